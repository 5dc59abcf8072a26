"""What one ``ids`` file costs an absent lookup: RocksDB multi-gets of absent ids against the same ids laid out
in one file and in many, with the table options of schema 4's FIFO family (16-bit full bloom filters, 16 KiB
zstd blocks): the cost that made a store of one FIFO family slow down as it grew.

    python benchmarks/bench_layout.py [--ids 20000000] [--file-ids 1450000] [--small 1000000]

Builds, with sorted SST files ingested into a FIFO family as a worker's store holds them:
- ``--ids`` random ``ajs-`` keys in files of ``--file-ids`` (a worker-grown store's file size);
- the same count in one file;
- ``--small`` keys in one file (a small store);
then times 200,000 absent keys through multi-gets of 32 (the store's lookup lists), median of 5 rounds. The
cost of one file per absent id is the difference per extra file; a filter's own size shows as one big file
against one small. Writes nothing but temporary stores; prints the rates and that difference.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rocksdict import IngestExternalFileOptions, Rdict, SstFileWriter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from store.codec import CF_IDS  # noqa: E402
from store.options import store_options  # noqa: E402

ABSENT = 200_000
CHUNK = 32


def sorted_keys(rng: np.random.Generator, count: int) -> list[bytes]:
    """Packed ``ajs-`` keys (``0xA0 0x10`` + 16 random bytes), in byte order."""
    raw = np.empty((count, 18), np.uint8)
    raw[:, :2] = (0xA0, 0x10)
    raw[:, 2:] = rng.integers(0, 256, (count, 16), dtype=np.uint8)
    ordered = np.sort(raw.view("S18").ravel())
    return ordered.tolist()


def build(path: Path, count: int, file_ids: int, seed: int) -> Rdict:
    _, families, _ = store_options(create=True, legacy_ids=True)  # schema 4's one FIFO family
    options = families[CF_IDS]
    options.create_if_missing(True)
    db = Rdict(str(path), options=options)
    rng = np.random.default_rng(seed)
    ingest = IngestExternalFileOptions()
    ingest.set_move_files(True)
    for first in range(0, count, file_ids):
        keys = sorted_keys(rng, min(file_ids, count - first))
        sst = path.with_name(f"{path.name}-{first}.sst")
        writer = SstFileWriter(options=options)
        writer.open(str(sst))
        for offset, key in enumerate(keys):
            writer[key] = (first + offset).to_bytes(4, "big")
        writer.finish()
        db.ingest_external_file([str(sst)], ingest)
    return db


def absent_rate(db: Rdict, rounds: int = 5) -> float:
    keys = sorted_keys(np.random.default_rng(99), ABSENT)
    np.random.default_rng(1).shuffle(keys)
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for at in range(0, ABSENT, CHUNK):
            db[keys[at : at + CHUNK]]
        rates.append(ABSENT / (time.perf_counter() - started))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=20_000_000)
    parser.add_argument("--file-ids", type=int, default=1_450_000)
    parser.add_argument("--small", type=int, default=1_000_000)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-layout-"))
    rates = {}
    try:
        for name, count, file_ids in (
            ("many files", args.ids, args.file_ids),
            ("one file", args.ids, args.ids),
            ("one small file", args.small, args.small),
        ):
            db = build(scratch / name.replace(" ", "-"), count, file_ids, seed=len(rates))
            files = -(-count // file_ids)
            rates[name] = (files, absent_rate(db))
            db.close()
            print(f"{count:,} ids in {files} file(s): {rates[name][1] / 1e6:.2f}M absent ids/s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (many_files, many), (_, one), (_, small) = rates["many files"], rates["one file"], rates["one small file"]
    per_file = (1 / many - 1 / one) / (many_files - 1)
    print(
        f"one more file costs an absent id {per_file * 1e9:.0f} ns; one file of {args.ids:,} ids against one of "
        f"{args.small:,}: {one / small:.2f}x the rate"
    )


if __name__ == "__main__":
    main()

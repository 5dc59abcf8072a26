"""What a duplicate's lookup costs in one sealed generation, by the generation's size and its blocks' codec.

    python benchmarks/bench_sealed_run.py [--sizes 1000000,10000000,40000000] [--codecs zstd12,lz4,none]
                                          [--blocks 1024,4096] [--index-restarts 16,4] [--mmap-reads]

For each size N, codec and data block size, one SST file of N sorted random packed ``ajs-`` ids (18-byte keys,
4-byte sequence numbers as values) is written as a sealed generation is (the store's restart intervals, no
filter; ``--index-restarts`` tries others for the index) and ingested into a fresh database with the store's
8 MiB block cache, read through ``pread`` as the store reads (``--mmap-reads``: through a mapping). Then 100,000
of its ids, at random, are looked up through multi-gets of 5,000 (median of 4 rounds after a first), read as
the store reads a generation older than its newest (without filling the block cache): present ids/s, bytes on
disk and table readers' memory per id, each rate with its ratio to the first size of the same codec, block size
and index restart interval.

Raw RocksDB through rocksdict, no id filter and no Python per id beyond the multi-get: what is left of a
duplicate's lookup once the id filter has routed it to its generation, and how it grows with the run. The
store seals with zstd at level 12 (``store.options``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

import numpy as np
from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict, SstFileWriter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from store.codec import AJS_PREFIX  # noqa: E402
from store.options import (  # noqa: E402
    BLOCK_CACHE_BYTES,
    GENERATION_BLOCK_BYTES,
    GENERATION_INDEX_RESTART_INTERVAL,
    GENERATION_RESTART_INTERVAL,
    IDS_ZSTD_LEVEL,
    older_generation_reads,
)

console = Console(width=None if sys.stdout.isatty() else 160)
PROBES = 100_000
BATCH = 5_000
ROUNDS = 5


def run_options(codec: str, block_bytes: int, cache: Cache, index_restarts: int, mmap_reads: bool) -> Options:
    table = BlockBasedOptions()
    table.set_block_size(block_bytes)
    table.set_block_restart_interval(GENERATION_RESTART_INTERVAL)
    table.set_index_block_restart_interval(index_restarts)
    table.set_format_version(5)
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(False)
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    if codec == "zstd12":
        options.set_compression_type(DBCompressionType.zstd())
        options.set_compression_options(-14, IDS_ZSTD_LEVEL, 0, 0)
    elif codec == "lz4":
        options.set_compression_type(DBCompressionType.lz4())
    elif codec == "none":
        options.set_compression_type(DBCompressionType.none())
    else:
        raise SystemExit(f"unknown codec {codec!r}: zstd12, lz4 or none")
    options.create_if_missing(True)
    options.set_allow_mmap_reads(mmap_reads)
    return options


def measure(scratch: Path, size: int, codec: str, block_bytes: int, index_restarts: int, mmap_reads: bool) -> dict:
    rng = np.random.default_rng(size)
    keys = np.unique(rng.integers(0, 256, (size, 16), dtype=np.uint8).view("V16").ravel())
    packed = [AJS_PREFIX + bytes(key) for key in keys]
    seqs = rng.permutation(len(packed)).tolist()
    directory = scratch / f"{codec}-{block_bytes}-{index_restarts}-{size}"
    directory.mkdir()
    options = run_options(codec, block_bytes, Cache(BLOCK_CACHE_BYTES), index_restarts, mmap_reads)
    writer = SstFileWriter(options=options)
    writer.open(str(directory / "run.sst"))
    for key, seq in zip(packed, seqs, strict=True):
        writer[key] = seq.to_bytes(4, "big")
    writer.finish()
    disk = (directory / "run.sst").stat().st_size / len(packed)
    db = Rdict(str(directory / "db"), options=options)
    try:
        db.ingest_external_file([str(directory / "run.sst")])
        db.set_read_options(older_generation_reads())  # as the store reads its older generations
        index_bytes = db.property_int_value("rocksdb.estimate-table-readers-mem")
        probes = [packed[i] for i in np.random.default_rng(1).choice(len(packed), PROBES, replace=False)]
        rates = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for at in range(0, PROBES, BATCH):
                found = db[probes[at : at + BATCH]]
            rates.append(PROBES / (time.perf_counter() - started))
            assert all(value is not None for value in found)
    finally:
        db.close()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "size": size,
        "codec": codec,
        "block_bytes": block_bytes,
        "index_restarts": index_restarts,
        "disk_bytes_per_id": disk,
        "memory_bytes_per_id": index_bytes / len(packed),
        "present_per_s": statistics.median(rates[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000,40000000")
    parser.add_argument("--codecs", default="zstd12,lz4,none")
    parser.add_argument("--blocks", default=f"{GENERATION_BLOCK_BYTES},4096", help="data block sizes, bytes")
    parser.add_argument(
        "--index-restarts", default=str(GENERATION_INDEX_RESTART_INTERVAL), help="index block restart intervals"
    )
    parser.add_argument("--mmap-reads", action="store_true", help="read the run through a mapping, not pread")
    parser.add_argument("--scratch", type=Path, help="directory for the runs (default: a temporary one)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-sealed-", dir=args.scratch))
    rows: list[dict] = []
    try:
        for size in (int(size) for size in args.sizes.split(",")):
            for codec in args.codecs.split(","):
                for block_bytes, restarts in product(
                    dict.fromkeys(int(block) for block in args.blocks.split(",")),
                    dict.fromkeys(int(interval) for interval in args.index_restarts.split(",")),
                ):
                    rows.append(measure(scratch, size, codec, block_bytes, restarts, args.mmap_reads))
                    row = rows[-1]
                    console.print(
                        f"{codec}, {block_bytes:,} B blocks, index restarts {restarts}, {size:,} ids: "
                        f"{row['present_per_s'] / 1e3:.1f}k present "
                        f"ids/s, {row['disk_bytes_per_id']:.1f} B/id on disk, "
                        f"{row['memory_bytes_per_id']:.3f} in memory"
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    reads = "a mapping" if args.mmap_reads else "pread"
    table = Table(title=f"one sealed run, multi-gets of {BATCH:,} held ids through {reads} ({os.cpu_count()} cores)")
    columns = (
        "codec",
        "block",
        "index restarts",
        "ids in the run",
        "disk B/id",
        "index B/id",
        "present ids/s",
        "vs the first size",
    )
    for column in columns:
        table.add_column(column, justify="right")
    first = {}
    for row in rows:
        base = first.setdefault((row["codec"], row["block_bytes"], row["index_restarts"]), row["present_per_s"])
        table.add_row(
            row["codec"],
            f"{row['block_bytes']:,}",
            str(row["index_restarts"]),
            f"{row['size']:,}",
            f"{row['disk_bytes_per_id']:.1f}",
            f"{row['memory_bytes_per_id']:.3f}",
            f"{row['present_per_s'] / 1e3:.1f}k",
            f"{row['present_per_s'] / base:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()

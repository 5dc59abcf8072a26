"""What a duplicate's lookup costs in a store's sealed generations, by their size and their blocks' codec.

    python benchmarks/bench_sealed_run.py [--sizes 1000000,10000000,40000000] [--codecs zstd12,lz4,none]
                                          [--blocks 1024,4096] [--index-restarts 16,4] [--mmap-reads]
                                          [--generations 15] [--hash-index-prefix 3]

For each size N, codec and data block size, N sorted random packed ``ajs-`` ids (18-byte keys, 4-byte sequence
numbers as values) are written as a sealed generation is (the store's restart intervals, no filter;
``--index-restarts`` tries others for the index) into one SST file per generation (``--generations``: N split
into that many runs, a column family each, as a store's generations are) and ingested into a fresh database
with the store's 8 MiB block cache, read through ``pread`` as the store reads (``--mmap-reads``: through a
mapping). Then 100,000 of its ids, at random over every generation, are looked up in batches of 5,000, each
batch one multi-get per generation of that generation's ids (median of 4 rounds after a first), read as the
store reads a generation older than its newest (without filling the block cache): present ids/s, bytes on disk
and table readers' memory per id, each rate with its ratio to the first size of the same codec, block size and
index. ``--hash-index-prefix N`` searches each run's index by a hash of the keys' first N bytes (RocksDB's hash
index, one index entry per block) instead of by binary search.

Raw RocksDB through rocksdict, no id filter and no Python per id beyond the multi-gets: what is left of a
duplicate's lookup once the id filter has routed it to its generation, and how it grows with the runs. The
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
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import numpy as np
from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
    SliceTransform,
    SstFileWriter,
)

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


@dataclass(frozen=True)
class Variant:
    codec: str
    block_bytes: int
    index_restarts: int
    hash_prefix: int = 0  # 0: the index is searched by binary search, as the store's is

    @property
    def index(self) -> str:
        return f"hash of {self.hash_prefix} B" if self.hash_prefix else f"restarts {self.index_restarts}"


def run_options(variant: Variant, cache: Cache, mmap_reads: bool) -> Options:
    table = BlockBasedOptions()
    table.set_block_size(variant.block_bytes)
    table.set_block_restart_interval(GENERATION_RESTART_INTERVAL)
    table.set_format_version(5)
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(False)
    options = Options(raw_mode=True)
    if variant.hash_prefix:
        table.set_index_type(BlockBasedIndexType.hash_search())
        table.set_index_block_restart_interval(1)  # the hash index points at index entries, each a restart
        options.set_prefix_extractor(SliceTransform.create_max_len_prefix(variant.hash_prefix))
    else:
        table.set_index_block_restart_interval(variant.index_restarts)
    options.set_block_based_table_factory(table)
    if variant.codec == "zstd12":
        options.set_compression_type(DBCompressionType.zstd())
        options.set_compression_options(-14, IDS_ZSTD_LEVEL, 0, 0)
    elif variant.codec == "lz4":
        options.set_compression_type(DBCompressionType.lz4())
    elif variant.codec == "none":
        options.set_compression_type(DBCompressionType.none())
    else:
        raise SystemExit(f"unknown codec {variant.codec!r}: zstd12, lz4 or none")
    options.create_if_missing(True)
    options.set_allow_mmap_reads(mmap_reads)
    return options


def random_ids(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """About ``size`` random distinct ids, 16 bytes each (``V16``, sorted), and a sequence number for each."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 256, (size, 16), dtype=np.uint8).view("V16").ravel())
    return keys, rng.permutation(len(keys))


def write_run(path: Path, options: Options, keys: np.ndarray, seqs: np.ndarray) -> list[bytes]:
    """One sealed run at ``path`` of ``keys`` (``random_ids``) packed as ``ajs-`` ids; returns the packed keys."""
    packed = [AJS_PREFIX + bytes(key) for key in keys]
    writer = SstFileWriter(options=options)
    writer.open(str(path))
    for key, seq in zip(packed, seqs.tolist(), strict=True):
        writer[key] = seq.to_bytes(4, "big")
    writer.finish()
    return packed


def batches_by_generation(owners: np.ndarray, probes: list[bytes]) -> list[dict[int, list[bytes]]]:
    """The probes in batches of ``BATCH``, each batch's grouped by the generation that holds them (``owners``)."""
    batches = []
    for at in range(0, len(probes), BATCH):
        asked: dict[int, list[bytes]] = {}
        for owner, key in zip(owners[at : at + BATCH].tolist(), probes[at : at + BATCH], strict=True):
            asked.setdefault(owner, []).append(key)
        batches.append(asked)
    return batches


def measure(scratch: Path, size: int, variant: Variant, generations: int, mmap_reads: bool) -> dict:
    directory = scratch / f"{variant.codec}-{variant.block_bytes}-{variant.index}-{size}".replace(" ", "-")
    directory.mkdir()
    options = run_options(variant, Cache(BLOCK_CACHE_BYTES), mmap_reads)
    db = Rdict(str(directory / "db"), options=options)
    families: list[Rdict] = []
    try:
        picker = np.random.default_rng(1)
        owners = picker.integers(0, generations, PROBES)
        probes: list[bytes] = [b""] * PROBES
        disk = index_bytes = ids = 0
        for number in range(generations):
            run = directory / f"run-{number}.sst"
            packed = write_run(run, options, *random_ids(size // generations, seed=size * 1000 + number))
            disk += run.stat().st_size
            ids += len(packed)
            family = db.create_column_family(f"generation-{number}", options)
            family.ingest_external_file([str(run)])
            family.set_read_options(older_generation_reads())  # as the store reads its older generations
            index_bytes += family.property_int_value("rocksdb.estimate-table-readers-mem")
            families.append(family)
            mine = np.flatnonzero(owners == number)
            chosen = picker.choice(len(packed), mine.size, replace=mine.size > len(packed))
            for slot, at in zip(mine.tolist(), chosen.tolist(), strict=True):
                probes[slot] = packed[at]
            del packed
        batches = batches_by_generation(owners, probes)
        rates = []
        for _ in range(ROUNDS):
            missing = 0
            started = time.perf_counter()
            for asked in batches:
                for owner, keys in asked.items():
                    missing += families[owner][keys].count(None)
            rates.append(PROBES / (time.perf_counter() - started))
            assert missing == 0, f"{missing} held ids not found"
    finally:
        for family in families:
            family.close()
        db.close()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "size": size,
        "variant": variant,
        "disk_bytes_per_id": disk / ids,
        "memory_bytes_per_id": index_bytes / ids,
        "present_per_s": statistics.median(rates[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000,40000000", help="ids in all the generations together")
    parser.add_argument("--codecs", default="zstd12,lz4,none")
    parser.add_argument("--blocks", default=f"{GENERATION_BLOCK_BYTES},4096", help="data block sizes, bytes")
    parser.add_argument(
        "--index-restarts", default=str(GENERATION_INDEX_RESTART_INTERVAL), help="index block restart intervals"
    )
    parser.add_argument(
        "--hash-index-prefix",
        type=int,
        default=0,
        help="also measure a hash index over the keys' first N bytes (0: binary search only)",
    )
    parser.add_argument("--generations", type=int, default=1, help="runs each size is split into")
    parser.add_argument("--mmap-reads", action="store_true", help="read the runs through a mapping, not pread")
    parser.add_argument("--scratch", type=Path, help="directory for the runs (default: a temporary one)")
    args = parser.parse_args()
    if args.generations < 1 or args.hash_index_prefix < 0:
        raise SystemExit("--generations must be at least 1 and --hash-index-prefix at least 0")
    variants = [
        Variant(codec, block_bytes, restarts)
        for codec, block_bytes, restarts in product(
            args.codecs.split(","),
            dict.fromkeys(int(block) for block in args.blocks.split(",")),
            dict.fromkeys(int(interval) for interval in args.index_restarts.split(",")),
        )
    ]
    if args.hash_index_prefix:
        variants += dict.fromkeys(Variant(v.codec, v.block_bytes, 1, args.hash_index_prefix) for v in variants)
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-sealed-", dir=args.scratch))
    rows: list[dict] = []
    try:
        for size in (int(size) for size in args.sizes.split(",")):
            for variant in variants:
                rows.append(measure(scratch, size, variant, args.generations, args.mmap_reads))
                row = rows[-1]
                console.print(
                    f"{variant.codec}, {variant.block_bytes:,} B blocks, index {variant.index}, {size:,} ids: "
                    f"{row['present_per_s'] / 1e3:.1f}k present "
                    f"ids/s, {row['disk_bytes_per_id']:.1f} B/id on disk, "
                    f"{row['memory_bytes_per_id']:.3f} in memory"
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    reads = "a mapping" if args.mmap_reads else "pread"
    table = Table(
        title=f"{args.generations} sealed run(s), multi-gets of {BATCH:,} held ids through {reads} "
        f"({os.cpu_count()} cores)"
    )
    columns = (
        "codec",
        "block",
        "index",
        "ids in the runs",
        "disk B/id",
        "index B/id",
        "present ids/s",
        "vs the first size",
    )
    for column in columns:
        table.add_column(column, justify="right")
    first = {}
    for row in rows:
        variant = row["variant"]
        base = first.setdefault(variant, row["present_per_s"])
        table.add_row(
            variant.codec,
            f"{variant.block_bytes:,}",
            variant.index,
            f"{row['size']:,}",
            f"{row['disk_bytes_per_id']:.1f}",
            f"{row['memory_bytes_per_id']:.3f}",
            f"{row['present_per_s'] / 1e3:.1f}k",
            f"{row['present_per_s'] / base:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()

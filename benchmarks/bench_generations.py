"""A candidate layout for the ``ids`` family against today's, as each grows: one column family per generation
of sequence numbers, leveled so that each generation is one sorted run with no filter on its last level,
against the FIFO family of the store (one file per flushed memtable, a 16-bit bloom filter in memory on each).

    python benchmarks/bench_generations.py [--sizes 1000000,10000000,100000000] [--generations 15]

For each size and layout it writes that many random packed ``ajs-`` ids in batches of 5,000 in sequence order
(as the worker does), the candidate switching to a new family every ``size / generations`` ids (the id
filter's stretches: a lookup is routed to one generation by the group the id filter holds for it), waits for
RocksDB's compactions, then reports:

- bytes on disk per id (SST files) and bytes of memory per id RocksDB keeps for its table readers (filters and
  indexes: ``rocksdb.estimate-table-readers-mem``), the two costs that grow with the ids held;
- present ids/s: 20,000 held ids through multi-gets of 32 (the candidate asks the id's generation only);
- routed absent ids/s: 20,000 ids never written, asked of one generation, which is what an id filter's false
  positive costs in the candidate (today's layout asks every file's filter);
- seconds to write, compactions included.

Every figure is printed with its ratio to the same layout's first (smallest) size. Raw RocksDB through
rocksdict, no id filter in front: this measures the layout, not ``DedupStore``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rocksdict import (
    BlockBasedOptions,
    BottommostLevelCompaction,
    Cache,
    CompactOptions,
    DBCompactionStyle,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from store.codec import CF_IDS  # noqa: E402
from store.options import BLOCK_CACHE_BYTES, IDS_ZSTD_LEVEL, store_options  # noqa: E402

BATCH = 5_000
SAMPLE = 20_000
CHUNK = 32
GENERATION_BLOCK_BYTES = 4 * 1024
SEAL = CompactOptions()
SEAL.set_bottommost_level_compaction(BottommostLevelCompaction.force())  # no trivial move: rewrite, filterless


@dataclass(frozen=True)
class Point:
    layout: str
    ids: int
    families: int
    files: int
    disk_per_id: float
    memory_per_id: float
    present_per_s: float
    absent_per_s: float
    write_seconds: float


def generation_options(cache: Cache) -> Options:
    """Leveled, one sorted run at the bottom: no filter there (``optimize_filters_for_hits``); lz4 above it
    (data passing through), zstd at the bottom (data that stays)."""
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(16, False)
    table.set_cache_index_and_filter_blocks(False)
    table.set_block_size(GENERATION_BLOCK_BYTES)
    table.set_format_version(5)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_block_based_table_factory(table)
    options.set_compaction_style(DBCompactionStyle.level())
    options.set_level_compaction_dynamic_level_bytes(True)
    options.set_optimize_filters_for_hits(True)
    options.set_compression_type(DBCompressionType.lz4())
    options.set_bottommost_compression_type(DBCompressionType.zstd())
    options.set_bottommost_compression_options(-14, IDS_ZSTD_LEVEL, 0, 0, True)
    options.set_write_buffer_size(64 * 1024 * 1024)
    options.set_max_open_files(-1)
    options.set_max_background_jobs(2)
    return options


def fifo_options() -> Options:
    _, families, _ = store_options(create=True, legacy_ids=True)  # schema 4's one FIFO family
    options = families[CF_IDS]
    options.create_if_missing(True)
    options.set_max_open_files(-1)
    options.set_max_background_jobs(2)
    return options


def random_keys(rng: np.random.Generator, count: int) -> list[bytes]:
    raw = np.empty((count, 18), np.uint8)
    raw[:, :2] = (0xA0, 0x10)
    raw[:, 2:] = rng.integers(0, 256, (count, 16), dtype=np.uint8)
    return raw.view("S18").ravel().tolist()


def settle(dbs: list[Rdict]) -> None:
    for db in dbs:
        db.flush(True)
    while any(
        (db.property_int_value("rocksdb.num-running-compactions") or 0)
        or (db.property_int_value("rocksdb.compaction-pending") or 0)
        or (db.property_int_value("rocksdb.num-running-flushes") or 0)
        for db in dbs
    ):
        time.sleep(0.2)


def rate(ask: Callable[[list[bytes]], object], keys: list[bytes], rounds: int = 3) -> float:
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for at in range(0, len(keys), CHUNK):
            found = ask(keys[at : at + CHUNK])
        assert found is not None
        rates.append(len(keys) / (time.perf_counter() - started))
    return statistics.median(rates)


def measure(layout: str, ids: int, generations: int, scratch: Path, seed: int) -> Point:
    path = scratch / f"{layout}-{ids}"
    rng = np.random.default_rng(seed)
    per_generation = -(-ids // generations) if layout == "generations" else ids
    options = generation_options(Cache(BLOCK_CACHE_BYTES)) if layout == "generations" else fifo_options()
    families: list[Rdict] = []
    samples: list[list[bytes]] = []
    started = time.perf_counter()
    root = Rdict(str(path), options=options)
    try:
        for first in range(0, ids, per_generation):
            name = "default" if first == 0 else f"ids.{first}"
            family = root if first == 0 else root.create_column_family(name, options)
            handle = root.get_column_family_handle(name)
            families.append(family)
            count = min(per_generation, ids - first)
            picked: list[bytes] = []
            for at in range(0, count, BATCH):
                keys = random_keys(rng, min(BATCH, count - at))
                batch = WriteBatch(raw_mode=True)
                for offset, key in enumerate(sorted(keys)):
                    batch.put(key, (first + at + offset).to_bytes(4, "big"), handle)
                root.write(batch)
                picked += keys[: -(-len(keys) * 2 * SAMPLE // ids)]  # random already: a share of every batch
            samples.append(picked)
            if layout == "generations":  # a closed generation is written no more: rewritten as one filterless run
                family.flush(True)
                family.compact_range(None, None, SEAL)
        settle(families)
        write_seconds = time.perf_counter() - started
        live = root.live_files()
        disk = sum(entry["size"] for entry in live)
        memory = sum(f.property_int_value("rocksdb.estimate-table-readers-mem") or 0 for f in families)
        chooser = np.random.default_rng(seed + 1)
        where = chooser.integers(0, len(families), SAMPLE)
        present = [[] for _ in families]
        for index in where.tolist():
            pool = samples[index]
            present[index].append(pool[int(chooser.integers(0, len(pool)))])
        absent = random_keys(chooser, SAMPLE)
        held = sum(
            value is not None for family, keys in zip(families, present, strict=True) for value in family.get(keys)
        )
        if held != SAMPLE:
            raise SystemExit(f"{layout}: {held} of {SAMPLE} present ids found (a bug in this benchmark)")
        present_rate = SAMPLE / sum(
            len(keys) / rate(family.get, keys) for family, keys in zip(families, present, strict=True) if keys
        )
        absent_rate = rate(families[-1].get, absent)  # routed: one generation (today's: every file)
        return Point(
            layout, ids, len(families), len(live), disk / ids, memory / ids, present_rate, absent_rate, write_seconds
        )
    finally:
        for family in families[1:]:
            family.close()
        root.close()
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000,100000000")
    parser.add_argument("--generations", type=int, default=15)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-generations-"))
    points: list[Point] = []
    try:
        for ids in sizes:
            for layout in ("fifo", "generations"):
                point = measure(layout, ids, args.generations, scratch, seed=ids % 997)
                points.append(point)
                base = next(p for p in points if p.layout == layout)
                print(
                    f"{layout:11} {ids:>13,} ids  families {point.families:>3}  files {point.files:>4}  "
                    f"disk {point.disk_per_id:5.2f} B/id  table readers {point.memory_per_id:5.3f} B/id  "
                    f"present {point.present_per_s / 1e3:6.1f}k/s ({point.present_per_s / base.present_per_s:4.2f})  "
                    f"absent {point.absent_per_s / 1e3:6.0f}k/s ({point.absent_per_s / base.absent_per_s:4.2f})  "
                    f"write {point.write_seconds:6.0f} s",
                    flush=True,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A worker's stores share one memtable budget: their memtables together stay under it, however many
partitions it holds (without it each store's ids memtable grows to 64 MiB on its own)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dedupectl.config import MIN_MEMTABLE_BUDGET
from store.compaction_log import read_jobs
from store.dedup_store import DedupStore
from store.footprint import ids_files
from store.options import shared_memory

BUDGET = 24 * 1024 * 1024
WINDOW = 10_000_000
STORES, BATCHES, BATCH = 2, 60, 5_000  # 300,000 ids per store: ~26 MiB of memtable each without a budget


def _ids_property(store: DedupStore, name: str) -> int:
    """A RocksDB property added up over the store's generations."""
    return sum(store.family(family).property_int_value(name) or 0 for family, _, _ in store.id_families())


def memtable_bytes(stores: list[DedupStore]) -> int:
    return sum(_ids_property(store, "rocksdb.cur-size-all-mem-tables") for store in stores)


def wait_for_flushes(stores: list[DedupStore], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(
        _ids_property(store, "rocksdb.num-immutable-mem-table") for store in stores
    ):
        time.sleep(0.05)


def batch_ids(number: int, batch: int) -> list[bytes]:
    return [f"ajs-{number:04x}{batch:06x}{i:022x}".encode() for i in range(BATCH)]


@pytest.mark.parametrize("shared", [True, False], ids=["budget", "no-budget"])
def test_stores_sharing_a_budget_keep_their_memtables_under_it(tmp_path: Path, shared: bool):
    memory = shared_memory(BUDGET) if shared else None
    stores = [  # a window of 10M ids: one generation holds every id written here
        DedupStore.open(tmp_path / f"t-{number}", topic="t", partition=number, shared=memory, window_ids=WINDOW)
        for number in range(STORES)
    ]
    try:
        highest = 0
        for batch in range(BATCHES):
            for number, store in enumerate(stores):
                store.record(batch_ids(number, batch), [1_700_000_000_000] * BATCH)
            highest = max(highest, memtable_bytes(stores))
        if shared:
            assert highest <= 1.25 * BUDGET, highest  # a flush under way overlaps the next memtable briefly
            wait_for_flushes(stores)
            assert all(len(ids_files(store)) for store in stores)
        else:
            assert highest > 1.25 * BUDGET, highest
        for number, store in enumerate(stores):  # nothing lost to the early flushes
            assert all(store.contains_many(batch_ids(number, 0) + batch_ids(number, BATCHES - 1)))
    finally:
        for store in stores:
            store.close()


def test_small_batches_under_the_minimum_budget_do_not_flush(tmp_path: Path):
    """Four stores under the smallest budget a worker accepts: empty memtables must not already fill it, or
    every write flushes all families into files of a few dozen bytes."""
    memory = shared_memory(MIN_MEMTABLE_BUDGET)
    stores = [
        DedupStore.open(tmp_path / f"t-{number}", topic="t", partition=number, shared=memory) for number in range(4)
    ]
    try:
        assert memory.write_buffers.get_usage() < MIN_MEMTABLE_BUDGET // 4
        for batch in range(200):
            for number, store in enumerate(stores):
                store.record([f"ajs-{number:04x}{batch:06x}{i:022x}".encode() for i in range(10)], [1] * 10)
        flushes = [job for store in stores for job in read_jobs(store.path, last=100_000) if job.kind == "flush"]
        assert len(flushes) <= 4, [(job.family, job.reason, job.bytes_out) for job in flushes[:10]]
    finally:
        for store in stores:
            store.close()

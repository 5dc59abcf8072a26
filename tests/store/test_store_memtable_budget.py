"""A worker's stores share one memtable budget: their memtables together stay under it, however many
partitions it holds (without it each store's ids memtable grows to 64 MiB on its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.codec import CF_IDS
from store.dedup_store import DedupStore
from store.options import shared_memory

BUDGET = 24 * 1024 * 1024
STORES, BATCHES, BATCH = 2, 60, 5_000  # 300,000 ids per store: ~26 MiB of memtable each without a budget


def memtable_bytes(stores: list[DedupStore]) -> int:
    return sum(store.family(CF_IDS).property_int_value("rocksdb.cur-size-all-mem-tables") or 0 for store in stores)


def batch_ids(number: int, batch: int) -> list[bytes]:
    return [f"ajs-{number:04x}{batch:06x}{i:022x}".encode() for i in range(BATCH)]


@pytest.mark.parametrize("shared", [True, False], ids=["budget", "no-budget"])
def test_stores_sharing_a_budget_keep_their_memtables_under_it(tmp_path: Path, shared: bool):
    memory = shared_memory(BUDGET) if shared else None
    stores = [
        DedupStore.open(tmp_path / f"t-{number}", topic="t", partition=number, shared=memory)
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
            assert all(store.family(CF_IDS).property_int_value("rocksdb.num-files-at-level0") for store in stores)
        else:
            assert highest > 1.25 * BUDGET, highest
        for number, store in enumerate(stores):  # nothing lost to the early flushes
            assert all(store.contains_many(batch_ids(number, 0) + batch_ids(number, BATCHES - 1)))
    finally:
        for store in stores:
            store.close()

"""The storm's duplicates must be ids its stores hold, or the benchmark measures new ids."""

from __future__ import annotations

import numpy as np

from benchmarks.bench_storm import PARTITIONS, held_ids, storm_input
from benchmarks.bulk_stores import PREFILL_LAYOUT, bulk_load_store
from store.dedup_store import DedupStore


def test_held_ids_are_held_by_the_bulk_loaded_store_across_its_buckets(tmp_path):
    per_store = PREFILL_LAYOUT.bucket_ids + 50_000  # two buckets
    path = tmp_path / "store"
    bulk_load_store(path, topic="in", partition=2, count=per_store, layout=PREFILL_LAYOUT, seed=2)
    ids = held_ids(2, per_store, 2_000, np.random.default_rng(5))
    assert len(set(ids)) == 2_000
    assert any(
        position >= PREFILL_LAYOUT.bucket_ids
        for position in np.random.default_rng(5).choice(per_store, 2_000, replace=False)
    )
    with DedupStore.open(path, topic="in", partition=2) as store:
        assert all(store.contains_many(ids))


def test_the_storm_mixes_its_share_of_held_ids_among_the_new_events():
    events = storm_input(4_000, 0.3, 10_000, seed=3)
    assert len(events) == 4_000
    keys = [key for _, key, _ in events]
    assert len(set(keys)) == 4_000
    new = events[: len(events) // 2]
    assert len({key for _, key, _ in new}) == len(new)
    assert {partition for partition, _, _ in events} == set(range(PARTITIONS))
    assert all(b'"messageId":"' + key + b'"' in value for _, key, value in events)

"""Aging by sequence: exactly the oldest ids go, whole generations are dropped (no tombstones), the cut survives
restarts, and an aged-out id is new again."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedupectl.errors import ConfigError
from store.aging import AgingPolicy, advance_cut, age_fully, age_step, plan_aging
from store.dedup_store import DedupStore
from store.footprint import data_bytes, ids_files

BASE_MS = 1_700_000_000_000


def _id(n: int) -> bytes:
    return f"ajs-{n:032x}".encode()


def _fill(store: DedupStore, count: int, batch: int = 1_000, flush_every: int | None = None) -> None:
    """Record ids 0..count-1 (id n gets sequence n and timestamp BASE_MS + n), flushing every few batches."""
    start = store.state.next_seq
    for index, first in enumerate(range(start, start + count, batch)):
        numbers = range(first, min(first + batch, start + count))
        store.record([_id(n) for n in numbers], [BASE_MS + n for n in numbers])
        if flush_every and (index + 1) % flush_every == 0:
            store.flush()


@pytest.fixture
def store(tmp_path: Path):
    with DedupStore.open(tmp_path / "events-0", topic="events", partition=0) as opened:
        yield opened


@pytest.mark.parametrize("cut", [9, 10, 11, 255, 256, 257, 65_535, 65_536, 65_537])
def test_aging_removes_exactly_the_ids_below_the_cut(store, cut):
    total = 65_600  # sequence values widen at 10 (decimal), 256 and 65,536
    _fill(store, total, batch=4_096, flush_every=4)
    result = age_step(store, AgingPolicy(max_keys=total - cut))
    assert result.first_live_seq == cut and result.aged == cut and result.done
    present = store.contains_many([_id(n) for n in range(total)])
    assert present == [n >= cut for n in range(total)]  # never an id at or after the cut
    assert store.lookup_many([_id(cut - 1), _id(cut)]) == [None, (cut, BASE_MS + cut)]
    assert [seq for seq, _ in store.iter_by_seq(cut - 2, cut + 2)] == [cut, cut + 1]


def test_a_lookup_spanning_many_multi_gets_answers_each_id(store):
    """Lists of unseen ids, ids seen once, and ids aged out, across the store's multi-get lists."""
    _fill(store, 5_000)
    unseen = [b"order:%d" % n for n in range(100)]
    straddling = [_id(n) for n in range(1_990, 2_010)]
    ids = unseen[:70] + straddling + unseen[70:] + [_id(4_999)]
    assert store.contains_many(ids) == [False] * 70 + [True] * 20 + [False] * 30 + [True]
    age_step(store, AgingPolicy(max_keys=3_000))  # the cut: 2,000
    assert store.contains_many(ids) == [False] * 70 + [n >= 2_000 for n in range(1_990, 2_010)] + [False] * 30 + [True]


def test_the_cut_survives_a_restart_and_aged_ids_are_new_again(tmp_path):
    path = tmp_path / "events-0"
    with DedupStore.open(path, topic="events", partition=0) as store:
        _fill(store, 5_000)
        age_step(store, AgingPolicy(max_keys=3_000))
    with DedupStore.open(path, topic="events", partition=0) as store:
        assert (store.state.first_live_seq, store.state.next_seq) == (2_000, 5_000)
        assert store.contains_many([_id(1_999), _id(2_000)]) == [False, True]
        state = store.record([_id(0), _id(1_999)], [BASE_MS + 9, BASE_MS + 10])  # seen again after aging
        assert store.contains_many([_id(0), _id(1_999)]) == [True, True]
        assert store.lookup_many([_id(0)]) == [(5_000, BASE_MS + 9)]
        assert state.live_ids == 3_002
    with DedupStore.open_secondary(path) as reader:  # another process sees the same cut
        assert reader.contains_many([_id(1), _id(0), _id(2_000)]) == [False, True, True]


def _ranges(store: DedupStore) -> list[tuple[int, int]]:
    return [(first, end) for _, first, end in store.id_families()]


@pytest.fixture
def four_generations(tmp_path, short_generations):
    """A store holding four generations of 10,000 ids, and that length."""
    with DedupStore.open(
        tmp_path / "events-0", topic="events", partition=0, window_ids=short_generations(10_000)
    ) as store:
        stretch = store.generation_ids()
        _fill(store, 4 * stretch, batch=1_000)
        yield store, stretch


def test_aging_drops_whole_generations_and_writes_no_tombstones(four_generations):
    store, stretch = four_generations
    assert store.wait_for_seals(30)
    assert _ranges(store) == [(n, n + stretch) for n in range(0, 4 * stretch, stretch)]
    before = data_bytes(store)
    (oldest,) = [size for first, end, size in store.generation_bytes() if (first, end) == (0, stretch)]

    cut = stretch + stretch // 2  # inside the second generation
    result = age_step(store, AgingPolicy(max_keys=4 * stretch - cut))
    assert (result.first_live_seq, result.generations_dropped) == (cut, 1)
    assert _ranges(store) == [(n, n + stretch) for n in range(stretch, 4 * stretch, stretch)]
    assert all(file.deletions == 0 for file in ids_files(store))
    assert data_bytes(store) < before - oldest * 0.9
    assert store.contains_many([_id(cut - 1), _id(cut)]) == [False, True]


def test_max_bytes_ages_until_the_generations_fit(four_generations):
    store, stretch = four_generations
    store.flush()
    assert store.wait_for_seals(30)
    sizes = [size for _, _, size in store.generation_bytes()]
    limit = data_bytes(store) - sizes[0] - sizes[1] + 1  # the two oldest generations must go, not a third
    plan = plan_aging(store, AgingPolicy(max_bytes=limit))
    assert plan.reason == "max_bytes" and plan.target_cut == 2 * stretch
    result = age_fully(store, AgingPolicy(max_bytes=limit))
    assert data_bytes(store) <= limit
    assert result.first_live_seq == plan.target_cut
    assert store.contains_many([_id(plan.target_cut - 1), _id(plan.target_cut)]) == [False, True]


def test_a_step_ages_at_most_max_deletes(store):
    _fill(store, 10_000)
    policy = AgingPolicy(max_keys=1_000)
    first = age_step(store, policy, max_deletes=4_000)
    assert (first.aged, first.done, first.first_live_seq) == (4_000, False, 4_000)
    second = age_step(store, policy, max_deletes=4_000)
    third = age_step(store, policy, max_deletes=4_000)
    assert (second.aged, third.aged, third.done, third.live_ids) == (4_000, 1_000, True, 1_000)
    assert age_step(store, policy).aged == 0


def test_the_cut_never_moves_back_nor_past_the_last_id(store):
    _fill(store, 100)
    advance_cut(store, 60)
    assert advance_cut(store, 10).first_live_seq == 60
    assert advance_cut(store, 10_000).first_live_seq == 100
    assert not any(store.contains_many([_id(n) for n in range(100)]))


@pytest.mark.parametrize("bad", [{"max_keys": -1}, {"max_keys": 0}, {"max_bytes": 0}, {"max_keys": True}])
def test_a_policy_refuses_non_positive_bounds(bad):
    with pytest.raises(ConfigError, match="must be a positive whole number"):
        AgingPolicy(**bad)

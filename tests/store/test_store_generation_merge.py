"""Generations merged as a growing store's filter grows: a group of the filter then asks one generation (two
where a stretch does not start at a generation's first number) however often the filter grew; lookups answer
exactly as before the merges, across reopening; and a writer killed at any point of a merge leaves a store
that answers the same, whose next writer finishes or drops what the merge left."""

from __future__ import annotations

from pathlib import Path

import pytest
from killed_writer import run_writer
from mixed_ids import distinct_mixed_ids
from rocksdict import Rdict

from store import generations as gens
from store.codec import META_MERGED, encode_ids
from store.dedup_store import DedupStore
from store.filter_keeper import FILTER_FILE
from store.generation_merge import MERGE_DIR

FIRST_WINDOW = 20_000  # ids the first filter is sized for: groups of 1,400 numbers, grown at about 13,000 ids


@pytest.fixture
def growing(monkeypatch):
    """A store without an aging bound whose generations are as short as its filter's stretch."""
    from store import dedup_store

    monkeypatch.setattr(dedup_store, "MIN_FILTER_WINDOW", FIRST_WINDOW)
    monkeypatch.setattr(gens, "MIN_GENERATION_IDS", 1)


def _answers(store: DedupStore, asked: list[bytes]) -> list[bool]:
    found = store.contains_many(asked)
    assert found == store.contains_keys_in_db(encode_ids(asked))  # routed or not, the same answer
    return found


def _grow(store: DedupStore, ids: list[bytes], step: int = 1_000) -> None:
    """Record ``ids`` as a worker would, each filter growth and merge seen through before the next batch (a
    test store outruns the child processes a real one waits for by its size)."""
    for at in range(0, len(ids), step):
        chunk = ids[at : at + step]
        assert not any(store.contains_many(chunk))
        store.record(chunk, [1_000 + at + n for n in range(len(chunk))])
        growth = store._filters._growth
        if growth is not None:
            assert growth.child.process.wait(60) == 0
        assert store.wait_for_merges(60)


def _spans(store: DedupStore) -> list[int]:
    """For each stretch of the filter's groups below the newest generation, how many generations cover it."""
    span = store._filters.ready().span
    families = store.id_families()
    newest_first = families[-1][1]
    counts = []
    for stretch in range(families[0][1] // span, newest_first // span):
        low, high = stretch * span, (stretch + 1) * span
        counts.append(sum(1 for _, first, end in families if first < high and end > low))
    return counts


def test_a_growing_store_merges_the_generations_each_grown_stretch_spans(tmp_path, growing, caplog):
    path = tmp_path / "t-0"
    ids, unseen = distinct_mixed_ids(120_000, 1), distinct_mixed_ids(5_000, 2)
    with caplog.at_level("INFO", logger="store.dedup_store"), DedupStore.open(path, topic="t", partition=0) as store:
        store.contains_many([b"x"])
        first_span = store._filters.current.span
        _grow(store, ids)
        span = store._filters.current.span
        assert span >= 8 * first_span  # grown three times at least, each time to twice the stretch
        assert span % first_span == 0
        assert set(_spans(store)) == {1}  # every stretch one generation: as a store sized for this window
        assert any(gens.merge_of(name) for name, _, _ in store.id_families())
        assert all(_answers(store, ids))
        assert not any(_answers(store, unseen))
    assert "merged" in caplog.text
    assert not (path / MERGE_DIR).exists()
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert all(_answers(store, ids))
        assert not any(_answers(store, unseen))
        assert set(_spans(store)) == {1}


def test_a_filter_grown_inline_keeps_the_stretches_whole(tmp_path, growing):
    ids = distinct_mixed_ids(60_000, 3)
    with DedupStore.open(tmp_path / "t-0", topic="t", partition=0) as store:
        store.contains_many([b"x"])
        first_span = store._filters.current.span
        store._filters._growth_failed = True  # no growth apart: the filter is built again inline once full
        _grow(store, ids)
        assert store._filters.current.span % first_span == 0
        assert set(_spans(store)) == {1}
        assert all(_answers(store, ids))


def test_a_stretch_that_does_not_start_at_a_generation_asks_two_at_most(tmp_path, growing):
    path = tmp_path / "t-0"
    ids = distinct_mixed_ids(80_000, 3)
    with DedupStore.open(path, topic="t", partition=0) as store:
        _grow(store, ids[:31_000])
    (path / FILTER_FILE).unlink()  # the next filter is built for the ids held, its stretch any length
    with DedupStore.open(path, topic="t", partition=0) as store:
        store.contains_many([b"x"])
        assert store._filters.current.span % 1_400
        _grow(store, ids[31_000:])
        assert store._filters.current.span % 1_400
        assert max(_spans(store)) == 2
        assert all(_answers(store, ids))


def test_ids_removed_or_put_back_during_a_merge_are_in_the_merged_generation(tmp_path, growing):
    path = tmp_path / "t-0"
    ids = distinct_mixed_ids(40_000, 4)
    lost = ids[100:110]
    with DedupStore.open(path, topic="t", partition=0) as store:
        store.contains_many([b"x"])
        for at in range(0, len(ids), 1_000):
            chunk = ids[at : at + 1_000]
            store.record(chunk, list(range(at, at + len(chunk))), output_offsets=range(at + 100, at + 100 + len(chunk)))
            growth = store._filters._growth
            if growth is not None:
                assert growth.child.process.wait(60) == 0
            if store._merge is not None:
                break
        merge = store._merge
        assert merge is not None
        assert store.forget_many(lost) == len(lost)
        assert store._merge is not merge  # voided: its files may hold the ids removed
        assert store.wait_for_merges(60)
        assert not any(_answers(store, lost))
        assert store.place(lost, list(range(200, 210))) == list(range(100, 110))
        recorded = store.state.next_seq
        _grow(store, ids[recorded:])
        assert all(_answers(store, ids))


WRITER_SEED = 5  # the ids the killed writer records, and the check expects


# A writer that grows a store, killed (SIGKILL) by itself at one point of taking a merge in, or by the test
# at any time: argv[3] names the point, "" for none; argv[5] is the seed of its ids.
_KILLED_WRITER = """
dedup_store.MIN_FILTER_WINDOW = 20_000
gens.MIN_GENERATION_IDS = 1

if point == "created":  # the merged family made, its file not ingested
    made = dedup_store.DedupStore._generation
    def _generation(self, name, first):
        if gens.merge_of(name):
            die()
        return made(self, name, first)
    dedup_store.DedupStore._generation = _generation
elif point == "ingested":  # its file ingested, the merge not committed
    synced = dedup_store.WriteOptions
    dedup_store.WriteOptions = lambda: die() if sys._getframe(1).f_code.co_name == "_take_run" else synced()
elif point.startswith("dropped-"):  # committed, and this many sources dropped
    dropped, wanted = [0], int(point.split("-")[1])
    drop = dedup_store.DedupStore._drop_family
    def _drop_family(self, generation):
        if self._merge is not None:
            if dropped[0] == wanted:
                die()
            dropped[0] += 1
        drop(self, generation)
    dedup_store.DedupStore._drop_family = _drop_family

store = dedup_store.DedupStore.open(path, topic="t", partition=0)
store.contains_many([b"x"])
next_seq = store.state.next_seq
for at in range(next_seq, count, 1_000):
    chunk = ids[at : at + 1_000]
    store.record(chunk, [1_000 + at + n for n in range(len(chunk))])
    growth = store._filters._growth
    if growth is not None:
        growth.child.process.wait(60)
    store.wait_for_merges(60)
store.close()
"""


def _write(path: Path, count: int, point: str, kill_after_s: float | None = None) -> int:
    return run_writer(_KILLED_WRITER, path, count, point, WRITER_SEED, kill_after_s=kill_after_s)


def _check_whole(path: Path, count: int) -> int:
    """Open the store as its next writer does; every id recorded is found, routed and not, and no other; no
    leftover of a merge stays. Returns the ids recorded."""
    ids = distinct_mixed_ids(count, WRITER_SEED)
    with DedupStore.open_secondary(path) as reader:  # before the writer tidies up: what a reader sees
        recorded = reader.state.next_seq
        assert reader.contains_many(ids) == [n < recorded for n in range(count)]
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert _answers(store, ids) == [n < recorded for n in range(count)]
        assert store._meta.get(META_MERGED) is None
        firsts = [gens.first_seq_of(name) for name in Rdict.list_cf(str(path)) if gens.first_seq_of(name) is not None]
        assert len(firsts) == len(set(firsts))  # one family for each first number
    assert not (path / MERGE_DIR).exists()
    return recorded


@pytest.mark.parametrize("point", ["created", "ingested", "dropped-0", "dropped-1"])
def test_a_writer_killed_while_taking_a_merge_in_leaves_a_whole_store(tmp_path, growing, point):
    path = tmp_path / "t-0"
    count = 50_000
    assert _write(path, count, point) == -9
    recorded = _check_whole(path, count)
    assert recorded < count
    assert _write(path, count, "") == 0  # the next writer goes on, merging again
    assert _check_whole(path, count) == count
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert set(_spans(store)) == {1}


def test_a_writer_killed_at_any_time_while_it_grows_and_merges_leaves_a_whole_store(tmp_path, growing):
    path = tmp_path / "t-0"
    count = 80_000
    for kill_after_s in (1.5, 2.5, 3.5, 4.5):
        _write(path, count, "", kill_after_s)
        _check_whole(path, count)
    _write(path, count, "")
    assert _check_whole(path, count) == count

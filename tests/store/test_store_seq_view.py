"""Reading ids in sequence order from a store that keeps them by id: ``iter_by_seq`` and the ``seq`` view."""

from __future__ import annotations

from pathlib import Path

from store.aging import AgingPolicy, age_step
from store.codec import SEQ_VIEW, encode_seq
from store.dedup_store import DedupStore


def _ids(first: int, count: int) -> list[bytes]:
    return [f"ajs-{n:032x}".encode() for n in range(first, first + count)]


def test_iter_by_seq_follows_records_forgets_and_aging(tmp_path: Path):
    with DedupStore.open(tmp_path / "events-0", topic="events", partition=0) as store:
        ids = [*_ids(0, 3000), b"order-17", "é".encode()]
        store.record(ids, list(range(len(ids))))
        assert list(store.iter_by_seq()) == list(enumerate(ids))
        assert list(store.iter_by_seq(2_999, 3_001)) == [(2_999, ids[2_999]), (3_000, b"order-17")]

        store.record(_ids(5_000, 2), [0, 0])  # recorded after the view was built: in it too
        assert [seq for seq, _ in store.iter_by_seq(3_001)] == [3_001, 3_002, 3_003]
        assert store.forget_many([ids[1], ids[5], b"never-seen"]) == 2
        assert store.contains_many([ids[1], ids[5], ids[6]]) == [False, False, True]
        assert [seq for seq, _ in store.iter_by_seq(0, 7)] == [0, 2, 3, 4, 6]

        age_step(store, AgingPolicy(max_keys=10))
        assert [seq for seq, _ in store.iter_by_seq()] == list(range(2_994, 3_004))
        view = store.family(SEQ_VIEW)  # schema 1's sequence family, as a read-only view
        assert view[encode_seq(3_000)] == b"order-17"


def test_a_secondary_reads_in_sequence_order_too(tmp_path: Path):
    path = tmp_path / "events-0"
    with DedupStore.open(path, topic="events", partition=0) as writer:
        writer.record(_ids(0, 100), [0] * 100)
        with DedupStore.open_secondary(path) as reader:
            assert [seq for seq, _ in reader.iter_by_seq(95)] == [95, 96, 97, 98, 99]
            writer.record(_ids(100, 5), [0] * 5)
            reader.refresh()
            assert [seq for seq, _ in reader.iter_by_seq(98)] == [98, 99, 100, 101, 102, 103, 104]

"""Where each id was published: batches keep their ids' output offsets, the aging cut maps to an exact
output offset, and an id the store lost goes back under the number it was recorded with."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.aging import advance_cut
from store.dedup_store import DedupStore
from store.times_codec import (
    decode_times,
    digest_count,
    encode_times,
    times_digests,
    times_offset_at,
    times_offsets,
    without_digests,
)

BASE_MS = 1_700_000_000_000


def _id(n: int) -> bytes:
    return f"ajs-{n:032x}".encode()


@pytest.fixture
def store(tmp_path: Path):
    with DedupStore.open(tmp_path / "events-0", topic="events", partition=0) as opened:
        yield opened


@pytest.mark.parametrize("count", [1, 2, 3, 513, 1_500])
@pytest.mark.parametrize("kind", ["consecutive", "consecutive range", "gaps", "stepped range", "wide gaps", None])
@pytest.mark.parametrize("digested", [True, False])
def test_times_values_keep_offsets_beside_timestamps_and_digests(count, kind, digested):
    stamps = [BASE_MS + 7 * n for n in range(count)]
    offsets = {
        "consecutive": list(range(40, 40 + count)),
        "consecutive range": range(40, 40 + count),  # as the worker gives them
        "stepped range": range(40, 40 + 2 * count, 2),
        "gaps": [40 + 2 * n + n // 100 for n in range(count)],  # transaction markers between batches
        "wide gaps": [n * 70_000 for n in range(count)],
        None: None,
    }[kind]
    digests = bytes(range(16)) * digest_count(count) if digested else None
    value = encode_times(stamps, digests, offsets)
    assert decode_times(value) == stamps
    assert times_offsets(value) == (offsets if offsets is None else list(offsets))
    assert times_digests(value) == digests
    if offsets is not None:
        assert [times_offset_at(value, i) for i in (0, count // 2, count - 1)] == [
            offsets[0],
            offsets[count // 2],
            offsets[-1],
        ]
    stripped = without_digests(value)
    assert times_digests(stripped) is None
    assert times_offsets(stripped) == (offsets if offsets is None else list(offsets))
    assert decode_times(stripped) == stamps
    if kind in ("consecutive", "consecutive range"):  # a worker batch: the first offset is all it costs
        assert len(value) == len(encode_times(stamps, digests)) + (9 if digested else 13)


def test_offsets_must_ascend():
    with pytest.raises(ValueError, match="ascend"):
        encode_times([BASE_MS] * 3, None, [5, 4, 6])


def _record(store: DedupStore, first: int, count: int, first_offset: int) -> None:
    """Record ids first..first+count-1 as one published batch at consecutive offsets, and its marker."""
    numbers = range(first, first + count)
    offsets = range(first_offset, first_offset + count)
    store.record([_id(n) for n in numbers], [BASE_MS + n for n in numbers], output_offsets=offsets,
                 output_offset=first_offset + count + 1)  # fmt: skip


def test_the_cut_maps_to_the_output_offset_of_the_oldest_live_id(store: DedupStore):
    assert store.ledger.window_start_offset() == -1 and store.ledger.newest_output_offset() == -1
    for batch in range(4):  # batch b: ids 100b.., offsets 101b.. (a transaction marker after each)
        _record(store, 100 * batch, 100, 101 * batch)
    assert store.ledger.window_start_offset() == -1  # nothing aged: no record is older than the window
    assert store.ledger.newest_output_offset() == 101 * 3 + 99
    for cut, offset in [(1, 1), (99, 99), (100, 101), (250, 252), (399, 101 * 3 + 99)]:
        advance_cut(store, cut)
        assert store.ledger.window_start_offset() == offset
    advance_cut(store, 400)  # everything aged: the window starts past the newest id
    assert store.ledger.window_start_offset() == 101 * 3 + 100


def test_a_cut_in_a_batch_without_offsets_is_not_placed(store: DedupStore):
    store.record([_id(n) for n in range(10)], [BASE_MS] * 10)  # written by hand: no offsets
    _record(store, 10, 10, 50)
    advance_cut(store, 5)
    assert store.ledger.window_start_offset() is None
    advance_cut(store, 12)
    assert store.ledger.window_start_offset() == 52


def test_lost_ids_go_back_under_their_own_numbers(store: DedupStore):
    for batch in range(5):
        _record(store, 100 * batch, 100, 101 * batch)
    advance_cut(store, 150)
    lost = [_id(n) for n in (160, 199, 200, 350, 499)]
    store.forget_many(lost)
    before = store.state
    offsets = [101 * (n // 100) + n % 100 for n in (160, 199, 200, 350, 499)]
    assert store.ledger.seqs_published_at(offsets) == dict(zip(offsets, [160, 199, 200, 350, 499], strict=True))
    # an offset below the cut, a marker's offset and one past the end have no live number
    assert store.ledger.seqs_published_at([101 + 20, 100, 10_000]) == {}
    assert store.place(lost, offsets) == [160, 199, 200, 350, 499]
    assert store.state == before  # nothing appended: the sequence and the cut are as they were
    assert [seq for seq, _ in store.lookup_many(lost)] == [160, 199, 200, 350, 499]
    assert [message_id for _, message_id in store.iter_by_seq()] == [_id(n) for n in range(150, 500)]
    # placing a live id again, or at an offset no live batch recorded (a marker's), changes nothing
    assert store.place(lost[:1], offsets[:1]) == [None]
    assert store.place([_id(1_001)], [101 * 2 + 100]) == [None]


def test_ids_recorded_without_offsets_have_no_place(store: DedupStore):
    store.record([_id(n) for n in range(100)], [BASE_MS] * 100, output_offset=101)
    store.forget_many([_id(50)])
    assert store.ledger.newest_output_offset() is None
    assert store.ledger.seqs_published_at([50]) == {}
    assert store.place([_id(50)], [50]) == [None]
    assert store.contains_many([_id(50)]) == [False]


def test_offsets_survive_a_restart(tmp_path: Path):
    path = tmp_path / "events-0"
    with DedupStore.open(path, topic="events", partition=0) as store:
        _record(store, 0, 300, 1_000)
        advance_cut(store, 120)
        store.flush()
    with DedupStore.open_secondary(path) as reader:
        assert reader.ledger.window_start_offset() == 1_120
        assert reader.ledger.output_offsets([0, 119, 299]) == [1_000, 1_119, 1_299]

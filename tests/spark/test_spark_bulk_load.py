"""store.bulk_load without Spark: SST files written per bucket and ingested give the store DedupStore.record
gives, read back through the store's own API (so a change of layout in store/codec.py that the bulk load
does not follow fails here first)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dedupectl.errors import StoreCorruptError
from store.aging import AgingPolicy, age_step
from store.bulk_load import LoadLayout, _times_value, ingest, write_bucket
from store.codec import CF_TIMES, StoreState, encode_ids
from store.dedup_store import DedupStore
from store.footprint import ids_files
from store.times_codec import batch_digests, encode_times

LAYOUT = LoadLayout(batch_ids=50, bucket_ids=200)


def _ids(count: int, kinds: int = 3) -> list[bytes]:
    """``ajs-`` ids; with ``kinds`` 3 UUIDs and other ids among them (keys of three lengths)."""
    rng = random.Random(3)
    shapes = [
        lambda: f"ajs-{rng.getrandbits(128):032x}",
        lambda: "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}".format(*(rng.getrandbits(b) for b in (32, 16, 12, 12, 48))),
        lambda: f"order:{rng.getrandbits(40)}",
    ]
    return [shapes[i % 7 % kinds]().encode() for i in range(count)]


def _contents(store: DedupStore) -> tuple:
    order = list(store.iter_by_seq())
    return store.state.next_seq, order, store.lookup_many([i for _, i in order])


@pytest.mark.parametrize("kinds", [1, 3], ids=["keys-of-one-length", "keys-of-three-lengths"])
def test_bulk_load_equals_record(tmp_path, kinds, generations_of):
    generations_of(LAYOUT.bucket_ids)  # a generation per bucket
    """Buckets 1 and 2 hold batches whose values are 1 and 2 bytes wide (sequence numbers past 255)."""
    ids = _ids(530, kinds)
    stamps = [1_790_000_000_000 + 7 * n for n in range(len(ids))]
    with DedupStore.open(tmp_path / "recorded", topic="t", partition=0) as store:
        for start in range(0, len(ids), 64):  # batches of another size: the layout is not part of the contents
            store.record(ids[start : start + 64], stamps[start : start + 64])
        recorded = _contents(store)

    buckets = []
    for bucket in range(3):
        first = bucket * LAYOUT.bucket_ids
        rows = sorted(zip(range(first, min(first + 200, 530)), ids[first : first + 200], stamps[first:], strict=False),
                      key=lambda row: row[1])  # fmt: skip
        seqs, bucket_ids, bucket_stamps = (list(column) for column in zip(*rows, strict=True))
        if kinds == 1:  # as rebuild_lines.parse gives ids of one length: one array, end to end
            bucket_ids = np.array(bucket_ids, dtype="V36")
        buckets.append(write_bucket(tmp_path / "sst", bucket, seqs, bucket_ids, bucket_stamps, len(ids), LAYOUT))
    state = StoreState(next_seq=len(ids), first_live_seq=0, input_offset=-1, output_offset=900)
    with ingest(tmp_path / "loaded", topic="t", partition=0, buckets=buckets, state=state) as store:
        assert _contents(store) == recorded
        assert store.state == state
        # every batch has its digests, as record() gives them (reconcile compares by them): they vouch for all
        assert store.ledger.match_digests(encode_ids(ids), 0) == []
        # a generation for each bucket (a worker's store then keeps the sealed ones' fixed-width ids in arrays)
        assert [(first, end - 1) for _, first, end in store.id_families()] == [(0, 199), (200, 399), (400, 529)]
        assert age_step(store, AgingPolicy(max_keys=300)).generations_dropped == 1
        assert store.contains_many([ids[199], ids[230], ids[529]]) == [False, True, True]


def test_an_id_recorded_again_is_held_under_its_later_number_as_record_leaves_it(tmp_path, generations_of):
    """Ids aged out and recorded again under later numbers (late retries the worker rightly published again):
    the bulk load holds each under its later number only; its earlier number keeps its timestamp, output offset
    and place in the digests, so the ``times`` values are those record() wrote, byte for byte."""
    generations_of(LAYOUT.bucket_ids)
    ids = _ids(300)
    sequence = ids + ids[:30]  # numbers 300-329: ids[0:30] again
    stamps = [1_790_000_000_000 + 7 * n for n in range(len(sequence))]
    offsets = [2 * n + 5 for n in range(len(sequence))]  # a transaction marker after each record
    with DedupStore.open(tmp_path / "recorded", topic="t", partition=0) as store:
        for start in range(0, len(sequence), LAYOUT.batch_ids):
            if start == 300:
                age_step(store, AgingPolicy(max_keys=200))  # ids[0:30] aged out: the worker publishes them again
            stop = start + LAYOUT.batch_ids
            store.record(sequence[start:stop], stamps[start:stop], output_offsets=offsets[start:stop])
        age_step(store, AgingPolicy(max_keys=200))
        recorded = _contents(store), _times_values(store), store.ledger.output_offsets(range(130, 330))

    held = [n >= 30 for n in range(len(sequence))]
    buckets = []
    for bucket, first in enumerate(range(0, len(sequence), LAYOUT.bucket_ids)):
        rows = sorted(range(first, min(first + LAYOUT.bucket_ids, len(sequence))), key=sequence.__getitem__)
        columns = [[column[n] for n in rows] for column in (sequence, stamps, offsets, held)]
        bucket_ids, bucket_stamps, bucket_offsets, bucket_held = columns
        buckets.append(
            write_bucket(tmp_path / "sst", bucket, rows, bucket_ids, bucket_stamps, len(sequence), LAYOUT,
                         offsets=bucket_offsets, held=bucket_held)
        )  # fmt: skip
    state = StoreState(next_seq=len(sequence), first_live_seq=0, input_offset=-1, output_offset=700)
    with ingest(tmp_path / "loaded", topic="t", partition=0, buckets=buckets, state=state) as store:
        assert [found[0] for found in store.lookup_many(ids[:30])] == list(range(300, 330))
        assert store.ledger.output_offsets(range(len(sequence))) == offsets
        assert store.ledger.match_digests(encode_ids(sequence), 0) == []  # the digests are of every number's id
        age_step(store, AgingPolicy(max_keys=200))
        assert (_contents(store), _times_values(store), store.ledger.output_offsets(range(130, 330))) == recorded


def test_a_bucket_whose_ids_are_all_recorded_again_has_no_ids_file(tmp_path, generations_of):
    """Numbers 0-299 hold no id (each recorded again at 300-599): the first bucket gets no ``ids`` file, the
    second's piece below 300 none either (an SST file cannot be empty); the numbers keep their timestamps."""
    generations_of(150)
    ids = _ids(300)
    sequence = ids + ids
    stamps = [1_790_000_000_000 + n for n in range(len(sequence))]
    held = [n >= 300 for n in range(len(sequence))]
    buckets = [
        write_bucket(tmp_path / "sst", bucket, list(range(first, first + 200)), sequence[first : first + 200],
                     stamps[first : first + 200], len(sequence), LAYOUT, held=held[first : first + 200])
        for bucket, first in enumerate(range(0, len(sequence), 200))
    ]  # fmt: skip
    assert buckets[0].ids_path is None and all(b.ids_path is not None for b in buckets[1:])
    state = StoreState(next_seq=len(sequence), first_live_seq=0, input_offset=-1, output_offset=700)
    with ingest(tmp_path / "loaded", topic="t", partition=0, buckets=buckets, state=state) as store:
        assert [first for _, first, _ in store.id_families()] == [300, 450]
        assert [found[0] for found in store.lookup_many(ids)] == list(range(300, 600))
        assert store.ledger.timestamps(range(len(sequence))) == stamps
        store.record([b"after-the-load"], [stamps[-1]])
        assert store.lookup_many([b"after-the-load"]) == [(600, stamps[-1])]
    assert not list((tmp_path / "sst").glob("ids-*"))  # the pieces written and the empty one left behind are gone


def _times_values(store: DedupStore) -> dict[bytes, bytes]:
    return dict(store.family(CF_TIMES).items())


def test_bulk_load_refuses_incomplete_or_doubled_input(tmp_path):
    ids = _ids(10)
    with pytest.raises(StoreCorruptError, match="got 9 ids for 10"):
        write_bucket(tmp_path, 0, list(range(9)), ids[:9], [0] * 9, 10, LAYOUT)
    with pytest.raises(StoreCorruptError, match="lacks some of sequence numbers"):
        write_bucket(tmp_path, 0, [0, 1, 2, 3, 4, 5, 6, 7, 8, 8], ids, [0] * 10, 10, LAYOUT)
    with pytest.raises(StoreCorruptError, match=r"outside 0\.\.9"):
        write_bucket(tmp_path, 0, [-1, *range(1, 10)], ids, [0] * 10, 10, LAYOUT)
    with pytest.raises(StoreCorruptError, match=r"outside 0\.\.9"):
        write_bucket(tmp_path, 0, [*range(9), 10], ids, [0] * 10, 10, LAYOUT)
    with pytest.raises(StoreCorruptError, match="the same id key twice"):
        write_bucket(tmp_path, 0, list(range(10)), [ids[0], *ids[:9]], [0] * 10, 10, LAYOUT)
    files = write_bucket(tmp_path / "ok", 0, list(range(10)), ids, [0] * 10, 10, LAYOUT)
    with pytest.raises(StoreCorruptError, match="holds 10 ids, the state says 11"):
        ingest(tmp_path / "store", topic="t", partition=0, buckets=[files], state=StoreState(next_seq=11))


@pytest.mark.parametrize(
    "stamps",
    [
        [1_790_000_000_000],
        [1_790_000_000_000 + 7 * n for n in range(600)],  # 2-byte deltas, two digests
        [0, 40_000, -5, 1 << 40, 3],  # 4- and 8-byte deltas, a negative timestamp read as 0
    ],
)
def test_bulk_times_values_are_those_record_writes(stamps):
    digests = batch_digests(encode_ids([f"ajs-{n:032x}".encode() for n in range(len(stamps))]))
    assert _times_value(np.asarray(stamps, dtype=np.int64), digests) == encode_times(stamps, digests)


def test_bulk_load_cuts_buckets_where_generations_start(tmp_path, generations_of):
    """Generations of 150 numbers over buckets of 200: each generation starts where the id filter's group
    does (a multiple of its stretch), the buckets that reach past one cut there, and every id is found."""
    generations_of(150)
    ids = _ids(530)
    stamps = [1_790_000_000_000 + 7 * n for n in range(len(ids))]
    buckets = [
        write_bucket(tmp_path / "sst", bucket, list(range(first, min(first + 200, 530))), ids[first : first + 200],
                     stamps[first : first + 200], len(ids), LAYOUT)
        for bucket, first in enumerate(range(0, 530, 200))
    ]  # fmt: skip
    state = StoreState(next_seq=len(ids), first_live_seq=0, input_offset=-1, output_offset=900)
    with ingest(tmp_path / "loaded", topic="t", partition=0, buckets=buckets, state=state) as store:
        assert [first for _, first, _ in store.id_families()] == [0, 150, 300, 450]
        # the sealed generations' ajs- and UUID ids in their sealed arrays, the newest's in its file
        sealed = {family for family, _, _ in store.arrays_files()}
        assert sorted(sealed) == [name for name, _, _ in store.id_families()[:-1]]
        assert (450, 529) in [f.seq_range for f in ids_files(store)]
        assert [found[0] for found in store.lookup_many(ids)] == list(range(len(ids)))
        assert store.contains_many(_ids(600)[530:] + ids[::7]) == [False] * 70 + [True] * len(ids[::7])
    assert not list((tmp_path / "sst").glob("*.reading"))  # the files read to cut a bucket are gone

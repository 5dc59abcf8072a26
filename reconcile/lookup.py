"""Sequence numbers of output ids in a store, looked up a large group at a time, one group ahead, in a thread.

**by digests first.** A healthy stretch of output is the store's ids in sequence order: the worker publishes
a batch and records it, with a digest of each 512 of its keys (``store.codec.batch_digests``, kept in the
batch's ``times`` value). So a group is first checked against those digests: the first id's number says
where the group starts, each 512-id chunk the group covers whole must have the digest of the group's keys
at its places, the chunks covered in part at the group's two edges are looked up id by id, and so is every
256th id (a spot check of the ``ids`` family itself: any stretch of 256 or more ids missing from it, say a
lost file, is caught). That costs ~0.65 us of CPU per id instead of ~4 (a present id's lookup reads and
searches a data block; bench_reconcile measures both). Anything else (a repeat, an absence, a batch without
digests, a reordering) fails the check and takes the lookups below, which give the exact answer. Two
different chunks share a digest with probability 2^-128.

**by lookups otherwise.** Each output record's id is looked up in the store. Nearly every id is present, and
a present id costs far more than an absent one (the bloom filter answers for those): its 16 KiB data block
is read, decompressed and searched. What makes that affordable over tens of millions of records:

- **key order.** A group of consecutive output records lies in one or two of the store's files, spread over
  every block of them. Its keys are put in key order (bucketed by their first random byte: cheap, and as
  good as a full sort at this block size) and looked up ``MULTI_GET_KEYS`` at a time, so consecutive
  multi-gets walk each file's blocks in order: a block is decompressed about once per group, not once
  per id, and RocksDB's own sort of each small multi-get runs in cache. Measured on a 5M-id store: 3.0-4.7
  us of CPU per id, against 5.2-7.7 us for the same ids in output order, 50,000 per multi-get (depending
  on the shared machine's load). The block cache (8 MiB) holds a few hundred of a file's ~2,300 blocks;
  with 128 MiB the lookups took ~15% less CPU.
- **order does not matter on the fast path.** A healthy group's numbers are exactly ``first..first+n-1``:
  every id present, no two alike, max - min = n - 1. That is checked on the numbers as they come back,
  without mapping them to records; only a group that fails it (absences, repeats, aged ids) is mapped back
  to its records, batch by batch, for the exact comparison.
- **one group ahead.** RocksDB releases the GIL while it reads, so looking up group N+1 in a helper thread
  while group N is compared (and librdkafka fetches N+2) overlaps the costs instead of adding them.

The multi-gets go to the ``ids`` family directly, with the store's cut applied the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate, chain, pairwise
from operator import itemgetter

from store.codec import (
    CF_IDS,
    CF_TIMES,
    DIGEST_BYTES,
    DIGEST_CHUNK,
    chunk_digest,
    decode_seq,
    decode_seq_value,
    encode_ids,
    encode_seq,
    times_count,
    times_digests,
)
from store.dedup_store import DedupStore

# Records per group: each group decompresses about every block of the file(s) it falls in, so larger groups
# cost less per id (measured: 50,000-record groups take ~30% more CPU per id than 200,000), but hold more
# records in memory (~150 bytes each in compact batches, twice: one group compared, the next looked up).
GROUP_RECORDS = 200_000
MULTI_GET_KEYS = 1_000  # per multi-get: a few blocks' worth of keys in key order
# A group checked by digests also looks up every 256th id in the ids family: a present id read out of order
# costs a block decompressed (~15 us), so every 32nd cost ~0.46 us per id, half the whole check
SPOT_CHECK_STRIDE = 256
_BUCKET = itemgetter(2)  # the first byte after the packed id's tag: uniform for packed ids


@dataclass(frozen=True)
class Lookup:
    """For each id its sequence number (None: absent); ``run_start`` is set when every id is present with
    consecutive ascending numbers from it (a healthy store read in publication order)."""

    seqs: list[int | None]
    run_start: int | None


@dataclass(frozen=True)
class GroupLookup:
    """The sequence numbers of a group of batches of ids. ``run_start`` is set when they are exactly
    ``run_start..run_start+count-1``, in some order (every id present and live, none repeated);
    ``per_batch`` gives each batch's numbers in record order (the exact path)."""

    batches: Sequence[Sequence[bytes]] = field(repr=False)
    count: int
    run_start: int | None
    # key -> value when the group is not one run ({}: every id absent); None for a run
    _found: dict[bytes, bytes | None] | None = field(default=None, repr=False)

    def per_batch(self, store: DedupStore) -> list[Lookup]:
        """Each batch's Lookup, in record order. A run kept no map from ids to numbers (nearly every group
        is one, and then needs none): should the caller still want it (a run of numbers matched before,
        i.e. repeats), the batches are looked up again, now."""
        if self._found is None:
            return [look_up(store, ids) for ids in self.batches]
        if not self._found:  # every id absent (a store catching up from scratch): nothing to map
            return [Lookup([None] * len(ids), None) for ids in self.batches]
        cut, found = store.state.first_live_seq, self._found
        keys = encode_ids(list(chain.from_iterable(self.batches)))
        seqs = [_live(found[key], cut) for key in keys]
        bounds = list(accumulate((len(ids) for ids in self.batches), initial=0))
        return [as_lookup(seqs[start:stop]) for start, stop in pairwise(bounds)]


def _live(value: bytes | None, cut: int) -> int | None:
    if value is None:
        return None
    seq = decode_seq_value(value)
    return seq if seq >= cut else None


def seqs_of(store: DedupStore, ids: Sequence[bytes]) -> list[int | None]:
    """Each id's live sequence number in ``store`` (None: absent, or aged out), with one multi-get."""
    if not ids:
        return []
    values = store.family(CF_IDS)[encode_ids(ids)]
    cut = store.state.first_live_seq
    return [_live(value, cut) for value in values]


def as_lookup(seqs: list[int | None]) -> Lookup:
    if not seqs or None in seqs:
        return Lookup(seqs, None)
    first = seqs[0]
    if seqs[-1] - first == len(seqs) - 1 and seqs == list(range(first, first + len(seqs))):
        return Lookup(seqs, first)
    return Lookup(seqs, None)


def look_up(store: DedupStore, ids: Sequence[bytes]) -> Lookup:
    return as_lookup(seqs_of(store, ids))


def key_order(keys: list[bytes]) -> list[bytes]:
    """``keys`` in an order that visits the store's blocks one after another: bucketed by their first
    random byte (a stable sort on one small int), or fully sorted when some key is too short for that."""
    if keys and min(map(len, keys)) > 2:
        return sorted(keys, key=_BUCKET)
    return sorted(keys)


def look_up_group(store: DedupStore, batches: Sequence[Sequence[bytes]]) -> GroupLookup:
    """Look up several batches of ids at once: by the store's batch digests, else in key order (see the
    module docstring)."""
    keys = encode_ids(list(chain.from_iterable(batches)))
    run_start = run_by_digests(store, keys)
    if run_start is not None:
        return GroupLookup(batches, len(keys), run_start)
    ordered = key_order(keys)
    values = _multi_get(store, ordered)
    run_start = _run_start(values, store.state.first_live_seq)
    if run_start is not None:
        return GroupLookup(batches, len(ordered), run_start)
    if values.count(None) == len(values):
        return GroupLookup(batches, len(ordered), None, {})
    return GroupLookup(batches, len(ordered), None, dict(zip(ordered, values, strict=True)))


def _multi_get(store: DedupStore, keys: list[bytes]) -> list[bytes | None]:
    return store.raw_values(keys, per_call=MULTI_GET_KEYS)


def run_by_digests(store: DedupStore, keys: list[bytes]) -> int | None:
    """``s`` when ``keys`` (encoded, in output order) are exactly the store's live ids ``s..s+n-1`` in that
    order, shown by the batch digests plus lookups of the edges and a spot check; None when that is not shown
    (which says nothing either way: the caller then looks every id up)."""
    count = len(keys)
    if count == 0:
        return None
    state = store.state
    ends = store.family(CF_IDS)[[keys[0], keys[-1]]]
    if None in ends:
        return None
    first = decode_seq_value(ends[0])
    stop = first + count
    if first < state.first_live_seq or stop > state.next_seq or decode_seq_value(ends[1]) != stop - 1:
        return None
    looked_up = _digest_check(store, keys, first)
    if looked_up is None:
        return None
    # in key order: the lookups then walk the store's blocks in order
    places = sorted(set(looked_up).union(range(0, count, SPOT_CHECK_STRIDE)), key=keys.__getitem__)
    values = _multi_get(store, [keys[place] for place in places])
    if None in values or list(map(decode_seq_value, values)) != [first + place for place in places]:
        return None
    return first


def _digest_check(store: DedupStore, keys: list[bytes], first: int) -> list[int] | None:
    """Walk the batches covering numbers ``first..first+len(keys)-1``: each of their digest chunks the keys
    cover whole must have the digest of the keys at its places. Returns the places left to look up (chunks
    covered in part, at the edges; batches without digests); None on a mismatch or a gap in the batches."""
    stop = first + len(keys)
    looked_up: list[int] = []
    reached = first  # every number below is accounted for
    it = store.family(CF_TIMES).iter()
    try:
        it.seek_for_prev(encode_seq(first))
        while it.valid() and reached < stop:
            batch_first, value = decode_seq(it.key()), it.value()
            batch_stop = batch_first + times_count(value)
            if batch_first > reached or batch_stop <= reached:
                return None  # a gap: not what record() writes
            high = min(batch_stop, stop)
            digests = times_digests(value)
            if digests is None:
                looked_up.extend(range(reached - first, high - first))
                reached = high
            chunk = (reached - batch_first) // DIGEST_CHUNK
            while reached < high:
                chunk_first = batch_first + chunk * DIGEST_CHUNK
                chunk_stop = min(chunk_first + DIGEST_CHUNK, batch_stop)
                if chunk_first == reached and chunk_stop <= high:
                    wanted = digests[chunk * DIGEST_BYTES : (chunk + 1) * DIGEST_BYTES]
                    if chunk_digest(keys[reached - first : chunk_stop - first]) != wanted:
                        return None
                    reached = chunk_stop
                else:  # the keys cover this chunk in part: look those up
                    end = min(chunk_stop, high)
                    looked_up.extend(range(reached - first, end - first))
                    reached = end
                chunk += 1
            it.next()
    finally:
        del it
    return looked_up if reached == stop else None


def _run_start(values: list[bytes | None], cut: int) -> int | None:
    """The first number when ``values`` are exactly a run of consecutive live numbers, in any order."""
    if not values or None in values:
        return None
    seqs = list(map(int.from_bytes, values))  # big-endian by default (3.11+): the codec's order, at C speed
    low = min(seqs)
    if low < cut or max(seqs) - low != len(seqs) - 1 or len(set(seqs)) != len(seqs):
        return None
    return low


class Prefetcher:
    """Look up groups of batches in a helper thread, one group ahead of the caller."""

    def __init__(self, store: DedupStore) -> None:
        self._store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reconcile-lookup")

    def submit(self, batches: Sequence[Sequence[bytes]]) -> Future[GroupLookup]:
        return self._pool.submit(look_up_group, self._store, batches)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

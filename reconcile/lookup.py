"""Sequence numbers of output ids in a store, looked up a large group at a time, one group ahead, in a thread.

**by digests first.** A healthy stretch of output is the store's ids in sequence order: the worker publishes
a batch and records it, with a digest of each 512 of its keys (``store.times_codec.batch_digests``, kept with the
batch's record). So a group is first checked against those digests: the first id's number says
where the group starts, each 512-id chunk the group covers whole must have the digest of the group's keys
at its places, the chunks covered in part at the group's two edges are looked up id by id, and so is every
256th id (a spot check of the stored ids themselves: any stretch of 256 or more ids missing from it, say a
lost file, is caught). That costs a fraction of the lookups' CPU per id (a present id's lookup reads and
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
  per id, and RocksDB's own sort of each small multi-get runs in cache. The block cache holds a small part
  of a file's blocks, and a larger one saves little (figures: docs/benchmarks.md).
- **order does not matter on the fast path.** A healthy group's numbers are exactly ``first..first+n-1``:
  every id present, no two alike, max - min = n - 1. That is checked on the numbers as they come back,
  without mapping them to records; only a group that fails it (absences, repeats, aged ids) is mapped back
  to its records, batch by batch, for the exact comparison.
- **one group ahead.** RocksDB releases the GIL while it reads, so looking up group N+1 in a helper thread
  while group N is compared (and librdkafka fetches N+2) overlaps the costs instead of adding them.

The store answers both (``Ledger.match_digests``, ``DedupStore.live_seqs``) and applies its aging cut to
them: this module decides what to ask, in which order, and what the answers mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate, chain, pairwise
from operator import itemgetter

from store.codec import encode_ids
from store.dedup_store import DedupStore

# Records per group: each group decompresses about every block of the file(s) it falls in, so larger groups
# cost less per id, but hold more records in memory (twice: one group compared, the next looked up).
GROUP_RECORDS = 200_000
MULTI_GET_KEYS = 1_000  # per multi-get: a few blocks' worth of keys in key order
# A group checked by digests also looks up every 256th id in the store: a present id read out of order
# costs a block decompressed, so a denser spot check would cost as much as the digests save
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
    # key -> live sequence number when the group is not one run ({}: every id absent); None for a run
    _found: dict[bytes, int | None] | None = field(default=None, repr=False)

    def per_batch(self, store: DedupStore) -> list[Lookup]:
        """Each batch's Lookup, in record order. A run kept no map from ids to numbers (nearly every group
        is one, and then needs none): should the caller still want it (a run of numbers matched before,
        i.e. repeats), the batches are looked up again, now."""
        if self._found is None:
            return [look_up(store, ids) for ids in self.batches]
        if not self._found:  # every id absent (a store catching up from scratch): nothing to map
            return [Lookup([None] * len(ids), None) for ids in self.batches]
        keys = encode_ids(list(chain.from_iterable(self.batches)))
        seqs = list(map(self._found.__getitem__, keys))
        bounds = list(accumulate((len(ids) for ids in self.batches), initial=0))
        return [as_lookup(seqs[start:stop]) for start, stop in pairwise(bounds)]


def seqs_of(store: DedupStore, ids: Sequence[bytes]) -> list[int | None]:
    """Each id's live sequence number in ``store`` (None: absent, or aged out), with one multi-get."""
    if not ids:
        return []
    return store.live_seqs(encode_ids(ids), per_call=len(ids))


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
    seqs = _multi_get(store, ordered)
    run_start = _run_start(seqs)
    if run_start is not None:
        return GroupLookup(batches, len(ordered), run_start)
    if seqs.count(None) == len(seqs):
        return GroupLookup(batches, len(ordered), None, {})
    return GroupLookup(batches, len(ordered), None, dict(zip(ordered, seqs, strict=True)))


def _multi_get(store: DedupStore, keys: list[bytes]) -> list[int | None]:
    return store.live_seqs(keys, per_call=MULTI_GET_KEYS)


def run_by_digests(store: DedupStore, keys: list[bytes]) -> int | None:
    """``s`` when ``keys`` (encoded, in output order) are exactly the store's live ids ``s..s+n-1`` in that
    order, shown by the batch digests plus lookups of the edges and a spot check; None when that is not shown
    (which says nothing either way: the caller then looks every id up)."""
    count = len(keys)
    if count == 0:
        return None
    first, last = store.live_seqs([keys[0], keys[-1]])
    if first is None or last is None:
        return None
    stop = first + count
    if stop > store.state.next_seq or last != stop - 1:
        return None
    unchecked = store.ledger.match_digests(keys, first)
    if unchecked is None:
        return None
    # in key order: the lookups then walk the store's blocks in order
    places = sorted(set(unchecked).union(range(0, count, SPOT_CHECK_STRIDE)), key=keys.__getitem__)
    if _multi_get(store, [keys[place] for place in places]) != [first + place for place in places]:
        return None
    return first


def _run_start(seqs: list[int | None]) -> int | None:
    """The first number when ``seqs`` are exactly a run of consecutive numbers, in any order."""
    if not seqs or None in seqs:
        return None
    low = min(seqs)
    if max(seqs) - low != len(seqs) - 1 or len(set(seqs)) != len(seqs):
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

"""Bulk-loading a dedup store: sorted SST files written apart (on Spark executors), ingested into a fresh store.

This is what ``DedupStore.record`` writes, batch by batch, produced without the write path: every key and
value comes from ``store.codec`` exactly as ``record`` builds them, so a bulk-loaded store and a recorded one
hold the same ids under the same sequence numbers and timestamps (the Spark tests compare the two). The
sequence is cut into batches (what a worker transaction records at most) and the batches into buckets (see
``LoadLayout``): one ``ids`` SST file and one ``times`` SST file per bucket.

- ``ids`` (FIFO): each file holds one stretch of consecutive sequence numbers with its batch markers, so its
  smallest and largest keys are its sequence range, exactly like a file flushed by the worker; aging drops
  the oldest files whole.
- ``times``: one key per batch, the batch's first sequence number; its timestamps and digest, as ``record``
  writes them.

An SST file needs its keys in ascending byte order. Callers may hand a bucket's rows in any order; when they
come sorted by message id (Spark sorts bytes as RocksDB does) the encoded keys usually come out sorted too,
which is checked, and sorted here only when the codec's encoding does not keep that order.
"""

from __future__ import annotations

import operator
import os
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice, pairwise, repeat
from pathlib import Path

from rocksdict import IngestExternalFileOptions, SstFileWriter

from dedupectl.errors import StoreCorruptError
from store.codec import (
    CF_IDS,
    CF_TIMES,
    StoreState,
    batch_digests,
    encode_ids,
    encode_marker,
    encode_seq,
    encode_seq_values,
    encode_times,
)
from store.dedup_store import DedupStore
from store.options import store_options

# The ids family compresses at a high zstd level (store.options): worth it for files flushed once in the
# background, but it makes writing an SST file 4x slower (3.7 vs 0.85 us per id, measured) for 7% fewer bytes.
# A bulk load is the critical path of restoring capacity, so its files use the fastest level: 1 writes 0.76 us
# per id against 0.92 at level 3 for 22.6 bytes per id against 22.3 (500k ajs- ids, measured back to back).
# The family's own level applies again whenever FIFO merges them.
BULK_ZSTD_LEVEL = 1
_UNFILLED = array("q", [-(1 << 63)])  # no timestamp is this


@dataclass(frozen=True)
class LoadLayout:
    """How the sequence is cut: ``batch_ids`` per recorded batch (one ``times`` value, one pair of markers;
    the worker records at most its batch size at once), a multiple of it per SST file (the unit aging drops)."""

    batch_ids: int = 10_000
    bucket_ids: int = 500_000

    def __post_init__(self) -> None:
        if self.batch_ids <= 0 or self.bucket_ids <= 0 or self.bucket_ids % self.batch_ids:
            raise ValueError(f"bucket_ids ({self.bucket_ids}) must be a positive multiple of batch_ids")

    def bucket_of(self, seq: int) -> int:
        return seq // self.bucket_ids


DEFAULT_LAYOUT = LoadLayout()


@dataclass(frozen=True)
class BucketFiles:
    """The SST files of one bucket: sequence numbers ``first_seq`` to ``first_seq + count - 1``."""

    bucket: int
    first_seq: int
    count: int
    ids_path: Path
    times_path: Path


def write_bucket(
    directory: Path,
    bucket: int,
    seqs: Sequence[int],
    ids: Sequence[bytes],
    timestamps_ms: Sequence[int],
    total_ids: int,
    layout: LoadLayout = DEFAULT_LAYOUT,
) -> BucketFiles:
    """Write the SST files of ``bucket`` from its ids, each with its sequence number and timestamp.

    The three columns line up, in any order of rows (sorted by id is cheapest). ``total_ids`` is the store's
    whole id count (the last bucket and batch may be short). Every sequence number of the bucket must be
    present exactly once.
    """
    first_seq = bucket * layout.bucket_ids
    places = list(map(operator.sub, seqs, repeat(first_seq, len(seqs))))
    return write_bucket_places(directory, bucket, places, ids, timestamps_ms, total_ids, layout)


def write_bucket_places(
    directory: Path,
    bucket: int,
    places: Sequence[int],
    ids: Sequence[bytes],
    timestamps_ms: Sequence[int],
    total_ids: int,
    layout: LoadLayout = DEFAULT_LAYOUT,
) -> BucketFiles:
    """``write_bucket`` with each id's place in the bucket (its sequence number minus the bucket's first).

    Every step over the ids runs in C (``map``, ``sorted``, the codec's batch packing): a Python-level step
    per id would cost about as much as RocksDB's own work for it (0.6-1 us per id, measured on 2 shared cores).
    """
    first_seq = bucket * layout.bucket_ids
    count = min(layout.bucket_ids, total_ids - first_seq)
    if count <= 0:
        raise ValueError(f"bucket {bucket} is past the last of {total_ids} ids")
    if not len(places) == len(ids) == len(timestamps_ms) == count:
        raise StoreCorruptError(f"bucket {bucket} got {len(ids)} ids for {count} sequence numbers")
    span = f"{first_seq}..{first_seq + count - 1}"
    # The timestamps in sequence order, for the times family. count places, each in range, every slot
    # filled: each sequence number exactly once (a negative place wraps around and leaves a slot unfilled).
    stamps = array("q", _UNFILLED) * count
    try:
        deque(map(stamps.__setitem__, places, timestamps_ms), maxlen=0)
    except IndexError:
        raise StoreCorruptError(f"bucket {bucket} got sequence numbers outside {span}") from None
    if _UNFILLED[0] in stamps:
        raise StoreCorruptError(f"bucket {bucket} lacks some of sequence numbers {span}")

    # An SST file takes its keys in ascending byte order. Rows sorted by id (Spark sorts bytes as RocksDB
    # does) give sorted keys when the bucket holds one shape of id; else sort here (sorted runs cost little).
    keys = encode_ids(ids)
    if not all(map(operator.lt, keys, islice(keys, 1, None))):
        order = sorted(range(count), key=keys.__getitem__)
        keys = list(map(keys.__getitem__, order))
        places = list(map(places.__getitem__, order))
    batch_starts = range(first_seq, first_seq + count, layout.batch_ids)
    seq_values: list[bytes] = []  # the ids values in sequence order: each as wide as its batch's last needs
    for batch_first in batch_starts:
        seq_values += encode_seq_values(batch_first, min(layout.batch_ids, first_seq + count - batch_first))

    _, families = store_options(create=True)
    directory.mkdir(parents=True, exist_ok=True)
    ids_path = directory / f"ids-{bucket:06d}.sst"
    times_path = directory / f"times-{bucket:06d}.sst"
    ids_options = families[CF_IDS]
    ids_options.set_compression_options(-14, BULK_ZSTD_LEVEL, 0, 0)  # window bits (default), level, strategy, dict
    writer = SstFileWriter(options=ids_options)
    writer.open(str(ids_path))
    put = writer.__setitem__
    for batch_first in batch_starts:  # the markers first: 0x00 sorts before every id key (see codec)
        put(encode_marker(True, batch_first), b"")
    try:
        deque(map(put, keys, map(seq_values.__getitem__, places)), maxlen=0)
    except Exception as error:  # RocksDB refuses a key equal to the one before (its message is not ours)
        duplicate = next((a for a, b in pairwise(keys) if a == b), None)
        if duplicate is not None:
            raise StoreCorruptError(f"the same id key twice in one bucket ({duplicate[:40]!r})") from error
        raise
    for batch_first in batch_starts:  # and last: 0xFF sorts after every id key
        put(encode_marker(False, min(batch_first + layout.batch_ids, first_seq + count) - 1), b"")
    writer.finish()

    # each batch's digests are of its keys in sequence order, as record() makes them (reconcile compares by them)
    in_seq_order: list[bytes] = [b""] * count
    deque(map(in_seq_order.__setitem__, places, keys), maxlen=0)
    times = SstFileWriter(options=families[CF_TIMES])
    times.open(str(times_path))
    for batch_first in batch_starts:
        offset = batch_first - first_seq
        digests = batch_digests(in_seq_order[offset : offset + layout.batch_ids])
        times[encode_seq(batch_first)] = encode_times(stamps[offset : offset + layout.batch_ids].tolist(), digests)
    times.finish()
    return BucketFiles(bucket, first_seq, count, ids_path, times_path)


def ingest(
    path: Path,
    *,
    topic: str,
    partition: int,
    buckets: Sequence[BucketFiles],
    state: StoreState,
) -> DedupStore:
    """Create a fresh store at ``path`` from the buckets' SST files (moved in, oldest sequence numbers first,
    so FIFO ages them first) and set its state; returns it open for writing."""
    ordered = sorted(buckets, key=lambda b: b.first_seq)
    expected = 0
    for files in ordered:
        if files.first_seq != expected:
            raise StoreCorruptError(f"bulk load is missing sequence numbers {expected}..{files.first_seq - 1}")
        expected += files.count
    if expected != state.next_seq:
        raise StoreCorruptError(f"bulk load holds {expected} ids, the state says {state.next_seq}")
    if os.path.exists(path):
        raise StoreCorruptError(f"{path} already exists; a bulk load builds a fresh store")
    store = DedupStore.open(path, topic=topic, partition=partition)
    try:
        options = IngestExternalFileOptions()
        options.set_move_files(True)  # a rename (hard link), not a copy
        if ordered:
            store.family(CF_IDS).ingest_external_file([str(f.ids_path) for f in ordered], options)
            store.family(CF_TIMES).ingest_external_file([str(f.times_path) for f in ordered], options)
        store.write_state(state)
        store.flush()
    except BaseException:
        store.close()
        raise
    return store

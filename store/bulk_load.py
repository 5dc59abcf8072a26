"""Bulk-loading a dedup store: sorted SST files written apart (on Spark executors), ingested into a fresh store.

This is what ``DedupStore.record`` writes, batch by batch, produced without the write path: the keys and
digests come from ``store.codec``, the ``ids`` values and ``times`` deltas are computed here as arrays in the
codec's layout (``codec.pack_times`` assembles each ``times`` value), so a bulk-loaded store and a recorded
one hold the same ids under the same sequence numbers, timestamps and output offsets (the tests compare the
two, and the ``times`` values byte for byte). The sequence is cut into batches (what a worker transaction
records at most) and the batches into buckets (see ``LoadLayout``): one ``ids`` SST file and one ``times``
SST file per bucket.

- ``ids``: each file holds one stretch of consecutive sequence numbers, with no bloom filter (as a sealed
  generation's run has none); ``ingest`` puts the files of each generation's stretch into its family
  (``store.generations``; a file that reaches into the next stretch is cut where it starts) and compacts a
  generation of several files into one run. A number whose id was recorded again under a later number (an
  id aged out, then published again) holds no key, as in the worker's store once that id's old generation
  is dropped; a stretch with no key left gets no file.
- ``times``: one key per batch, the batch's first sequence number; its timestamps, output offsets (when
  given) and digests of every number's id, as ``record`` writes them.

An SST file needs its keys in ascending byte order. Callers may hand a bucket's rows in any order; when they
come sorted by message id (Spark sorts bytes as RocksDB does) the encoded keys usually come out sorted too,
which is checked, and sorted here only when the codec's encoding does not keep that order.
"""

from __future__ import annotations

import bisect
import operator
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import compress, islice, pairwise
from pathlib import Path

import numpy as np
from rocksdict import Cache, IngestExternalFileOptions, Rdict, SstFileWriter

from store.codec import CF_TIMES, StoreState, encode_fixed_ids_end_to_end, encode_ids, encode_seq, seq_width
from store.dedup_store import DedupStore
from store.errors import StoreCorruptError
from store.options import generation_options, store_options
from store.times_codec import DELTA_WIDTHS, batch_digests, batch_digests_joined, encode_offsets, pack_times

# A bulk load is the critical path of restoring capacity: its files use zstd's fastest level, not the ids
# families' high one (a generation of several files is rewritten at that one when it is compacted).
BULK_ZSTD_LEVEL = 1


@dataclass(frozen=True)
class LoadLayout:
    """How the sequence is cut: ``batch_ids`` per recorded batch (one ``times`` value;
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
    """The SST files of one bucket: sequence numbers ``first_seq`` to ``first_seq + count - 1``. ``ids_path`` is
    None when the ``ids`` family holds none of them (each one's id was recorded again under a later number)."""

    bucket: int
    first_seq: int
    count: int
    ids_path: Path | None
    times_path: Path


def write_bucket(
    directory: Path,
    bucket: int,
    seqs: Sequence[int],
    ids: Sequence[bytes],
    timestamps_ms: Sequence[int],
    total_ids: int,
    layout: LoadLayout = DEFAULT_LAYOUT,
    *,
    offsets: Sequence[int] | None = None,
    held: Sequence[bool] | None = None,
) -> BucketFiles:
    """Write the SST files of ``bucket`` from its ids, each with its sequence number and timestamp.

    The columns line up, in any order of rows (sorted by id is cheapest). ``total_ids`` is the store's next
    sequence number (the last bucket and batch may be short). Every sequence number of the bucket must be
    present exactly once. ``offsets`` and ``held``: see ``write_bucket_places``.
    """
    places = np.asarray(seqs, dtype=np.int64) - bucket * layout.bucket_ids
    return write_bucket_places(
        directory, bucket, places, ids, timestamps_ms, total_ids, layout, offsets=offsets, held=held
    )


def write_bucket_places(
    directory: Path,
    bucket: int,
    places: Sequence[int] | np.ndarray,
    ids: Sequence[bytes] | np.ndarray,
    timestamps_ms: Sequence[int] | np.ndarray,
    total_ids: int,
    layout: LoadLayout = DEFAULT_LAYOUT,
    *,
    offsets: Sequence[int] | np.ndarray | None = None,
    held: Sequence[bool] | np.ndarray | None = None,
) -> BucketFiles:
    """``write_bucket`` with each id's place in the bucket (its sequence number minus the bucket's first).

    ``ids`` may also be a numpy array of byte strings of one length (what ``rebuild_lines.parse`` gives).
    ``offsets``: the output offset each row was published at, for the ``times`` values (none when omitted).
    ``held``: the rows whose id the ``ids`` family holds under this number (default all); the others are ids
    recorded again under a later number, as when the worker publishes an aged-out id again: their numbers
    keep their timestamps, offsets and a place in the digests, as ``record`` wrote them, but no ``ids`` key.
    The ids come in key order and the ``times`` family wants them in sequence order: that permutation, the
    checks and the values run as numpy array operations: a Python-level step per id (a random store into a
    large list misses the cache) would cost as much as RocksDB's own work for the id.
    """
    first_seq = bucket * layout.bucket_ids
    count = min(layout.bucket_ids, total_ids - first_seq)
    if count <= 0:
        raise ValueError(f"bucket {bucket} is past the last of {total_ids} ids")
    if not len(places) == len(ids) == len(timestamps_ms) == count:
        raise StoreCorruptError(f"bucket {bucket} got {len(ids)} ids for {count} sequence numbers")
    span = f"{first_seq}..{first_seq + count - 1}"
    places = np.asarray(places, dtype=np.int64)
    if places.min() < 0 or places.max() >= count:
        raise StoreCorruptError(f"bucket {bucket} got sequence numbers outside {span}")
    rows = _Rows(
        places,
        np.asarray(timestamps_ms, dtype=np.int64),
        None if offsets is None else np.asarray(offsets, dtype=np.int64),
        np.ones(count, dtype=bool) if held is None else np.asarray(held, dtype=bool),
    )
    keys, end_to_end, rows = _keys_in_order(ids, rows)
    # each sequence number exactly once: the row holding each place, no slot left unfilled
    row_of_place = np.full(count, -1, dtype=np.int64)
    row_of_place[rows.places] = np.arange(count)
    if (row_of_place < 0).any():
        raise StoreCorruptError(f"bucket {bucket} lacks some of sequence numbers {span}")

    _, families, _ = store_options(create=True)
    directory.mkdir(parents=True, exist_ok=True)
    files = BucketFiles(
        bucket, first_seq, count, directory / f"ids-{bucket:06d}.sst", directory / f"times-{bucket:06d}.sst"
    )
    batch_starts = range(first_seq, first_seq + count, layout.batch_ids)
    values = _seq_values(rows.places, first_seq, count, layout.batch_ids)
    if rows.held.all():
        _write_ids_file(files, keys, values)
    elif rows.held.any():
        _write_ids_file(files, list(compress(keys, rows.held)), list(compress(values, rows.held)))
    else:  # an SST file cannot be empty
        files = replace(files, ids_path=None)
    # each batch's timestamps, offsets and digests (of every number's key), in sequence order, as record() makes them
    stamps = rows.stamps[row_of_place]
    offsets_by_place = None if rows.offsets is None else rows.offsets[row_of_place]
    digests_of = _digests_in_seq_order(keys, end_to_end, row_of_place)
    times = SstFileWriter(options=families[CF_TIMES])
    times.open(str(files.times_path))
    for batch_first in batch_starts:
        batch = slice(batch_first - first_seq, batch_first - first_seq + layout.batch_ids)
        batch_offsets = None if offsets_by_place is None else offsets_by_place[batch].tolist()
        times[encode_seq(batch_first)] = _times_value(stamps[batch], digests_of(batch), batch_offsets)
    times.finish()
    return files


@dataclass(frozen=True)
class _Rows:
    """A bucket's columns besides the ids, row by row: place, timestamp, output offset (or None), held."""

    places: np.ndarray
    stamps: np.ndarray
    offsets: np.ndarray | None
    held: np.ndarray

    def taken(self, order: list[int]) -> _Rows:
        return _Rows(
            self.places[order],
            self.stamps[order],
            None if self.offsets is None else self.offsets[order],
            self.held[order],
        )


def _keys_in_order(ids: Sequence[bytes] | np.ndarray, rows: _Rows) -> tuple[list[bytes], bytes | None, _Rows]:
    """The ids' keys in ascending byte order, an SST file's order, with their rows.

    Rows sorted by id (Spark sorts bytes as RocksDB does) give sorted keys when the bucket holds one shape of
    id; else they are sorted here (sorted runs cost little). ``end_to_end`` is the keys joined, when known.
    """
    if isinstance(ids, np.ndarray):  # ids of one length, end to end (dtype V<length>): no object per id
        keys, end_to_end = encode_fixed_ids_end_to_end(np.ascontiguousarray(ids).tobytes(), ids.dtype.itemsize)
    else:
        keys, end_to_end = encode_ids(ids), None
    if not all(map(operator.lt, keys, islice(keys, 1, None))):
        order = sorted(range(len(keys)), key=keys.__getitem__)
        keys, end_to_end = list(map(keys.__getitem__, order)), None
        rows = rows.taken(order)
    return keys, end_to_end, rows


def _write_ids_file(files: BucketFiles, keys: list[bytes], values) -> None:
    """The bucket's ``ids`` SST file: its keys, in order, and their sequence numbers."""
    writer = _ids_file_writer(files.ids_path)
    try:
        deque(map(writer.__setitem__, keys, values), maxlen=0)
    except Exception as error:  # RocksDB refuses a key equal to the one before (its message is not ours)
        duplicate = next((a for a, b in pairwise(keys) if a == b), None)
        if duplicate is not None:
            raise StoreCorruptError(f"the same id key twice in one bucket ({duplicate[:40]!r})") from error
        raise
    writer.finish()


def _ids_file_writer(path: Path) -> SstFileWriter:
    """An ``ids`` SST file of a bulk load, open at ``path``: filterless, at the bulk load's zstd level."""
    writer = SstFileWriter(options=generation_options(Cache(0), filtered=False, zstd_level=BULK_ZSTD_LEVEL))
    writer.open(str(path))
    return writer


def _times_value(stamps: np.ndarray, digests: bytes, offsets: list[int] | None = None) -> bytes:
    """``times_codec.encode_times(stamps, digests, offsets)``, its deltas computed and packed as one array."""
    stamps = np.maximum(stamps, 0)  # a negative timestamp is read as 0
    deltas = np.diff(stamps)
    packed_offsets = None if offsets is None else encode_offsets(offsets)
    for width in DELTA_WIDTHS:
        bound = 1 << (8 * width - 1)
        if not deltas.size or (deltas.min() >= -bound and deltas.max() < bound):
            packed = deltas.astype(f">i{width}").tobytes()
            return pack_times(int(stamps[0]), width, packed, len(stamps), digests, packed_offsets)
    raise ValueError("a timestamp delta does not fit in 8 bytes")


def _seq_values(places: np.ndarray, first_seq: int, count: int, batch_ids: int) -> list[bytes]:
    """The ``ids`` value of each row: its sequence number big-endian, as wide as its batch's last needs
    (``codec.encode_seq_values``, which ``record`` uses)."""
    widths = [seq_width(first_seq + min(start + batch_ids, count) - 1) for start in range(0, count, batch_ids)]
    seqs = places + first_seq
    if len(set(widths)) > 1:  # a bucket whose batches straddle 2^8, 2^16, ...: one call per id
        return list(map(int.to_bytes, seqs.tolist(), np.asarray(widths)[places // batch_ids].tolist()))
    width = widths[0]
    big_endian = seqs.astype(">u8").view(np.uint8).reshape(-1, 8)
    return np.ascontiguousarray(big_endian[:, 8 - width :]).view(f"V{width}").ravel().tolist()


def _digests_in_seq_order(
    keys: list[bytes], end_to_end: bytes | None, row_of_place: np.ndarray
) -> Callable[[slice], bytes]:
    """``batch_digests`` of the keys at a slice of places. Keys of one length (every ``ajs-`` or UUID key)
    are reordered as one array (from ``end_to_end``, the keys' bytes as ``encode_fixed_ids_end_to_end``
    packed them, when given); others one by one."""
    if end_to_end is None and len(set(map(len, keys))) == 1:
        end_to_end = b"".join(keys)
    if end_to_end is not None:
        key_bytes = len(keys[0])
        in_order = np.frombuffer(end_to_end, dtype=f"V{key_bytes}")[row_of_place]
        return lambda batch: batch_digests_joined(in_order[batch].tobytes(), key_bytes)
    in_seq_order = list(map(keys.__getitem__, row_of_place.tolist()))
    return lambda batch: batch_digests(in_seq_order[batch])


def ingest(
    path: Path,
    *,
    topic: str,
    partition: int,
    buckets: Sequence[BucketFiles],
    state: StoreState,
    window_ids: int | None = None,
) -> DedupStore:
    """Create a fresh store at ``path`` from the buckets' SST files (moved in, each into the generation of its
    sequence numbers) and set its state; returns it open for writing, its id filter built for
    ``window_ids`` (see ``DedupStore.open``)."""
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
    store = DedupStore.open(path, topic=topic, partition=partition, window_ids=window_ids)
    try:
        options = IngestExternalFileOptions()
        options.set_move_files(True)  # a rename (hard link), not a copy
        store.write_state(state)  # first: the generations' stretch follows from the ids held
        if ordered:
            store.ingest_generations(_generation_files(ordered, store.generation_ids()))
            store.family(CF_TIMES).ingest_external_file([str(f.times_path) for f in ordered], options)
        store.flush()
        store.prepare_filter()  # saved when the store closes: its first worker need not read every id
    except BaseException:
        store.close()
        raise
    return store


def _generation_files(ordered: Sequence[BucketFiles], stretch: int) -> dict[int, list[str]]:
    """The ``ids`` files of each generation, by its first number: generations start at multiples of
    ``stretch``, where the id filter's groups do, so that a duplicate's route asks one generation. A bucket
    that reaches past such a multiple is cut there."""
    by_generation: dict[int, list[str]] = {}
    for files in ordered:
        if files.ids_path is None:
            continue
        for first, path in _ids_pieces(files, stretch):
            by_generation.setdefault(first // stretch * stretch, []).append(str(path))
    return by_generation


def _ids_pieces(files: BucketFiles, stretch: int) -> list[tuple[int, Path]]:
    """``(first number, ids file)`` of the bucket's pieces, cut at each multiple of ``stretch`` inside it."""
    end = files.first_seq + files.count
    firsts = [files.first_seq, *range((files.first_seq // stretch + 1) * stretch, end, stretch)]
    if len(firsts) == 1:
        return [(files.first_seq, files.ids_path)]
    pieces = [files.ids_path.with_name(f"{files.ids_path.stem}-{first:020d}.sst") for first in firsts]
    writers = [_ids_file_writer(piece) for piece in pieces]
    reader_path = files.ids_path.with_name(f"{files.ids_path.stem}.reading")
    reader = Rdict(str(reader_path), options=generation_options(Cache(0), filtered=False))
    moved = IngestExternalFileOptions()
    moved.set_move_files(True)  # a hard link, not a copy: the bucket's file goes once it is cut
    written = [False] * len(pieces)
    try:
        reader.ingest_external_file([str(files.ids_path)], moved)
        for key, value in reader.items():  # key order, each piece's order too
            piece = bisect.bisect_right(firsts, int.from_bytes(value, "big")) - 1
            writers[piece][key] = value
            written[piece] = True
    finally:
        reader.close()
        Rdict.destroy(str(reader_path))
    for writer, path, wrote in zip(writers, pieces, written, strict=True):
        if wrote:
            writer.finish()
        else:  # a stretch none of whose numbers holds its id (each recorded again later): an SST file cannot be empty
            path.unlink(missing_ok=True)
    files.ids_path.unlink(missing_ok=True)  # moved files are unlinked by RocksDB itself
    return [(first, path) for first, path, wrote in zip(firsts, pieces, written, strict=True) if wrote]

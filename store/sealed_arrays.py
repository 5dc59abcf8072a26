"""A sealed generation's fixed-width ids as sorted arrays in one memory-mapped file, searched through a guide.

The layout a sealed generation's ``ajs-`` and UUID ids take outside RocksDB (``store.generation_arrays``
names and writes a generation's files): a duplicate's lookup in it costs a few reads of memory instead of an
index search and a block decompressed (figures and the commands that measure them: docs/benchmarks.md).

One file holds the ids of one key prefix (``store.codec``: ``0xA0 0x10`` for ``ajs-``, ``0x02`` for a UUID),
each as the 16 bytes after it:

    header   48 bytes, little-endian: magic | count (u64) | first number (u64) | CRC-32 of the columns (u32) |
             prefix length (u8) | prefix (up to 19 bytes, zero-padded)
    high     count x u64: each id's first 8 bytes read big-endian, ascending
    low      count x u64: its last 8 bytes, so that (high, low) ascends as the ids' bytes do
    seqs     count x u32: each id's sequence number less the file's first number

A guide is built when a file is first searched: for each of about count / 32 equal slices of the key space
(by the first bits of an id), where its ids start in the file, as u32 (0.125 bytes per id, in memory). An id's
slice bounds a binary search on the first halves that a batch's ids take in step (one numpy gather a step, so
their reads of memory overlap): about 7 steps whatever the file holds, as long as ids spread over the key space
as random ids do. Ids sharing a first half are then told apart by their second, so answers are exact for any
ids; ids bunched in a few slices only widen the search, up to a plain binary search.

Written as a file apart, synced, then renamed: after a crash the file is whole or absent.
"""

from __future__ import annotations

import math
import mmap
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from store.errors import StoreCorruptError
from store.id_filter import commit

ID_BYTES = 16
MAGIC = b"DDSARR02"
MAX_PREFIX_BYTES = 19
_HEADER = struct.Struct(f"<8sQQIB{MAX_PREFIX_BYTES}s")
HEADER_BYTES = _HEADER.size
BYTES_PER_ID = 8 + 8 + 4
MAX_SEQ_SPAN = 2**32  # numbers a file can hold above its first: they are kept as u32
IDS_PER_SLICE = 32  # of the guide: about 7 search steps a lookup, 0.125 bytes of memory per id
_CRC_CHUNK = 1 << 24


def halves_of(bodies: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The first and second big-endian 64-bit halves of 16-byte ids laid end to end, as native integers."""
    halves = np.frombuffer(bodies, dtype=">u8").reshape(-1, 2).astype(np.uint64)
    return halves[:, 0], halves[:, 1]


def write(path: Path, prefix: bytes, bodies: bytes, seqs: np.ndarray, first_seq: int) -> None:
    """Write the ids ``prefix`` + each 16 bytes of ``bodies``, numbered ``seqs`` (each within
    ``MAX_SEQ_SPAN`` above ``first_seq``), to ``path``: written apart, synced, renamed. Ids need not come in
    order; the same id twice is a bug of the caller."""
    if len(prefix) > MAX_PREFIX_BYTES:
        raise ValueError(f"a prefix of {len(prefix)} bytes: at most {MAX_PREFIX_BYTES}")
    if len(bodies) % ID_BYTES:
        raise ValueError(f"{len(bodies)} bytes of ids is not a whole number of {ID_BYTES}-byte ids")
    high, low = halves_of(bodies)
    numbers = np.asarray(seqs, dtype=np.int64)
    if numbers.shape != high.shape:
        raise ValueError(f"{high.size} ids and {numbers.size} sequence numbers")
    if numbers.size and (numbers.min() < first_seq or numbers.max() - first_seq >= MAX_SEQ_SPAN):
        raise ValueError(f"sequence numbers {numbers.min()}-{numbers.max()} are not within 2^32 from {first_seq}")
    order = np.lexsort((low, high))
    high, low = high[order], low[order]
    if high.size > 1 and np.any((high[1:] == high[:-1]) & (low[1:] == low[:-1])):
        raise ValueError("the same id twice")
    columns = (high, low, (numbers[order] - first_seq).astype(np.uint32))
    crc = 0
    for column in columns:
        crc = zlib.crc32(column.data, crc)
    header = _HEADER.pack(MAGIC, high.size, first_seq, crc, len(prefix), prefix)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with open(partial, "wb") as handle:
            handle.write(header)
            for column in columns:
                column.tofile(handle)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    commit(partial, path)


@dataclass(frozen=True)
class SealedArrays:
    """One file's ids, memory-mapped: the mapping lasts as long as this object or an array taken from it."""

    path: Path
    prefix: bytes
    first_seq: int
    high: np.ndarray
    low: np.ndarray
    seqs: np.ndarray
    crc: int

    @classmethod
    def open(cls, path: Path) -> SealedArrays:
        """Map the file at ``path``; a file this layout did not write whole is refused."""
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(0)
            head = handle.read(HEADER_BYTES)
            if len(head) < HEADER_BYTES or not head.startswith(MAGIC):
                raise _corrupt(path, "it does not start with a sealed-arrays header")
            _, count, first_seq, crc, prefix_bytes, prefix = _HEADER.unpack(head)
            if prefix_bytes > MAX_PREFIX_BYTES:
                raise _corrupt(path, f"its header gives a prefix of {prefix_bytes} bytes (at most {MAX_PREFIX_BYTES})")
            expected = HEADER_BYTES + count * BYTES_PER_ID
            if size != expected:
                raise _corrupt(path, f"it holds {size} bytes, not the {expected} its header says")
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if count else None
        start = HEADER_BYTES
        columns = []
        for kind in (np.uint64, np.uint64, np.uint32):
            columns.append(np.frombuffer(mapped, dtype=kind, count=count, offset=start) if count else np.zeros(0, kind))
            start += count * np.dtype(kind).itemsize
        return cls(path, prefix[:prefix_bytes], first_seq, *columns, crc)

    def __len__(self) -> int:
        return self.high.size

    @cached_property
    def _guide(self) -> tuple[np.ndarray, int, int]:
        """Where each slice of the key space starts in the file (and, last, the count), how many first bits of an
        id name its slice, and the most ids a slice holds."""
        bits = max(0, int(math.log2(max(len(self), 1) / IDS_PER_SLICE)))
        bounds = np.arange(2**bits, dtype=np.uint64) << np.uint64(64 - bits) if bits else np.zeros(1, np.uint64)
        starts = np.empty(2**bits + 1, dtype=np.uint32 if len(self) < 2**32 else np.int64)
        starts[:-1] = np.searchsorted(self.high, bounds, side="left")
        starts[-1] = len(self)
        return starts, bits, int(np.diff(starts.astype(np.int64)).max())

    def verify(self) -> None:
        """Read the whole file and check it against the CRC its header carries."""
        crc = 0
        for column in (self.high, self.low, self.seqs):
            view = column.view(np.uint8)
            for start in range(0, view.size, _CRC_CHUNK):
                crc = zlib.crc32(view[start : start + _CRC_CHUNK], crc)
        if crc != self.crc:
            raise _corrupt(self.path, "its ids do not match the checksum its header carries")

    def seqs_of(self, bodies: bytes) -> np.ndarray:
        """The sequence number of each 16-byte id of ``bodies`` (laid end to end, without the prefix), -1 where
        the file does not hold it."""
        high, low = halves_of(bodies)
        count = len(self)
        if not count or not high.size:
            return np.full(high.size, -1, dtype=np.int64)
        starts, bits, span = self._guide
        slices = (high >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(high.size, np.int64)
        first, end = starts.take(slices).astype(np.int64), starts.take(slices + 1).astype(np.int64)
        at = _first_not_below(first, end, span, count - 1, lambda row: self.high.take(row) < high)
        row = np.minimum(at, count - 1)
        found_high = self.high.take(row)
        tied = np.flatnonzero((at < count) & (found_high == high) & (self.low.take(row) < low))
        if tied.size:  # ids sharing this first half: the first whose second half is not below the asked one's
            tied_high, tied_low = high[tied], low[tied]

            def pair_below(rows: np.ndarray) -> np.ndarray:
                found = self.high.take(rows)
                return (found < tied_high) | ((found == tied_high) & (self.low.take(rows) < tied_low))

            span = int((end[tied] - at[tied]).max())
            at[tied] = _first_not_below(at[tied], end[tied], span, count - 1, pair_below)
            row = np.minimum(at, count - 1)
            found_high = self.high.take(row)
        held = (at < count) & (found_high == high) & (self.low.take(row) == low)
        return np.where(held, self.seqs.take(row).astype(np.int64) + self.first_seq, -1)

    def position(self, key: bytes) -> int:
        """How many of the file's ids (each with its prefix, as ``store.codec`` packs it) sort below ``key``."""
        if key[: len(self.prefix)] != self.prefix:
            return 0 if key < self.prefix else len(self)
        body = key[len(self.prefix) :].ljust(ID_BYTES, b"\x00")[:ID_BYTES]
        high, low = (int(half[0]) for half in halves_of(body))
        at = int(np.searchsorted(self.high, np.uint64(high), side="left"))
        while at < len(self) and int(self.high[at]) == high and int(self.low[at]) < low:
            at += 1  # ids sharing a first half: a few at most
        longer = len(key) > len(self.prefix) + ID_BYTES
        if longer and at < len(self) and self._body(at) == key[len(self.prefix) :][:ID_BYTES]:
            at += 1  # a key longer than an id, past the one it starts with
        return at

    def _body(self, row: int) -> bytes:
        return int(self.high[row]).to_bytes(8, "big") + int(self.low[row]).to_bytes(8, "big")

    def items(self, chunk: int = 65_536, start: int = 0) -> Iterator[tuple[list[bytes], list[int]]]:
        """``(keys, seqs)`` of the ids from the ``start``-th on in key order, ``chunk`` at a time: each key with
        its prefix, as ``store.codec`` packs it."""
        for begin in range(start, len(self), chunk):
            stop = begin + chunk
            bodies = np.empty((min(stop, len(self)) - begin, 2), dtype=">u8")
            bodies[:, 0], bodies[:, 1] = self.high[begin:stop], self.low[begin:stop]
            packed = bodies.tobytes()
            keys = [self.prefix + packed[at : at + ID_BYTES] for at in range(0, len(packed), ID_BYTES)]
            yield keys, (self.seqs[begin:stop].astype(np.int64) + self.first_seq).tolist()


def _first_not_below(
    first: np.ndarray, end: np.ndarray, span: int, last: int, below: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """For each row, the first position in ``first[i]:end[i]`` of an ascending column whose entry is not
    ``below`` the row's wanted one (``end[i]`` if none): a binary search all rows take in step. ``below`` is
    given each row's position clipped to ``last``, the column's last (a search that has closed on the
    column's end asks one past it)."""
    first, end = first.copy(), end.copy()
    for _ in range(_steps(span)):
        middle = (first + end) >> 1
        lower = below(np.minimum(middle, last))
        first, end = np.where(lower, middle + 1, first), np.where(lower, end, middle)
    return first


def _steps(span: int) -> int:
    """Halvings that take a range of ``span`` positions down to one answer (of ``span + 1``)."""
    return math.ceil(math.log2(span + 1)) if span > 0 else 0


def _corrupt(path: Path, why: str) -> StoreCorruptError:
    return StoreCorruptError(
        f"sealed arrays {path} cannot be read: {why}", "restore the store from a snapshot or rebuild it"
    )

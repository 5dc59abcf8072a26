"""A sealed generation's fixed-width ids as sorted arrays in one memory-mapped file, searched through a guide.

The layout a sealed generation's ``ajs-`` and UUID ids take outside RocksDB (``store.generation_arrays``
names and writes a generation's files): a duplicate's lookup in it costs a few reads of memory instead of an
index search and a block decompressed (figures and the commands that measure them: docs/benchmarks.md).

One file holds the ids of one key prefix (``store.codec``: ``0xA0 0x10`` for ``ajs-``, ``0x02`` for a UUID),
each as the 16 bytes after it:

    header   48 bytes, little-endian: magic | count (u64) | first number (u64) | CRC-32 (u32) of the header
             (this field as 0) and the block table | prefix length (u8) | prefix (up to 19 bytes, zero-padded)
    ids      count x 2 u64: each id's first 8 bytes read big-endian, then its last 8, ascending as the ids'
             bytes do; an id's two halves side by side, so that the search's last step reads both in one line
             of memory
    seqs     count x u32: each id's sequence number less the file's first number
    guide    2^b + 1 x u32, b = floor(log2(count / 32)) (0 below 64 ids): where each of 2^b equal slices of the
             key space (by an id's first b bits) starts in the file, and last the count
    blocks   a u32 CRC-32 of each 4 KiB block of the ids, seqs and guide above, laid end to end (the last block
             as long as what is left)

Every byte is checked before anything is answered from it: the header and the block table at open (a few
KiB a file: 0.001 bytes per id), each block at the first read of it (a lookup reads a few; a scan, all). A
worker's restart then checks what its first lookups read, not every file whole.

A search, a scan's chunk or a check maps the pages it reads and unmaps them when it returns
(``MADV_DONTNEED``): they stay in the page cache, as RocksDB's table blocks do, and the process keeps none of
a file's pages, so its memory does not grow with the ids its files hold (nor its OOM score). A page is mapped
again from the page cache at its next read, for less than a search's other steps.

The guide (0.125 bytes per id, in the file: a search reads it from the mapping, and nothing is built at open
or at a first search) bounds a binary search on the first halves of an id's slice, about 32 ids, that a
batch's ids take in step (one numpy gather a step, so their reads of memory overlap): about 7 steps whatever
the file holds, as long as ids spread over the key space as random ids do. Ids sharing a first half are then
told apart by their second, so answers are exact for any ids; ids bunched in a few slices only widen the
search, up to a plain binary search.

Written as a file apart, synced, then renamed: after a crash the file is whole or absent.
"""

from __future__ import annotations

import math
import mmap
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property, wraps
from pathlib import Path
from typing import TypeVar

import numpy as np

from store.damage import damaged
from store.errors import StoreCorruptError
from store.id_filter import commit

ID_BYTES = 16
MAGIC = b"DDSARR04"
MAX_PREFIX_BYTES = 19
_HEADER = struct.Struct(f"<8sQQIB{MAX_PREFIX_BYTES}s")
HEADER_BYTES = _HEADER.size
BYTES_PER_ID = 8 + 8 + 4
MAX_SEQ_SPAN = 2**32  # numbers a file can hold above its first: they are kept as u32
IDS_PER_SLICE = 32  # of the guide: about 7 search steps a lookup, 0.125 bytes of memory per id
BLOCK_BYTES = 4096  # a page: a lookup's first read of a block checks 4 KiB
_GUIDE_CHUNK = 1 << 20
MAX_IDS = 2**32 - 1  # a guide's entries are u32
_Result = TypeVar("_Result")


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
    if high.size > MAX_IDS:
        raise ValueError(f"{high.size} ids: a file holds at most {MAX_IDS}")
    if numbers.size and (numbers.min() < first_seq or numbers.max() - first_seq >= MAX_SEQ_SPAN):
        raise ValueError(f"sequence numbers {numbers.min()}-{numbers.max()} are not within 2^32 from {first_seq}")
    if not _strictly_ascending(high, low):  # a generation's family comes in key order: no sort needed
        order = np.lexsort((low, high))
        high, low, numbers = high[order], low[order], numbers[order]
        if not _strictly_ascending(high, low):
            raise ValueError("the same id twice")
    pairs = np.empty((high.size, 2), dtype=np.uint64)
    pairs[:, 0], pairs[:, 1] = high, low
    columns = (pairs, (numbers - first_seq).astype(np.uint32), _guide_starts(high))
    unchecked = _HEADER.pack(MAGIC, high.size, first_seq, 0, len(prefix), prefix)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with open(partial, "wb+") as handle:
            handle.write(unchecked)
            for column in columns:
                column.tofile(handle)
            handle.flush()
            with mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as mapped:
                table = _block_crcs(mapped, HEADER_BYTES)
            handle.seek(0, 2)
            table.tofile(handle)
            handle.seek(0)
            handle.write(_HEADER.pack(MAGIC, high.size, first_seq, _header_crc(unchecked, table), len(prefix), prefix))
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    commit(partial, path)


def _releasing(read: Callable[..., _Result]) -> Callable[..., _Result]:
    """A read of the file that unmaps the pages it mapped when it returns (``SealedArrays.release``)."""

    @wraps(read)
    def released(self: SealedArrays, *args, **kwargs) -> _Result:
        try:
            return read(self, *args, **kwargs)
        finally:
            self.release()

    return released


@dataclass(frozen=True)
class SealedArrays:
    """One file's ids, memory-mapped: the mapping lasts as long as this object or an array taken from it, its
    pages only while a read of them runs (``release``).

    ``halves`` holds every id's two halves, as u64, side by side: an id's first half is at ``2 * row``, its
    second at ``2 * row + 1``. Nothing is read from them before the blocks it lies in are checked."""

    path: Path
    prefix: bytes
    first_seq: int
    halves: np.ndarray
    seqs: np.ndarray
    stored_guide: np.ndarray  # the file's guide
    data: np.ndarray  # the bytes the block table covers
    table: np.ndarray  # each block's CRC-32
    checked: np.ndarray  # each block's: checked already
    mapping: mmap.mmap

    @classmethod
    def open(cls, path: Path) -> SealedArrays:
        """Map the file at ``path``; a file this layout did not write whole, or whose header or block table fails
        its CRC, is refused."""
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(0)
            head = handle.read(HEADER_BYTES)
            if len(head) < HEADER_BYTES or not head.startswith(MAGIC):
                raise _corrupt(path, "it does not start with this layout's header")
            _, count, first_seq, crc, prefix_bytes, prefix = _HEADER.unpack(head)
            if prefix_bytes > MAX_PREFIX_BYTES:
                raise _corrupt(path, f"its header gives a prefix of {prefix_bytes} bytes (at most {MAX_PREFIX_BYTES})")
            expected = _file_size(count)
            if size != expected:
                raise _corrupt(path, f"it holds {size} bytes, not the {expected} its header says")
            data_bytes = _data_bytes(count)
            handle.seek(HEADER_BYTES + data_bytes)
            table = np.frombuffer(handle.read(), dtype=np.uint32)
            if _header_crc(_HEADER.pack(MAGIC, count, first_seq, 0, prefix_bytes, prefix), table) != crc:
                raise _corrupt(path, "its header or block table does not match the checksum its header carries")
            mapped = mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        data = np.frombuffer(mapped, dtype=np.uint8, count=data_bytes, offset=HEADER_BYTES)
        halves = data[: 16 * count].view(np.uint64)
        seqs = data[16 * count : 20 * count].view(np.uint32)
        guide = data[20 * count :].view(np.uint32)
        checked = np.zeros(table.size, dtype=bool)
        return cls(path, prefix[:prefix_bytes], first_seq, halves, seqs, guide, data, table, checked, mapped)

    def release(self) -> None:
        """Unmap the pages reads mapped: they stay in the page cache, and the mapping stays valid (a read maps a
        page again). A block checked once stays checked: the file never changes once written."""
        self.mapping.madvise(mmap.MADV_DONTNEED)

    def _check_rows(self, low: np.ndarray, high: np.ndarray, at: int = 0, width: int = 16) -> None:
        """Check the blocks of the entries ``low[i]`` to ``high[i]`` (inclusive) of the column of ``width``-byte
        entries at byte ``at`` of the checked bytes, before they are read."""
        first = (at + width * low) // BLOCK_BYTES
        spans = (at + width * high + width - 1) // BLOCK_BYTES - first + 1
        if spans.size and spans.max() > 1:  # ranges over several blocks: every block of each
            starts = np.repeat(first, spans)
            steps = np.arange(starts.size) - np.repeat(np.cumsum(spans) - spans, spans)
            first = starts + steps
        self._check_blocks(first)

    def _check_blocks(self, blocks: np.ndarray) -> None:
        todo = np.unique(blocks[~self.checked[blocks]])
        for block in todo.tolist():
            start = block * BLOCK_BYTES
            if zlib.crc32(self.data[start : start + BLOCK_BYTES]) != int(self.table[block]):
                raise _corrupt(self.path, f"its block at byte {HEADER_BYTES + start} fails its checksum")
        self.checked[todo] = True

    def _check_all(self) -> None:
        self._check_blocks(np.flatnonzero(~self.checked))

    def __len__(self) -> int:
        return self.seqs.size

    @property
    def high(self) -> np.ndarray:
        """Every id's first half, in order (a view of the file)."""
        return self.halves[0::2]

    @property
    def low(self) -> np.ndarray:
        """Every id's second half, in order (a view of the file)."""
        return self.halves[1::2]

    def _search_whole(self, highs: np.ndarray) -> np.ndarray:
        """For each first half of ``highs``, the first position whose first half is not below it: a search of
        the whole file (numpy's ``searchsorted`` would copy a strided column whole first)."""
        count = len(self)
        whole = np.zeros(highs.size, dtype=np.int64), np.full(highs.size, count, dtype=np.int64)
        return _first_not_below(*whole, count, count - 1, lambda row: self._high_at(row) < highs)

    def _high_at(self, rows: np.ndarray) -> np.ndarray:
        return self.halves.take(rows * 2)

    def _low_at(self, rows: np.ndarray) -> np.ndarray:
        return self.halves.take(rows * 2 + 1)

    @cached_property
    def _guide(self) -> tuple[np.ndarray, int, int]:
        """Where each slice of the key space starts in the file (and, last, the count), how many first bits of an
        id name its slice, and the most ids a slice holds."""
        count = len(self)
        self._check_rows(np.zeros(1, np.int64), np.array([self.stored_guide.size - 1]), 20 * count, 4)
        starts = self.stored_guide
        sizes = np.diff(starts.astype(np.int64))
        if starts[0] != 0 or starts[-1] != count or sizes.min() < 0:  # a search would leave the file
            raise _corrupt(self.path, "its guide does not describe its ids")
        return starts, _guide_bits(count), int(sizes.max())

    @property
    def file_bytes(self) -> int:
        return _file_size(len(self))

    @_releasing
    def prepare(self) -> None:
        """Read the guide now rather than at the first search."""
        _ = self._guide

    @_releasing
    def verify(self) -> None:
        """Read the whole file and check every block against its CRC."""
        self._check_all()

    @_releasing
    def seqs_of(self, bodies: bytes) -> np.ndarray:
        """The sequence number of each 16-byte id of ``bodies`` (laid end to end, without the prefix), -1 where
        the file does not hold it."""
        rows = self._rows_of(bodies)
        held = np.flatnonzero(rows >= 0)
        self._check_rows(rows[held], rows[held], 16 * len(self), 4)
        found = np.full(rows.size, -1, dtype=np.int64)
        found[held] = self.seqs.take(rows[held]).astype(np.int64) + self.first_seq
        return found

    @_releasing
    def rows_of(self, bodies: bytes) -> np.ndarray:
        """Where in the file each 16-byte id of ``bodies`` (laid end to end, without the prefix) is, -1 where
        it does not hold it: whether it is held, without reading its number."""
        return self._rows_of(bodies)

    def _rows_of(self, bodies: bytes) -> np.ndarray:
        high, low = halves_of(bodies)
        count = len(self)
        if not count or not high.size:
            return np.full(high.size, -1, dtype=np.int64)
        starts, bits, span = self._guide
        slices = (high >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(high.size, np.int64)
        first, end = starts.take(slices).astype(np.int64), starts.take(slices + 1).astype(np.int64)
        self._check_rows(np.minimum(first, count - 1), np.minimum(end, count - 1))  # every row a search may read
        at = _first_not_below(first, end, span, count - 1, lambda row: self._high_at(row) < high)
        row = np.minimum(at, count - 1)
        found_high = self._high_at(row)
        tied = np.flatnonzero((at < count) & (found_high == high) & (self._low_at(row) < low))
        if tied.size:  # ids sharing this first half: the first whose second half is not below the asked one's
            tied_high, tied_low = high[tied], low[tied]

            def pair_below(rows: np.ndarray) -> np.ndarray:
                found = self._high_at(rows)
                return (found < tied_high) | ((found == tied_high) & (self._low_at(rows) < tied_low))

            span = int((end[tied] - at[tied]).max())
            at[tied] = _first_not_below(at[tied], end[tied], span, count - 1, pair_below)
            row = np.minimum(at, count - 1)
            found_high = self._high_at(row)
        held = (at < count) & (found_high == high) & (self._low_at(row) == low)
        return np.where(held, row, -1)

    @_releasing
    def position(self, key: bytes) -> int:
        """How many of the file's ids (each with its prefix, as ``store.codec`` packs it) sort below ``key``."""
        self._check_all()
        if key[: len(self.prefix)] != self.prefix:
            return 0 if key < self.prefix else len(self)
        body = key[len(self.prefix) :].ljust(ID_BYTES, b"\x00")[:ID_BYTES]
        high, low = (int(half[0]) for half in halves_of(body))
        at = int(self._search_whole(np.array([high], dtype=np.uint64))[0])
        firsts, seconds = self.high, self.low
        while at < len(self) and int(firsts[at]) == high and int(seconds[at]) < low:
            at += 1  # ids sharing a first half: a few at most
        longer = len(key) > len(self.prefix) + ID_BYTES
        if longer and at < len(self) and self._body(at) == key[len(self.prefix) :][:ID_BYTES]:
            at += 1  # a key longer than an id, past the one it starts with
        return at

    def _body(self, row: int) -> bytes:
        return int(self.high[row]).to_bytes(8, "big") + int(self.low[row]).to_bytes(8, "big")

    def columns(self, chunk: int = 1_000_000) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(first halves, second halves, numbers)`` of the ids in key order, ``chunk`` at a time, as arrays:
        for readers of every id that need no key made (an id filter's build)."""
        try:
            self.verify()
            for begin in range(0, len(self), chunk):
                stop = begin + chunk
                seqs = self.seqs[begin:stop].astype(np.int64) + self.first_seq
                yield self.high[begin:stop], self.low[begin:stop], seqs
                self.release()  # the chunk's reader is done with it: its pages go
        finally:
            self.release()

    def items(self, chunk: int = 65_536, start: int = 0) -> Iterator[tuple[list[bytes], list[int]]]:
        """``(keys, seqs)`` of the ids from the ``start``-th on in key order, ``chunk`` at a time: each key with
        its prefix, as ``store.codec`` packs it."""
        try:
            self.verify()
            for begin in range(start, len(self), chunk):
                stop = begin + chunk
                bodies = np.empty((min(stop, len(self)) - begin, 2), dtype=">u8")
                bodies[:, 0], bodies[:, 1] = self.high[begin:stop], self.low[begin:stop]
                packed = bodies.tobytes()
                keys = [self.prefix + packed[at : at + ID_BYTES] for at in range(0, len(packed), ID_BYTES)]
                seqs = (self.seqs[begin:stop].astype(np.int64) + self.first_seq).tolist()
                self.release()  # copied out: the chunk's pages go
                yield keys, seqs
        finally:
            self.release()


def _data_bytes(count: int) -> int:
    """Bytes of the ids, numbers and guide of a file of ``count`` ids: what its block table covers."""
    return count * BYTES_PER_ID + _guide_entries(count) * 4


def _file_size(count: int) -> int:
    """Bytes of a file of ``count`` ids, its guide and block table included."""
    data = _data_bytes(count)
    return HEADER_BYTES + data + -(-data // BLOCK_BYTES) * 4


def _block_crcs(mapped: mmap.mmap, at: int) -> np.ndarray:
    """The CRC-32 of each block of ``mapped`` from byte ``at`` on."""
    view = memoryview(mapped)
    try:
        return np.array(
            [zlib.crc32(view[start : start + BLOCK_BYTES]) for start in range(at, len(view), BLOCK_BYTES)],
            dtype=np.uint32,
        )
    finally:
        view.release()


def _header_crc(header: bytes, table: np.ndarray) -> int:
    return zlib.crc32(table.tobytes(), zlib.crc32(header))


def _guide_bits(count: int) -> int:
    return max(0, int(math.log2(max(count, 1) / IDS_PER_SLICE)))


def _guide_entries(count: int) -> int:
    return 2 ** _guide_bits(count) + 1


def _guide_starts(high: np.ndarray) -> np.ndarray:
    """The guide of the ascending first halves ``high``: where each slice starts, then their count; the ids of
    each slice counted in one pass, in chunks."""
    count = high.size
    bits = _guide_bits(count)
    held = np.zeros(2**bits, dtype=np.int64)
    if bits:
        shift = np.uint64(64 - bits)
        for begin in range(0, count, _GUIDE_CHUNK):
            held += np.bincount((high[begin : begin + _GUIDE_CHUNK] >> shift).astype(np.intp), minlength=held.size)
    else:
        held[0] = count
    starts = np.zeros(held.size + 1, dtype=np.uint32)
    starts[1:] = np.cumsum(held)
    return starts


def _strictly_ascending(high: np.ndarray, low: np.ndarray) -> bool:
    """Whether the ids (``high``, ``low``) ascend with no id twice."""
    if high.size < 2:
        return True
    rising = high[1:] > high[:-1]
    return bool(np.all(rising | ((high[1:] == high[:-1]) & (low[1:] > low[:-1]))))


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
    return damaged(f"sealed arrays {path}", why)

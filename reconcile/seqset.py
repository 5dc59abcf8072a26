"""Which store sequence numbers a reconcile has seen in the output: a sparse bitmap that folds full chunks.

A reconcile must remember every sequence number it matched (to spot repeats, and afterwards the store ids
nobody matched) without memory that grows with the range. Sequence numbers are dense integers, assigned in
publication order, so:

- the numbers live in chunks of ``CHUNK_BITS`` bits (8 KiB each), allocated only when touched;
- a chunk whose every bit is set is replaced by a shared marker, so a healthy scan, which fills chunks one
  after another, holds one or two partial chunks at any time: memory stays flat whatever the range;
- in the worst case (output order unrelated to sequence order) memory is one bit per number of the
  window, 1.25 MB per 10 million, against ~100 bytes per id for a set of ids.

Runs of consecutive numbers (the common case: a batch matched the store in order) are set with slice
assignments, so a 10,000-record batch costs a few C-level operations, not 10,000 Python ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

CHUNK_SHIFT = 16
CHUNK_BITS = 1 << CHUNK_SHIFT
CHUNK_BYTES = CHUNK_BITS // 8
_FULL = object()  # marker of a chunk with every bit set
_NOT_FULL = re.compile(rb"[^\xff]+")


class _Chunk:
    __slots__ = ("bits", "count")

    def __init__(self) -> None:
        self.bits = bytearray(CHUNK_BYTES)
        self.count = 0


class SeqBitmap:
    """A set of non-negative integers, optimised for dense, mostly ascending runs."""

    def __init__(self) -> None:
        self._chunks: dict[int, _Chunk | object] = {}

    def __contains__(self, seq: int) -> bool:
        chunk = self._chunks.get(seq >> CHUNK_SHIFT)
        if chunk is None:
            return False
        if chunk is _FULL:
            return True
        bit = seq & (CHUNK_BITS - 1)
        return bool(chunk.bits[bit >> 3] & (1 << (bit & 7)))

    def add(self, seq: int) -> bool:
        """Add ``seq``; True if it was already there."""
        index = seq >> CHUNK_SHIFT
        chunk = self._chunks.get(index)
        if chunk is _FULL:
            return True
        if chunk is None:
            chunk = self._chunks[index] = _Chunk()
        bit = seq & (CHUNK_BITS - 1)
        mask = 1 << (bit & 7)
        if chunk.bits[bit >> 3] & mask:
            return True
        chunk.bits[bit >> 3] |= mask
        chunk.count += 1
        if chunk.count == CHUNK_BITS:
            self._chunks[index] = _FULL
        return False

    def add_many(self, seqs: Iterable[int]) -> list[int]:
        """Add each number; return those that were already there (in the order given)."""
        add = self.add
        return [seq for seq in seqs if add(seq)]

    def add_run(self, start: int, stop: int) -> list[int]:
        """Add ``start..stop-1``; return the numbers that were already there."""
        repeated: list[int] = []
        while start < stop:
            index = start >> CHUNK_SHIFT
            end = min(stop, (index + 1) << CHUNK_SHIFT)
            chunk = self._chunks.get(index)
            if chunk is _FULL:
                repeated.extend(range(start, end))
            elif chunk is None and end - start == CHUNK_BITS:
                self._chunks[index] = _FULL
            else:
                if chunk is None:
                    chunk = self._chunks[index] = _Chunk()
                base = index << CHUNK_SHIFT
                if _run_is_clear(chunk.bits, start - base, end - base):
                    _set_run(chunk.bits, start - base, end - base)
                    chunk.count += end - start
                    if chunk.count == CHUNK_BITS:
                        self._chunks[index] = _FULL
                else:  # some were seen before: find which, one by one
                    repeated.extend(self.add_many(range(start, end)))
            start = end
        return repeated

    def run_is_clear(self, start: int, stop: int) -> bool:
        """Whether none of ``start..stop-1`` is in the set (a few C-level operations per chunk)."""
        while start < stop:
            index = start >> CHUNK_SHIFT
            end = min(stop, (index + 1) << CHUNK_SHIFT)
            chunk = self._chunks.get(index)
            if chunk is _FULL:
                return False
            if chunk is not None:
                base = index << CHUNK_SHIFT
                if not _run_is_clear(chunk.bits, start - base, end - base):
                    return False
            start = end
        return True

    def missing_runs(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """Spans ``(a, b)`` inside ``start..stop-1`` that hold every number not in the set (and, to stay
        cheap, possibly some that are: callers test each candidate with ``in``)."""
        pending: tuple[int, int] | None = None
        for a, b in self._candidate_spans(start, stop):
            if pending is not None and pending[1] == a:
                pending = (pending[0], b)
                continue
            if pending is not None:
                yield pending
            pending = (a, b)
        if pending is not None:
            yield pending

    def _candidate_spans(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        index = start >> CHUNK_SHIFT
        while (index << CHUNK_SHIFT) < stop:
            base = index << CHUNK_SHIFT
            low, high = max(start, base), min(stop, base + CHUNK_BITS)
            chunk = self._chunks.get(index)
            if chunk is None:
                yield low, high
            elif chunk is not _FULL:
                for match in _NOT_FULL.finditer(chunk.bits):
                    a, b = max(low, base + match.start() * 8), min(high, base + match.end() * 8)
                    if a < b:
                        yield a, b
            index += 1

    @property
    def allocated_bytes(self) -> int:
        """Bitmap bytes held (markers of full chunks cost nothing)."""
        return sum(CHUNK_BYTES for chunk in self._chunks.values() if chunk is not _FULL)


def _run_is_clear(bits: bytearray, start: int, stop: int) -> bool:
    first_byte, last_byte = start >> 3, (stop - 1) >> 3
    if first_byte == last_byte:
        return not bits[first_byte] & _mask(start & 7, ((stop - 1) & 7) + 1)
    if bits[first_byte] & _mask(start & 7, 8) or bits[last_byte] & _mask(0, ((stop - 1) & 7) + 1):
        return False
    return bits.count(0, first_byte + 1, last_byte) == last_byte - first_byte - 1


def _set_run(bits: bytearray, start: int, stop: int) -> None:
    first_byte, last_byte = start >> 3, (stop - 1) >> 3
    if first_byte == last_byte:
        bits[first_byte] |= _mask(start & 7, ((stop - 1) & 7) + 1)
        return
    bits[first_byte] |= _mask(start & 7, 8)
    bits[last_byte] |= _mask(0, ((stop - 1) & 7) + 1)
    bits[first_byte + 1 : last_byte] = b"\xff" * (last_byte - first_byte - 1)


def _mask(low: int, high: int) -> int:
    """Bits ``low..high-1`` of a byte."""
    return ((1 << high) - 1) & ~((1 << low) - 1)

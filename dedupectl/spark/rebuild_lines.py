"""How ``dedupectl rebuild`` hands the numbered ids from Spark's JVM to the Python tasks that write SST files.

Spark rows reach Python one pickled object at a time (several microseconds each: more than writing the id
into an SST file costs). So the ids travel as text lines Spark writes by itself, one folder per bucket, and
a Python task takes a whole bucket as a few big byte strings, split by a handful of C-level calls.

One line per id, all binary, big-endian, then Spark's ``\\n``::

    >I  id length L | >I  place in the bucket (sequence number - bucket's first) | >q  timestamp ms | L bytes id

The length makes the line self-delimiting (an id may hold any byte, ``\\n`` included: Spark's text writer
keeps a string's bytes as they are). When every line of a bucket has the same length (every ``ajs-`` id is 36
bytes, every canonical UUID too) they are unpacked by ``struct``, thousands per call; other files line by line.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

from pyspark.sql import Column
from pyspark.sql import functions as F

from dedupectl.errors import StoreCorruptError

_HEAD = struct.Struct(">IIq")
_NEWLINE = 0x0A
BLOCK_LINES = 4096  # lines unpacked per struct call: one compiled format serves every bucket


def _hex_digits(column: Column, digits: int) -> Column:
    # a number as fixed-width big-endian hex (Spark's ANSI mode refuses to cast numbers to binary; hex() of a
    # negative long is its 16-digit two's complement, which lpad leaves as it is)
    return F.lpad(F.hex(column), digits, "0")


def line(message_id: Column, place: Column, timestamp_ms: Column) -> Column:
    """The line of one id (a string column holding the bytes above, without the ``\\n`` Spark appends)."""
    head = F.concat(_hex_digits(F.length(message_id), 8), _hex_digits(place, 8), _hex_digits(timestamp_ms, 16))
    return F.concat(F.unhex(head), message_id).cast("string")


def parse(chunks: Sequence[bytes]) -> tuple[list[int], list[int], list[bytes]]:
    """Places, timestamps and ids of every line in ``chunks`` (whole lines each, as Spark wrote them)."""
    places: list[int] = []
    stamps: list[int] = []
    ids: list[bytes] = []
    for chunk in chunks:
        if chunk and not _parse_fixed(chunk, places, stamps, ids):
            _parse_each(chunk, places, stamps, ids)
    return places, stamps, ids


def _parse_fixed(chunk: bytes, places: list[int], stamps: list[int], ids: list[bytes]) -> bool:
    """All lines as long as the first: checked position by position on the whole chunk (each line's length
    field and its newline, at the stride the first line sets), then unpacked a block of lines per call."""
    if len(chunk) < _HEAD.size:
        return False
    length = int.from_bytes(chunk[:4], "big")
    stride = _HEAD.size + length + 1
    count, rest = divmod(len(chunk), stride)
    if rest or chunk[stride - 1 :: stride] != b"\n" * count:
        return False
    if any(chunk[i::stride] != chunk[i : i + 1] * count for i in range(4)):
        return False
    whole = count - count % BLOCK_LINES
    blocks = [(start, BLOCK_LINES) for start in range(0, whole, BLOCK_LINES)]
    if count > whole:
        blocks.append((whole, count - whole))
    for start, lines in blocks:
        fields = _block_format(length, lines).unpack_from(chunk, start * stride)
        places += fields[0::3]
        stamps += fields[1::3]
        ids += fields[2::3]
    return True


@lru_cache(maxsize=16)
def _block_format(length: int, lines: int) -> struct.Struct:
    return struct.Struct(">" + f"4xIq{length}sx" * lines)


def _parse_each(chunk: bytes, places: list[int], stamps: list[int], ids: list[bytes]) -> None:
    position, end = 0, len(chunk)
    while position < end:
        if end - position < _HEAD.size + 1:
            raise StoreCorruptError(f"a truncated id line at byte {position} of a rebuild's hand-over file")
        length, place, stamp = _HEAD.unpack_from(chunk, position)
        stop = position + _HEAD.size + length
        if stop >= end or chunk[stop] != _NEWLINE:
            raise StoreCorruptError(f"a malformed id line at byte {position} of a rebuild's hand-over file")
        places.append(place)
        stamps.append(stamp)
        ids.append(chunk[position + _HEAD.size : stop])
        position = stop + 1

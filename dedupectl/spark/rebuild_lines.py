"""How ``dedupectl rebuild`` hands the numbered ids from Spark's JVM to the Python tasks that write SST files.

Spark rows reach Python one pickled object at a time (several microseconds each: more than writing the id
into an SST file costs). So the ids travel as text lines Spark writes by itself, one folder per bucket, and
a Python task takes a whole bucket as a few big byte strings, split by a handful of C-level calls.

One line per sequence number, all binary, big-endian, then Spark's ``\\n``::

    >I  id length L | >I  place in the bucket (sequence number - bucket's first) | >q  timestamp ms
    | >q  output offset | >B  held (1: the store holds the id under this number; 0: under a later one) | L bytes id

The length makes the line self-delimiting (an id may hold any byte, ``\\n`` included: Spark's text writer
keeps a string's bytes as they are). When every line of a bucket has the same length (every ``ajs-`` id is 36
bytes, every canonical UUID too) they are read as one numpy array of records; other files line by line.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

from dedupectl.errors import StoreCorruptError

_HEAD = struct.Struct(">IIqqB")
_NEWLINE = 0x0A


def _hex_digits(column: Column, digits: int) -> Column:
    # a number as fixed-width big-endian hex (Spark's ANSI mode refuses to cast numbers to binary; hex() of a
    # negative long is its 16-digit two's complement, which lpad leaves as it is)
    return F.lpad(F.hex(column), digits, "0")


def line(message_id: Column, place: Column, timestamp_ms: Column, offset: Column, held: Column) -> Column:
    """The line of one sequence number (a string column holding the bytes above, without the ``\\n`` Spark
    appends); ``held`` is a boolean column."""
    head = F.concat(
        _hex_digits(F.length(message_id), 8),
        _hex_digits(place, 8),
        _hex_digits(timestamp_ms, 16),
        _hex_digits(offset, 16),
        F.when(held, F.lit("01")).otherwise(F.lit("00")),
    )
    return F.concat(F.unhex(head), message_id).cast("string")


class Lines(NamedTuple):
    """The columns of parsed lines: places, timestamps and output offsets (int64 arrays), held (a bool array),
    and the ids: a numpy array of byte strings (dtype ``V<length>``, no object per id) when every line has the
    same length, else a list."""

    places: np.ndarray
    stamps: np.ndarray
    offsets: np.ndarray
    held: np.ndarray
    ids: np.ndarray | list[bytes]


def parse(chunks: Sequence[bytes]) -> Lines:
    """The columns of every line in ``chunks`` (whole lines each, as Spark wrote them)."""
    parsed = [_parse_fixed(chunk) or _parse_each(chunk) for chunk in chunks if chunk]
    numbers = [_joined([rows[column] for rows in parsed], dtype) for column, dtype in enumerate(_NUMBERS)]
    columns = [rows.ids for rows in parsed]
    dtypes = {column.dtype if isinstance(column, np.ndarray) else None for column in columns}
    if len(dtypes) == 1 and None not in dtypes:
        return Lines(*numbers, np.concatenate(columns))
    ids: list[bytes] = []
    for column in columns:
        ids += column.tolist() if isinstance(column, np.ndarray) else column
    return Lines(*numbers, ids)


_NUMBERS = (np.int64, np.int64, np.int64, np.bool_)  # the dtypes of Lines' columns before the ids


def _joined(columns: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(columns) if columns else np.empty(0, dtype=dtype)


def _parse_fixed(chunk: bytes) -> Lines | None:
    """All lines as long as the first: read as one numpy array of records, each line's length field and
    newline checked; None otherwise."""
    if len(chunk) < _HEAD.size:
        return None
    length = int.from_bytes(chunk[:4], "big")
    if _HEAD.size + length + 1 > len(chunk):
        return None
    line = np.dtype(
        [
            ("length", ">u4"),
            ("place", ">u4"),
            ("stamp", ">i8"),
            ("offset", ">i8"),
            ("held", "u1"),
            ("id", f"V{length}"),
            ("end", "u1"),
        ]
    )
    if len(chunk) % line.itemsize:
        return None
    rows = np.frombuffer(chunk, dtype=line)
    if not ((rows["length"] == length).all() and (rows["end"] == _NEWLINE).all()):
        return None
    return Lines(
        rows["place"].astype(np.int64),
        rows["stamp"].astype(np.int64),
        rows["offset"].astype(np.int64),
        rows["held"] != 0,
        rows["id"],
    )


def _parse_each(chunk: bytes) -> Lines:
    heads: list[tuple[int, int, int, int, int]] = []
    ids: list[bytes] = []
    position, end = 0, len(chunk)
    while position < end:
        if end - position < _HEAD.size + 1:
            raise StoreCorruptError(f"a truncated id line at byte {position} of a rebuild's hand-over file")
        head = _HEAD.unpack_from(chunk, position)
        stop = position + _HEAD.size + head[0]
        if stop >= end or chunk[stop] != _NEWLINE:
            raise StoreCorruptError(f"a malformed id line at byte {position} of a rebuild's hand-over file")
        heads.append(head)
        ids.append(chunk[position + _HEAD.size : stop])
        position = stop + 1
    table = np.asarray(heads, dtype=np.int64).reshape(-1, 5)
    return Lines(table[:, 1], table[:, 2], table[:, 3], table[:, 4] != 0, ids)

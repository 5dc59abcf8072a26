"""How ``dedupectl rebuild`` hands the numbered ids from Spark's JVM to the Python tasks that write SST files.

Spark rows reach Python one pickled object at a time (several microseconds each: more than writing the id
into an SST file costs). So the ids travel as text lines Spark writes by itself, one folder per bucket, and
a Python task takes a whole bucket as a few big byte strings, split by a handful of C-level calls.

One line per id, all binary, big-endian, then Spark's ``\\n``::

    >I  id length L | >I  place in the bucket (sequence number - bucket's first) | >q  timestamp ms | L bytes id

The length makes the line self-delimiting (an id may hold any byte, ``\\n`` included: Spark's text writer
keeps a string's bytes as they are). When every line of a bucket has the same length (every ``ajs-`` id is 36
bytes, every canonical UUID too) they are read as one numpy array of records; other files line by line.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

from dedupectl.errors import StoreCorruptError

_HEAD = struct.Struct(">IIq")
_NEWLINE = 0x0A


def _hex_digits(column: Column, digits: int) -> Column:
    # a number as fixed-width big-endian hex (Spark's ANSI mode refuses to cast numbers to binary; hex() of a
    # negative long is its 16-digit two's complement, which lpad leaves as it is)
    return F.lpad(F.hex(column), digits, "0")


def line(message_id: Column, place: Column, timestamp_ms: Column) -> Column:
    """The line of one id (a string column holding the bytes above, without the ``\\n`` Spark appends)."""
    head = F.concat(_hex_digits(F.length(message_id), 8), _hex_digits(place, 8), _hex_digits(timestamp_ms, 16))
    return F.concat(F.unhex(head), message_id).cast("string")


def parse(chunks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray | list[bytes]]:
    """Places and timestamps (int64 arrays) and ids of every line in ``chunks`` (whole lines each, as Spark
    wrote them). The ids are a numpy array of byte strings (dtype ``V<length>``, no object per id) when every
    line has the same length, else a list."""
    parsed = [_parse_fixed(chunk) or _parse_each(chunk) for chunk in chunks if chunk]
    places = _joined([rows[0] for rows in parsed])
    stamps = _joined([rows[1] for rows in parsed])
    columns = [rows[2] for rows in parsed]
    dtypes = {column.dtype if isinstance(column, np.ndarray) else None for column in columns}
    if len(dtypes) == 1 and None not in dtypes:
        return places, stamps, np.concatenate(columns)
    ids: list[bytes] = []
    for column in columns:
        ids += column.tolist() if isinstance(column, np.ndarray) else column
    return places, stamps, ids


def _joined(columns: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(columns) if columns else np.empty(0, dtype=np.int64)


def _parse_fixed(chunk: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """All lines as long as the first: read as one numpy array of records, each line's length field and
    newline checked; None otherwise."""
    if len(chunk) < _HEAD.size:
        return None
    length = int.from_bytes(chunk[:4], "big")
    if _HEAD.size + length + 1 > len(chunk):
        return None
    line = np.dtype([("length", ">u4"), ("place", ">u4"), ("stamp", ">i8"), ("id", f"V{length}"), ("end", "u1")])
    if len(chunk) % line.itemsize:
        return None
    rows = np.frombuffer(chunk, dtype=line)
    if not ((rows["length"] == length).all() and (rows["end"] == _NEWLINE).all()):
        return None
    return rows["place"].astype(np.int64), rows["stamp"].astype(np.int64), rows["id"]


def _parse_each(chunk: bytes) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    places: list[int] = []
    stamps: list[int] = []
    ids: list[bytes] = []
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
    return np.asarray(places, dtype=np.int64), np.asarray(stamps, dtype=np.int64), ids

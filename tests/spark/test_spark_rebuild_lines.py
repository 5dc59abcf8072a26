"""The rebuild's hand-over lines: what Spark's text writer makes of ``rebuild_lines.line`` is what
``rebuild_lines.parse`` reads back, for every shape of id (newlines and bytes that are not UTF-8 included),
with their timestamps, output offsets and held flags, as one numpy array when the lines are all as long, line by
line otherwise; a damaged file is refused."""

from __future__ import annotations

import struct

import pytest
from pyspark.sql import functions as F

from dedupectl.errors import StoreCorruptError
from dedupectl.spark import rebuild_lines

IDS = [
    b"ajs-0123456789abcdef0123456789abcdef",
    b"ajs-ffffffffffffffffffffffffffffffff",
    b"6f1c2a9e-1b2c-4d3e-8f40-123456789abc",
    b"line\nbreak",
    b"\xff\xfe not utf-8 \x80",
    b"x" * 300,
]
STAMPS = [1_790_000_000_000, -1, 0, 1, (1 << 62), 1_790_000_000_007]
OFFSETS = [0, 7, (1 << 40) + 3, 9, 10, 12]
HELD = [True, False, True, True, False, True]


def _written(spark, tmp_path, ids, stamps, offsets, held) -> list[bytes]:
    rows = zip(ids, range(len(ids)), stamps, offsets, held, strict=True)
    frame = spark.createDataFrame(list(rows), "id binary, place long, ts long, offset long, held boolean")
    line = rebuild_lines.line(F.col("id"), F.col("place"), F.col("ts"), F.col("offset"), F.col("held"))
    frame.select(line.alias("line")).coalesce(1).write.text(str(tmp_path / "lines"))
    return [part.read_bytes() for part in sorted((tmp_path / "lines").glob("part-*"))]


def test_spark_writes_what_parse_reads(spark_session, tmp_path):
    lines = rebuild_lines.parse(_written(spark_session, tmp_path, IDS, STAMPS, OFFSETS, HELD))
    assert list(lines.ids) == IDS and list(lines.stamps) == STAMPS and list(lines.places) == list(range(len(IDS)))
    assert list(lines.offsets) == OFFSETS and list(lines.held) == HELD


def test_lines_of_one_length_unpack_at_once(spark_session, tmp_path):
    ids = [f"ajs-{n:032x}".encode() for n in range(50)]
    held = [n % 3 > 0 for n in range(50)]
    (chunk,) = _written(spark_session, tmp_path, ids, range(50), range(100, 150), held)
    assert rebuild_lines._parse_fixed(chunk) is not None  # the fast way was taken
    lines = rebuild_lines.parse([chunk, chunk])
    assert lines.ids.dtype.itemsize == 36  # ids of one length stay one array, no object per id
    assert lines.ids.tolist() == ids * 2 and lines.stamps.tolist() == [*range(50)] * 2
    assert lines.places.tolist() == [*range(50)] * 2 and lines.offsets.tolist() == [*range(100, 150)] * 2
    assert lines.held.tolist() == held * 2


def test_files_of_different_id_lengths_give_a_list():
    short, long = _line(b"order:7", 0, 5) * 3, _line(b"ajs-0123456789abcdef0123456789abcdef", 3, 6, held=False)
    lines = rebuild_lines.parse([short, long])
    assert lines.ids == [b"order:7"] * 3 + [b"ajs-0123456789abcdef0123456789abcdef"]
    assert lines.held.tolist() == [True, True, True, False] and lines.offsets.tolist() == [50, 50, 50, 60]


def _line(message_id: bytes, place: int, stamp: int, held: bool = True) -> bytes:
    return struct.pack(">IIqqB", len(message_id), place, stamp, stamp * 10, held) + message_id + b"\n"


def test_a_damaged_file_is_refused():
    good = _line(b"ajs-0123456789abcdef0123456789abcdef", 0, 5) + _line(b"order:7", 1, 6)
    assert list(rebuild_lines.parse([good]).ids) == [b"ajs-0123456789abcdef0123456789abcdef", b"order:7"]
    with pytest.raises(StoreCorruptError, match="truncated id line"):
        rebuild_lines.parse([good[:-20]])  # the second line's head cut short
    with pytest.raises(StoreCorruptError, match="malformed id line"):
        rebuild_lines.parse([good[:-3]])  # its id cut short
    with pytest.raises(StoreCorruptError, match="malformed id line"):
        rebuild_lines.parse([good[:-1] + b"x"])  # no newline where the length says the line ends

"""The rebuild's hand-over lines: what Spark's text writer makes of ``rebuild_lines.line`` is what
``rebuild_lines.parse`` reads back, for every shape of id (newlines and bytes that are not UTF-8 included),
as one numpy array when the lines are all as long, line by line otherwise; a damaged file is refused."""

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


def _written(spark, tmp_path, ids, stamps) -> list[bytes]:
    frame = spark.createDataFrame(
        [(message_id, place, stamp) for place, (message_id, stamp) in enumerate(zip(ids, stamps, strict=True))],
        "id binary, place long, ts long",
    )
    lines = frame.select(rebuild_lines.line(F.col("id"), F.col("place"), F.col("ts")).alias("line"))
    lines.coalesce(1).write.text(str(tmp_path / "lines"))
    return [part.read_bytes() for part in sorted((tmp_path / "lines").glob("part-*"))]


def test_spark_writes_what_parse_reads(spark_session, tmp_path):
    chunks = _written(spark_session, tmp_path, IDS, STAMPS)
    places, stamps, ids = rebuild_lines.parse(chunks)
    assert list(ids) == IDS and list(stamps) == STAMPS and list(places) == list(range(len(IDS)))


def test_lines_of_one_length_unpack_at_once(spark_session, tmp_path):
    ids = [f"ajs-{n:032x}".encode() for n in range(50)]
    (chunk,) = _written(spark_session, tmp_path, ids, range(50))
    assert rebuild_lines._parse_fixed(chunk) is not None  # the fast way was taken
    places, stamps, parsed = rebuild_lines.parse([chunk, chunk])
    assert parsed.dtype.itemsize == 36  # ids of one length stay one array, no object per id
    assert parsed.tolist() == ids * 2 and stamps.tolist() == [*range(50)] * 2 and places.tolist() == [*range(50)] * 2


def test_files_of_different_id_lengths_give_a_list():
    short, long = _line(b"order:7", 0, 5) * 3, _line(b"ajs-0123456789abcdef0123456789abcdef", 3, 6)
    assert rebuild_lines.parse([short, long])[2] == [b"order:7"] * 3 + [b"ajs-0123456789abcdef0123456789abcdef"]


def _line(message_id: bytes, place: int, stamp: int) -> bytes:
    return struct.pack(">IIq", len(message_id), place, stamp) + message_id + b"\n"


def test_a_damaged_file_is_refused():
    good = _line(b"ajs-0123456789abcdef0123456789abcdef", 0, 5) + _line(b"order:7", 1, 6)
    assert list(rebuild_lines.parse([good])[2]) == [b"ajs-0123456789abcdef0123456789abcdef", b"order:7"]
    with pytest.raises(StoreCorruptError, match="truncated id line"):
        rebuild_lines.parse([good[:-20]])  # the second line's head cut short
    with pytest.raises(StoreCorruptError, match="malformed id line"):
        rebuild_lines.parse([good[:-3]])  # its id cut short
    with pytest.raises(StoreCorruptError, match="malformed id line"):
        rebuild_lines.parse([good[:-1] + b"x"])  # no newline where the length says the line ends

"""The first half of ``dedupectl rebuild``: the output partition's ids, each with its sequence number.

What the worker's recovery would record: the first occurrence of each id (a later copy is a duplicate the
store never records), numbered 0, 1, 2, ... in offset order; records without a key (not the worker's) are
skipped and counted.

Usually the output holds no duplicate at all (the worker publishes each id once). Then every keyed record
is a first occurrence and its sequence number is its rank among the keyed records: Spark's Kafka source
reads the partition in a few contiguous offset ranges, in offset order, so each record's rank is its range's
first rank plus its row number within the range, with no shuffle and no sort. One aggregation on 64-bit
hashes of the ids proves there is no duplicate (equal hashes send it the general way, to be exact).
Otherwise each id's first occurrence is found by grouping, and numbered by a row number over spans of
offsets (the general way).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from dedupectl.spark.extract import output_id
from dedupectl.spark.sources import PartitionRange

ROW_BITS = 33  # monotonically_increasing_id: partition index above bit 33, row number within it below


@dataclass(frozen=True)
class Ordered:
    """``numbered``: one row per id to record (``seq``, ``id``, ``timestamp_ms``); the counts of the read."""

    numbered: DataFrame
    ids: int
    keyed_records: int
    unkeyed_records: int
    without_duplicates: bool  # numbered by the fast way
    cached: tuple[DataFrame, ...]  # to unpersist once the ids are written


def order_ids(records: DataFrame, output_range: PartitionRange) -> Ordered:
    """Number the ids of ``records`` (the output partition over ``output_range``, as ``kafka_records``
    gives it). The read is cached: it is used again when the numbered ids are written."""
    read = records.select(output_id(F.col("key")).alias("id"), "offset", "timestamp_ms").persist(
        StorageLevel.MEMORY_AND_DISK_DESER
    )
    keyed = read.where(F.col("id").isNotNull()).withColumn("row", F.monotonically_increasing_id())
    ranges = (
        keyed.groupBy(F.shiftright("row", ROW_BITS).alias("range"))
        .agg(F.count(F.lit(1)).alias("rows"), F.min("offset").alias("first"), F.max("offset").alias("last"))
        .collect()
    )
    keyed_records = sum(row["rows"] for row in ranges)
    unkeyed = read.count() - keyed_records
    starts = _range_starts(ranges)
    if starts is not None and not _any_repeated_id(keyed):
        first_seq = F.element_at(
            F.array(*[F.lit(seq).cast("long") for seq in starts]), F.shiftright("row", ROW_BITS).cast("int") + 1
        )
        in_range = F.col("row").bitwiseAND((1 << ROW_BITS) - 1)
        numbered = keyed.select((first_seq + in_range).alias("seq"), "id", "timestamp_ms")
        return Ordered(numbered, keyed_records, keyed_records, unkeyed, True, (read,))
    firsts = _first_occurrences(read).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    numbered, ids = _numbered_by_spans(firsts, output_range, read.sparkSession.sparkContext.defaultParallelism)
    return Ordered(numbered, ids, keyed_records, unkeyed, False, (firsts, read))


def _range_starts(ranges: list) -> list[int] | None:
    """Each range's first sequence number, indexed by range (Spark partition) number; None unless the
    ranges follow one another in offset order without overlapping."""
    if not ranges:
        return []
    by_offset = sorted(ranges, key=lambda row: row["first"])
    if any(before["last"] >= after["first"] for before, after in pairwise(by_offset)):
        return None
    starts = [0] * (max(row["range"] for row in ranges) + 1)
    running = 0
    for row in by_offset:
        starts[row["range"]] = running
        running += row["rows"]
    return starts


def _any_repeated_id(keyed: DataFrame) -> bool:
    # hashes are 8 bytes against an id's ~36: a smaller shuffle. A collision only costs the general way.
    (most,) = keyed.groupBy(F.xxhash64("id")).count().agg(F.max("count")).first()
    return (most or 0) > 1


def _first_occurrences(read: DataFrame) -> DataFrame:
    """One row per keyed id: the offset and timestamp of its first occurrence."""
    return (
        read.where(F.col("id").isNotNull())
        .groupBy("id")
        .agg(
            F.min("offset").alias("offset"),
            F.min_by("timestamp_ms", "offset").alias("timestamp_ms"),  # a hash aggregation, unlike min(struct)
        )
    )


def _numbered_by_spans(firsts: DataFrame, output_range: PartitionRange, parallelism: int) -> tuple[DataFrame, int]:
    """The first occurrences with their sequence numbers (rank by offset), and how many they are. Offsets
    are cut into equal spans; the driver turns each span's id count into its first sequence number, and a row
    number within the span (ordered by offset) does the rest."""
    spans = max(parallelism * 2, output_range.size // 1_000_000, 1)
    width = max(-(-output_range.size // spans), 1)
    span = F.floor((F.col("offset") - output_range.start) / width).cast("int")
    per_span = firsts.groupBy(span.alias("span")).agg(F.count(F.lit(1)).alias("ids")).collect()
    counts = {row["span"]: row["ids"] for row in per_span}
    first_seq, running = [], 0
    for number in range(spans):
        first_seq.append(running)
        running += counts.get(number, 0)
    starts = F.array(*[F.lit(seq).cast("long") for seq in first_seq])
    in_span = F.row_number().over(Window.partitionBy("span").orderBy("offset")) - 1
    numbered = firsts.withColumn("span", span).select(
        (F.element_at(starts, F.col("span") + 1) + in_span).alias("seq"), "id", "timestamp_ms"
    )
    return numbered, running

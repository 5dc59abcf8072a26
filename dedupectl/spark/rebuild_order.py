"""The first half of ``dedupectl rebuild``: every keyed output record with its sequence number.

What the worker's store holds: the worker numbers each record it publishes with the next sequence number, so
a record's number is its rank among the partition's keyed records, in offset order (records without a key are
not the worker's: skipped and counted). An id published twice (a late retry of an id already aged out of the
window, rightly published again) is held under its latest copy's number; the numbers of its earlier copies
keep their timestamps and offsets in ``times`` (as the worker recorded them) but hold no id.

The ranks cost no shuffle and no sort: Spark's Kafka source reads the partition in a few contiguous offset
ranges, in offset order, so each record's rank is its range's first rank plus its row number within the
range. (Ranges that overlap are numbered by a row number over equal spans of offsets instead.) One
aggregation on 64-bit hashes of the ids proves that no id repeats, and then every record holds its id. Else
(or when two ids share a hash) a window over each id finds its latest copy: a shuffle, only then.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from dedupectl.spark.extract import output_id
from dedupectl.spark.sources import PartitionRange

ROW_BITS = 33  # monotonically_increasing_id: partition index above bit 33, row number within it below


@dataclass(frozen=True)
class Ordered:
    """``numbered``: one row per keyed record (``seq``, ``id``, ``timestamp_ms``, ``offset``, ``held``: whether
    the store holds the id under this number, i.e. no later copy of it follows); the counts of the read."""

    numbered: DataFrame
    ids: int  # distinct ids: the rows held
    keyed_records: int  # sequence numbers
    unkeyed_records: int
    without_duplicates: bool  # no id repeats: every row held, found without a shuffle
    cached: tuple[DataFrame, ...]  # to unpersist once the ids are written


def order_ids(records: DataFrame, output_range: PartitionRange) -> Ordered:
    """Number the keyed records of ``records`` (the output partition over ``output_range``, as
    ``kafka_records`` gives it). The read is cached: it is used again when the numbered ids are written."""
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
    if starts is not None:
        first_seq = F.element_at(
            F.array(*[F.lit(seq).cast("long") for seq in starts]), F.shiftright("row", ROW_BITS).cast("int") + 1
        )
        in_range = F.col("row").bitwiseAND((1 << ROW_BITS) - 1)
        numbered = keyed.select((first_seq + in_range).alias("seq"), "id", "timestamp_ms", "offset")
    else:
        parallelism = read.sparkSession.sparkContext.defaultParallelism
        numbered = _numbered_by_spans(keyed.drop("row"), output_range, parallelism)
    if not _any_repeated_id(keyed):
        return Ordered(numbered.withColumn("held", F.lit(True)), keyed_records, keyed_records, unkeyed, True, (read,))
    numbered = _latest_copies(numbered).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    ids = numbered.where("held").count()
    return Ordered(numbered, ids, keyed_records, unkeyed, False, (numbered, read))


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
    # hashes are 8 bytes against an id's ~36: a smaller shuffle. A collision only costs the window by id.
    (most,) = keyed.groupBy(F.xxhash64("id")).count().agg(F.max("count")).first()
    return (most or 0) > 1


def _latest_copies(numbered: DataFrame) -> DataFrame:
    """``numbered`` with ``held``: true on each id's last copy in offset order, the one the worker's store holds."""
    latest = F.max("offset").over(Window.partitionBy("id"))
    return numbered.withColumn("held", F.col("offset") == latest)


def _numbered_by_spans(keyed: DataFrame, output_range: PartitionRange, parallelism: int) -> DataFrame:
    """The keyed records with their sequence numbers (rank by offset). Offsets are cut into equal spans; the
    driver turns each span's record count into its first sequence number, and a row number within the span
    (ordered by offset) does the rest."""
    spans = max(parallelism * 2, output_range.size // 1_000_000, 1)
    width = max(-(-output_range.size // spans), 1)
    span = F.floor((F.col("offset") - output_range.start) / width).cast("int")
    per_span = keyed.groupBy(span.alias("span")).agg(F.count(F.lit(1)).alias("records")).collect()
    counts = {row["span"]: row["records"] for row in per_span}
    first_seq, running = [], 0
    for number in range(spans):
        first_seq.append(running)
        running += counts.get(number, 0)
    starts = F.array(*[F.lit(seq).cast("long") for seq in first_seq])
    in_span = F.row_number().over(Window.partitionBy("span").orderBy("offset")) - 1
    return keyed.withColumn("span", span).select(
        (F.element_at(starts, F.col("span") + 1) + in_span).alias("seq"), "id", "timestamp_ms", "offset"
    )


@dataclass(frozen=True)
class Routed:
    """The keyed records of several partitions numbered for the partitions they go to: ``of(q)`` is target
    ``q``'s numbering, as ``order_ids`` gives one partition's."""

    numbered: DataFrame  # ``target`` and the columns of ``Ordered.numbered``
    counts: dict[int, tuple[int, int]]  # target -> (keyed records, ids held)
    unkeyed_records: int
    without_duplicates: bool
    cached: tuple[DataFrame, ...]

    def of(self, target: int) -> Ordered:
        records, ids = self.counts.get(target, (0, 0))
        rows = self.numbered.where(F.col("target") == target).drop("target")
        return Ordered(rows, ids, records, 0, self.without_duplicates, ())


def order_routed(records: DataFrame, target: Column) -> Routed:
    """Number the keyed records of ``records`` (several partitions, as ``kafka_records`` gives them) per
    ``target`` (a column of the record's ``key``: the partition it goes to). Within a target, numbers follow
    time (then source partition and offset, which order a partition's own records as its worker numbered
    them), so the oldest ids age first; an id is held under its last copy in that order. A target's numbering
    needs one shuffle and sort, unlike one partition's (``order_ids``)."""
    read = records.select(
        output_id(F.col("key")).alias("id"), "partition", "offset", "timestamp_ms", target.alias("target")
    ).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    keyed = read.where(F.col("id").isNotNull())
    rank = Window.partitionBy("target").orderBy("timestamp_ms", "partition", "offset")
    numbered = keyed.select("target", (F.row_number().over(rank) - 1).alias("seq"), "id", "timestamp_ms", "offset")
    repeated = _any_repeated_id(keyed)
    if repeated:
        numbered = numbered.withColumn("held", F.col("seq") == F.max("seq").over(Window.partitionBy("target", "id")))
    else:
        numbered = numbered.withColumn("held", F.lit(True))
    numbered = numbered.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    rows = numbered.groupBy("target").agg(F.count(F.lit(1)).alias("records"), F.sum(F.col("held").cast("long")))
    counts = {row[0]: (row[1], row[2]) for row in rows.collect()}
    unkeyed = read.count() - sum(records for records, _ in counts.values())
    return Routed(numbered, counts, unkeyed, not repeated, (numbered, read))

"""``dedupectl audit``: prove that a range of the input was delivered to the output exactly once.

Per partition: input records, dead letters (records the worker rejects, by the worker's own ``extract_id``),
distinct valid ids, output records, and the three violations:

- duplicates: an id published more than once, where a repeat lies within ``window`` of the occurrence
  before it (a repeat further apart is counted as ``repeats_beyond_window``: the store only remembers ids for
  its window, so that is the design, not a fault);
- losses: a valid input id that appears nowhere in the output read;
- extras: an output id in the range that no valid input record in the range carries.

Which output records are compared. The worker publishes a record with its input timestamp, so the output of
an input range is the output records whose timestamps fall within the range's time span: the ``--from``/
``--to`` times themselves, or for offsets the first/last timestamps of the selected input records. Output
records in that span are *in range* (extras and duplicates are counted there). To tell losses from late
deliveries, the output is read beyond the span: from ``window`` before it (an id published just before the
range suppresses its retries inside it) to the end of the topic (a replay delivers late, with the original
timestamp). ``--output-from``/``--output-to`` replace all of this with an explicit output range, compared whole.
Without any range both topics are compared whole.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import reduce
from types import MappingProxyType

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dedupectl.config import VALUE_FORMATS, KafkaConfig
from dedupectl.errors import ConfigError
from dedupectl.schemas import SchemaSource
from dedupectl.spark.extract import dead_letter_reason, input_id, output_id, refuse_header_ids_in_files
from dedupectl.spark.progress import ProgressSink, tracking
from dedupectl.spark.runner import JobRun, run_job
from dedupectl.spark.session import SparkSettings
from dedupectl.spark.sources import (
    FileSource,
    PartitionRange,
    Source,
    TopicSource,
    choose_partitions,
    end_offsets,
    file_records,
    kafka_records,
    offsets_from_time,
    require_records,
    resolve_topic_ranges,
    select_file_range,
    spark_kafka_options,
)
from reconcile.ranges import Bound, check_order

KINDS = ("duplicate", "loss", "extra")
BROADCAST_REPEATS = 200_000  # ids published more than once, up to which they are broadcast
_DURATION = re.compile(r"^(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d|w)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_window(text: str) -> int:
    """``--window``: a duration such as ``90s``, ``30m``, ``24h``, ``7d``; returns milliseconds."""
    match = _DURATION.match(text.strip().lower())
    if not match or float(match["amount"]) <= 0:
        raise ConfigError(f"--window {text!r} is not a positive duration", "write it as 30m, 24h or 7d")
    return int(float(match["amount"]) * _UNIT_MS[match["unit"]])


@dataclass(frozen=True)
class AuditRequest:
    input: Source
    output: Source
    kafka: KafkaConfig | None = None  # needed when either side is a topic
    kafka_java_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    partitions: tuple[int, ...] | None = None
    start: Bound | None = None
    stop: Bound | None = None
    output_start: Bound | None = None
    output_stop: Bound | None = None
    window_ms: int | None = None
    value_format: str = "json"
    id_field: str = "messageId"
    id_header: str | None = None  # the id is this header's value (input from Kafka only, read with headers)
    schemas: SchemaSource | None = None  # writer schemas, for value_format avro and protobuf
    sample_size: int = 5


@dataclass(frozen=True)
class PartitionAudit:
    partition: int | None  # None: archived records that do not say
    input_records: int = 0
    dead_letters: int = 0
    distinct_ids: int = 0
    output_records: int = 0  # in range
    output_context_records: int = 0  # read around the range to tell losses from late deliveries
    output_without_id: int = 0
    duplicate_ids: int = 0
    duplicate_records: int = 0  # copies beyond the first
    repeats_beyond_window: int = 0
    losses: int = 0
    extras: int = 0
    input_offsets: tuple[int, int] | None = None
    output_offsets: tuple[int, int] | None = None

    @property
    def violations(self) -> int:
        return self.duplicate_ids + self.losses + self.extras

    @property
    def status(self) -> str:
        return "exactly once" if not self.violations else "VIOLATED"


@dataclass(frozen=True)
class AuditSample:
    kind: str  # duplicate, loss, extra
    partition: int | None
    id: bytes
    offsets: tuple[int, ...]  # input offset (loss) or output offsets (duplicate, extra)


@dataclass(frozen=True)
class AuditReport:
    input: str
    output: str
    window_ms: int | None
    partitions: tuple[PartitionAudit, ...]
    samples: tuple[AuditSample, ...]
    dead_letter_reasons: Mapping[str, int]
    seconds: float

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions)

    @property
    def violations(self) -> int:
        return sum(p.violations for p in self.partitions)

    @property
    def exit_code(self) -> int:
        return 1 if self.violations else 0


@dataclass(frozen=True)
class _Span:
    """The time span (ms) of a partition's input range; None ends are open."""

    start_ms: int | None
    end_ms: int | None


def validate(request: AuditRequest) -> None:
    if request.value_format not in VALUE_FORMATS:
        raise ConfigError(f"value_format must be one of {', '.join(VALUE_FORMATS)}, got {request.value_format!r}")
    if isinstance(request.input, FileSource):
        refuse_header_ids_in_files("audit", request.id_header)
    if request.sample_size < 0:
        raise ConfigError(f"--samples must be 0 or more, got {request.sample_size}")
    if request.window_ms is not None and request.window_ms <= 0:
        raise ConfigError(f"--window must be positive, got {request.window_ms} ms")
    if request.kafka is None and (isinstance(request.input, TopicSource) or isinstance(request.output, TopicSource)):
        raise ConfigError("no Kafka bootstrap servers given", "pass --bootstrap-servers or set bootstrap_servers")
    check_order(request.start, request.stop)
    check_order(request.output_start, request.output_stop)


def prepare(request: AuditRequest) -> dict[str, list[PartitionRange]]:
    """Driver-side checks before any Spark work: topics exist, partitions exist, ranges hold records."""
    validate(request)
    for side in (request.input, request.output):
        if isinstance(side, FileSource):
            side.check()
    resolved = {}
    if isinstance(request.input, TopicSource):
        topic = request.input.topic
        partitions = choose_partitions(request.kafka, topic, request.partitions)
        ranges = resolve_topic_ranges(request.kafka, topic, partitions, request.start, request.stop)
        require_records(ranges, "input", topic)
        resolved["input"] = ranges
    if isinstance(request.output, TopicSource):
        choose_partitions(request.kafka, request.output.topic, request.partitions)
    return resolved


def audit(
    request: AuditRequest,
    settings: SparkSettings,
    sink: ProgressSink | None = None,
    notify: Callable[[str], None] | None = None,
) -> JobRun[AuditReport]:
    """The whole command: checks that need no JVM first, then the audit in a session of its own."""
    resolved = prepare(request)
    return run_job(settings, lambda spark: run_audit(spark, request, sink, resolved), notify=notify)


def run_audit(
    spark: SparkSession,
    request: AuditRequest,
    sink: ProgressSink | None = None,
    resolved: dict[str, list[PartitionRange]] | None = None,
) -> AuditReport:
    """Run the audit on ``spark``; see the module docstring for what is counted."""
    started = time.monotonic()
    resolved = prepare(request) if resolved is None else resolved
    cached: list[DataFrame] = []
    try:
        with tracking(spark, sink) as step:
            step("audit: reading the input, extracting ids")
            inp = _input_frame(spark, request, resolved.get("input"))
            inp = inp.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(inp)
            input_stats = _input_stats(inp)
            reasons = _dead_letter_reasons(inp, request)

            step("audit: reading the output")
            out, output_ranges = _output_frame(spark, request, input_stats, resolved.get("input"))
            out = out.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(out)
            output_stats = _output_stats(out)

            step("audit: matching input and output ids")
            aggregated = _aggregate_ids(inp, out).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(aggregated)
            facts = _with_repeats(aggregated, out, request.window_ms)
            counts = _violation_counts(facts)

            step("audit: collecting samples")
            found = any(kinds.get(k) for kinds in counts.values() for k in ("loss", "extra", "duplicate_ids"))
            samples = _samples(facts, out, request.sample_size) if found else ()
    finally:
        for frame in cached:
            frame.unpersist()
    partitions = _assemble(request, resolved.get("input"), output_ranges, input_stats, output_stats, counts)
    return AuditReport(
        input=request.input.describe(),
        output=request.output.describe(),
        window_ms=request.window_ms,
        partitions=partitions,
        samples=samples,
        dead_letter_reasons=MappingProxyType(reasons),
        seconds=time.monotonic() - started,
    )


# -- input ---------------------------------------------------------------------------------------------


def _input_frame(spark: SparkSession, request: AuditRequest, ranges: list[PartitionRange] | None) -> DataFrame:
    source = request.input
    if isinstance(source, TopicSource):
        options = spark_kafka_options(request.kafka, request.kafka_java_settings)
        records = kafka_records(spark, options, source.topic, ranges, headers=request.id_header is not None)
    else:
        records = select_file_range(file_records(spark, source), request.partitions, request.start, request.stop)
    headers = F.col("headers") if request.id_header is not None else None
    rules = (request.value_format, request.id_field, headers, request.id_header, request.schemas)
    ident = input_id(F.col("key"), F.col("value"), *rules)
    with_id = records.withColumn("id", ident)
    # key and value are kept only for dead letters (their reason is computed later, for those rows alone)
    dead = F.col("id").isNull()
    return with_id.select(
        "partition",
        "offset",
        "timestamp_ms",
        "id",
        F.when(dead, F.col("key")).alias("dead_key"),
        F.when(dead, F.col("value")).alias("dead_value"),
        *([] if headers is None else [F.when(dead, headers).alias("dead_headers")]),
    )


def _input_stats(inp: DataFrame) -> dict[int | None, dict[str, int]]:
    rows = (
        inp.groupBy("partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.count("id").alias("valid"),
            F.min("timestamp_ms").alias("min_ts"),
            F.max("timestamp_ms").alias("max_ts"),
        )
        .collect()
    )
    return {row["partition"]: row.asDict() for row in rows}


def _dead_letter_reasons(inp: DataFrame, request: AuditRequest) -> dict[str, int]:
    headers = None if request.id_header is None else F.col("dead_headers")
    rules = (request.value_format, request.id_field, headers, request.id_header, request.schemas)
    reason = dead_letter_reason(F.col("dead_key"), F.col("dead_value"), *rules)
    rows = inp.where(F.col("id").isNull()).select(reason.alias("reason")).groupBy("reason").count().collect()
    return {row["reason"] or "unknown": row["count"] for row in rows}


# -- output --------------------------------------------------------------------------------------------


def _spans(
    request: AuditRequest, input_stats: Mapping[int | None, Mapping[str, int]], partitions: list[int]
) -> dict[int | None, _Span]:
    """Per input partition, the time span its range covers (the output records it should have produced).

    A time bound is its own end of the span; an offset bound's end is the first or last timestamp of the
    records selected, so a partition whose offset range holds none has no span (nothing to compare)."""
    start, stop = request.start, request.stop
    spans = {}
    for partition in set(input_stats) | set(partitions):
        stats = input_stats.get(partition) or {"min_ts": None, "max_ts": None}
        if stats["min_ts"] is None and ((start and start.offset is not None) or (stop and stop.offset is not None)):
            continue
        start_ms = None if start is None else (start.timestamp_ms if start.offset is None else stats["min_ts"])
        end_ms = None if stop is None else (stop.timestamp_ms if stop.offset is None else stats["max_ts"] + 1)
        spans[partition] = _Span(start_ms, end_ms)
    return spans


def _output_frame(
    spark: SparkSession,
    request: AuditRequest,
    input_stats: Mapping[int | None, Mapping[str, int]],
    input_ranges: list[PartitionRange] | None,
) -> tuple[DataFrame, dict[int, PartitionRange]]:
    """The output records to compare, with ``in_range``; plus the Kafka offsets read per partition."""
    source = request.output
    explicit = request.output_start is not None or request.output_stop is not None
    whole = explicit or (request.start is None and request.stop is None)
    input_partitions = [r.partition for r in input_ranges or ()]
    spans = {} if whole else _spans(request, input_stats, input_partitions)
    lookback = request.window_ms or 0
    if isinstance(source, TopicSource):
        topic = source.topic
        partitions = choose_partitions(request.kafka, topic, request.partitions)
        if explicit:
            ranges = resolve_topic_ranges(request.kafka, topic, partitions, request.output_start, request.output_stop)
        elif whole:
            ranges = resolve_topic_ranges(request.kafka, topic, partitions, None, None)
        else:
            # only partitions whose input range holds records (or a time range says where to look)
            wanted = [p for p in partitions if p in spans or None in spans]
            starts = {}
            for partition in wanted:
                span = spans.get(partition) or spans[None]
                starts[partition] = None if span.start_ms is None else span.start_ms - lookback
            first = offsets_from_time(request.kafka, topic, starts)
            ends = end_offsets(request.kafka, topic, wanted)
            ranges = [PartitionRange(p, first[p], max(ends[p], first[p])) for p in wanted]
        options = spark_kafka_options(request.kafka, request.kafka_java_settings)
        records = kafka_records(spark, options, topic, ranges)
        ranges_by_partition = {r.partition: r for r in ranges}
    else:
        records = file_records(spark, source)
        if explicit:
            records = select_file_range(records, request.partitions, request.output_start, request.output_stop)
        else:
            records = select_file_range(records, request.partitions, None, None)
            starts = [s.start_ms for s in spans.values() if s.start_ms is not None]
            if starts and len(starts) == len(spans):
                records = records.where(F.col("timestamp_ms") >= min(starts) - lookback)
        ranges_by_partition = {}
    # archived output without keys (bare events): the id is read from the value as for input
    ident = output_id(F.col("key"))
    if isinstance(source, FileSource) and request.id_header is None:
        ident = F.coalesce(
            ident,
            input_id(F.col("key"), F.col("value"), request.value_format, request.id_field, schemas=request.schemas),
        )
    in_range = _in_range(spans) if spans else F.lit(True)
    frame = records.select("partition", "offset", "timestamp_ms", ident.alias("id"), in_range.alias("in_range"))
    return frame, ranges_by_partition


def _in_range(spans: Mapping[int | None, _Span]) -> Column:
    def within(span: _Span) -> Column:
        ts = F.col("timestamp_ms")
        condition = F.lit(True)
        if span.start_ms is not None:
            condition = condition & (ts >= span.start_ms)
        if span.end_ms is not None:
            condition = condition & (ts < span.end_ms)
        return condition

    default = within(spans[None]) if None in spans else F.lit(False)
    keyed = [(p, s) for p, s in spans.items() if p is not None]
    if not keyed:
        return F.coalesce(default, F.lit(False))
    expression = reduce(lambda acc, item: acc.when(F.col("partition") == item[0], within(item[1])), keyed[1:],
                        F.when(F.col("partition") == keyed[0][0], within(keyed[0][1])))  # fmt: skip
    return F.coalesce(expression.otherwise(default), F.lit(False))


def _output_stats(out: DataFrame) -> dict[int | None, dict[str, int]]:
    in_range = F.col("in_range")
    rows = (
        out.groupBy("partition")
        .agg(
            F.count(F.when(in_range, 1)).alias("in_range"),
            F.count(F.when(~in_range, 1)).alias("context"),
            F.count(F.when(in_range & F.col("id").isNull(), 1)).alias("without_id"),
        )
        .collect()
    )
    return {row["partition"]: row.asDict() for row in rows}


# -- matching ------------------------------------------------------------------------------------------


# Where a record is, as one number: min() over a long is a hash aggregation, min() over a struct a sort.
# (partition + 1) << 40 | (offset + 1), with -1 for "not known" (archives): offsets stay below 2^40 (10^12).
_OFFSET_BITS = 40
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1


def _position(partition: Column, offset: Column) -> Column:
    return ((F.coalesce(partition, F.lit(-1)).cast("long") + 1) * (1 << _OFFSET_BITS)) + (
        F.coalesce(offset, F.lit(-1)).cast("long") + 1
    )


def _partition_of(position: Column) -> Column:
    number = F.floor(position / (1 << _OFFSET_BITS)).cast("int") - 1
    return F.when(number >= 0, number)


def _decode_position(position: int) -> tuple[int | None, int | None]:
    partition, offset = (position >> _OFFSET_BITS) - 1, (position & _OFFSET_MASK) - 1
    return (partition if partition >= 0 else None), (offset if offset >= 0 else None)


def _aggregate_ids(inp: DataFrame, out: DataFrame) -> DataFrame:
    """One row per id seen on either side: where it first came in and went out, how often. Both sides go
    through one aggregation by id (one shuffle; no join of two big sides)."""
    at = _position(F.col("partition"), F.col("offset"))
    inputs = inp.where(F.col("id").isNotNull()).select(
        "id", F.lit(True).alias("is_input"), at.alias("at"), F.lit(False).alias("in_range")
    )
    outputs = out.where(F.col("id").isNotNull()).select(
        "id", F.lit(False).alias("is_input"), at.alias("at"), "in_range"
    )
    is_input, in_range = F.col("is_input"), F.col("in_range")
    facts = (
        inputs.unionByName(outputs)
        .groupBy("id")
        .agg(
            F.count(F.when(is_input, 1)).alias("in_count"),
            F.min(F.when(is_input, F.col("at"))).alias("first_in"),
            F.count(F.when(~is_input, 1)).alias("out_count"),
            F.max(F.when(~is_input, in_range)).alias("any_in_range"),
            F.min(F.when(~is_input & in_range, F.col("at"))).alias("first_out"),
        )
    )
    # a side that never saw the id has a null count (not 0): "known on this side" reads as isNotNull
    counts = [F.when(F.col(name) > 0, F.col(name)).alias(name) for name in ("in_count", "out_count")]
    return facts.select("id", "first_in", "any_in_range", "first_out", *counts)


def _with_repeats(facts: DataFrame, out: DataFrame, window_ms: int | None) -> DataFrame:
    """``facts`` plus the repeats of each id published more than once (normally a handful of ids: only
    their occurrences are ordered in time; none at all costs one count)."""
    repeated = facts.where(F.col("out_count") > 1).select("id")
    how_many = repeated.count()
    if how_many == 0:
        nothing = F.lit(None).cast("long")
        names = ("dup_records", "beyond_records", "first_dup", "first_beyond")
        return facts.select("*", *(nothing.alias(name) for name in names))
    if how_many <= BROADCAST_REPEATS:  # sent to every task: the output is not shuffled to find them
        repeated = F.broadcast(repeated)
    order = Window.partitionBy("id").orderBy("timestamp_ms", "partition", "offset")
    occurrences = (
        out.where(F.col("id").isNotNull())
        .join(repeated, "id", "left_semi")
        .withColumn("prev_ts", F.lag("timestamp_ms").over(order))
        .withColumn("prev_in_range", F.lag("in_range").over(order))
    )
    at = _position(F.col("partition"), F.col("offset"))
    is_repeat = F.col("prev_ts").isNotNull() & (F.col("in_range") | F.col("prev_in_range"))
    close = F.lit(True) if window_ms is None else (F.col("timestamp_ms") - F.col("prev_ts") <= window_ms)
    repeats = occurrences.groupBy("id").agg(
        F.count(F.when(is_repeat & close, 1)).alias("dup_records"),
        F.count(F.when(is_repeat & ~close, 1)).alias("beyond_records"),
        F.min(F.when(is_repeat & close, at)).alias("first_dup"),
        F.min(F.when(is_repeat & ~close, at)).alias("first_beyond"),
    )
    return facts.join(repeats, "id", "left_outer")


def _violation_counts(facts: DataFrame) -> dict[int | None, dict[str, int]]:
    """Per partition: distinct ids, losses, extras, duplicate ids and records, repeats beyond the window."""

    def entry(condition: Column, kind: str, where: str, n: Column | int = 1) -> Column:
        n = n if isinstance(n, Column) else F.lit(n)
        partition = _partition_of(F.col(where)).alias("partition")
        return F.when(condition, F.struct(F.lit(kind).alias("kind"), partition, n.cast("long").alias("n")))

    known_in, known_out = F.col("in_count").isNotNull(), F.col("out_count").isNotNull()
    duplicated, beyond = F.col("dup_records") > 0, F.col("beyond_records") > 0
    entries = F.array(
        entry(known_in, "distinct", "first_in"),
        entry(known_in & ~known_out, "loss", "first_in"),
        entry(~known_in & F.col("any_in_range"), "extra", "first_out"),
        entry(duplicated, "duplicate_ids", "first_dup"),
        entry(duplicated, "duplicate_records", "first_dup", F.col("dup_records")),
        entry(beyond, "beyond", "first_beyond", F.col("beyond_records")),
    )
    rows = (
        facts.select(F.explode(entries).alias("e"))
        .where(F.col("e").isNotNull())
        .groupBy("e.kind", "e.partition")
        .agg(F.sum("e.n").alias("n"))
        .collect()
    )
    counts: dict[int | None, dict[str, int]] = defaultdict(dict)
    for row in rows:
        counts[row["partition"]][row["kind"]] = int(row["n"])
    return dict(counts)


def _samples(facts: DataFrame, out: DataFrame, size: int) -> tuple[AuditSample, ...]:
    if size == 0:
        return ()
    kind = (
        F.when(F.col("dup_records") > 0, F.lit("duplicate"))
        .when(F.col("in_count").isNotNull() & F.col("out_count").isNull(), F.lit("loss"))
        .when(F.col("in_count").isNull() & F.col("any_in_range"), F.lit("extra"))
    )
    where = (
        F.when(F.col("kind") == "duplicate", F.col("first_dup"))
        .when(F.col("kind") == "loss", F.col("first_in"))
        .otherwise(F.col("first_out"))
    )
    picked = (
        facts.select("id", kind.alias("kind"), "first_dup", "first_in", "first_out")
        .where(F.col("kind").isNotNull())
        .select("id", "kind", where.alias("at"))
        .withColumn("n", F.row_number().over(Window.partitionBy("kind", _partition_of(F.col("at"))).orderBy("id")))
        .where(F.col("n") <= size)
        .collect()
    )
    if not picked:
        return ()
    output_ids = [row["id"] for row in picked if row["kind"] != "loss"]
    offsets: dict[bytes, list[int]] = defaultdict(list)
    if output_ids:
        for row in out.where(F.col("id").isin(output_ids)).select("id", "offset").orderBy("offset").collect():
            if row["offset"] is not None:
                offsets[bytes(row["id"])].append(row["offset"])
    samples = []
    for row in picked:
        message_id = bytes(row["id"])
        partition, offset = _decode_position(row["at"])
        where_offsets = (offset,) if row["kind"] == "loss" and offset is not None else tuple(offsets[message_id][:10])
        samples.append(AuditSample(row["kind"], partition, message_id, where_offsets))
    order = {kind: index for index, kind in enumerate(KINDS)}
    samples.sort(key=lambda s: (order[s.kind], -1 if s.partition is None else s.partition, s.id))
    return tuple(samples)


# -- the report ----------------------------------------------------------------------------------------


def _assemble(
    request: AuditRequest,
    input_ranges: list[PartitionRange] | None,
    output_ranges: Mapping[int, PartitionRange],
    input_stats: Mapping[int | None, Mapping[str, int]],
    output_stats: Mapping[int | None, Mapping[str, int]],
    counts: Mapping[int | None, Mapping[str, int]],
) -> tuple[PartitionAudit, ...]:
    inputs_by_partition = {r.partition: r for r in input_ranges or ()}
    partitions = set(input_stats) | set(output_stats) | set(counts) | set(inputs_by_partition)
    audits = []
    for partition in sorted(partitions, key=lambda p: -1 if p is None else p):
        stats_in = input_stats.get(partition, {})
        stats_out = output_stats.get(partition, {})
        found = counts.get(partition, {})
        in_range = inputs_by_partition.get(partition)
        out_range = output_ranges.get(partition)
        audits.append(
            PartitionAudit(
                partition=partition,
                input_records=stats_in.get("records", 0),
                dead_letters=stats_in.get("records", 0) - stats_in.get("valid", 0),
                distinct_ids=found.get("distinct", 0),
                output_records=stats_out.get("in_range", 0),
                output_context_records=stats_out.get("context", 0),
                output_without_id=stats_out.get("without_id", 0),
                duplicate_ids=found.get("duplicate_ids", 0),
                duplicate_records=found.get("duplicate_records", 0),
                repeats_beyond_window=found.get("beyond", 0),
                losses=found.get("loss", 0),
                extras=found.get("extra", 0),
                input_offsets=None if in_range is None else (in_range.start, in_range.stop),
                output_offsets=None if out_range is None else (out_range.start, out_range.stop),
            )
        )
    return tuple(audits)

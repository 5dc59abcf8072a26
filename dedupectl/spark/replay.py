"""``dedupectl replay``: re-drive a range of the input so the output gets what it lacks, never twice.

How it stays exactly-once. Replay never writes the output topic. It finds the valid input ids of the range
that the output lacks (the whole retained output of the partition, read_committed, is the reference) and
re-produces the first record of each to the *input* topic, to the partition it came from, with its key,
value, headers and timestamp, plus a ``dedupectl.replayed-from`` header. The worker then treats them like
any input: it publishes an id only if its store lacks it, in the same transaction that commits its input
offset. So:

- replaying twice is harmless: if the worker already published the first replay, the second finds nothing
  missing; if not yet, the worker publishes the first copy and drops the second as a duplicate;
- a running worker is no hazard: nothing bypasses its store check or its transaction (writing the output
  directly would race with it and could publish an id twice);
- the original timestamp is kept, so the worker publishes the record with it and a time-range audit of the
  incident finds it where it belongs.

Ids the worker has not reached yet are not lost: the worker group's committed input offsets are read before
the output, and an id whose first record is at or past them is reported as not yet consumed (the worker
will publish it as it catches up), neither replayed nor checked against a store. Records without a valid
id are skipped and counted: replay re-drives ids, and the worker dead-letters such records itself.

One case replay cannot fix alone: an id the store still holds but the output lost (the output was truncated,
or an unclean leader election dropped committed records). The worker would drop its replay as a duplicate.
With ``--data-dir`` replay checks the partitions' stores (as a secondary instance: safe while the worker
runs) and reports such ids; ``dedupectl reconcile --apply`` removes them from the store, then replay again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dedupectl.config import VALUE_FORMATS, KafkaConfig
from dedupectl.errors import ConfigError, StoreNotFoundError
from dedupectl.schemas import SchemaSource
from dedupectl.spark.extract import input_id, output_id
from dedupectl.spark.progress import ProgressSink, tracking
from dedupectl.spark.runner import JobRun, run_job
from dedupectl.spark.session import SparkSettings
from dedupectl.spark.sources import (
    PartitionRange,
    choose_partitions,
    committed_offsets,
    kafka_records,
    require_records,
    resolve_topic_ranges,
    spark_kafka_options,
)
from reconcile.ranges import Bound, check_order

REPLAY_HEADER = "dedupectl.replayed-from"
STORE_CHECK_BATCH = 10_000


@dataclass(frozen=True)
class ReplayRequest:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str
    kafka_java_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    partitions: tuple[int, ...] | None = None
    start: Bound | None = None
    stop: Bound | None = None
    value_format: str = "json"
    id_field: str = "messageId"
    id_header: str | None = None  # the id is this header's value
    schemas: SchemaSource | None = None  # writer schemas, for value_format avro and protobuf
    dry_run: bool = False
    data_dir: Path | None = None  # check the partitions' stores for ids the worker would drop
    group_id: str | None = None  # the worker's group: ids past its committed offsets are not yet consumed
    sample_size: int = 5


@dataclass(frozen=True)
class PartitionReplay:
    partition: int
    input_offsets: tuple[int, int]
    input_records: int = 0
    distinct_ids: int = 0
    missing: int = 0  # valid ids the worker consumed (below its committed offset) that the output lacks
    replayed: int = 0  # records produced to the input topic (0 with --dry-run)
    held_by_store: int | None = None  # missing ids the store holds: the worker would drop them (None: unchecked)
    committed_offset: int | None = None  # the worker group's committed input offset (None: none or not asked)
    not_yet_consumed: int = 0  # ids the output lacks only because the worker has not reached them: not replayed
    invalid_records: int = 0  # records without a valid id: skipped (the worker dead-letters them, replay does not)


@dataclass(frozen=True)
class ReplaySample:
    partition: int
    id: bytes
    offset: int  # the input offset replayed


@dataclass(frozen=True)
class ReplayReport:
    input_topic: str
    output_topic: str
    dry_run: bool
    partitions: tuple[PartitionReplay, ...]
    samples: tuple[ReplaySample, ...]
    seconds: float

    def total(self, name: str) -> int:
        return sum(getattr(p, name) or 0 for p in self.partitions)

    @property
    def exit_code(self) -> int:
        """1 when some missing ids cannot reach the output by replay alone (the store holds them)."""
        return 1 if self.total("held_by_store") else 0


def prepare(request: ReplayRequest) -> list[PartitionRange]:
    """Driver-side checks before any Spark work; returns the input ranges."""
    if request.value_format not in VALUE_FORMATS:
        raise ConfigError(f"value_format must be one of {', '.join(VALUE_FORMATS)}, got {request.value_format!r}")
    if request.input_topic == request.output_topic:
        raise ConfigError("the input and output topics must differ")
    if request.sample_size < 0:
        raise ConfigError(f"--samples must be 0 or more, got {request.sample_size}")
    check_order(request.start, request.stop)
    partitions = choose_partitions(request.kafka, request.input_topic, request.partitions)
    choose_partitions(request.kafka, request.output_topic, partitions)
    ranges = resolve_topic_ranges(request.kafka, request.input_topic, partitions, request.start, request.stop)
    require_records(ranges, "input", request.input_topic)
    return ranges


def replay(
    request: ReplayRequest,
    settings: SparkSettings,
    sink: ProgressSink | None = None,
    notify: Callable[[str], None] | None = None,
) -> JobRun[ReplayReport]:
    """The whole command: checks that need no JVM first, then the replay in a session of its own."""
    ranges = prepare(request)
    return run_job(settings, lambda spark: run_replay(spark, request, sink, ranges), notify=notify)


def run_replay(
    spark: SparkSession,
    request: ReplayRequest,
    sink: ProgressSink | None = None,
    ranges: list[PartitionRange] | None = None,
) -> ReplayReport:
    started = time.monotonic()
    ranges = ranges if ranges is not None else prepare(request)
    options = spark_kafka_options(request.kafka, request.kafka_java_settings)
    cached: list[DataFrame] = []
    try:
        with tracking(spark, sink) as step:
            step("replay: reading the input range, extracting ids")
            inp = _cached(cached, _input_ids(spark, request, options, ranges))
            input_stats = _input_stats(inp)

            committed = _committed(request, [r.partition for r in ranges])  # before the output is read
            step("replay: reading the output, finding what it lacks")
            lacking = _missing_from_output(spark, request, options, inp, [r.partition for r in ranges])
            lacking = _cached(cached, lacking.withColumn("pending", _not_yet_consumed(committed)))
            missing = lacking.where(~F.col("pending"))
            missing_counts, pending_counts = _counts_by_pending(lacking)
            samples = _samples(missing, request.sample_size)

            held = None
            if request.data_dir is not None and missing_counts:
                step("replay: checking the partitions' stores")
                held = _held_by_stores(missing, request.data_dir, request.input_topic, list(missing_counts))

            replayed: dict[int, int] = {}
            if not request.dry_run and missing_counts:
                step(f"replay: producing {sum(missing_counts.values()):,} records to {request.input_topic}")
                replayed = _produce(missing, request)
    finally:
        for frame in cached:
            frame.unpersist()
    partitions = []
    for r in ranges:
        records, distinct, invalid = input_stats.get(r.partition, (0, 0, 0))
        partitions.append(
            PartitionReplay(
                partition=r.partition,
                input_offsets=(r.start, r.stop),
                input_records=records,
                distinct_ids=distinct,
                missing=missing_counts.get(r.partition, 0),
                replayed=replayed.get(r.partition, 0),
                held_by_store=None if held is None else held.get(r.partition, 0),
                committed_offset=committed.get(r.partition),
                not_yet_consumed=pending_counts.get(r.partition, 0),
                invalid_records=invalid,
            )
        )
    return ReplayReport(
        input_topic=request.input_topic,
        output_topic=request.output_topic,
        dry_run=request.dry_run,
        partitions=tuple(partitions),
        samples=samples,
        seconds=time.monotonic() - started,
    )


def _cached(cached: list[DataFrame], frame: DataFrame) -> DataFrame:
    """``frame`` kept (memory, then disk) while several actions read it; ``cached`` lists what to release."""
    kept = frame.persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(kept)
    return kept


def _input_ids(
    spark: SparkSession, request: ReplayRequest, options: dict[str, str], ranges: list[PartitionRange]
) -> DataFrame:
    """The input range's records (with headers, to replay them whole) and each one's id by the worker's rules."""
    records = kafka_records(spark, options, request.input_topic, ranges, headers=True)
    ident = input_id(
        F.col("key"),
        F.col("value"),
        request.value_format,
        request.id_field,
        F.col("headers"),
        request.id_header,
        request.schemas,
    )
    return records.withColumn("id", ident)


def _input_stats(inp: DataFrame) -> dict[int, tuple[int, int, int]]:
    """Records, distinct valid ids and records without a valid id, per partition."""
    counts = inp.groupBy("partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.countDistinct("id").alias("distinct"),
        F.count(F.when(F.col("id").isNull(), 1)).alias("invalid"),
    )
    return {row["partition"]: (row["records"], row["distinct"], row["invalid"]) for row in counts.collect()}


def _committed(request: ReplayRequest, partitions: list[int]) -> dict[int, int | None]:
    if request.group_id is None:
        return {}
    return committed_offsets(request.kafka, request.group_id, request.input_topic, partitions)


def _not_yet_consumed(committed: Mapping[int, int | None]) -> Column:
    """True for a record at or past its partition's committed offset: the worker has yet to consume it, so
    the output may lack its id without anything being lost. No committed offset: treated as consumed."""
    pending = F.lit(False)
    for partition, offset in committed.items():
        if offset is not None:
            pending = pending | ((F.col("partition") == partition) & (F.col("offset") >= offset))
    return pending


def _counts_by_pending(lacking: DataFrame) -> tuple[dict[int, int], dict[int, int]]:
    """Ids the output lacks per partition: (consumed, hence missing; not yet consumed)."""
    missing: dict[int, int] = {}
    pending: dict[int, int] = {}
    for row in lacking.groupBy("partition", "pending").count().collect():
        (pending if row["pending"] else missing)[row["partition"]] = row["count"]
    return missing, pending


def _missing_from_output(
    spark: SparkSession, request: ReplayRequest, options: dict[str, str], inp: DataFrame, partitions: list[int]
) -> DataFrame:
    """The first input record of each valid id the output lacks; the whole retained output is the reference."""
    output_ranges = resolve_topic_ranges(request.kafka, request.output_topic, partitions, None, None)
    published = (
        kafka_records(spark, options, request.output_topic, output_ranges)
        .select(output_id(F.col("key")).alias("id"))
        .where(F.col("id").isNotNull())
        .distinct()
    )
    first = Window.partitionBy("id").orderBy("partition", "offset")
    return (
        inp.where(F.col("id").isNotNull())
        .join(published, "id", "left_anti")
        .withColumn("occurrence", F.row_number().over(first))
        .where(F.col("occurrence") == 1)
        .drop("occurrence")
    )


def _samples(missing: DataFrame, size: int) -> tuple[ReplaySample, ...]:
    if size == 0:
        return ()
    order = Window.partitionBy("partition").orderBy("offset")
    rows = (
        missing.select("partition", "offset", "id")
        .withColumn("n", F.row_number().over(order))
        .where(F.col("n") <= size)
        .orderBy("partition", "offset")
        .collect()
    )
    return tuple(ReplaySample(row["partition"], bytes(row["id"]), row["offset"]) for row in rows)


def _held_by_stores(missing: DataFrame, data_dir: Path, topic: str, partitions: list[int]) -> dict[int, int]:
    """How many missing ids each partition's store holds (opened as a secondary: no lock taken)."""
    from store.dedup_store import DedupStore
    from store.layout import store_path

    held = {}
    for partition in partitions:
        try:
            store = DedupStore.open_secondary(store_path(data_dir, topic, partition))
        except StoreNotFoundError:
            held[partition] = 0  # no store here: nothing can be dropped by it
            continue
        try:
            count, batch = 0, []
            ids = missing.where(F.col("partition") == partition).select("id").toLocalIterator()
            for row in ids:
                batch.append(bytes(row["id"]))
                if len(batch) >= STORE_CHECK_BATCH:
                    count += sum(store.contains_many(batch))
                    batch = []
            count += sum(store.contains_many(batch))
            held[partition] = count
        finally:
            store.close()
    return held


def _produce(missing: DataFrame, request: ReplayRequest) -> dict[int, int]:
    """Produce the missing records to the input topic from the executors; records per partition."""
    settings = {
        **request.kafka.client_settings(),
        "enable.idempotence": True,  # retries never add copies (the worker would drop them anyway)
        "acks": "all",
        "linger.ms": 20,
    }
    topic, timeout_s = request.input_topic, request.kafka.timeout_s
    ordered = (
        missing.select("partition", "offset", "timestamp_ms", "key", "value", "headers")
        .repartition("partition")
        .sortWithinPartitions("partition", "offset")  # the worker sees them in their original order
    )

    def produce(rows: Iterator[Any]) -> Iterator[tuple[int, int]]:
        yield from produce_partition(rows, settings, topic, timeout_s)

    counts: dict[int, int] = {}
    for partition, count in ordered.rdd.mapPartitions(produce).collect():
        counts[partition] = counts.get(partition, 0) + count
    return counts


def produce_partition(
    rows: Iterator[Any], settings: Mapping[str, Any], topic: str, timeout_s: float
) -> Iterator[tuple[int, int]]:
    """Executor side: produce ``rows`` (in order) and yield ``(partition, records)`` once all are delivered."""
    from confluent_kafka import KafkaException, Producer

    from dedupectl.errors import BrokerError
    from reconcile.kafka import is_authorization_error, permission_denied

    producer = Producer(dict(settings))
    failures: list = []  # the KafkaErrors of failed deliveries, and the producer's own fatal one

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    try:
        counts = _produce_rows(producer, rows, topic, delivered)
        remaining = producer.flush(timeout_s * 4)
    except (KafkaException, SystemError) as error:
        # a fatal producer error surfaces from inside flush's delivery callbacks, as a SystemError's cause
        cause = error if isinstance(error, KafkaException) else error.__cause__
        if not isinstance(cause, KafkaException) or not cause.args:
            raise
        failures.append(cause.args[0])
        counts, remaining = {}, len(producer)
    # an idempotent producer without Write on any topic is refused its producer id as a cluster authorization
    denied = next((failure for failure in failures if is_authorization_error(failure)), None)
    if denied is not None:
        raise permission_denied("Write", "topic", topic, denied.str())
    if remaining or failures:
        detail = failures[0].str() if failures else f"{remaining} records undelivered after {timeout_s * 4:g}s"
        raise BrokerError(
            f"replay could not deliver to {topic}: {detail}",
            "nothing is lost or doubled: run the same replay again (it re-drives only what the output lacks)",
        )
    yield from counts.items()


def _produce_rows(producer: Any, rows: Iterator[Any], topic: str, delivered: Any) -> dict[int, int]:
    from confluent_kafka import KafkaException

    from dedupectl.errors import BrokerError

    counts: dict[int, int] = {}
    for row in rows:
        headers = [(h["key"], bytes(h["value"]) if h["value"] is not None else None) for h in row["headers"] or []]
        headers.append((REPLAY_HEADER, f"{topic}[{row['partition']}]@{row['offset']}".encode()))
        kwargs = {"partition": row["partition"], "headers": headers, "on_delivery": delivered}
        if row["timestamp_ms"] is not None and row["timestamp_ms"] > 0:
            kwargs["timestamp"] = row["timestamp_ms"]
        value = None if row["value"] is None else bytes(row["value"])
        key = None if row["key"] is None else bytes(row["key"])
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as error:
                if error.args and error.args[0].fatal():
                    raise  # the producer's own error (e.g. refused its id): the caller names it
                raise BrokerError(f"cannot produce to {topic}: {error.args[0].str()}") from error
        counts[row["partition"]] = counts.get(row["partition"], 0) + 1
    return counts

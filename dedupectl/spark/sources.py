"""Where a job's records come from: a Kafka topic over per-partition offset ranges, or archived files.

Every source yields the same columns, so the jobs never care which it was::

    partition     int     Kafka partition (null: an archive that does not say)
    offset        bigint  offset in that partition (null: not archived)
    timestamp_ms  bigint  record timestamp, ms since the epoch (null: not archived)
    key           binary  record key
    value         binary  record value
    headers       array<struct<key: string, value: binary>>   (Kafka, when asked for)

Kafka ranges are resolved on the driver (``reconcile.ranges``: offsets, ISO times or ages, ``--from``
inclusive and ``--to`` exclusive) into explicit per-partition offsets for Spark's Kafka source, read with
``read_committed`` so aborted transactions never count.

Archives (for ranges past the topics' retention) are Parquet or JSON lines:
- Parquet with the columns above (``key``/``value`` binary or string; ``timestamp_ms``, or ``timestamp`` as a
  timestamp or ms), as ``spark.read.format("kafka")…write.parquet`` leaves them; missing columns are null;
- JSON lines: a line with a ``value`` field is a Kafka record (``key``, ``value`` as a string or an object,
  ``partition``, ``offset``, ``timestamp`` in ms or ISO-8601); any other line is the event itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dedupectl.config import KafkaConfig
from dedupectl.errors import BrokerError, ConfigError, RangeError, SparkError
from reconcile.broker_retry import describe
from reconcile.kafka import make_consumer, partition_counts
from reconcile.ranges import Bound, resolve_range
from reconcile.scan import OutputReader

FILE_FORMATS = ("auto", "parquet", "jsonl")
_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
RECORD_SCHEMA = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp_ms", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
    ]
)
_JSONL_RECORD = StructType(
    [
        StructField("key", StringType()),
        StructField("value", StringType()),  # an object value is kept as its JSON text
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", StringType()),
    ]
)


@dataclass(frozen=True)
class PartitionRange:
    """Offsets ``start`` (inclusive) to ``stop`` (exclusive) of one partition."""

    partition: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return max(self.stop - self.start, 0)


@dataclass(frozen=True)
class TopicSource:
    topic: str

    def describe(self) -> str:
        return f"topic {self.topic}"


@dataclass(frozen=True)
class FileSource:
    path: str
    format: str = "auto"

    def describe(self) -> str:
        return f"{self.resolved_format()} files {self.path}"

    def check(self) -> None:
        """Before Spark starts: a local path must exist (other file systems are Spark's to check)."""
        if "://" not in self.path and not Path(self.path).exists():
            raise ConfigError(f"no such file or directory: {self.path}", "check --input-files / --output-files")
        self.resolved_format()

    def resolved_format(self) -> str:
        if self.format != "auto":
            return self.format
        path = Path(self.path)
        names = [path.name] if not path.is_dir() else sorted(p.name for p in path.iterdir() if p.is_file())
        names = [name for name in names if not name.startswith((".", "_"))]  # _SUCCESS, .crc
        if names and all(name.endswith(".parquet") for name in names):
            return "parquet"
        if names and all(name.endswith(_JSONL_SUFFIXES) for name in names):
            return "jsonl"
        raise ConfigError(
            f"cannot tell the format of {self.path} from its file names", "pass --files-format parquet or jsonl"
        )


Source = TopicSource | FileSource


_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def java_security_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The Java Kafka client's equivalent of librdkafka's TLS and SASL settings, so one configuration (file or
    environment) serves the driver's librdkafka calls and Spark's Kafka source alike: the protocol, the
    mechanism, a PLAIN/SCRAM user as ``sasl.jaas.config``, a PEM CA as a PEM truststore. Anything else
    (mTLS keystores, OAUTHBEARER, Kerberos) is given with --spark-kafka-option."""
    java = {key: settings[key] for key in ("security.protocol",) if key in settings}
    mechanism = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")  # librdkafka takes both names
    if mechanism:
        java["sasl.mechanism"] = mechanism
    module = _LOGIN_MODULES.get((mechanism or "").upper())
    if module and "sasl.username" in settings and "sasl.password" in settings:
        username, password = (_jaas_quoted(settings[key]) for key in ("sasl.username", "sasl.password"))
        java["sasl.jaas.config"] = f"{module} required username={username} password={password};"
    if "ssl.ca.location" in settings:
        java |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": settings["ssl.ca.location"]}
    if settings.get("ssl.endpoint.identification.algorithm", "").lower() == "none":
        java["ssl.endpoint.identification.algorithm"] = ""
    return java


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(kafka: KafkaConfig, java_settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options for Spark's Kafka source (``kafka.*``): the bootstrap servers, the security settings derived
    from the librdkafka ones, then the Java-client settings given for Spark, which win."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    for key, value in {**java_security_settings(kafka.settings), **(java_settings or {})}.items():
        options[f"kafka.{key}"] = value
    return options


# -- Kafka ---------------------------------------------------------------------------------------------


def choose_partitions(
    kafka: KafkaConfig, topic: str, wanted: Sequence[int] | None, operation: str = "Read"
) -> list[int]:
    """The partitions to read: all of the topic's, or the wanted ones (each must exist)."""
    count = partition_counts(kafka, [topic], needs={topic: operation})[topic]
    if not wanted:
        return list(range(count))
    for partition in wanted:
        if not 0 <= partition < count:
            raise ConfigError(
                f"partition {partition} does not exist: topic {topic!r} has {count} partitions (0-{count - 1})",
                "fix --partition",
            )
    return sorted(set(wanted))


def resolve_topic_ranges(
    kafka: KafkaConfig, topic: str, partitions: Sequence[int], start: Bound | None, stop: Bound | None
) -> list[PartitionRange]:
    """Per-partition offsets of a range given as offsets, times or ages (see ``reconcile.ranges``)."""
    with OutputReader(kafka) as reader:
        ranges = []
        for partition in partitions:
            resolved = resolve_range(reader, topic, partition, start, stop)
            ranges.append(PartitionRange(partition, resolved.start, max(resolved.stop, resolved.start)))
    return ranges


def offsets_from_time(kafka: KafkaConfig, topic: str, times_ms: Mapping[int, int | None]) -> dict[int, int]:
    """For each partition, the first offset at or after its time (None: the first retained offset); the end
    offset when no record is that recent."""
    found = {}
    with OutputReader(kafka) as reader:
        for partition, time_ms in times_ms.items():
            bounds = reader.bounds(topic, partition)
            if time_ms is None:
                found[partition] = bounds.low
                continue
            offset = reader.offset_for_time(topic, partition, time_ms)
            found[partition] = bounds.end if offset is None else max(offset, bounds.low)
    return found


def end_offsets(kafka: KafkaConfig, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    """Each partition's last stable offset now (what ``read_committed`` can read up to)."""
    with OutputReader(kafka) as reader:
        return {partition: reader.bounds(topic, partition).end for partition in partitions}


def committed_offsets(
    kafka: KafkaConfig, group_id: str, topic: str, partitions: Sequence[int]
) -> dict[int, int | None]:
    """The consumer group's committed offset per partition (None: none committed); transactional commits
    still open are waited for (read_committed), so every offset below was consumed and its output committed."""
    from confluent_kafka import KafkaException, TopicPartition

    consumer = make_consumer(
        kafka, **{"group.id": group_id, "enable.auto.commit": False, "isolation.level": "read_committed"}
    )
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=kafka.timeout_s)
    except KafkaException as error:
        raise BrokerError(
            f"cannot read the committed offsets of consumer group {group_id}: {describe(error)}",
            "check --group-id (the worker's group_id) and that the principal may Describe that group",
        ) from error
    finally:
        consumer.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}


def kafka_records(
    spark: SparkSession,
    options: Mapping[str, str],
    topic: str,
    ranges: Sequence[PartitionRange],
    *,
    headers: bool = False,
) -> DataFrame:
    """The committed records of ``topic`` in ``ranges``, as RECORD_SCHEMA (plus ``headers`` when asked)."""
    ranges = [r for r in ranges if r.size > 0]
    if not ranges:
        fields = [*RECORD_SCHEMA.fields, *([StructField("headers", HEADERS_TYPE)] if headers else [])]
        schema = StructType(fields)
        return spark.createDataFrame([], schema)
    reader = spark.read.format("kafka").options(**options)
    frame = (
        reader.option("assign", json.dumps({topic: [r.partition for r in ranges]}))
        .option("startingOffsets", json.dumps({topic: {str(r.partition): r.start for r in ranges}}))
        .option("endingOffsets", json.dumps({topic: {str(r.partition): r.stop for r in ranges}}))
        .option("kafka.isolation.level", "read_committed")
        # records gone between resolving the range and reading it (retention) fail the job: an audit must
        # never pass over data it did not see (transaction markers and aborted records are not loss)
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true" if headers else "false")
        # split large partitions so every core works even on a one-partition topic
        .option("minPartitions", str(max(spark.sparkContext.defaultParallelism, len(ranges))))
        .load()
    )
    columns = [
        F.col("partition"),
        F.col("offset"),
        F.unix_millis(F.col("timestamp")).alias("timestamp_ms"),
        F.col("key"),
        F.col("value"),
    ]
    return frame.select(*columns, *([F.col("headers")] if headers else []))


# -- archives ------------------------------------------------------------------------------------------


def file_records(spark: SparkSession, source: FileSource) -> DataFrame:
    """The archived records of ``source``, as RECORD_SCHEMA."""
    source.check()
    fmt = source.resolved_format()
    try:
        if fmt == "parquet":
            return _parquet_records(spark.read.parquet(source.path), source.path)
        return _jsonl_records(spark.read.text(source.path))
    except SparkError:
        raise
    except Exception as error:  # Spark's AnalysisException for unreadable paths
        raise ConfigError(f"cannot read {fmt} files {source.path}: {str(error).splitlines()[0]}") from error


def _as_binary(frame: DataFrame, name: str) -> Column:
    if name not in frame.columns:
        return F.lit(None).cast(BinaryType())
    kind = frame.schema[name].dataType
    if isinstance(kind, BinaryType):
        return F.col(name)
    return F.col(name).cast(StringType()).cast(BinaryType())


def _timestamp_ms(column: Column, kind) -> Column:
    if isinstance(kind, (LongType, IntegerType)):
        return column.cast(LongType())
    if isinstance(kind, StringType):
        return F.when(column.rlike(r"^\d+$"), column.cast(LongType())).otherwise(F.unix_millis(F.to_timestamp(column)))
    return F.unix_millis(column.cast("timestamp"))


def _parquet_records(frame: DataFrame, path: str) -> DataFrame:
    if "key" not in frame.columns and "value" not in frame.columns:
        raise ConfigError(f"{path} has neither a key nor a value column", "archive Kafka records (key, value, …)")
    timestamp = F.lit(None).cast(LongType())
    for name in ("timestamp_ms", "timestamp"):  # as this module writes it, or as Spark's Kafka source does
        if name in frame.columns:
            timestamp = _timestamp_ms(F.col(name), frame.schema[name].dataType)
            break

    def optional(name: str, kind) -> Column:
        return (F.col(name) if name in frame.columns else F.lit(None)).cast(kind).alias(name)

    return frame.select(
        optional("partition", IntegerType()),
        optional("offset", LongType()),
        timestamp.alias("timestamp_ms"),
        _as_binary(frame, "key").alias("key"),
        _as_binary(frame, "value").alias("value"),
    )


def _jsonl_records(lines: DataFrame) -> DataFrame:
    lines = lines.where(F.trim(F.col("value")) != "")
    parsed = F.from_json(F.col("value"), _JSONL_RECORD)
    frame = lines.select(F.col("value").alias("line"), parsed.alias("r"))
    is_record = F.col("r.value").isNotNull()
    return frame.select(
        F.when(is_record, F.col("r.partition")).alias("partition"),
        F.when(is_record, F.col("r.offset")).alias("offset"),
        F.when(is_record, _timestamp_ms(F.col("r.timestamp"), StringType())).alias("timestamp_ms"),
        F.when(is_record, F.col("r.key").cast(BinaryType())).alias("key"),
        F.when(is_record, F.col("r.value")).otherwise(F.col("line")).cast(BinaryType()).alias("value"),
    )


def select_file_range(
    frame: DataFrame, partitions: Sequence[int] | None, start: Bound | None, stop: Bound | None
) -> DataFrame:
    """Apply ``--partition``/``--from``/``--to`` to archived records (by their partition, offset, timestamp)."""
    if partitions:
        frame = frame.where(F.col("partition").isin(list(partitions)))
    for bound, compare in ((start, lambda c, v: c >= v), (stop, lambda c, v: c < v)):
        if bound is None:
            continue
        column = "offset" if bound.offset is not None else "timestamp_ms"
        value = bound.offset if bound.offset is not None else bound.timestamp_ms
        frame = frame.where(compare(F.col(column), F.lit(value)))
    return frame


def require_records(ranges: Sequence[PartitionRange], what: str, topic: str) -> None:
    if not any(r.size for r in ranges):
        raise RangeError(
            f"the {what} range holds no records in {topic}",
            "check --from/--to (and --partition): `dedupectl reconcile` and kcat show what a topic holds",
        )

"""``dedupectl rebuild --partition P``: a partition's store, built from the output topic in bulk.

The worker's recovery would rebuild a lost store too, but record by record through the write path. Here
Spark reads the output partition (read_committed) and the executors compute what recovery would record:

1. the first occurrence of each id (a later copy is a duplicate the store never records), in offset order;
2. its sequence number: its rank in that order (offsets are cut into equal spans, the driver turns each
   span's id count into the span's first sequence number, a row number within the span does the rest);
3. per bucket of sequence numbers, sorted SST files for the ``ids`` and ``times`` families, written with
   rocksdict's ``SstFileWriter`` through ``store.bulk_load`` (every key and value comes from ``store.codec``).

The driver ingests the files into a fresh store (``ingest_external_file``) and sets its state: the next
sequence number, the first live one (0), the input offset (-1: unknown) and the output offset the read
ended at. The store is built beside the target and renamed into place when complete. The worker's recovery
then reads only the output's tail from that offset.

The ids reach the executors' Python as a few big texts per bucket (many times faster than millions of rows).
On a local master Spark writes them to text files and the executors write the SST files straight into the
staging folder; on a cluster each bucket's lines travel as one value and the SST files come back to the
driver in chunks, one task at a time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dedupectl.config import KafkaConfig
from dedupectl.errors import DataDirError, StoreError
from dedupectl.spark.extract import output_id
from dedupectl.spark.progress import ProgressSink, tracking
from dedupectl.spark.runner import JobRun, run_job
from dedupectl.spark.session import SparkSettings
from dedupectl.spark.sources import (
    PartitionRange,
    choose_partitions,
    kafka_records,
    resolve_topic_ranges,
    spark_kafka_options,
)
from store import bulk_load
from store.codec import StoreState
from store.dedup_store import DedupStore
from store.layout import store_path

CHUNK_BYTES = 8 * 1024 * 1024  # SST files travel to the driver in pieces this big (cluster masters)


@dataclass(frozen=True)
class RebuildRequest:
    kafka: KafkaConfig
    input_topic: str  # the store is the input partition's (data_dir/<input topic>-<partition>)
    output_topic: str
    partition: int
    data_dir: Path
    kafka_java_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    replace: bool = False  # move an existing store aside instead of refusing
    ship_files: bool | None = None  # send SST files to the driver (None: unless the master is local)
    layout: bulk_load.LoadLayout = field(default_factory=bulk_load.LoadLayout)


@dataclass(frozen=True)
class RebuildReport:
    partition: int
    store: Path
    output_offsets: tuple[int, int]  # the output read: first retained offset, end offset
    records_read: int
    ids: int
    duplicate_records: int  # output records whose id was published before
    unkeyed_records: int  # output records without a key: not the worker's, not recorded
    files: int
    sst_bytes: int
    state: StoreState
    replaced: Path | None  # where an existing store was moved
    seconds: float
    seconds_ordering: float  # read, first occurrences, sequence numbers
    seconds_writing: float  # SST files
    seconds_ingesting: float


@dataclass(frozen=True)
class _Plan:
    target: Path
    output_range: PartitionRange


def prepare(request: RebuildRequest) -> _Plan:
    """Driver-side checks before any Spark work: the partition exists, the target is free (or may be
    replaced: then no process may hold it), the data directory is writable."""
    choose_partitions(request.kafka, request.input_topic, [request.partition])
    choose_partitions(request.kafka, request.output_topic, [request.partition])
    target = store_path(request.data_dir, request.input_topic, request.partition)
    try:
        request.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataDirError(
            f"cannot create data directory {request.data_dir}: {error.strerror}", "point --data-dir elsewhere"
        ) from error
    if not os.access(request.data_dir, os.W_OK):
        raise DataDirError(f"data directory {request.data_dir} is not writable", "fix its permissions")
    if target.exists():
        if not request.replace:
            raise StoreError(
                f"a store already exists at {target}",
                "rebuild builds a fresh store: pass --replace to move the existing one aside (worker stopped)",
            )
        if (target / "CURRENT").exists():
            DedupStore.open_existing(target).close()  # StoreLockedError while a worker holds it
    (output_range,) = resolve_topic_ranges(request.kafka, request.output_topic, [request.partition], None, None)
    return _Plan(target, output_range)


def rebuild(
    request: RebuildRequest,
    settings: SparkSettings,
    sink: ProgressSink | None = None,
    notify: Callable[[str], None] | None = None,
) -> JobRun[RebuildReport]:
    """The whole command: checks that need no JVM first, then the rebuild in a session of its own."""
    plan = prepare(request)
    return run_job(settings, lambda spark: run_rebuild(spark, request, sink, plan), notify=notify)


def run_rebuild(
    spark: SparkSession, request: RebuildRequest, sink: ProgressSink | None = None, plan: _Plan | None = None
) -> RebuildReport:
    started = time.monotonic()
    plan = plan if plan is not None else prepare(request)
    staging = Path(tempfile.mkdtemp(prefix=f".rebuild-{request.partition}-", dir=request.data_dir))
    firsts = None
    try:
        with tracking(spark, sink) as step:
            step(f"rebuild: reading {request.output_topic}[{request.partition}], ordering ids")
            firsts = _first_occurrences(spark, request, plan.output_range).persist(StorageLevel.MEMORY_AND_DISK)
            numbered, total_ids, keyed_records, unkeyed = _numbered(spark, firsts, plan.output_range)
            ordering_done = time.monotonic()

            step(f"rebuild: writing SST files for {total_ids:,} ids")
            buckets: list[bulk_load.BucketFiles] = []
            if total_ids:
                ship = request.ship_files if request.ship_files is not None else not _is_local(spark)
                lines = _routed_lines(numbered, total_ids, request.layout)
                buckets = _write_buckets(lines, staging, total_ids, request.layout, ship)
            sst_bytes = sum(b.ids_path.stat().st_size + b.times_path.stat().st_size for b in buckets)
            writing_done = time.monotonic()

            step("rebuild: ingesting the SST files into a fresh store")
            state = StoreState(
                next_seq=total_ids, first_live_seq=0, input_offset=-1, output_offset=plan.output_range.stop
            )
            built = staging / "store"
            bulk_load.ingest(
                built, topic=request.input_topic, partition=request.partition, buckets=buckets, state=state
            ).close()
            replaced = _place(built, plan.target, request.replace)
    finally:
        if firsts is not None:
            firsts.unpersist()
        shutil.rmtree(staging, ignore_errors=True)
    finished = time.monotonic()
    return RebuildReport(
        partition=request.partition,
        store=plan.target,
        output_offsets=(plan.output_range.start, plan.output_range.stop),
        records_read=keyed_records + unkeyed,
        ids=total_ids,
        duplicate_records=keyed_records - total_ids,
        unkeyed_records=unkeyed,
        files=len(buckets),
        sst_bytes=sst_bytes,
        state=state,
        replaced=replaced,
        seconds=finished - started,
        seconds_ordering=ordering_done - started,
        seconds_writing=writing_done - ordering_done,
        seconds_ingesting=finished - writing_done,
    )


def _first_occurrences(spark: SparkSession, request: RebuildRequest, output_range: PartitionRange) -> DataFrame:
    """One row per id: the offset and timestamp of its first occurrence and how many copies the output holds.
    Records without a key (not the worker's) gather under the empty id, which no real id can be."""
    options = spark_kafka_options(request.kafka, request.kafka_java_settings)
    records = kafka_records(spark, options, request.output_topic, [output_range])
    ident = F.coalesce(output_id(F.col("key")), F.lit(b"").cast("binary"))
    return (
        records.select(ident.alias("id"), "offset", "timestamp_ms")
        .groupBy("id")
        .agg(
            F.min("offset").alias("offset"),
            F.min_by("timestamp_ms", "offset").alias("timestamp_ms"),  # a hash aggregation, unlike min(struct)
            F.count(F.lit(1)).alias("copies"),
        )
    )


def _numbered(spark: SparkSession, firsts: DataFrame, output_range: PartitionRange) -> tuple[DataFrame, int, int, int]:
    """The ids with their sequence numbers (rank by first offset), and the counts: ids, keyed records,
    unkeyed records. Offsets are cut into equal spans; the driver turns each span's id count into its first
    sequence number, and a row number within the span (ordered by offset) does the rest."""
    spans = max(spark.sparkContext.defaultParallelism * 2, output_range.size // 1_000_000, 1)
    width = max(-(-output_range.size // spans), 1)
    span = F.floor((F.col("offset") - output_range.start) / width).cast("int")
    keyed = F.length("id") > 0
    counts = (
        firsts.groupBy(span.alias("span"))
        .agg(
            F.count(F.when(keyed, 1)).alias("ids"),
            F.sum(F.when(keyed, F.col("copies"))).alias("copies"),
            F.sum(F.when(~keyed, F.col("copies"))).alias("unkeyed"),
        )
        .collect()
    )
    ids = {row["span"]: row["ids"] for row in counts}
    first_seq, running = [], 0
    for number in range(spans):
        first_seq.append(running)
        running += ids.get(number, 0)
    starts = F.array(*[F.lit(seq).cast("long") for seq in first_seq])
    in_span = F.row_number().over(Window.partitionBy("span").orderBy("offset")) - 1
    numbered = (
        firsts.where(keyed)
        .withColumn("span", span)
        .select((F.element_at(starts, F.col("span") + 1) + in_span).alias("seq"), "id", "timestamp_ms")
    )
    keyed_records = sum(row["copies"] or 0 for row in counts)
    unkeyed = sum(row["unkeyed"] or 0 for row in counts)
    return numbered, running, keyed_records, unkeyed


def _routed_lines(numbered: DataFrame, total_ids: int, layout: bulk_load.LoadLayout) -> DataFrame:
    """The ids as text lines ``hex id,seq,timestamp``: one bucket per Spark partition, sorted by id within it
    (Spark sorts bytes as RocksDB sorts keys)."""
    bucket_count = layout.bucket_of(total_ids - 1) + 1
    line = F.concat_ws(",", F.hex("id"), F.col("seq").cast("string"), F.col("timestamp_ms").cast("string"))
    routes = F.array(*[F.lit(key).cast("long") for key in _routing_keys(numbered.sparkSession, bucket_count)])
    bucket = F.floor(F.col("seq") / layout.bucket_ids).cast("long")
    return (
        numbered.withColumn("bucket", bucket)
        .withColumn("route", F.element_at(routes, F.col("bucket").cast("int") + 1))
        .repartition(bucket_count, "route")  # bucket b goes to task b: each writes one bucket, all in parallel
        .sortWithinPartitions("bucket", "id")
        .select("route", "bucket", line.alias("line"))
    )


def _routing_keys(spark: SparkSession, count: int) -> list[int]:
    """For each of ``count`` tasks, a number that Spark's hash partitioning sends to exactly that task.

    Partitioning by the bucket number itself would hash several buckets to one task (and leave others idle);
    partitioning by range would sample the data first, recomputing its sequence numbers."""
    keys: dict[int, int] = {}
    start = 0
    while len(keys) < count:
        candidates = spark.range(start, start + 16 * count).select(
            "id", F.pmod(F.hash(F.col("id")), F.lit(count)).alias("task")
        )
        for row in candidates.collect():
            keys.setdefault(row["task"], row["id"])
        start += 16 * count
    return [keys[task] for task in range(count)]


def _is_local(spark: SparkSession) -> bool:
    return spark.sparkContext.master.startswith("local")


def _write_buckets(
    lines: DataFrame, staging: Path, total_ids: int, layout: bulk_load.LoadLayout, ship: bool
) -> list[bulk_load.BucketFiles]:
    """Run the executors' SST writing; returns the files, in ``staging/sst`` on the driver.

    The ids cross from the JVM to Python as a few big texts per bucket, many times faster than millions of
    rows: on a local master Spark writes each bucket's lines to a text file the executors then read (they
    share the driver's disk); on a cluster each bucket's lines are joined into one value, and the finished
    SST files travel back to the driver in chunks."""
    sst_dir = staging / "sst"
    sst_dir.mkdir(parents=True)
    if not ship:
        text_dir = staging / "text"
        lines.select("bucket", "line").write.partitionBy("bucket").text(str(text_dir))
        jobs = [(int(folder.name.split("=", 1)[1]), str(folder)) for folder in sorted(text_dir.glob("bucket=*"))]
        target = str(sst_dir)
        spark_context = lines.sparkSession.sparkContext
        written = spark_context.parallelize(jobs, len(jobs)).map(
            lambda job: _bucket_from_folder(job[0], job[1], target, total_ids, layout)
        )
        return [bulk_load.BucketFiles(b, first, count, Path(i), Path(t)) for b, first, count, i, t in written.collect()]
    texts = (
        lines.groupBy("route", "bucket")  # already partitioned by route: no shuffle, rows stay in id order
        .agg(F.concat_ws("\n", F.collect_list("line")).alias("lines"))
        .select("bucket", "lines")
    )
    buckets, handles = [], {}
    produced = texts.rdd.mapPartitions(lambda part: _ship_buckets(part, total_ids, layout))
    for item in produced.toLocalIterator(prefetchPartitions=True):
        if item[0] == "chunk":
            _, name, data = item
            handle = handles.get(name) or handles.setdefault(name, open(sst_dir / name, "wb"))  # noqa: SIM115
            handle.write(data)
        else:
            _, bucket, first, count, ids_name, times_name = item
            for name in (ids_name, times_name):
                handles.pop(name).close()
            buckets.append(bulk_load.BucketFiles(bucket, first, count, sst_dir / ids_name, sst_dir / times_name))
    return buckets


def _parse_lines(text: str) -> tuple[list[int], list[bytes], list[int]]:
    seqs, ids, stamps = [], [], []
    for line in text.split("\n"):
        if line:
            message_id, seq, timestamp_ms = line.split(",")
            ids.append(bytes.fromhex(message_id))
            seqs.append(int(seq))
            stamps.append(int(timestamp_ms))
    return seqs, ids, stamps


def _bucket_from_folder(
    bucket: int, folder: str, target: str, total_ids: int, layout: bulk_load.LoadLayout
) -> tuple[int, int, int, str, str]:
    """Executor side (local master): the SST files of one bucket from the text files Spark wrote for it."""
    parts = sorted(Path(folder).glob("part-*"))
    text = "".join(part.read_text() for part in parts)  # one file, unless Spark split the bucket's task
    seqs, ids, stamps = _parse_lines(text)
    files = bulk_load.write_bucket(Path(target), bucket, seqs, ids, stamps, total_ids, layout)
    return bucket, files.first_seq, files.count, str(files.ids_path), str(files.times_path)


def _ship_buckets(rows: Iterator[Any], total_ids: int, layout: bulk_load.LoadLayout) -> Iterator[tuple[Any, ...]]:
    """Executor side (cluster): write each bucket's SST files in local scratch space and send them back in
    chunks, then one row saying which bucket they were."""
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-sst-"))
    try:
        for bucket, text in rows:
            seqs, ids, stamps = _parse_lines(text)
            files = bulk_load.write_bucket(scratch, bucket, seqs, ids, stamps, total_ids, layout)
            for path in (files.ids_path, files.times_path):
                with open(path, "rb") as handle:
                    while data := handle.read(CHUNK_BYTES):
                        yield ("chunk", path.name, data)
                path.unlink()
            yield ("bucket", bucket, files.first_seq, files.count, files.ids_path.name, files.times_path.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _place(built: Path, target: Path, replace: bool) -> Path | None:
    """Rename the finished store into place; an existing one is moved aside (``--replace``)."""
    replaced = None
    if target.exists():
        if not replace:
            raise StoreError(f"a store appeared at {target} during the rebuild", "stop whatever writes there")
        replaced = target.with_name(f"{target.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        target.rename(replaced)
    built.rename(target)
    return replaced

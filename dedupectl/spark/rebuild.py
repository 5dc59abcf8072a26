"""``dedupectl rebuild --partition P``: a partition's store, built from the output topic in bulk.

The worker's recovery would rebuild a lost store too, but record by record through the write path. Here
Spark reads the output partition (read_committed) and computes the store the worker would have had, in
four timed phases:

1. ordering (``rebuild_order``): every keyed record's sequence number, its rank in offset order (as the worker
   numbered what it published), and each id's latest copy, the one the store holds it under;
2. hand-over (``rebuild_sst``, local master): Spark writes the numbered records into one folder per bucket of
   sequence numbers, each file sorted by id, in a compact binary line format (``rebuild_lines``);
3. SST files: one Python task per bucket writes its ``ids`` and ``times`` files with rocksdict's
   ``SstFileWriter`` through ``store.bulk_load`` (every key and value comes from ``store.codec``): ``times``
   the timestamp, output offset and digests of every number, ``ids`` each id under its latest copy's number;
4. ingest: the driver ingests the files into a fresh store (``ingest_external_file``) and sets its state:
   the next sequence number (the keyed records), the first live one (0), the input offset (-1: unknown) and
   the output offset the read ended at. The store is built beside the target and renamed into place when
   complete.

The worker's recovery then reads only the output's tail from that offset. On a cluster (``ship_files``) the
hand-over and the SST files are one phase: each bucket's lines travel to one task as one value and the
files come back to the driver in chunks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from pyspark.sql import SparkSession

from dedupectl.config import DEFAULT_MAX_KEYS, KafkaConfig
from dedupectl.errors import DataDirError, StoreError
from dedupectl.spark import rebuild_sst
from dedupectl.spark.progress import ProgressSink, tracking
from dedupectl.spark.rebuild_order import Ordered, order_ids
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
from store.layout import moved_aside_path, store_path


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
    window_ids: int = DEFAULT_MAX_KEYS  # the worker's bound (its max_keys): sizes the store's id filter


@dataclass(frozen=True)
class RebuildReport:
    partition: int
    store: Path
    output_offsets: tuple[int, int]  # the output read: first retained offset, end offset
    records_read: int
    ids: int  # distinct ids held, each under its latest copy's sequence number
    duplicate_records: int  # keyed records whose id was published again later: numbered, their id held later
    unkeyed_records: int  # output records without a key: not the worker's, not recorded
    files: int
    sst_bytes: int
    state: StoreState
    replaced: Path | None  # where an existing store was moved
    seconds: float
    seconds_ordering: float  # read, sequence numbers, latest copies
    seconds_writing: float  # SST files (on a cluster: with the hand-over)
    seconds_ingesting: float
    seconds_handing_over: float = 0.0  # the numbered records to the SST writers, sorted by id (local master)
    without_duplicates: bool = True  # the output held no id twice: no shuffle to find latest copies


@dataclass(frozen=True)
class _Plan:
    target: Path
    output_range: PartitionRange


def prepare(request: RebuildRequest) -> _Plan:
    """Driver-side checks before any Spark work: the partition exists, the target is free (or may be
    replaced: then no process may hold it), the data directory is writable."""
    choose_partitions(request.kafka, request.input_topic, [request.partition], "Describe")  # only its count
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
    ordered = None
    try:
        with tracking(spark, sink) as step:
            step(f"rebuild: reading {request.output_topic}[{request.partition}], ordering ids")
            options = spark_kafka_options(request.kafka, request.kafka_java_settings)
            ordered = order_ids(
                kafka_records(spark, options, request.output_topic, [plan.output_range]), plan.output_range
            )
            ordering_done = time.monotonic()
            state = StoreState(
                next_seq=ordered.keyed_records, first_live_seq=0, input_offset=-1, output_offset=plan.output_range.stop
            )
            target = StoreTarget(request.input_topic, request.partition, state, request.window_ids)
            written = write_store(spark, ordered, staging, target, request.layout, request.ship_files, step)
            replaced = _place(written.path, plan.target, request.replace)
    finally:
        for frame in ordered.cached if ordered is not None else ():
            frame.unpersist()
        shutil.rmtree(staging, ignore_errors=True)
    finished = time.monotonic()
    return RebuildReport(
        partition=request.partition,
        store=plan.target,
        output_offsets=(plan.output_range.start, plan.output_range.stop),
        records_read=ordered.keyed_records + ordered.unkeyed_records,
        ids=ordered.ids,
        duplicate_records=ordered.keyed_records - ordered.ids,
        unkeyed_records=ordered.unkeyed_records,
        files=written.files,
        sst_bytes=written.sst_bytes,
        state=state,
        replaced=replaced,
        seconds=finished - started,
        seconds_ordering=ordering_done - started,
        seconds_writing=written.writing_done - written.handing_over_done,
        seconds_ingesting=finished - written.writing_done,
        seconds_handing_over=written.handing_over_done - ordering_done,
        without_duplicates=ordered.without_duplicates,
    )


@dataclass(frozen=True)
class StoreTarget:
    """The store a numbering becomes: its identity (input topic and partition), its state, its bound."""

    topic: str
    partition: int
    state: StoreState
    window_ids: int = DEFAULT_MAX_KEYS
    with_offsets: bool = True  # the records' offsets are the store's own output partition's (else none kept)


@dataclass(frozen=True)
class WrittenStore:
    path: Path
    files: int
    sst_bytes: int
    handing_over_done: float  # monotonic times at the ends of phases 2 and 3
    writing_done: float


def write_store(
    spark: SparkSession,
    ordered: Ordered,
    staging: Path,
    target: StoreTarget,
    layout: bulk_load.LoadLayout,
    ship_files: bool | None,
    step: Callable[[str], None],
) -> WrittenStore:
    """Phases 2 to 4 for one numbering (a rebuilt partition's, or one new partition's of a repartition): the
    SST files, then a fresh store at ``staging/store`` holding them, its state set (left closed)."""
    buckets, handing_over_done = _sst_files(spark, ordered, staging, step, layout, ship_files, target.with_offsets)
    sst_bytes = sum(path.stat().st_size for b in buckets for path in (b.ids_path, b.times_path) if path)
    writing_done = time.monotonic()
    step(f"{target.topic}-{target.partition}: ingesting the SST files into a fresh store")
    built = staging / "store"
    bulk_load.ingest(
        built,
        topic=target.topic,
        partition=target.partition,
        buckets=buckets,
        state=target.state,
        window_ids=target.window_ids,
    ).close()
    return WrittenStore(built, len(buckets), sst_bytes, handing_over_done, writing_done)


def _sst_files(
    spark: SparkSession,
    ordered: Ordered,
    staging: Path,
    step: Callable[[str], None],
    layout: bulk_load.LoadLayout,
    ship_files: bool | None,
    with_offsets: bool,
) -> tuple[list[bulk_load.BucketFiles], float]:
    """Phases 2 and 3: the numbered records handed over to the SST writers (local master), then the files
    written; on a cluster the two are one. Returns the files and when the hand-over ended."""
    numbers = ordered.keyed_records
    local = spark.sparkContext.master.startswith("local")
    ship = ship_files if ship_files is not None else not local
    folders: list[tuple[int, str]] = []
    if numbers and not ship:
        step(f"handing {numbers:,} records over to the SST writers")
        folders = rebuild_sst.hand_over(ordered.numbered, staging, numbers, layout)
    handing_over_done = time.monotonic()
    step(f"writing SST files for {numbers:,} sequence numbers, {ordered.ids:,} ids")
    buckets: list[bulk_load.BucketFiles] = []
    if numbers and ship:
        buckets = rebuild_sst.write_shipped(ordered.numbered, staging / "sst", numbers, layout, with_offsets)
    elif numbers:
        buckets = rebuild_sst.write_handed_over(spark, folders, staging / "sst", numbers, layout, with_offsets)
    return buckets, handing_over_done


def _place(built: Path, target: Path, replace: bool) -> Path | None:
    """Rename the finished store into place; an existing one is moved aside (``--replace``)."""
    replaced = None
    if target.exists():
        if not replace:
            raise StoreError(f"a store appeared at {target} during the rebuild", "stop whatever writes there")
        replaced = moved_aside_path(target)
        target.rename(replaced)
    built.rename(target)
    return replaced

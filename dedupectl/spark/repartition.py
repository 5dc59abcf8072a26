"""``dedupectl repartition build``: every new partition's store, built from the old output partitions in bulk.

Spark reads each old output partition (read_committed) from its first retained offset to its end, sends
every keyed record to the new partition the producers' partitioner gives its key under the new count, and
numbers each new partition's records in time order (``rebuild_order.order_routed``). Each numbering becomes
a store through rebuild's own SST and ingest path (``rebuild.write_store``): every id held under its latest
copy, with its timestamp. Its ``times`` keep no output offsets: the records were published to other output
partitions (or another layout of this one), and a store's offsets are its own output partition's.

The stores are written into the staging directory (``repartition.manifest``) with the build's manifest: the
output offsets read to, from which the cutover folds in what the old workers published meanwhile, and sets
each store's covered output offset. Workers keep running on the old layout throughout.
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

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

from dedupectl.config import DEFAULT_MAX_KEYS, KafkaConfig
from dedupectl.errors import DataDirError, RepartitionError
from dedupectl.partitioner import PARTITIONERS
from dedupectl.repartition.manifest import MANIFEST, Manifest
from dedupectl.repartition.plan import PlanRequest, RepartitionPlan, make_plan
from dedupectl.spark.progress import ProgressSink, tracking
from dedupectl.spark.rebuild import StoreTarget, write_store
from dedupectl.spark.rebuild_order import order_routed
from dedupectl.spark.runner import JobRun, run_job
from dedupectl.spark.session import SparkSettings
from dedupectl.spark.sources import kafka_records, resolve_topic_ranges, spark_kafka_options
from store import bulk_load, clock
from store.codec import StoreState
from store.layout import store_path


@dataclass(frozen=True)
class BuildRequest:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str
    data_dir: Path
    new_count: int
    partitioner: str = "auto"
    kafka_java_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    replace: bool = False  # delete a build already staged instead of refusing
    ship_files: bool | None = None
    layout: bulk_load.LoadLayout = field(default_factory=bulk_load.LoadLayout)
    window_ids: int = DEFAULT_MAX_KEYS


@dataclass(frozen=True)
class BuiltPartition:
    partition: int
    ids: int
    records: int  # numbered: ids + records whose id the output holds again later
    sst_bytes: int


@dataclass(frozen=True)
class BuildReport:
    staging: Path
    old_count: int
    new_count: int
    partitioner: str
    read_to: tuple[int, ...]  # per old partition, the output offset read to (exclusive)
    records_read: int
    unkeyed_records: int
    without_duplicates: bool
    stores: tuple[BuiltPartition, ...]
    seconds: float
    seconds_ordering: float
    ids_per_second: float  # the ids numbered (keyed records) over the whole build


def prepare(request: BuildRequest) -> RepartitionPlan:
    """Driver-side checks before Spark starts: the plan's refusals, then a staging directory to write."""
    plan = make_plan(
        PlanRequest(
            request.kafka,
            request.input_topic,
            request.output_topic,
            request.data_dir,
            request.new_count,
            request.partitioner,
        )
    )
    if plan.staging.exists() and not (plan.staging / MANIFEST).exists():
        shutil.rmtree(plan.staging)  # a build that did not finish: nothing was handed over yet
    if plan.staging.exists():
        if not request.replace:
            raise RepartitionError(
                f"a repartition build is already staged in {plan.staging}",
                "run `dedupectl repartition cutover`, or pass --replace to build it again",
            )
        if Manifest.load(plan.staging).phase != "built":
            raise RepartitionError(
                f"the staged build in {plan.staging} is being cut over", "run `dedupectl repartition cutover` again"
            )
        shutil.rmtree(plan.staging)
    try:
        plan.staging.mkdir(parents=True)
    except OSError as error:
        raise DataDirError(f"cannot create {plan.staging}: {error.strerror}", "check the data directory") from error
    return plan


def build(
    request: BuildRequest,
    settings: SparkSettings,
    sink: ProgressSink | None = None,
    notify: Callable[[str], None] | None = None,
) -> JobRun[BuildReport]:
    plan = prepare(request)
    return run_job(settings, lambda spark: run_build(spark, request, sink, plan), notify=notify)


def target_partition(key: Column, partitioner: str, count: int) -> Column:
    """The partition ``partitioner`` gives a record's key among ``count``: CRC32 natively, murmur2 (Kafka's
    own variant, which Spark lacks) through the product's Python function."""
    if partitioner == "crc32":
        return F.pmod(F.crc32(key), F.lit(count)).cast("int")
    function = PARTITIONERS[partitioner][0]
    return F.udf(lambda data: None if data is None else function(bytes(data), count), IntegerType())(key)


def run_build(
    spark: SparkSession, request: BuildRequest, sink: ProgressSink | None = None, plan: RepartitionPlan | None = None
) -> BuildReport:
    started = time.monotonic()
    plan = plan if plan is not None else prepare(request)
    ranges = resolve_topic_ranges(request.kafka, request.output_topic, list(range(plan.old_count)), None, None)
    routed = None
    stores = []
    finished = False
    try:
        with tracking(spark, sink) as step:
            step(f"repartition: reading {request.output_topic} ({plan.old_count} partitions), numbering ids")
            options = spark_kafka_options(request.kafka, request.kafka_java_settings)
            records = kafka_records(spark, options, request.output_topic, ranges)
            routed = order_routed(records, target_partition(F.col("key"), plan.partitioner, plan.new_count))
            ordering_done = time.monotonic()
            for partition in plan.stores:
                ordered = routed.of(partition)
                state = StoreState(next_seq=ordered.keyed_records, first_live_seq=0, input_offset=-1, output_offset=-1)
                target = StoreTarget(request.input_topic, partition, state, request.window_ids, with_offsets=False)
                scratch = Path(tempfile.mkdtemp(prefix=f".build-{partition}-", dir=plan.staging))
                try:
                    written = write_store(spark, ordered, scratch, target, request.layout, request.ship_files, step)
                    os.replace(written.path, store_path(plan.staging, request.input_topic, partition))
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                stores.append(BuiltPartition(partition, ordered.ids, ordered.keyed_records, written.sst_bytes))
        read_to = tuple(r.stop for r in sorted(ranges, key=lambda r: r.partition))
        Manifest(
            input_topic=request.input_topic,
            output_topic=request.output_topic,
            old_count=plan.old_count,
            new_count=plan.new_count,
            partitioner=plan.partitioner,
            read_to=read_to,
            built_at_ms=clock.now_ms(),
        ).save(plan.staging)
        finished = True
    finally:
        for frame in routed.cached if routed is not None else ():
            frame.unpersist()
        if not finished:  # no half a build for a cutover to take
            shutil.rmtree(plan.staging, ignore_errors=True)
    seconds = time.monotonic() - started
    numbered = sum(built.records for built in stores)
    return BuildReport(
        staging=plan.staging,
        old_count=plan.old_count,
        new_count=plan.new_count,
        partitioner=plan.partitioner,
        read_to=read_to,
        records_read=numbered + routed.unkeyed_records,
        unkeyed_records=routed.unkeyed_records,
        without_duplicates=routed.without_duplicates,
        stores=tuple(stores),
        seconds=seconds,
        seconds_ordering=ordering_done - started,
        ids_per_second=numbered / seconds if seconds > 0 else 0.0,
    )

"""``dedupectl reconcile`` as one call: pick the partitions, open their stores, resolve the range, compare
(and repair) each partition, in parallel up to ``jobs``.

Checks run cheapest-first and before any long work, so a bad request fails in a second with one line:
range syntax, then Kafka (reachable, topic, partition numbers), then the stores (present, a dedup store,
not held by a worker when repairing), then the range against each partition.

Stores are opened before the range's end is read from Kafka. Read-only, that order is what makes the
comparison sound against a running worker: everything the store holds was published before the end
offset the scan stops at.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from reconcile.comparison import ScanRange
from reconcile.diff import reconcile_partition
from reconcile.errors import Interrupted, RangeError, TopicError
from reconcile.gaps import find_gap
from reconcile.kafka import KafkaConfig, partition_counts
from reconcile.ranges import Bound, OffsetRange, check_order, resolve_range
from reconcile.report import PartitionReport, ReconcileReport
from reconcile.scan import OutputReader
from store.dedup_store import DedupStore
from store.errors import StoreCorruptError, StoreLockedError, StoreNotFoundError
from store.layout import list_store_dirs, store_path
from store.worker_status import WorkerStatus, describe, read_statuses

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileRequest:
    kafka: KafkaConfig
    input_topic: str  # stores are named after the input topic
    output_topic: str
    data_dir: Path
    partitions: tuple[int, ...] | None  # None: every partition of the output topic
    start: Bound | None = None
    stop: Bound | None = None
    apply: bool = False
    jobs: int = 1
    sample_size: int = 10


class ProgressSink(Protocol):
    def started(self, partition: int, offsets: OffsetRange) -> None: ...

    def advanced(self, partition: int, position: int, records: int) -> None: ...

    def finished(self, partition: int, report: PartitionReport) -> None: ...


def run_reconcile(request: ReconcileRequest, progress: ProgressSink | None = None) -> ReconcileReport:
    """Reconcile the requested partitions; raises a DedupeError (one line, exit 2) for a bad request."""
    started = time.monotonic()
    if request.jobs < 1:
        raise RangeError(f"--jobs must be at least 1, got {request.jobs}")
    check_order(request.start, request.stop)
    output = request.output_topic
    count = partition_counts(request.kafka, [output], needs={output: "Read"})[output]
    partitions = _partitions(request, count)
    without_store: tuple[int, ...] = ()
    if request.partitions is None:  # every partition of the topic: one without a store is a finding
        held = {p for topic, p, _ in list_store_dirs(request.data_dir) if topic == request.input_topic}
        without_store = tuple(p for p in partitions if p not in held)
        partitions = [p for p in partitions if p in held]
    with ExitStack() as stack:
        stores = {p: stack.enter_context(_open_store(request, p)) for p in partitions}
        ranges = _resolve_ranges(request, partitions)
        reports = _compare_all(request, stores, ranges, progress)
    return ReconcileReport(
        output_topic=request.output_topic,
        input_topic=request.input_topic,
        applied=request.apply,
        partitions=tuple(reports),
        seconds=round(time.monotonic() - started, 3),
        without_store=without_store,
        data_dir=str(request.data_dir),
    )


def _partitions(request: ReconcileRequest, count: int) -> list[int]:
    if request.partitions is None:
        found = [p for topic, p, _ in list_store_dirs(request.data_dir) if topic == request.input_topic]
        if not found:
            raise StoreNotFoundError(
                f"no dedup stores of topic {request.input_topic!r} in {request.data_dir}",
                "check --data-dir and --topic (stores are named <input topic>-<partition>)",
            )
        wanted = sorted(set(found) | set(range(count)))  # a store past the topic's partitions is refused below
    else:
        wanted = sorted(set(request.partitions))
    for partition in wanted:
        if not 0 <= partition < count:
            raise TopicError(
                f"partition {partition} does not exist: {request.output_topic!r} has {count} partition(s), "
                f"0-{count - 1}",
                "check --partition",
            )
    return wanted


def _open_store(request: ReconcileRequest, partition: int) -> DedupStore:
    path = store_path(request.data_dir, request.input_topic, partition)
    if not request.apply:
        store = DedupStore.open_secondary(path)
    else:
        try:
            store = DedupStore.open_existing(path)
        except StoreLockedError as error:
            raise StoreLockedError(
                f"partition {partition}'s store {path} is held by {_holder(request, partition)}",
                "stop the worker for this partition before reconcile --apply (without --apply, reconcile "
                "works while it runs)",
            ) from error
    if (store.identity.topic, store.identity.partition) != (request.input_topic, partition):
        identity = store.identity
        store.close()
        raise StoreCorruptError(
            f"store {path} belongs to {identity.topic}[{identity.partition}], not {request.input_topic}[{partition}]",
            "check --data-dir; never copy a store between partitions",
        )
    return store


def _serving(request: ReconcileRequest, partition: int) -> WorkerStatus | None:
    """The status of the worker serving a partition from this data dir, if one left its file."""
    return next((s for s in read_statuses(request.data_dir) if s.serves(request.input_topic, partition)), None)


def _holder(request: ReconcileRequest, partition: int) -> str:
    status = _serving(request, partition)
    return "another process (a running worker?)" if status is None else describe(status)


def _resolve_ranges(request: ReconcileRequest, partitions: list[int]) -> dict[int, OffsetRange]:
    with OutputReader(request.kafka) as reader:
        ranges = {p: resolve_range(reader, request.output_topic, p, request.start, request.stop) for p in partitions}
    explicit = request.start is not None or request.stop is not None
    if explicit:
        for partition, offsets in ranges.items():
            if offsets.start > offsets.stop:
                raise RangeError(
                    f"in partition {partition} the range starts at offset {offsets.start} "
                    f"({_shown(request.start, 'the first retained offset')}) after it ends at offset "
                    f"{offsets.stop} ({_shown(request.stop, 'the end')})",
                    "--from must be the earlier end",
                )
        if all(offsets.empty for offsets in ranges.values()):
            spans = ", ".join(f"{p}: {r.low}-{r.end}" for p, r in ranges.items())
            raise RangeError(
                "the range holds no records in any partition asked for",
                f"the partitions hold offsets (first-end) {spans}",
            )
    return ranges


def _shown(bound: Bound | None, default: str) -> str:
    return default if bound is None else bound.text


def _compare_all(
    request: ReconcileRequest,
    stores: dict[int, DedupStore],
    ranges: dict[int, OffsetRange],
    progress: ProgressSink | None,
) -> list[PartitionReport]:
    cancel = threading.Event()

    def compare(partition: int) -> PartitionReport:
        offsets = ranges[partition]
        if progress is not None:
            progress.started(partition, offsets)
        with OutputReader(request.kafka) as reader:
            # the worker would refuse this partition: said in the report, never advanced over by --apply
            gap = find_gap(stores[partition], reader, request.output_topic, partition, offsets)
            report = reconcile_partition(
                stores[partition],
                reader,
                request.output_topic,
                partition,
                ScanRange(start=offsets.start, stop=offsets.stop, low=offsets.low),
                apply=request.apply,
                on_batch=None if progress is None else lambda pos, n: progress.advanced(partition, pos, n),
                cancel=cancel,
                sample_size=request.sample_size,
                # a worker leaves its status file while it runs (or after a crash: then a re-check costs <1 s)
                writer_may_run=_serving(request, partition) is not None,
                output_gap=gap,
            )
        if progress is not None:
            progress.finished(partition, report)
        return report

    with ThreadPoolExecutor(max_workers=min(request.jobs, len(stores)), thread_name_prefix="reconcile") as pool:
        futures = [pool.submit(compare, partition) for partition in stores]
        try:
            return [future.result() for future in futures]
        except (KeyboardInterrupt, Interrupted):
            cancel.set()  # every partition stops after its current batch; each batch was written atomically
            for future in futures:
                future.cancel()
            raise KeyboardInterrupt from None
        except BaseException:
            cancel.set()
            raise

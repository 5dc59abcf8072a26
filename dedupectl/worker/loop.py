"""The dedup worker: consume a batch, drop repeated ids, publish the rest in one Kafka transaction together
with the input offsets, then record the published ids in the partition's store.

Why this is exactly-once (docs/guide.md, "Why a crash at any point neither duplicates nor loses"):
- the transaction makes publishing and advancing the input offset one atomic step, and fences zombies;
- the store is written only after the commit, so it may lag the output but never lead it;
- the next batch is collected and planned while a batch commits, its ids counted as held; it is published only
  once that commit succeeded, and dropped with it (both read again) if it failed;
- before a partition's first batch after any assignment, recovery reads the output partition from the
  store's covered output offset to its end (read_committed) and records what the store lacks. It first waits
  until no transaction is open on that output partition (its last stable offset at its end): a stable
  committed input position alone does not rule out an earlier owner's transaction that holds no offsets and
  commits behind recovery.
A crash anywhere therefore costs at most a re-read; it never publishes an id twice nor drops one.

``Worker`` runs the loop and wires its owners: ``clients`` (Kafka clients, failure kinds), ``partitions``
(stores and status), ``pipeline`` (batches), ``publisher`` (transactions), ``recovery`` (output catch-up and
the abort sweep), ``plan`` (the dedup decision).
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException, TopicPartition

from dedupectl.config import WorkerConfig
from dedupectl.data_dir_faults import data_dir_faults, read_only_volume
from dedupectl.errors import BrokerError, DataDirError, TopicError
from dedupectl.metrics import WorkerMetrics
from dedupectl.repartition.manifest import refuse_cutover_under_way
from dedupectl.worker.clients import Clients, ClientsLost
from dedupectl.worker.crashpoint import CrashPoint
from dedupectl.worker.observer import claim_data_dir
from dedupectl.worker.partitions import Partitions
from dedupectl.worker.permissions import prove_permissions
from dedupectl.worker.pipeline import Pipeline
from dedupectl.worker.publisher import TransactionalPublisher
from dedupectl.worker.recovery import Recovery
from dedupectl.worker.routing import RouteCheck
from dedupectl.worker.signals import IDLE_STOP_S, StopRequest
from dedupectl.worker.summary import RunSummary
from reconcile.kafka import partition_counts
from snapshots.schedule import FAILURE_STEPS, ScheduleConfig, SnapshotSchedule
from store.codec import StoreState
from store.damage import translated
from store.memory import limit_heap_retention, release_free_memory
from store.opening import require_writable_dir

YOUNG_OBJECTS_BEFORE_COLLECTING = 100_000  # objects made and not freed before the cycle collector runs

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

MEMORY_RELEASE_S = 60.0
MAINTENANCE_S = 5.0  # every held partition ages and refreshes its window gauge at least this often, input or not


class Worker:
    def __init__(self, config: WorkerConfig, metrics: WorkerMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or WorkerMetrics()
        self.summary = RunSummary()
        crashpoint = CrashPoint.from_environment()
        self._clients = Clients(config)
        self._partitions = Partitions(config, self.metrics, self.summary)
        self._recovery = Recovery(config, self._clients, self.metrics, self.summary)
        self._publisher = TransactionalPublisher(config, self._clients, self.metrics, self.summary, crashpoint)
        self._pipeline = Pipeline(
            config,
            self._clients,
            self._partitions,
            self._publisher,
            self._recovery,
            self.metrics,
            self.summary,
            crashpoint,
        )
        self._idle_since: float | None = None
        self._closing = False
        self._stopping = False  # the loop has ended: what is left is the stop's own work
        self._iteration_started = -math.inf  # the loop's last turn began then (monotonic)
        # always on: it also answers `dedupectl snapshot create` for the partitions this worker holds
        self._snapshots = SnapshotSchedule(
            config.data_dir,
            config.input_topic,
            ScheduleConfig(every_s=config.snapshot_every, destination=config.snapshot_to, keep=config.snapshot_keep),
            on_failure=lambda step: self.metrics.snapshot_failures.labels(step).inc(),
            on_published=self.metrics.snapshots_published.inc,
        )
        if config.snapshot_every is not None:
            self.metrics.export_snapshot_failures(FAILURE_STEPS)

    # -- lifecycle -----------------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        exit_on_idle_s: float | None = None,
        on_progress: Callable[[RunSummary], None] | None = None,
    ) -> RunSummary:
        """Process until ``stop`` is set (or nothing arrives for ``exit_on_idle_s``); returns the summary."""
        if isinstance(stop, StopRequest):  # a signal's stop waits only for work in hand
            stop.busy = self._busy
        try:
            # a full or read-only volume, or a damaged store file, is the operator's, not a bug
            with data_dir_faults(self.config.data_dir), translated():
                return self._run(stop, exit_on_idle_s=exit_on_idle_s, on_progress=on_progress)
        finally:
            if isinstance(stop, StopRequest):  # its error or summary is printed next: a stop has nothing to cut
                stop.end()

    def _run(
        self,
        stop: threading.Event | None,
        *,
        exit_on_idle_s: float | None,
        on_progress: Callable[[RunSummary], None] | None,
    ) -> RunSummary:
        stop = stop or threading.Event()
        self._preflight()
        config = self.config
        if config.observe:
            log.info(
                "observer %s: %s, deciding as a worker would and publishing nothing (group %s%s), data in %s",
                config.worker_id,
                config.input_topic,
                config.group_id,
                "" if config.duplicates_topic is None else f", dropped copies: {config.duplicates_topic}",
                config.data_dir,
            )
        else:
            log.info(
                "worker %s: %s -> %s (dead letters: %s%s), data in %s",
                config.worker_id,
                config.input_topic,
                config.output_topic,
                config.dead_letter_topic,
                "" if config.duplicates_topic is None else f", dropped copies: {config.duplicates_topic}",
                config.data_dir,
            )
        # connect the output reader now, while the group assigns partitions: the first recovery then costs a
        # fetch, not a fetch plus connection and metadata set-up
        self._recovery.connect()
        prove_permissions(config, self._recovery.reader, self._clients.retrying)  # before anything is published
        # whatever an earlier instance left is settled by the new producer; what a crashed broker still holds
        # pending of it in the group is dropped (its batch is read again and recovery drops what was published)
        self._start_clients({})
        self._partitions.write_status()
        limit_heap_retention()  # glibc would otherwise keep freed batch buffers: RSS per id is a design target
        gc.freeze()  # what exists now lives for the run: the collector's full passes need not walk it again
        # a batch's tens of thousands of records are freed together once it is done, and hold no cycle: at the
        # default of 700 new objects the collector would walk every batch's records over and over
        gc.set_threshold(YOUNG_OBJECTS_BEFORE_COLLECTING, *gc.get_threshold()[1:])
        try:
            self._loop(stop, exit_on_idle_s, on_progress)
        except KafkaException as error:  # outside a transaction: nothing in hand was committed or recorded
            raise BrokerError(
                f"Kafka error: {error.args[0].str() if error.args else error}",
                "restart the worker: recovery makes its stores agree with the output topic",
            ) from error
        finally:
            self._stopping = True  # however the loop ended (a stop, an error): closing is the stop's own work
            self._shutdown()
            gc.unfreeze()  # a worker run inside a longer-lived process (tests, benchmarks) leaves it as it was
        if self._partitions.close_failures:  # a stop is done only once it wrote what it owed (run: exit 74)
            raise self._partitions.close_failures[0]
        return self.summary

    def _loop(
        self, stop: threading.Event, exit_on_idle_s: float | None, on_progress: Callable[[RunSummary], None] | None
    ) -> None:
        pipeline, partitions = self._pipeline, self._partitions
        started = last_report = last_release = last_maintenance = time.monotonic()
        while not stop.is_set():
            self._iteration_started = time.monotonic()
            try:
                batch = pipeline.collect()
                if batch:
                    pipeline.process(batch)
                # no input: the batch committing is recorded now, and a partition assigned is recovered, input
                # or not; recovering is work, so an idle wait starts after it
                elif pipeline.finish_in_flight() and self._recovery.recover_assigned(partitions):
                    self._idle_since = time.monotonic()
            except ClientsLost as lost:
                self._restart_clients(lost)
                continue
            now = time.monotonic()
            if batch:
                self._idle_since = now
            elif exit_on_idle_s is not None and self._idle_for(now, started) >= exit_on_idle_s:
                break
            if now - last_maintenance >= MAINTENANCE_S:
                partitions.maintain(self._clients.consumer)
                last_maintenance = now
            self._snapshots.maybe_run(partitions.stores())
            if now - last_release >= MEMORY_RELEASE_S:
                release_free_memory()  # a few ms, once a minute
                last_release = now
            if on_progress is not None and now - last_report >= 1.0:
                on_progress(self.summary)
                last_report = now
        self._stopping = True
        try:
            pipeline.finish_in_flight()
        except ClientsLost as lost:  # stopping: the next start's recovery settles it, as after a crash
            log.warning("the last transaction's outcome is unknown (%s): the next start recovers it", lost)

    def _busy(self) -> bool:
        """Whether a stop has work in hand to wait for: a transaction, a snapshot being published, the stop's own
        steps once the loop has ended (closing the clients and the stores: --stop-timeout bounds them), or a turn
        of the loop begun within ``IDLE_STOP_S``: it sees the stop at its end, on a machine however loaded; a
        loop stuck in one turn (retrying an unreachable broker) or not started yet has nothing in hand."""
        return (
            self._stopping
            or self._publisher.open
            or not self._snapshots.wait(0)
            or time.monotonic() - self._iteration_started < IDLE_STOP_S
        )

    def _idle_for(self, now: float, started: float) -> float:
        """Seconds without input since the last batch or assignment; before any assignment the clock only
        runs out once the group had ample time to assign (so --exit-on-idle never quits before starting)."""
        if self._idle_since is None:
            return now - started - 2 * self.config.session_timeout_ms / 1000
        return now - self._idle_since

    def _preflight(self) -> None:
        config = self.config
        try:
            require_writable_dir(Path(config.data_dir))
        except DataDirError as refused:  # a volume the kernel turned read-only says so, and what to do
            raise read_only_volume(config.data_dir) or refused from None
        claim_data_dir(config)  # an observer's stores and a worker's never share a directory
        refuse_cutover_under_way(Path(config.data_dir), config.input_topic)
        needs = {config.input_topic: "Read"}
        if not config.observe:  # an observer writes neither: it decides, counts and records
            needs |= {config.output_topic: "Write", config.dead_letter_topic: "Write"}
        if config.duplicates_topic is not None:
            needs[config.duplicates_topic] = "Write"
        topics = list(needs)
        counts = self._clients.retrying(
            lambda: partition_counts(config.kafka, topics, needs=needs), "reading the topics"
        )
        if config.duplicates_topic is not None:
            self._publisher.duplicates_partitions = counts[config.duplicates_topic]
        inputs = counts[config.input_topic]
        self._pipeline.routing = RouteCheck(config.partitioner, inputs)  # an observer checks as a worker would
        if config.observe:
            return
        outputs = counts[config.output_topic]
        if inputs != outputs:
            raise TopicError(
                f"output topic {config.output_topic!r} has {outputs} partitions but input {config.input_topic!r} "
                f"has {inputs}",
                f"give the output {inputs} partitions: a record goes to the output partition of its input partition",
            )
        self._publisher.dead_letter_partitions = counts[config.dead_letter_topic]

    def _shutdown(self) -> None:
        self._snapshots.close(timeout_s=30)
        self._closing = True
        # the run failed with a batch committing: the next start's recovery records it
        self._pipeline.drop_in_flight(wait_s=self.config.kafka.timeout_s)
        self._clients.close_consumer()
        self._partitions.close_all()
        self._recovery.close()
        self._clients.flush_producer()
        self._partitions.remove_status()

    # -- the group's callbacks and the clients' restarts --------------------------------------------------

    def _subscribe(self) -> None:
        self._clients.consumer.subscribe(
            [self.config.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        self._partitions.assign((tp.partition for tp in partitions), self._recovery.reader)
        self._idle_since = time.monotonic()

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        if not self._closing:  # the batch committing is recorded in the stores about to close (or aborted)
            self._pipeline.finish_in_flight()
        self._partitions.revoke((tp.partition for tp in partitions), closing=self._closing)

    def _restart_clients(self, lost: ClientsLost) -> None:
        """After a fatal producer error, do in process what a process restart does: the old producer is
        destroyed, the stores closed and the consumer closed; a new producer's initialisation fences the old
        one and settles its last transaction (committed or aborted) before it returns; the group is joined
        again, so every partition is assigned afresh, recovered from the output and read again from its
        committed offset."""
        self._clients.count_restart(str(lost))
        self.metrics.client_restarts.inc()
        log.warning(
            "the transactional producer failed (%s): restarting the Kafka clients; every held partition recovers "
            "from the output before its next batch",
            lost,
        )
        self._pipeline.drop_in_flight()  # the failed producer's last transaction is settled by its successor
        covered = self._partitions.covered()
        self._clients.discard_producer(touch=not lost.hung)
        self._clients.leave_group()
        self._on_revoke(
            None, [TopicPartition(self.config.input_topic, number) for number in self._partitions.numbers()]
        )
        self._recovery.reconnect()
        self._start_clients(covered, commit_requested=lost.commit_requested)
        self._partitions.write_status()

    def _start_clients(self, covered: dict[int, StoreState], *, commit_requested: bool = False) -> None:
        """A new producer and consumer; the consumer joins the group once what the earlier producer may have left
        open is aborted (``Recovery.sweep``)."""
        self._clients.start()
        self._recovery.sweep(covered, commit_requested=commit_requested)
        self._subscribe()

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
"""

from __future__ import annotations

import gc
import logging
import math
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter, not_, or_
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from dedupectl.config import WorkerConfig
from dedupectl.data_dir_faults import data_dir_faults, is_storage_io_error, read_only_volume
from dedupectl.errors import BrokerError, DataDirError, DedupeError, FencedError, OutputGapError, TopicError
from dedupectl.kafka_clients import exactly_once_settings, flush_at_exit
from dedupectl.messages import DeadLetter, extract_ids
from dedupectl.metrics import WorkerMetrics
from reconcile.broker_retry import (
    RetryPolicy,
    describe,
    is_fence,
    is_replaceable_producer_error,
    is_transient,
    kafka_error_of,
    with_retries,
)
from reconcile.kafka import build_client, is_authorization_error, partition_counts, permission_denied
from reconcile.recovery import catch_up
from reconcile.scan import OffsetBounds, OutputReader
from snapshots.schedule import FAILURE_STEPS, ScheduleConfig, SnapshotSchedule
from store import clock
from store.aging import AgingPolicy, age_step
from store.codec import StoreState, encode_ids
from store.damage import translated
from store.dedup_store import DedupStore
from store.footprint import dir_bytes
from store.layout import store_path
from store.memory import limit_heap_retention, release_free_memory
from store.options import shared_memory
from store.window import effective_window_seconds
from store.worker_status import remove_status, status_path, write_status

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

CONSUME_CHUNK = 5_000  # messages asked of librdkafka per call: bounds how far a batch overshoots its byte cap


# clients restarted after fatal errors this often are fighting something a process restart will not fix
CLIENT_RESTARTS_MAX = 3
CLIENT_RESTARTS_WINDOW_S = 600.0
OFFSETS_HANG_MARGIN_S = 15.0  # beyond the call's own timeout, before sending offsets counts as hung
SETTLE_MARGIN_S = 30.0  # beyond twice transaction.timeout.ms: the coordinator's abort sweep and marker writes
SWEEP_HEADER = "dedupectl-abort-sweep"  # the empty record of a transaction that only aborts what was left open
MEMORY_RELEASE_S = 60.0
MAINTENANCE_S = 5.0  # every held partition ages and refreshes its window gauge at least this often, input or not


@dataclass
class _Partition:
    number: int
    store: DedupStore
    recovered: bool = False


@dataclass
class _Plan:
    """What one partition's share of a batch becomes. The records to publish are parallel lists, in input
    order: the hot loops run over them with C-level map/zip instead of per-record tuples."""

    partition: int
    records: list[Message]
    ids: list[bytes]  # messageIds
    keys: list[bytes]  # the same ids as store keys (encoded once, for the lookup and for record)
    values: list[bytes | None]
    timestamps_ms: list[int]
    dead: list[tuple[Message, DeadLetter]]
    consumed: int
    duplicates: int
    next_input_offset: int


@dataclass
class _InFlight:
    """A batch published and committing on a thread of its own while the next batch is collected and planned.
    Its ids count as held for that next plan; they are recorded once the commit is known to have succeeded."""

    plans: list[_Plan]
    seen: dict[int, frozenset[bytes]]  # store keys per partition
    spans: dict[int, tuple[int, int]]  # each partition's first and last output offset, filled by delivery
    denied: list[str]  # topics the authorizer refused a record of
    committed: Future  # of _CommitDone
    planned_at: float  # perf_counter when the batch's plan began


@dataclass(frozen=True)
class _CommitDone:
    perf: float  # time.perf_counter()
    monotonic: float
    wall_ms: int  # clock.now_ms()


@dataclass
class RunSummary:
    consumed: int = 0
    published: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    recovered: int = 0
    batches: int = 0
    commits: int = 0
    aborts: int = 0
    first_consumed_at: float | None = None
    last_committed_at: float | None = None
    partitions: list[int] = field(default_factory=list)

    @property
    def busy_seconds(self) -> float:
        """From the first record consumed to the last transaction committed."""
        if self.first_consumed_at is None or self.last_committed_at is None:
            return 0.0
        return max(self.last_committed_at - self.first_consumed_at, 0.0)


class _ClientsLost(Exception):
    """The transactional producer failed fatally without another instance having taken over: the worker's
    Kafka clients and stores are restarted in process, as a process restart would."""

    def __init__(self, error: KafkaException, commit_requested: bool, *, hung: bool = False) -> None:
        super().__init__(describe(error))
        self.error = error
        self.commit_requested = commit_requested  # False: the failed transaction can only have been aborted
        self.hung = hung  # a call into the producer never returned: the producer may not be touched again


class _CrashPoint:
    """Fault injection for the crash tests: ``DEDUPECTL_CRASHPOINT=after-commit:3`` SIGKILLs the process the
    3rd time it reaches ``after-commit``. Unset, it costs one attribute test per batch."""

    def __init__(self, spec: str | None) -> None:
        self.name, self.remaining = None, 0
        if spec:
            name, _, count = spec.partition(":")
            self.name, self.remaining = name, int(count or 1)

    def __call__(self, name: str) -> None:
        if self.name == name:
            self.remaining -= 1
            if self.remaining <= 0:
                os.kill(os.getpid(), signal.SIGKILL)


class Worker:
    def __init__(self, config: WorkerConfig, metrics: WorkerMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or WorkerMetrics()
        self.summary = RunSummary()
        self._partitions: dict[int, _Partition] = {}
        self._dead_letter_partitions = 0
        self._crashpoint = _CrashPoint(os.environ.get("DEDUPECTL_CRASHPOINT"))
        self._status_path = status_path(config.data_dir, config.worker_id)
        self._consumer = None
        self._producer = None
        self._idle_since: float | None = None
        self._closing = False
        self._reader: OutputReader | None = None
        self._shared_memory = shared_memory(config.memtable_budget)  # for every held store
        self._aging = AgingPolicy(max_keys=config.max_keys, max_bytes=config.max_bytes)
        self._retry = RetryPolicy(bound_s=config.broker_retry_for)
        self._transaction_began = 0.0
        self._client_restarts: list[float] = []
        self._commit_requested = False  # whether the transaction in hand has asked its coordinator to commit
        self._in_flight: _InFlight | None = None  # the batch committing while the next one is collected
        self._rewinds = 0  # seeks back to the committed offsets so far: a batch collected across one is void
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
        # a full or read-only volume, or a damaged store file, is the operator's, not a bug
        with data_dir_faults(self.config.data_dir), translated():
            return self._run(stop, exit_on_idle_s=exit_on_idle_s, on_progress=on_progress)

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
        log.info(
            "worker %s: %s -> %s (dead letters: %s), data in %s",
            config.worker_id,
            config.input_topic,
            config.output_topic,
            config.dead_letter_topic,
            config.data_dir,
        )
        # connect the output reader now, while the group assigns partitions: the first recovery then costs a
        # fetch, not a fetch plus connection and metadata set-up
        self._reader = OutputReader(config.kafka)
        # whatever an earlier instance left is settled by the new producer; what a crashed broker still holds
        # pending of it in the group is dropped (its batch is read again and recovery drops what was published)
        self._start_clients({})
        self._write_status()
        limit_heap_retention()  # glibc would otherwise keep freed batch buffers: RSS per id is a design target
        gc.freeze()  # what exists now lives for the run: the collector's full passes need not walk it again
        try:
            self._loop(stop, exit_on_idle_s, on_progress)
        except KafkaException as error:  # outside a transaction: nothing in hand was committed or recorded
            raise BrokerError(
                f"Kafka error: {error.args[0].str() if error.args else error}",
                "restart the worker: recovery makes its stores agree with the output topic",
            ) from error
        finally:
            self._shutdown()
            gc.unfreeze()  # a worker run inside a longer-lived process (tests, benchmarks) leaves it as it was
        return self.summary

    def _subscribe(self) -> None:
        self._consumer.subscribe(
            [self.config.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )

    def _loop(
        self, stop: threading.Event, exit_on_idle_s: float | None, on_progress: Callable[[RunSummary], None] | None
    ) -> None:
        started = last_report = last_release = last_maintenance = time.monotonic()
        while not stop.is_set():
            try:
                batch = self._collect(self._consumer)
                if batch:
                    self._process(batch)
                # no input: the batch committing is recorded now, and a partition assigned is recovered, input
                # or not; recovering is work, so an idle wait starts after it
                elif self._finish_in_flight() and self._recover_assigned():
                    self._idle_since = time.monotonic()
            except _ClientsLost as lost:
                self._restart_clients(lost)
                continue
            now = time.monotonic()
            if batch:
                self._idle_since = now
            elif exit_on_idle_s is not None and self._idle_for(now, started) >= exit_on_idle_s:
                break
            if now - last_maintenance >= MAINTENANCE_S:
                self._maintain()
                last_maintenance = now
            self._snapshots.maybe_run({number: owned.store for number, owned in self._partitions.items()})
            if now - last_release >= MEMORY_RELEASE_S:
                release_free_memory()  # a few ms, once a minute
                last_release = now
            if on_progress is not None and now - last_report >= 1.0:
                on_progress(self.summary)
                last_report = now
        try:
            self._finish_in_flight()
        except _ClientsLost as lost:  # stopping: the next start's recovery settles it, as after a crash
            log.warning("the last transaction's outcome is unknown (%s): the next start recovers it", lost)

    def _start_producer(self) -> Producer:
        """A transactional producer, its transactions initialised: this fences any earlier instance of this
        worker and completes or aborts whatever transaction it left open, before it returns."""
        return self._retrying(
            self._new_producer,
            f"starting Kafka transactions as {self.config.transactional_id}",
            # a producer left fatal by a failed init (CONCURRENT_TRANSACTIONS can do that) is replaced on retry
            transient=lambda error: is_transient(error) or is_replaceable_producer_error(error),
        )

    def _new_producer(self) -> Producer:
        config = self.config
        producer = build_client(
            Producer,
            exactly_once_settings(
                config.kafka,
                defaults={"linger.ms": 5, "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000},
                owned={
                    "transactional.id": config.transactional_id,
                    "enable.idempotence": True,
                    "acks": "all",
                    "transaction.timeout.ms": config.transaction_timeout_ms,
                },
            ),
        )
        try:
            producer.init_transactions(config.kafka.timeout_s)
        except KafkaException as error:
            if is_transient(error) or is_replaceable_producer_error(error):
                raise
            if is_authorization_error(error.args[0]):
                raise self._denied(error.args[0]) from error
            raise BrokerError(
                f"cannot start Kafka transactions as {config.transactional_id}: {error.args[0].str()}",
                "check the broker is reachable and transactions are enabled (transaction.state.log.* settings)",
            ) from error
        return producer

    def _start_consumer(self) -> Consumer:
        config = self.config
        owned = {
            "group.id": config.group_id,
            "session.timeout.ms": config.session_timeout_ms,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
        # static membership: a restarted worker takes its partitions back without a rebalance; but librdkafka
        # never sends LeaveGroup for a static member, so a worker being removed runs as a dynamic one
        if not config.leave_group_on_stop:
            owned["group.instance.id"] = config.worker_id
        return build_client(
            Consumer,
            exactly_once_settings(
                config.kafka,
                defaults={"auto.offset.reset": "earliest", "fetch.max.bytes": 64 * 1024 * 1024},
                owned=owned,
            ),
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
            Path(config.data_dir).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DataDirError(
                f"cannot create data directory {config.data_dir}: {error.strerror}",
                "point --data-dir at a writable directory",
            ) from error
        if not os.access(config.data_dir, os.W_OK):
            raise read_only_volume(config.data_dir) or DataDirError(
                f"data directory {config.data_dir} is not writable", "fix its permissions or choose another --data-dir"
            )
        topics = [config.input_topic, config.output_topic, config.dead_letter_topic]
        needs = {config.input_topic: "Read", config.output_topic: "Write", config.dead_letter_topic: "Write"}
        counts = self._retrying(lambda: partition_counts(config.kafka, topics, needs=needs), "reading the topics")
        inputs, outputs = counts[config.input_topic], counts[config.output_topic]
        if inputs != outputs:
            raise TopicError(
                f"output topic {config.output_topic!r} has {outputs} partitions but input {config.input_topic!r} "
                f"has {inputs}",
                f"give the output {inputs} partitions: a record goes to the output partition of its input partition",
            )
        self._dead_letter_partitions = counts[config.dead_letter_topic]

    def _shutdown(self) -> None:
        self._snapshots.close(timeout_s=30)
        self._closing = True
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:  # the run failed with a batch committing: the next start's recovery records it
            with suppress(Exception):
                in_flight.committed.exception(timeout=self.config.kafka.timeout_s)
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError, OSError) as error:  # OSError: a failed volume, from on_revoke
                log.warning("closing the consumer: %s", error)
        for number in list(self._partitions):
            self._close_store(self._partitions.pop(number).store)
        if self._reader is not None:
            self._reader.close()
        if self._producer is not None:
            flush_at_exit(self._producer, self.config.kafka.timeout_s)
        remove_status(self._status_path)

    # -- assignment ----------------------------------------------------------------------------------

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if tp.partition not in self._partitions:
                path = store_path(self.config.data_dir, self.config.input_topic, tp.partition)
                created = not path.exists()
                store = DedupStore.open(
                    path,
                    topic=self.config.input_topic,
                    partition=tp.partition,
                    shared=self._shared_memory,
                    window_ids=self.config.max_keys,  # the id filter is sized for what aging lets the store keep
                )
                self._partitions[tp.partition] = _Partition(tp.partition, store)
                if created or (store.state.next_seq == 0 and store.state.output_offset < 0):
                    self._report_empty_store(tp.partition, created)
                self._age(tp.partition, store)  # the window gauge exists from assignment on, input or not
            # another worker may have published while we did not own it: recover before the next batch
            self._partitions[tp.partition].recovered = False
        self._idle_since = time.monotonic()
        log.info("assigned %s", sorted(tp.partition for tp in partitions))
        self._write_status()

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        if not self._closing:  # the batch committing is recorded in the stores about to close (or aborted)
            self._finish_in_flight()
        for tp in partitions:
            owned = self._partitions.pop(tp.partition, None)
            if owned is not None:
                self._close_store(owned.store)
                if not self._closing:  # a rebalance: its next owner exports its gauges, a stale copy would mislead
                    self.metrics.forget_store(tp.partition)
        log.info("revoked %s", sorted(tp.partition for tp in partitions))
        self._write_status()

    def _close_store(self, store: DedupStore) -> None:
        try:
            store.close()
        except Exception as error:
            # at shutdown a failed volume must not cut the rest short: what ended the run is reported already,
            # and the store's next open replays its log
            if not (self._closing and is_storage_io_error(error)):
                raise
            log.warning("store %s was not closed cleanly (%s): its next open recovers it", store.path, error)

    def _write_status(self) -> None:
        config = self.config
        fields = {"worker_id": config.worker_id, "group_id": config.group_id, "input_topic": config.input_topic}
        fields |= {"output_topic": config.output_topic, "partitions": sorted(self._partitions)}
        write_status(self._status_path, fields)
        self.summary.partitions = sorted(self._partitions)

    def _collect(self, consumer) -> list[Message]:
        """Up to batch_max_messages / batch_max_bytes, waiting at most batch_max_ms."""
        config = self.config
        deadline = time.monotonic() + config.batch_max_ms / 1000
        batch: list[Message] = []
        size = 0
        rewinds = self._rewinds
        while len(batch) < config.batch_max_messages and size < config.batch_max_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wanted = min(CONSUME_CHUNK, config.batch_max_messages - len(batch))
            got = consumer.consume(num_messages=wanted, timeout=remaining)
            records = got if not any(map(Message.error, got)) else self._records_only(got)
            batch += records
            size += sum(map(len, filter(None, map(Message.value, records))))
            if len(got) < wanted:
                break
        if self._rewinds != rewinds:
            # a rebalance settled the batch committing and it was aborted: what this one holds may lie past
            # records the rewind reads again, so it goes, and the consumer reads from the committed offsets
            self._rewind()
            return []
        if batch and self.summary.first_consumed_at is None:
            self.summary.first_consumed_at = time.monotonic()
        return batch

    def _records_only(self, got: list[Message]) -> list[Message]:
        """The records among consumer events; a fatal one ends the worker, others are logged."""
        records = []
        for message in got:
            error = message.error()
            if error is None:
                records.append(message)
                continue
            if is_authorization_error(error):  # the group or the input: nothing to consume until an ACL is added
                raise self._denied(error)
            # a static member replaced by a twin with the same worker_id surfaces as _FATAL, and
            # error.fatal() is False for it: without this the fenced worker would idle holding its stores
            if error.fatal() or error.code() == KafkaError._FATAL:
                raise FencedError(
                    f"this worker was fenced out of its group ({error.str()})",
                    "another worker with the same worker_id is running: give each worker its own",
                )
            log.warning("consumer: %s", error.str())
        return records

    def _process(self, batch: list[Message]) -> None:
        """Plan this batch while the one before commits, then publish it and record the one before.

        The batch committing (``_in_flight``) is not in the stores yet: its ids count as held for this plan.
        Only once its commit is known to have succeeded is this batch published, and only then is the one
        before recorded, while this one commits. An aborted commit voids this batch too: the rewind reads both
        again from the committed offsets."""
        planned_at = time.perf_counter()
        by_partition: dict[int, list[Message]] = defaultdict(list)
        for message in batch:
            by_partition[message.partition()].append(message)
        # a partition revoked while the batch filled is left out: its next owner reads it from the committed offset
        owned_now = [owned for number in by_partition if (owned := self._partitions.get(number)) is not None]
        if not all(owned.recovered for owned in owned_now) and not self._finish_in_flight():
            return  # recovery waits until no transaction is open on the output, this worker's own included
        committed = self._in_flight
        seen = committed.seen if committed is not None else {}
        plans = []
        for owned in owned_now:
            if not owned.recovered:
                self._recover(owned)
            plans.append(self._plan(owned, by_partition[owned.number], seen.get(owned.number)))
        self._in_flight = None
        done = None if committed is None else self._settle(committed)
        if committed is not None and done is None:
            return
        try:
            if plans:
                self._in_flight = self._publish(plans, planned_at)
        finally:
            if done is not None:
                self._record(committed, done)

    def _finish_in_flight(self) -> bool:
        """Settle and record the batch committing, if any; False when its commit failed and it was aborted (the
        consumer is then rewound to the committed offsets)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return True
        done = self._settle(in_flight)
        if done is None:
            return False
        self._record(in_flight, done)
        return True

    def _record(self, in_flight: _InFlight, done: _CommitDone) -> None:
        """Record a committed batch's ids in the stores of its partitions, then age them."""
        recording = time.perf_counter()
        for plan in in_flight.plans:
            owned = self._partitions.get(plan.partition)
            if owned is None:  # revoked meanwhile (its ids were recorded then): never reached, but never wrong
                continue
            span = in_flight.spans.get(plan.partition)
            state = owned.store.record(
                plan.ids,
                plan.timestamps_ms,
                keys=plan.keys,
                input_offset=plan.next_input_offset,
                output_offset=None if span is None else span[1] + 1,
                output_offsets=self._published_at(plan, span),
            )
            self._account(plan, state.next_seq - state.first_live_seq)
            self._age(plan.partition, owned.store)
        self._crashpoint("after-record")
        self.summary.batches += 1
        # the batch's own time: plan to commit, and its store write (not the next batch's collect between)
        self.metrics.batch_seconds.observe(done.perf - in_flight.planned_at + time.perf_counter() - recording)

    def _observe_latency(self, plans: list[_Plan], committed_ms: int) -> None:
        for plan in plans:
            if plan.timestamps_ms:
                self.metrics.latency.observe(max(committed_ms - min(plan.timestamps_ms), 0) / 1000)

    @staticmethod
    def _published_at(plan: _Plan, span: tuple[int, int] | None) -> range | None:
        """Each published id's output offset: one transaction of the only writer of the partition puts them
        at consecutive offsets. Should another producer have written in between, they are not known."""
        if span is None:
            return None
        if span[1] - span[0] != len(plan.ids) - 1:
            log.warning(
                "partition %d: %d records took output offsets %d..%d: another producer writes to the output "
                "partition; this batch is recorded without its offsets",
                plan.partition, len(plan.ids), span[0], span[1],
            )  # fmt: skip
            return None
        return range(span[0], span[1] + 1)

    def _plan(self, owned: _Partition, messages: list[Message], seen: frozenset[bytes] | None = None) -> _Plan:
        """``seen``: the store keys of the batch committing, held as if recorded."""
        keys = list(map(Message.key, messages))
        values = list(map(Message.value, messages))
        ids, dead = extract_ids(keys, values, self.config.value_format, self.config.id_field)
        # where each id first occurs (built from the end, so earlier positions overwrite later ones): a
        # repeat inside the batch is a duplicate, and the first occurrence is the one published
        first_at = dict(zip(reversed(ids), range(len(ids) - 1, -1, -1), strict=True))
        first_at.pop(None, None)  # dead letters
        positions = sorted(first_at.values())
        candidates = list(map(ids.__getitem__, positions))
        store_keys = encode_ids(candidates)
        held = owned.store.contains_keys(store_keys)
        if seen:
            held = list(map(or_, held, map(seen.__contains__, store_keys)))
        absent = list(map(not_, held))
        positions = list(compress(positions, absent))
        records = list(map(messages.__getitem__, positions))
        timestamps = list(map(itemgetter(1), map(Message.timestamp, records)))
        if timestamps and min(timestamps) <= 0:  # no usable record timestamp: the time it was seen
            now_ms = clock.now_ms()
            timestamps = [timestamp if timestamp > 0 else now_ms for timestamp in timestamps]
        return _Plan(
            partition=owned.number,
            records=records,
            ids=list(compress(candidates, absent)),
            keys=list(compress(store_keys, absent)),
            values=list(map(values.__getitem__, positions)),
            timestamps_ms=timestamps,
            dead=[(messages[index], reason) for index, reason in dead],
            consumed=len(messages),
            duplicates=len(messages) - len(dead) - len(positions),
            # after a rebalance inside one batch, offsets may not be ascending: cover the furthest read
            next_input_offset=max(map(Message.offset, messages)) + 1,
        )

    def _publish(self, plans: list[_Plan], planned_at: float) -> _InFlight | None:
        """Begin a transaction, produce the batch and send its input offsets, then commit on a thread of its own;
        None when the transaction was aborted (the batch is then read again from the committed offsets)."""
        config, producer = self.config, self._producer
        spans: dict[int, tuple[int, int]] = {}
        denied: list[str] = []

        def note_denied(error, message) -> None:
            if error is not None and is_authorization_error(error):
                denied.append(message.topic())

        def remember(error, message) -> None:
            note_denied(error, message)
            if error is None:
                offset = message.offset()
                first, last = spans.get(message.partition(), (offset, offset))
                spans[message.partition()] = (min(first, offset), max(last, offset))

        try:
            producer.begin_transaction()
            self._transaction_began = time.monotonic()
            self._commit_requested = False
            offsets = [TopicPartition(config.input_topic, plan.partition, plan.next_input_offset) for plan in plans]
            # the offsets go to the group coordinator (two broker round trips, GIL released) while this thread
            # produces: a transaction takes its offsets at any point before the commit
            offsets_sent = _in_background(
                producer.send_offsets_to_transaction,
                offsets,
                self._consumer.consumer_group_metadata(),
                config.kafka.timeout_s,
                name="send-offsets",
            )
            try:
                self._produce_batch(plans, remember, note_denied)
                self._crashpoint("after-produce")
            finally:
                sent_error = self._offsets_outcome(offsets_sent)  # nothing else may touch the transaction meanwhile
            if sent_error is not None:
                raise sent_error
        except KafkaException as error:
            self._transaction_failed(error, denied)
            return None
        self._commit_requested = True
        return _InFlight(
            plans=plans,
            seen={plan.partition: frozenset(plan.keys) for plan in plans},
            spans=spans,
            denied=denied,
            committed=_in_background(self._commit, name="commit"),
            planned_at=planned_at,
        )

    def _settle(self, in_flight: _InFlight) -> _CommitDone | None:
        """Wait for a batch's commit; None when it failed and was aborted (the consumer is then rewound)."""
        try:
            done: _CommitDone = in_flight.committed.result()
        except KafkaException as error:
            self._transaction_failed(error, in_flight.denied)
            return None
        self.summary.commits += 1
        self.summary.last_committed_at = done.monotonic
        self.metrics.last_commit.set(done.wall_ms / 1000)
        self.metrics.transactions.labels("committed").inc()
        self._crashpoint("after-commit")
        self._observe_latency(in_flight.plans, done.wall_ms)
        return done

    def _transaction_failed(self, error: KafkaException, denied: list[str]) -> None:
        """Abort the failed transaction and rewind the consumer, or raise what ends the run or restarts the
        clients."""
        config, kafka_error = self.config, error.args[0]
        if denied or is_authorization_error(kafka_error):
            with suppress(KafkaException):  # nothing of it may become visible; a fatal producer cannot abort
                self._producer.abort_transaction(config.kafka.timeout_s)
            raise self._denied(kafka_error, denied[0] if denied else config.output_topic) from error
        if kafka_error.fatal():
            raise self._fatal_producer_error(error) from error
        if not kafka_error.txn_requires_abort() and not is_transient(error):
            raise BrokerError(f"transaction failed: {kafka_error.str()}") from error
        log.warning("transaction aborted (%s): re-reading the batch", kafka_error.str())
        self._abort_and_rewind()

    def _offsets_outcome(self, offsets_sent: Future) -> BaseException | None:
        """What sending the offsets raised, waiting past its own timeout for a bounded time: after a broker
        fault librdkafka can block in send_offsets_to_transaction for good. The blocked thread is then left
        behind with its producer, and the clients are restarted."""
        try:
            return offsets_sent.exception(timeout=self.config.kafka.timeout_s + OFFSETS_HANG_MARGIN_S)
        except FutureTimeoutError:
            hung = KafkaException(KafkaError(KafkaError._TIMED_OUT, "sending the offsets to the transaction hung"))
            raise _ClientsLost(hung, commit_requested=False, hung=True) from None

    def _produce_batch(self, plans: list[_Plan], remember: Callable, note_denied: Callable) -> None:
        """Produce every plan's records (and dead letters); ``remember`` hears each partition's first and last,
        ``note_denied`` each dead letter's failure."""
        config, produce = self.config, self._producer.produce
        output_topic = config.output_topic
        for plan in plans:
            partition, last = plan.partition, len(plan.ids) - 1
            headers = list(map(Message.headers, plan.records))
            if last > 0:  # the first one reports its offset too: the store keeps where each id was published
                self._produce_when_room(
                    output_topic,
                    plan.values[0],
                    plan.ids[0],
                    partition,
                    on_delivery=remember,
                    timestamp=plan.timestamps_ms[0],
                    headers=headers[0],
                )
            for value, message_id, timestamp, header in zip(
                plan.values[1:last], plan.ids[1:last], plan.timestamps_ms[1:last], headers[1:last], strict=True
            ):
                try:  # inline, not a helper call: this runs once per published record
                    produce(output_topic, value, message_id, partition, timestamp=timestamp, headers=header)
                except BufferError:
                    self._produce_when_room(
                        output_topic, value, message_id, partition, timestamp=timestamp, headers=header
                    )
            if last >= 0:  # the last one reports its output offset: the store's covered offset
                self._produce_when_room(
                    output_topic,
                    plan.values[last],
                    plan.ids[last],
                    partition,
                    on_delivery=remember,
                    timestamp=plan.timestamps_ms[last],
                    headers=headers[last],
                )
            for message, reason in plan.dead:
                self._produce_when_room(
                    config.dead_letter_topic,
                    message.value(),
                    message.key(),
                    partition % self._dead_letter_partitions,
                    on_delivery=note_denied,
                    headers=_dead_letter_headers(message, reason),
                )

    def _produce_when_room(self, topic: str, *args, **kwargs) -> None:
        while True:
            try:
                self._producer.produce(topic, *args, **kwargs)
                return
            except BufferError:  # local queue full: let librdkafka deliver some, then retry
                self._producer.poll(0.05)

    def _commit(self) -> _CommitDone:
        # a commit that timed out resumes when called again; one that needs an abort is the caller's
        self._retrying(
            lambda: self._producer.commit_transaction(self.config.kafka.timeout_s),
            "committing the transaction",
            transient=lambda error: is_transient(error) and not error.args[0].txn_requires_abort(),
        )
        return _CommitDone(perf=time.perf_counter(), monotonic=time.monotonic(), wall_ms=clock.now_ms())

    def _abort_and_rewind(self) -> None:
        timeout_s = self.config.kafka.timeout_s
        try:
            self._retrying(lambda: self._producer.abort_transaction(timeout_s), "aborting the transaction")
        except KafkaException as error:
            if not error.args[0].fatal():
                raise BrokerError(f"cannot abort the transaction: {error.args[0].str()}") from error
            raise self._fatal_producer_error(error) from error
        self.summary.aborts += 1
        self.metrics.transactions.labels("aborted").inc()
        self._rewind()

    def _rewind(self) -> None:
        """Seek every held partition back to its committed offset: what was consumed past it is read again."""
        committed = self._retrying(
            self._committed_offsets,
            "reading the committed input offsets",
            # the group may need this consumer to poll before it answers (a rebalance after a broker restart)
            sleep=self._poll_dropping,
        )
        self._rewinds += 1
        for tp in committed:
            if tp.partition in self._partitions:
                tp.offset = tp.offset if tp.offset >= 0 else 0
                try:
                    self._consumer.seek(tp)
                except KafkaException as error:  # revoked meanwhile: its next owner re-reads it
                    log.info("not rewinding partition %d: %s", tp.partition, error)

    def _committed_offsets(self) -> list[TopicPartition]:
        held = [TopicPartition(self.config.input_topic, number) for number in self._partitions]
        return self._consumer.committed(held, timeout=self.config.kafka.timeout_s) if held else []

    def _poll_dropping(self, seconds: float) -> None:
        """Serve the consumer's group protocol (assignments run here) for ``seconds``; the records it returns are
        dropped, as the seek that follows reads them again."""
        deadline = time.monotonic() + max(seconds, 0.2)
        while (left := deadline - time.monotonic()) > 0:
            self._records_only(self._consumer.consume(num_messages=CONSUME_CHUNK, timeout=left))  # errors still count

    def _retrying(self, call, what: str, **options):
        """``with_retries`` within ``--broker-retry-for``."""
        return with_retries(call, what, self._retry, **options)

    def _may_have_timed_out(self) -> bool:
        """Whether the open transaction outlived transaction.timeout.ms: the coordinator then aborts it and bumps
        the producer's epoch itself (a broker outage does that), which reads as a fence by a newer instance."""
        return time.monotonic() - self._transaction_began >= self.config.transaction_timeout_ms / 1000

    def _fatal_producer_error(self, error: KafkaException) -> Exception:
        """What a fatal producer error becomes: fenced (the run ends) only when another instance took over;
        otherwise the clients are restarted in process (``_ClientsLost``), unless the error is one the operator
        must fix (authorization, an unknown topic), which ends the run.

        A transaction older than transaction.timeout.ms may have been aborted by its coordinator during an
        outage, which reads as a fence too: that is a broker fault, not a twin."""
        kafka_error = kafka_error_of(error)
        detail = str(error) if kafka_error is None else kafka_error.str()
        if kafka_error is not None and is_fence(kafka_error) and not self._may_have_timed_out():
            return FencedError(
                f"this worker was fenced ({detail})",
                "another worker with the same worker_id took over; stop one of them",
            )
        if kafka_error is not None and (is_fence(kafka_error) or is_replaceable_producer_error(error)):
            return _ClientsLost(error, self._commit_requested)
        return BrokerError(
            f"the transactional producer failed ({detail})",
            "restart the worker (a supervisor does): recovery makes its stores agree with the output topic",
        )

    def _denied(self, error: KafkaError, topic: str | None = None) -> DedupeError:
        """The missing ACL behind an authorization failure, named for the operator (the worker then exits)."""
        config, code = self.config, error.code()
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return permission_denied("Read", "group", config.group_id, error.str())
        if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return permission_denied("Write", "transactional id", config.transactional_id, error.str())
        if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            return permission_denied("IdempotentWrite", "cluster", "kafka-cluster", error.str())
        if topic is not None:  # a refused record: its topic is one the worker writes
            return permission_denied("Write", "topic", topic, error.str())
        return permission_denied("Read", "topic", config.input_topic, error.str())

    def _restart_clients(self, lost: _ClientsLost) -> None:
        """After a fatal producer error, do in process what a process restart does: the old producer is
        destroyed, the stores closed and the consumer closed; a new producer's initialisation fences the old
        one and settles its last transaction (committed or aborted) before it returns; the group is joined
        again, so every partition is assigned afresh, recovered from the output and read again from its
        committed offset."""
        self._count_restart(str(lost))
        self.metrics.client_restarts.inc()
        log.warning(
            "the transactional producer failed (%s): restarting the Kafka clients; every held partition recovers "
            "from the output before its next batch",
            lost,
        )
        self._in_flight = None  # the failed producer's last transaction is settled by its successor
        covered = {number: owned.store.state for number, owned in self._partitions.items()}
        self._discard_producer(touch=not lost.hung)
        self._leave_group()
        self._reader.close()
        self._reader = OutputReader(self.config.kafka)
        self._start_clients(covered, commit_requested=lost.commit_requested)
        self._write_status()

    def _start_clients(self, covered: dict[int, StoreState], *, commit_requested: bool = False) -> None:
        """A new producer (which fences any earlier one and settles its last transaction), then a consumer that
        joins the group once what the earlier producer may have left open is aborted (see
        ``_abort_what_was_left_open``). ``covered``: the partitions held before, each with its
        store's state (the input and output offsets it covers), whose outputs may be swept; ``commit_requested``:
        whether the failed transaction had asked to commit, so that only partitions whose failed batch the group
        did not commit are swept."""
        self._producer = self._start_producer()
        self._consumer = self._start_consumer()
        if commit_requested:
            self._abort_what_was_left_open({})  # the group's pending offsets first: its committed ones then read
            uncommitted = self._batches_not_committed(covered)
            self._abort_what_was_left_open({number: covered[number].output_offset for number in uncommitted})
        else:
            self._abort_what_was_left_open({number: state.output_offset for number, state in covered.items()})
        self._subscribe()

    def _batches_not_committed(self, covered: dict[int, StoreState]) -> list[int]:
        """The partitions whose group offset is not past what their store covers: the failed transaction's batch
        of them was not committed (it is read again), so records of it left open may be aborted. With its
        offsets committed, its records were meant to count: they are left alone (recovery then waits for them)."""
        held = [TopicPartition(self.config.input_topic, number) for number in covered]
        try:
            committed = self._consumer.committed(held, timeout=self.config.kafka.timeout_s) if held else []
        except KafkaException as error:
            log.warning("cannot read the group's committed offsets (%s): no output partition is swept", describe(error))
            return []
        return sorted(
            tp.partition for tp in committed if tp.error is None and tp.offset <= covered[tp.partition].input_offset
        )

    def _count_restart(self, reason: str) -> None:
        """Too many client restarts in a row is a fight a process restart will not win either: end the run."""
        now = time.monotonic()
        recent = [at for at in self._client_restarts if now - at < CLIENT_RESTARTS_WINDOW_S]
        if len(recent) >= CLIENT_RESTARTS_MAX:
            raise BrokerError(
                f"the Kafka clients failed fatally {len(recent) + 1} times within {CLIENT_RESTARTS_WINDOW_S:.0f}s "
                f"(last: {reason})",
                "check the brokers' logs and that no other worker runs with this worker_id; "
                "a restart resumes exactly where the worker stopped",
            )
        self._client_restarts = [*recent, now]

    def _discard_producer(self, *, touch: bool) -> None:
        """Destroy the failed producer before its successor exists: nothing it still holds may reach a broker
        after the new producer has settled the last transaction. One blocked in a call is only dropped (the
        new producer's initialisation fences it)."""
        producer, self._producer = self._producer, None
        if not touch:
            return
        try:
            producer.purge()
            producer.close()
        except (KafkaException, RuntimeError) as error:
            log.info("closing the failed producer: %s", describe(error))

    def _leave_group(self) -> None:
        """Close the consumer and every held store; a static member rejoins with the same assignment."""
        consumer, self._consumer = self._consumer, None
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as error:
            log.info("closing the consumer: %s", describe(error))
        self._on_revoke(None, [TopicPartition(self.config.input_topic, number) for number in list(self._partitions)])

    def _recover_assigned(self) -> bool:
        """Recover every partition assigned and not recovered yet (no transaction of this worker's is open);
        whether there was any."""
        waiting = [owned for owned in self._partitions.values() if not owned.recovered]
        for owned in waiting:
            self._recover(owned)
        return bool(waiting)

    def _recover(self, owned: _Partition) -> None:
        began = time.monotonic()
        bounds: OffsetBounds | None = self._await_settled_output(owned.number)

        def attempt():
            nonlocal bounds
            # the first attempt reads from the bounds the wait has just seen; a retry asks for them again
            known, bounds = bounds, None
            return catch_up(owned.store, self._reader, self.config.output_topic, owned.number, bounds=known)

        try:
            result = self._retrying(attempt, f"recovering partition {owned.number} from the output")
        except OutputGapError as refused:  # no retry or exact way on: the worker exits with the error's one line
            self.metrics.refused.labels(str(owned.number), refused.gap.kind).set(1)
            raise
        owned.recovered = True
        self.summary.recovered += result.recorded
        self.metrics.recovered.labels(str(owned.number)).inc(result.recorded)
        self.metrics.recovery_offsets.labels(str(owned.number)).set(result.end_offset - max(result.start_offset, 0))
        self.metrics.recovery_seconds.labels(str(owned.number)).set(time.monotonic() - began)
        log.info(
            "partition %d recovered: read output offsets %d..%d (%d records), recorded %d missing ids",
            owned.number,
            result.start_offset,
            result.end_offset,
            result.scanned,
            result.recorded,
        )

    def _await_settled_output(self, partition: int) -> OffsetBounds:
        """Wait until no transaction is open on the output partition before recovery reads it; return its
        bounds as last read. One still open (a former owner's, or this worker's last one while the coordinator
        settles it after a broker fault) could commit after recovery has read up to it, and its ids would be
        missing from the store. The coordinator ends any transaction within transaction.timeout.ms; one open
        much longer is hanging."""
        topic = self.config.output_topic
        limit_s = 2 * self.config.transaction_timeout_ms / 1000 + SETTLE_MARGIN_S
        began = time.monotonic()
        delay = 0.1
        while True:
            bounds, end = self._open_span(partition)
            stable = bounds.end
            if stable >= end:
                return bounds
            waited = time.monotonic() - began
            if waited >= limit_s:
                raise BrokerError(
                    f"a transaction has been open on {topic}[{partition}] for {waited:.0f}s (offsets {stable}..{end})"
                    ": recovery cannot know whether its records will count",
                    "find and abort the hanging transaction (kafka-transactions.sh find-hanging, then abort), "
                    "then restart the worker",
                )
            if delay == 0.1:
                log.info("partition %d: waiting for an open transaction on the output to end", partition)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _open_span(self, partition: int) -> tuple[OffsetBounds, int]:
        """The output partition's bounds (up to its last stable offset) and its end: the end equals the last
        stable offset unless a transaction is open on it."""
        topic, reader = self.config.output_topic, self._reader
        bounds = self._retrying(lambda: reader.bounds(topic, partition), "reading the output's stable end")
        return bounds, self._retrying(lambda: reader.log_end(topic, partition), "reading the output's end")

    def _abort_what_was_left_open(self, outputs: dict[int, int]) -> None:
        """End as aborted what an earlier producer of this worker's id left open that a broker still holds: at
        start, and after a failed transaction. A broker that crashed mid-transaction can lose the markers its
        coordinator sends: the group then keeps the transaction's offsets pending (its committed offsets never
        become stable, so the consumer never starts), and an output partition keeps its records open (its last
        stable offset stuck below its end). One transaction of this producer's id that sends offsets to the
        group and writes an empty record to each of ``outputs`` left open (never visible to read_committed
        readers), then aborts, makes the brokers close what this id left open there. ``outputs`` maps each
        partition to the output offset its store covers: records open from below it belong to a batch the
        store recorded as committed (a commit whose markers the broker lost), and are never aborted; recovery
        then refuses to read past them.

        Pending offsets are always safe to drop: the batch is read again and recovery, which reads the output,
        drops what was published. Open output records only where the failed batch is read again (see
        ``_start_clients``): then nothing of them can have been meant to count."""
        config, producer = self.config, self._producer
        open_outputs = []
        for number, covered in sorted(outputs.items()):
            bounds, end = self._open_span(number)
            stable = bounds.end
            if stable < end and stable >= covered:
                open_outputs.append((number, stable, end))
            elif stable < end:
                log.warning(
                    "partition %d: output offsets %d..%d are still open from below what its store covers (%d): a "
                    "committed batch whose markers the broker lost, left alone",
                    number,
                    stable,
                    end,
                    covered,
                )
        for number, stable, end in open_outputs:
            log.warning(
                "partition %d: output offsets %d..%d are still open after the failed transaction: aborting them",
                number,
                stable,
                end,
            )
        self._retrying(producer.begin_transaction, "beginning a transaction")
        for number, _, _ in open_outputs:
            self._produce_when_room(config.output_topic, None, None, number, headers=[(SWEEP_HEADER, b"")])
        # delivered before the abort: an abort discards what is unsent, and its markers reach only what it wrote to
        producer.flush(config.kafka.timeout_s)
        # offsets of an aborted transaction never count: any valid offset makes the group's marker come
        offsets = [TopicPartition(config.input_topic, number, 0) for number in sorted(outputs) or [0]]
        try:
            self._retrying(
                lambda: producer.send_offsets_to_transaction(
                    offsets, self._consumer.consumer_group_metadata(), config.kafka.timeout_s
                ),
                "sending offsets to the aborting transaction",
            )
        except KafkaException as error:
            # the group refuses the offsets of a consumer that has not joined yet (unknown member), but the
            # transaction holds the group's partition by then, so its abort marker still reaches it; the records
            # are produced first, as the refusal leaves the transaction able only to abort
            if not error.args[0].txn_requires_abort():
                raise
            log.debug("offsets of the aborting transaction refused (%s): aborting it", describe(error))
        self._retrying(lambda: producer.abort_transaction(config.kafka.timeout_s), "aborting the transaction")

    def _report_empty_store(self, partition: int, created: bool) -> None:
        """Say that a partition starts with no ids, and how much of the output its recovery will read."""
        label = str(partition)
        self.metrics.empty_stores.labels(label).inc()
        how = "a new empty store" if created else "an empty store"
        try:
            bounds = self._reader.bounds(self.config.output_topic, partition)
        except DedupeError as error:
            log.warning("partition %d starts from %s; output offsets unknown (%s)", partition, how, error)
            return
        self.metrics.recovery_offsets.labels(label).set(bounds.end - bounds.low)
        lost = (
            f"; offsets below {bounds.low} were deleted by retention: late retries of their ids will be published again"
            if bounds.low > 0
            else ""
        )
        log.info(
            "partition %d starts from %s: recovery reads the whole output partition, offsets %d..%d (%d)%s",
            partition,
            how,
            bounds.low,
            bounds.end,
            bounds.end - bounds.low,
            lost,
        )

    def _maintain(self) -> None:
        """Age every held partition, including those without input (their aged files still go), and refresh
        their window gauges, which grow with wall time."""
        for number, owned in list(self._partitions.items()):
            self._age(number, owned.store)
            self.metrics.store_bytes.labels(str(number)).set(dir_bytes(owned.store.path))
        self._measure_lag()
        self.metrics.measure_data_dir(self.config.data_dir)

    def _measure_lag(self) -> None:
        """Records behind each held partition's end, from what fetches last told (no request to the broker)."""
        held = [TopicPartition(self.config.input_topic, number) for number in self._partitions]
        try:
            positions = self._consumer.position(held) if held else []
            for tp in positions:
                _, high = self._consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset >= 0 and high >= 0:
                    self.metrics.lag.labels(str(tp.partition)).set(max(high - tp.offset, 0))
        except KafkaException as error:  # a gauge left a few seconds old is no reason to stop
            log.debug("lag not measured: %s", error)

    def _age(self, partition: int, store: DedupStore) -> None:
        """One bounded aging step (microseconds: it moves the cut and drops whole generations below it), then the
        effective window for the gauge operators page on (NaN while the store holds no id)."""
        label = str(partition)
        result = age_step(store, self._aging)
        if result.aged:
            self.metrics.aged.labels(label).inc(result.aged)
            self.metrics.store_keys.labels(label).set(result.live_ids)
        window = effective_window_seconds(store)
        self.metrics.window_seconds.labels(label).set(math.nan if window is None else window)
        self.metrics.id_filter_bytes.labels(label).set(store.filter_bytes)

    def _account(self, plan: _Plan, store_keys: int) -> None:
        label = str(plan.partition)
        published, dead = len(plan.ids), len(plan.dead)
        summary = self.summary
        summary.consumed += plan.consumed
        summary.published += published
        summary.duplicates += plan.duplicates
        summary.dead_letters += dead
        metrics = self.metrics
        metrics.consumed.labels(label).inc(plan.consumed)
        metrics.published.labels(label).inc(published)
        metrics.duplicates.labels(label).inc(plan.duplicates)
        metrics.dead_letters.labels(label).inc(dead)
        metrics.store_keys.labels(label).set(store_keys)


def _in_background(call: Callable, *args: object, name: str) -> Future:
    """``call(*args)`` on a daemon thread of its own: one that never returns (librdkafka can block for good
    after a broker fault) is left behind and does not hold the process at exit, as an executor's would."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call(*args))
        except BaseException as error:  # handed to the caller, who decides
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _dead_letter_headers(message: Message, reason: DeadLetter) -> list[tuple[str, bytes]]:
    return [
        *(message.headers() or []),
        ("dedupectl.reason", reason.reason.value.encode()),
        ("dedupectl.detail", reason.detail[:500].encode()),
        ("dedupectl.source.topic", message.topic().encode()),
        ("dedupectl.source.partition", str(message.partition()).encode()),
        ("dedupectl.source.offset", str(message.offset()).encode()),
    ]


def stop_on_signals(stop_timeout_s: float | None = None) -> threading.Event:
    """An event set by SIGTERM or SIGINT: the worker finishes the batch in hand, commits, and exits 0.

    A second signal, or ``stop_timeout_s`` running out after the first, ends the process at once, as a crash
    would: a store records a batch only after its transaction committed, so nothing half done is kept, and
    the next owner's recovery (or the restarted worker's fencing of its open transaction) covers the rest."""
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        # the next signal is the kernel's to act on: it ends the process even while a Kafka call blocks
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        log.info("%s received: finishing the batch in hand", signal.Signals(signum).name)
        stop.set()
        if stop_timeout_s is not None:
            threading.Thread(target=_force_stop_after, args=(stop_timeout_s,), name="stop-bound", daemon=True).start()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def _force_stop_after(seconds: float) -> None:
    time.sleep(seconds)
    log.error(
        "still stopping after --stop-timeout %gs: exiting now; the next recovery covers the batch in hand", seconds
    )
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGTERM)  # the default action by now: the same end as a second SIGTERM

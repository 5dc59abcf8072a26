"""The transactional publisher: one Kafka transaction per batch holding its new records, its dead letters, its
dropped copies (with ``--duplicates-topic``) and its input offsets; the commit runs on a thread of its own
while the next batch is collected and planned."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from contextlib import suppress
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from dedupectl.config import WorkerConfig
from dedupectl.errors import BrokerError
from dedupectl.messages import DeadLetter
from dedupectl.metrics import WorkerMetrics
from dedupectl.worker.clients import Clients, ClientsLost, fatal_producer_error, produce_all, produce_when_room
from dedupectl.worker.crashpoint import CrashPoint
from dedupectl.worker.duplicates import DroppedCopy
from dedupectl.worker.plan import Plan
from dedupectl.worker.summary import RunSummary
from reconcile.broker_retry import is_transient
from reconcile.kafka import is_authorization_error
from store import clock

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

OFFSETS_HANG_MARGIN_S = 15.0  # beyond the call's own timeout, before sending offsets counts as hung


@dataclass(frozen=True)
class Outgoing:
    """A partition's plan with the consumed records behind it: their headers and sources go out with them."""

    plan: Plan
    records: list[Message]  # the records to publish, parallel to ``plan.ids``
    dead: list[tuple[Message, DeadLetter]]
    copies: list[DroppedCopy] = field(default_factory=list)  # for the duplicates topic, when there is one
    forward: list[tuple[Message, int]] = field(default_factory=list)  # to this input partition (--misrouted forward)

    @classmethod
    def of(cls, plan: Plan, messages: list[Message]) -> Outgoing:
        return cls(
            plan,
            list(map(messages.__getitem__, plan.positions)),
            [(messages[position], reason) for position, reason in plan.dead],
            forward=[(messages[position], partition) for position, partition in plan.forward],
        )


@dataclass
class InFlight:
    """A batch published and committing on a thread of its own while the next batch is collected and planned.
    Its ids count as held for that next plan; they are recorded once the commit is known to have succeeded."""

    batch: list[Outgoing]
    seen: dict[int, frozenset[bytes]]  # store keys per partition
    spans: dict[int, tuple[int, int]]  # each partition's first and last output offset, filled by delivery
    denied: list[str]  # topics the authorizer refused a record of
    committed: Future  # of CommitDone
    planned_at: float  # perf_counter when the batch's plan began


@dataclass(frozen=True)
class CommitDone:
    perf: float  # time.perf_counter()
    monotonic: float
    wall_ms: int  # clock.now_ms()


class TransactionalPublisher:
    """Begins, fills, commits or aborts the worker's transactions through the clients' producer. A batch whose
    transaction was aborted comes back as None: the caller reads it again from the committed offsets."""

    def __init__(
        self,
        config: WorkerConfig,
        clients: Clients,
        metrics: WorkerMetrics,
        summary: RunSummary,
        crashpoint: CrashPoint,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.summary = summary
        self.dead_letter_partitions = 0  # set once the topics are read
        self.duplicates_partitions = 0
        self._clients = clients
        self._crashpoint = crashpoint
        self._transaction_began = 0.0
        self.commit_requested = False  # whether the transaction in hand has asked its coordinator to commit
        self.open = False  # a transaction begun and not yet committed or aborted: a stop waits for it

    def publish(self, batch: list[Outgoing], planned_at: float) -> InFlight | None:
        """Begin a transaction, produce the batch and send its input offsets, then commit on a thread of its own;
        None when the transaction was aborted."""
        config, producer = self.config, self._clients.producer
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
            self.open = True
            producer.begin_transaction()
            self._transaction_began = time.monotonic()
            self.commit_requested = False
            offsets = [
                TopicPartition(config.input_topic, out.plan.partition, out.plan.next_input_offset) for out in batch
            ]
            # the offsets go to the group coordinator (two broker round trips, GIL released) while this thread
            # produces: a transaction takes its offsets at any point before the commit
            offsets_sent = in_background(
                producer.send_offsets_to_transaction,
                offsets,
                self._clients.consumer.consumer_group_metadata(),
                config.kafka.timeout_s,
                name="send-offsets",
            )
            try:
                self._produce_batch(batch, remember, note_denied)
                self._crashpoint("after-produce")
            finally:
                sent_error = self._offsets_outcome(offsets_sent)  # nothing else may touch the transaction meanwhile
            if sent_error is not None:
                raise sent_error
        except KafkaException as error:
            try:
                self._transaction_failed(error, denied)
            finally:
                self.open = False
            return None
        self.commit_requested = True
        return InFlight(
            batch=batch,
            seen={out.plan.partition: frozenset(out.plan.keys) for out in batch},
            spans=spans,
            denied=denied,
            committed=in_background(self._commit, name="commit"),
            planned_at=planned_at,
        )

    def settle(self, in_flight: InFlight) -> CommitDone | None:
        """Wait for a batch's commit; None when it failed and was aborted."""
        try:
            done: CommitDone = in_flight.committed.result()
        except KafkaException as error:
            try:
                self._transaction_failed(error, in_flight.denied)
            finally:
                self.open = False
            return None
        self.open = False
        self.summary.commits += 1
        self.summary.last_committed_at = done.monotonic
        self.metrics.last_commit.set(done.wall_ms / 1000)
        self.metrics.transactions.labels("committed").inc()
        self._crashpoint("after-commit")
        self._observe_latency(in_flight.batch, done.wall_ms)
        return done

    def _observe_latency(self, batch: list[Outgoing], committed_ms: int) -> None:
        for out in batch:
            if out.plan.timestamps_ms:
                self.metrics.latency.observe(max(committed_ms - min(out.plan.timestamps_ms), 0) / 1000)

    def _transaction_failed(self, error: KafkaException, denied: list[str]) -> None:
        """Abort the failed transaction, or raise what ends the run or restarts the clients."""
        config, kafka_error = self.config, error.args[0]
        if denied or is_authorization_error(kafka_error):
            with suppress(KafkaException):  # nothing of it may become visible; a fatal producer cannot abort
                self._clients.producer.abort_transaction(config.kafka.timeout_s)
            topic = denied[0] if denied else config.output_topic or config.input_topic  # an observer has no output
            raise self._clients.denied(kafka_error, topic) from error
        if kafka_error.fatal():
            raise self._fatal(error) from error
        if not kafka_error.txn_requires_abort() and not is_transient(error):
            raise BrokerError(f"transaction failed: {kafka_error.str()}") from error
        log.warning("transaction aborted (%s): re-reading the batch", kafka_error.str())
        self._abort()

    def _abort(self) -> None:
        timeout_s, clients = self.config.kafka.timeout_s, self._clients
        try:
            clients.retrying(lambda: clients.producer.abort_transaction(timeout_s), "aborting the transaction")
        except KafkaException as error:
            if not error.args[0].fatal():
                raise BrokerError(f"cannot abort the transaction: {error.args[0].str()}") from error
            raise self._fatal(error) from error
        self.summary.aborts += 1
        self.metrics.transactions.labels("aborted").inc()

    def _fatal(self, error: KafkaException) -> Exception:
        # outliving transaction.timeout.ms, the coordinator aborts it and bumps the epoch itself: not a twin's fence
        may_have_timed_out = time.monotonic() - self._transaction_began >= self.config.transaction_timeout_ms / 1000
        return fatal_producer_error(
            error, may_have_timed_out=may_have_timed_out, commit_requested=self.commit_requested
        )

    def _offsets_outcome(self, offsets_sent: Future) -> BaseException | None:
        """What sending the offsets raised, waiting past its own timeout for a bounded time: after a broker
        fault librdkafka can block in send_offsets_to_transaction for good. The blocked thread is then left
        behind with its producer, and the clients are restarted."""
        try:
            return offsets_sent.exception(timeout=self.config.kafka.timeout_s + OFFSETS_HANG_MARGIN_S)
        except FutureTimeoutError:
            hung = KafkaException(KafkaError(KafkaError._TIMED_OUT, "sending the offsets to the transaction hung"))
            raise ClientsLost(hung, commit_requested=False, hung=True) from None

    def _produce_batch(self, batch: list[Outgoing], remember: Callable, note_denied: Callable) -> None:
        """Produce every plan's records, dead letters and dropped copies; ``remember`` hears each partition's
        first and last, ``note_denied`` each dead letter's and copy's failure."""
        config, producer = self.config, self._clients.producer
        output_topic = config.output_topic
        for out in batch:
            if config.observe:  # it publishes nothing: only the copies it drops, to its own topic
                self._produce_copies(out, note_denied)
                continue
            plan = out.plan
            partition, last = plan.partition, len(plan.ids) - 1
            headers = list(map(Message.headers, out.records))
            if last > 0:  # the first one reports its offset too: the store keeps where each id was published
                produce_when_room(
                    producer,
                    output_topic,
                    plan.values[0],
                    plan.ids[0],
                    partition,
                    on_delivery=remember,
                    timestamp=plan.timestamps_ms[0],
                    headers=headers[0],
                )
            produce_all(
                producer, output_topic, partition,
                plan.values[1:last], plan.ids[1:last], plan.timestamps_ms[1:last], headers[1:last],
            )  # fmt: skip
            if last >= 0:  # the last one reports its output offset: the store's covered offset
                produce_when_room(
                    producer,
                    output_topic,
                    plan.values[last],
                    plan.ids[last],
                    partition,
                    on_delivery=remember,
                    timestamp=plan.timestamps_ms[last],
                    headers=headers[last],
                )
            for message, reason in out.dead:
                produce_when_room(
                    producer,
                    config.dead_letter_topic,
                    message.value(),
                    message.key(),
                    partition % self.dead_letter_partitions,
                    on_delivery=note_denied,
                    headers=dead_letter_headers(message, reason),
                )
            for message, target in out.forward:  # in the batch's transaction: sent on exactly once
                timestamp = message.timestamp()[1]
                produce_when_room(
                    producer,
                    config.input_topic,
                    message.value(),
                    message.key(),
                    target,
                    on_delivery=note_denied,
                    headers=message.headers(),
                    **({"timestamp": timestamp} if timestamp > 0 else {}),
                )
            self._produce_copies(out, note_denied)

    def _produce_copies(self, out: Outgoing, note_denied: Callable) -> None:
        for copy in out.copies:
            message = copy.message
            timestamp = message.timestamp()[1]
            produce_when_room(
                self._clients.producer,
                self.config.duplicates_topic,
                message.value(),
                message.key(),
                out.plan.partition % self.duplicates_partitions,
                on_delivery=note_denied,
                headers=copy.headers,
                **({"timestamp": timestamp} if timestamp > 0 else {}),
            )

    def _commit(self) -> CommitDone:
        # a commit that timed out resumes when called again; one that needs an abort is the caller's
        self._clients.retrying(
            lambda: self._clients.producer.commit_transaction(self.config.kafka.timeout_s),
            "committing the transaction",
            transient=lambda error: is_transient(error) and not error.args[0].txn_requires_abort(),
        )
        return CommitDone(perf=time.perf_counter(), monotonic=time.monotonic(), wall_ms=clock.now_ms())


def in_background(call: Callable, *args: object, name: str) -> Future:
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


def dead_letter_headers(message: Message, reason: DeadLetter) -> list[tuple[str, bytes]]:
    return [
        *(message.headers() or []),
        ("dedupectl.reason", reason.reason.value.encode()),
        ("dedupectl.detail", reason.detail[:500].encode()),
        ("dedupectl.source.topic", message.topic().encode()),
        ("dedupectl.source.partition", str(message.partition()).encode()),
        ("dedupectl.source.offset", str(message.offset()).encode()),
    ]

"""The worker's Kafka clients (the transactional producer, the group's consumer), their retries, and what their
failures mean: transient (retried), operator-fixable (a named error), fenced, or lost (restarted in process)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from itertools import repeat
from operator import length_hint

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from dedupectl.config import WorkerConfig
from dedupectl.errors import BrokerError, DedupeError, FencedError
from dedupectl.kafka_clients import exactly_once_settings, flush_at_exit
from reconcile.broker_retry import (
    RetryPolicy,
    describe,
    is_fence,
    is_replaceable_producer_error,
    is_transient,
    kafka_error_of,
    with_retries,
)
from reconcile.kafka import FETCH_QUEUE_BACKOFF_MS, build_client, is_authorization_error, permission_denied

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

CONSUME_CHUNK = 5_000  # messages asked of librdkafka per call: bounds how far a batch overshoots its byte cap
# clients restarted after fatal errors this often are fighting something a process restart will not fix
CLIENT_RESTARTS_MAX = 3
CLIENT_RESTARTS_WINDOW_S = 600.0


class ClientsLost(Exception):
    """The transactional producer failed fatally without another instance having taken over: the worker's
    Kafka clients and stores are restarted in process, as a process restart would."""

    def __init__(self, error: KafkaException, commit_requested: bool, *, hung: bool = False) -> None:
        super().__init__(describe(error))
        self.error = error
        self.commit_requested = commit_requested  # False: the failed transaction can only have been aborted
        self.hung = hung  # a call into the producer never returned: the producer may not be touched again


def fatal_producer_error(error: KafkaException, *, may_have_timed_out: bool, commit_requested: bool) -> Exception:
    """What a fatal producer error becomes: fenced (the run ends) only when another instance took over;
    otherwise the clients are restarted in process (``ClientsLost``), unless the error is one the operator
    must fix (authorization, an unknown topic), which ends the run.

    A transaction older than transaction.timeout.ms (``may_have_timed_out``) may have been aborted by its
    coordinator during an outage, which reads as a fence too: that is a broker fault, not a twin."""
    kafka_error = kafka_error_of(error)
    detail = str(error) if kafka_error is None else kafka_error.str()
    if kafka_error is not None and is_fence(kafka_error) and not may_have_timed_out:
        return FencedError(
            f"this worker was fenced ({detail})",
            "another worker with the same worker_id took over; stop one of them",
        )
    if kafka_error is not None and (is_fence(kafka_error) or is_replaceable_producer_error(error)):
        return ClientsLost(error, commit_requested)
    return BrokerError(
        f"the transactional producer failed ({detail})",
        "restart the worker (a supervisor does): recovery makes its stores agree with the output topic",
    )


def produce_when_room(producer: Producer, topic: str, *args, **kwargs) -> None:
    while True:
        try:
            producer.produce(topic, *args, **kwargs)
            return
        except BufferError:  # local queue full: let librdkafka deliver some, then retry
            producer.poll(0.05)


def produce_all(
    producer: Producer,
    topic: str,
    partition: int,
    values: list[bytes | None],
    keys: list[bytes],
    timestamps_ms: list[int],
    headers: list,
) -> None:
    """Produce records to one partition, parallel lists, in order: a C-level loop with positional arguments
    (keywords cost the client a dictionary per record). When the local queue is full, the record refused
    waits for room, and the loop goes on from the next one."""
    start, count, produce = 0, len(values), producer.produce
    while start < count:
        rest = iter(values[start:])
        try:  # produce's positional arguments: topic, value, key, partition, callback, on_delivery, timestamp, headers
            deque(
                map(produce, repeat(topic), rest, keys[start:], repeat(partition), repeat(None), repeat(None),
                    timestamps_ms[start:], headers[start:]),
                0,
            )  # fmt: skip
            return
        except BufferError:  # map took the refused record's value from ``rest``, and nothing past it
            refused = count - length_hint(rest) - 1
            produce_when_room(
                producer, topic, values[refused], keys[refused], partition,
                timestamp=timestamps_ms[refused], headers=headers[refused],
            )  # fmt: skip
            start = refused + 1


class Clients:
    """The producer and the consumer in use (each replaced whole after a fatal error), and the retry bound."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self._retry = RetryPolicy(bound_s=config.broker_retry_for)
        self._restarts: list[float] = []

    def retrying(self, call, what: str, **options):
        """``with_retries`` within ``--broker-retry-for``."""
        return with_retries(call, what, self._retry, **options)

    def start(self) -> None:
        """A new producer (which fences any earlier one and settles its last transaction), then a consumer."""
        self.producer = self._start_producer()
        self.consumer = self._start_consumer()

    def _start_producer(self) -> Producer:
        """A transactional producer, its transactions initialised: this fences any earlier instance of this
        worker and completes or aborts whatever transaction it left open, before it returns."""
        return self.retrying(
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
                raise self.denied(error.args[0]) from error
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
                defaults={
                    "auto.offset.reset": "earliest",
                    "fetch.max.bytes": 64 * 1024 * 1024,
                    "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
                },
                owned=owned,
            ),
        )

    def denied(self, error: KafkaError, topic: str | None = None) -> DedupeError:
        """The missing ACL behind an authorization failure, named for the operator (the worker then exits)."""
        config, code = self.config, error.code()
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return permission_denied("Read", "group", config.group_id, error.str())
        if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            prefix = config.transactional_id_prefix  # one prefixed ACL covers every worker of the group
            return permission_denied("Write", "transactional id", config.transactional_id, error.str(), prefix=prefix)
        if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            return permission_denied("IdempotentWrite", "cluster", "kafka-cluster", error.str())
        if topic is not None:  # a refused record: its topic is one the worker writes
            return permission_denied("Write", "topic", topic, error.str())
        return permission_denied("Read", "topic", config.input_topic, error.str())

    def records_only(self, got: list[Message]) -> list[Message]:
        """The records among consumer events; a fatal one ends the worker, others are logged."""
        records = []
        for message in got:
            error = message.error()
            if error is None:
                records.append(message)
                continue
            if is_authorization_error(error):  # the group or the input: nothing to consume until an ACL is added
                raise self.denied(error)
            # a static member replaced by a twin with the same worker_id surfaces as _FATAL, and
            # error.fatal() is False for it: without this the fenced worker would idle holding its stores
            if error.fatal() or error.code() == KafkaError._FATAL:
                raise FencedError(
                    f"this worker was fenced out of its group ({error.str()})",
                    "another worker with the same worker_id is running: give each worker its own",
                )
            log.warning("consumer: %s", error.str())
        return records

    def poll_dropping(self, seconds: float) -> None:
        """Serve the consumer's group protocol (assignments run here) for ``seconds``; the records it returns are
        dropped, as the seek that follows reads them again."""
        deadline = time.monotonic() + max(seconds, 0.2)
        while (left := deadline - time.monotonic()) > 0:
            self.records_only(self.consumer.consume(num_messages=CONSUME_CHUNK, timeout=left))  # errors still count

    def committed(self, partitions: Iterable[int]) -> list[TopicPartition]:
        """The group's committed input offsets of these partitions."""
        held = [TopicPartition(self.config.input_topic, number) for number in partitions]
        return self.consumer.committed(held, timeout=self.config.kafka.timeout_s) if held else []

    def count_restart(self, reason: str) -> None:
        """Too many client restarts in a row is a fight a process restart will not win either: end the run."""
        now = time.monotonic()
        recent = [at for at in self._restarts if now - at < CLIENT_RESTARTS_WINDOW_S]
        if len(recent) >= CLIENT_RESTARTS_MAX:
            raise BrokerError(
                f"the Kafka clients failed fatally {len(recent) + 1} times within {CLIENT_RESTARTS_WINDOW_S:.0f}s "
                f"(last: {reason})",
                "check the brokers' logs and that no other worker runs with this worker_id; "
                "a restart resumes exactly where the worker stopped",
            )
        self._restarts = [*recent, now]

    def discard_producer(self, *, touch: bool) -> None:
        """Destroy the failed producer before its successor exists: nothing it still holds may reach a broker
        after the new producer has settled the last transaction. One blocked in a call is only dropped (the
        new producer's initialisation fences it)."""
        producer, self.producer = self.producer, None
        if not touch:
            return
        try:
            producer.purge()
            producer.close()
        except (KafkaException, RuntimeError) as error:
            log.info("closing the failed producer: %s", describe(error))

    def leave_group(self) -> None:
        """Close the consumer after a fatal producer error; a static member rejoins with the same assignment."""
        consumer, self.consumer = self.consumer, None
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as error:
            log.info("closing the consumer: %s", describe(error))

    def close_consumer(self) -> None:
        """At the end of the run: the group's revocation closes the stores the consumer held."""
        if self.consumer is None:
            return
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError, OSError) as error:  # OSError: a failed volume, from on_revoke
            log.warning("closing the consumer: %s", error)

    def flush_producer(self) -> None:
        if self.producer is not None:
            flush_at_exit(self.producer, self.config.kafka.timeout_s)

"""Riding out transient Kafka faults: which errors go away by themselves, and retrying with backoff.

A broker restarting, a coordinator moving or loading, a request timing out: these are retried with
exponential backoff and full jitter for a bounded time, each retry logged once, before anything is turned
into an exit. Errors that will not go away (fenced, not authorized, an unknown topic) are raised at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from reconcile.errors import BrokerError, BrokerUnavailableError
from store.errors import DedupeError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Never retried: another process took over, or the operator must change something first.
PERMANENT_CODES = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError._FENCED,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    }
)
# Transient although librdkafka does not always flag them retriable (Kafka documents them as retriable).
TRANSIENT_CODES = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._DESTROY,
        KafkaError._RESOLVE,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._WAIT_COORD,
        KafkaError.CONCURRENT_TRANSACTIONS,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
    }
)


FENCE_CODES = frozenset(
    {KafkaError.PRODUCER_FENCED, KafkaError._FENCED, KafkaError.FENCED_INSTANCE_ID, KafkaError.INVALID_PRODUCER_EPOCH}
)


def kafka_error_of(error: BaseException) -> KafkaError | None:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return None


def is_fence(error: KafkaError) -> bool:
    """Whether a newer instance of this worker (or a twin with its worker_id) took over."""
    return error.code() in FENCE_CODES


def is_replaceable_producer_error(error: BaseException) -> bool:
    """A fatal producer error that a new producer clears: not a fence by another instance, nothing the
    operator must change (librdkafka can turn a transient fault into a fatal state, e.g. INVALID_TXN_STATE)."""
    found = kafka_error_of(error)
    return found is not None and found.fatal() and not is_fence(found) and found.code() not in PERMANENT_CODES


def is_transient_kafka_error(error: KafkaError) -> bool:
    if error.code() in PERMANENT_CODES:
        return False
    return error.code() in TRANSIENT_CODES or error.retriable()


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is worth retrying: a transient KafkaException or an unanswered connection."""
    if isinstance(error, BrokerUnavailableError):
        return True
    found = kafka_error_of(error)
    return found is not None and not found.fatal() and is_transient_kafka_error(found)


def describe(error: BaseException) -> str:
    found = kafka_error_of(error)
    if found is not None:
        return found.str()
    return error.message if isinstance(error, DedupeError) else str(error)


@dataclass(frozen=True)
class RetryPolicy:
    """How long transient faults are ridden out (``bound_s``), and the backoff between tries."""

    bound_s: float = 300.0
    first_delay_s: float = 0.5
    max_delay_s: float = 10.0
    # what to do once the bound runs out: a read-only command's caller has no worker to restart
    advice: str = "check the brokers and the network; a restart resumes exactly where the worker stopped"

    def delay(self, attempt: int, left_s: float) -> float:
        # full jitter: workers that lost the same broker do not all come back in the same instant
        return min(random.uniform(0, min(self.max_delay_s, self.first_delay_s * 2**attempt)), max(left_s, 0.0))


def with_retries(
    call: Callable[[], T],
    what: str,
    policy: RetryPolicy,
    *,
    transient: Callable[[BaseException], bool] = is_transient,
    sleep: Callable[[float], None] = time.sleep,
    service: str = "Kafka",
    error: type[DedupeError] = BrokerError,
) -> T:
    """``call()``, retried while it fails with a transient error and the bound lasts. When the bound runs out
    the last error is raised as ``error`` (a BrokerError unless another ``service`` is called) that says so;
    other errors are raised as they are."""
    deadline: float | None = None
    attempt = 0
    while True:
        try:
            return call()
        except Exception as failure:
            if not transient(failure):
                raise
            now = time.monotonic()
            deadline = now + policy.bound_s if deadline is None else deadline
            if now >= deadline:
                raise error(
                    f"{what}: {service} still failing after {policy.bound_s:g}s of retries ({describe(failure)})",
                    policy.advice,
                ) from failure
            delay = policy.delay(attempt, deadline - now)
            log.warning("%s: %s; retrying in %.1fs (for %.0fs more)", what, describe(failure), delay, deadline - now)
            sleep(delay)
            attempt += 1

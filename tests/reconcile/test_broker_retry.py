"""Which Kafka errors are ridden out, and the bounded backoff that rides them out."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from reconcile.broker_retry import RetryPolicy, is_fence, is_replaceable_producer_error, is_transient, with_retries
from reconcile.errors import BrokerError, BrokerUnavailableError, TopicError


def kafka(code: int, *, fatal: bool = False, retriable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, "test", fatal=fatal, retriable=retriable))


@pytest.mark.parametrize(
    "code", [KafkaError.CONCURRENT_TRANSACTIONS, KafkaError._TIMED_OUT, KafkaError.COORDINATOR_LOAD_IN_PROGRESS]
)
def test_faults_kafka_documents_as_retriable_are_transient(code: int) -> None:
    assert is_transient(kafka(code))


def test_errors_that_will_not_go_away_are_not_transient() -> None:
    assert not is_transient(kafka(KafkaError.TOPIC_AUTHORIZATION_FAILED, retriable=True))
    assert not is_transient(kafka(KafkaError._FENCED, fatal=True))
    assert not is_transient(TopicError("topic 'x' does not exist"))
    assert is_transient(BrokerUnavailableError("cannot reach Kafka"))


def test_a_fatal_error_that_is_no_takeover_is_cleared_by_a_new_producer() -> None:
    assert is_replaceable_producer_error(kafka(KafkaError.INVALID_TXN_STATE, fatal=True))
    assert not is_replaceable_producer_error(kafka(KafkaError._FENCED, fatal=True))
    assert not is_replaceable_producer_error(kafka(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal=True))
    assert is_fence(KafkaError(KafkaError.PRODUCER_FENCED))


def test_transient_failures_are_retried_until_the_call_succeeds() -> None:
    calls, slept = [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise kafka(KafkaError.CONCURRENT_TRANSACTIONS)
        return "done"

    assert with_retries(flaky, "starting", RetryPolicy(bound_s=60), sleep=slept.append) == "done"
    assert len(calls) == 4 and len(slept) == 3
    assert all(0 <= delay <= 10 for delay in slept)


def test_a_permanent_error_is_raised_at_once() -> None:
    calls = []

    def refused() -> None:
        calls.append(1)
        raise kafka(KafkaError.GROUP_AUTHORIZATION_FAILED)

    with pytest.raises(KafkaException):
        with_retries(refused, "joining", RetryPolicy(bound_s=60), sleep=lambda _s: None)
    assert len(calls) == 1


def test_when_the_bound_runs_out_the_error_says_so() -> None:
    def down() -> None:
        raise BrokerUnavailableError("cannot reach Kafka at h:9092 within 15s (refused)")

    with pytest.raises(BrokerError, match=r"reading the topics: Kafka still failing after 0\.2s of retries"):
        with_retries(down, "reading the topics", RetryPolicy(bound_s=0.2, first_delay_s=0.01))

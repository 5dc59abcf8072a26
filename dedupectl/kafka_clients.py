"""The Kafka clients of the worker and of the topic commands: exactly-once client settings, flushing on the
way out, topic creation. Connecting, reachability and partition counts live in ``reconcile.kafka``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewPartitions, NewTopic

from reconcile.errors import TopicError
from reconcile.kafka import KafkaConfig, admin_client, cluster_metadata, librdkafka_log


def exactly_once_settings(kafka: KafkaConfig, defaults: Mapping[str, Any], owned: Mapping[str, Any]) -> dict:
    """A worker client's settings: defaults < the operator's passthrough settings < what exactly-once requires."""
    return {**defaults, **kafka.client_settings(), "logger": librdkafka_log, **owned}


def flush_at_exit(producer: Producer, timeout_s: float) -> int:
    """Flush on the way out; return the messages left undelivered. A producer that met a fatal error (fenced
    by a newer instance) raises it again from the flush that serves its error event: at exit that would
    replace the error being reported (FencedError, exit 2) with a bare KafkaException, so it is only logged."""
    try:
        return producer.flush(timeout_s)
    except KafkaException as error:
        librdkafka_log.warning("flush at exit: %s", error.args[0].str() if error.args else error)
        return len(producer)


@dataclass(frozen=True)
class TopicResult:
    topic: str
    partitions: int
    created: bool


def create_topics(
    kafka: KafkaConfig,
    topics: Sequence[str],
    partitions: int,
    *,
    replication_factor: int = -1,
    topic_config: Mapping[str, str] | None = None,
) -> list[TopicResult]:
    """Create the topics with ``partitions`` each; existing topics are accepted if their count matches."""
    if partitions <= 0:
        raise TopicError(f"--partition-count must be positive, got {partitions}")
    admin = admin_client(kafka)
    existing = cluster_metadata(kafka, admin).topics
    results, wanted = [], []
    for topic in topics:
        if topic in existing and existing[topic].error is None:
            count = len(existing[topic].partitions)
            if count != partitions:
                raise TopicError(
                    f"topic {topic!r} exists with {count} partitions, not {partitions}",
                    "input, output and dead-letter topics need the same partition count",
                )
            results.append(TopicResult(topic, count, created=False))
        else:
            wanted.append(
                NewTopic(topic, partitions, replication_factor=replication_factor, config=dict(topic_config or {}))
            )
    if wanted:
        futures = admin.create_topics(wanted, operation_timeout=kafka.timeout_s, request_timeout=kafka.timeout_s)
        for topic, future in futures.items():
            try:
                future.result()
            except KafkaException as error:
                kafka_error: KafkaError = error.args[0]
                if kafka_error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicError(f"cannot create topic {topic!r}: {kafka_error.str()}") from error
            results.append(TopicResult(topic, partitions, created=True))
    return sorted(results, key=lambda result: topics.index(result.topic))


def grow_partitions(kafka: KafkaConfig, topic: str, count: int) -> bool:
    """Give ``topic`` ``count`` partitions if it has fewer, and wait until the cluster's metadata shows them;
    whether partitions were added (a topic that already has ``count`` is left as it is)."""
    admin = admin_client(kafka)
    current = len(cluster_metadata(kafka, admin).topics[topic].partitions)
    if current >= count:
        return False
    futures = admin.create_partitions(
        [NewPartitions(topic, count)], operation_timeout=kafka.timeout_s, request_timeout=kafka.timeout_s
    )
    try:
        futures[topic].result()
    except KafkaException as error:
        kafka_error: KafkaError = error.args[0]
        raise TopicError(
            f"cannot give topic {topic!r} {count} partitions: {kafka_error.str()}",
            "check the principal may Alter the topic, then run the command again",
        ) from error
    deadline = time.monotonic() + kafka.timeout_s
    while len(cluster_metadata(kafka, admin).topics[topic].partitions) < count:
        if time.monotonic() > deadline:
            raise TopicError(f"topic {topic!r} does not show {count} partitions yet", "run the command again")
        time.sleep(0.2)
    return True

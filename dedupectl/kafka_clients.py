"""Kafka helpers: client construction, reachability and topic checks, topic creation.

librdkafka's own log lines go to the ``dedupectl.librdkafka`` logger (shown with --log-level debug): an
unreachable broker should read as one clear error, not a screen of connection retries.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from dedupectl.config import KafkaConfig
from dedupectl.errors import BrokerError, ConfigError, TopicError

librdkafka_log = logging.getLogger("dedupectl.librdkafka")


def _settings(kafka: KafkaConfig, extra: Mapping[str, Any]) -> dict[str, Any]:
    return {**kafka.client_settings(), "logger": librdkafka_log, **extra}


def build_client(kind: type, settings: Mapping[str, Any]) -> Any:
    """Construct a Consumer, Producer or AdminClient; a setting librdkafka rejects is a ConfigError."""
    try:
        return kind(dict(settings))
    except KafkaException as error:
        detail = error.args[0].str() if error.args else str(error)
        raise ConfigError(
            f"invalid Kafka client setting: {detail}", "fix it in [kafka] / -X / DEDUPECTL_KAFKA_*"
        ) from error


def admin_client(kafka: KafkaConfig) -> AdminClient:
    return build_client(AdminClient, _settings(kafka, {}))


def make_consumer(kafka: KafkaConfig, **extra: Any) -> Consumer:
    return build_client(Consumer, _settings(kafka, extra))


def flush_at_exit(producer: Producer, timeout_s: float) -> int:
    """Flush on the way out; return the messages left undelivered. A producer that met a fatal error (fenced
    by a newer instance) raises it again from the flush that serves its error event: at exit that would
    replace the error being reported (FencedError, exit 2) with a bare KafkaException, so it is only logged."""
    try:
        return producer.flush(timeout_s)
    except KafkaException as error:
        librdkafka_log.warning("flush at exit: %s", error.args[0].str() if error.args else error)
        return len(producer)


def unreachable(kafka: KafkaConfig, detail: str) -> BrokerError:
    return BrokerError(
        f"cannot reach Kafka at {kafka.bootstrap_servers} within {kafka.timeout_s:g}s ({detail})",
        "check bootstrap_servers, the network and the broker (`dedupectl dev broker status` for the local one)",
    )


def cluster_metadata(kafka: KafkaConfig, admin: AdminClient | None = None) -> ClusterMetadata:
    """Metadata for all topics, or a BrokerError within ``kafka.timeout_s``."""
    admin = admin or admin_client(kafka)
    try:
        return admin.list_topics(timeout=kafka.timeout_s)
    except KafkaException as error:
        raise unreachable(kafka, error.args[0].str() if error.args else str(error)) from error


def partition_counts(kafka: KafkaConfig, topics: Sequence[str], admin: AdminClient | None = None) -> dict[str, int]:
    """Partition count of each topic; a TopicError names the first one missing."""
    metadata = cluster_metadata(kafka, admin)
    counts = {}
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise TopicError(
                f"topic {topic!r} does not exist on {kafka.bootstrap_servers}",
                "create it (`dedupectl topics create`) or fix the topic name",
            )
        counts[topic] = len(found.partitions)
    return counts


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
        raise TopicError(f"--partitions must be positive, got {partitions}")
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

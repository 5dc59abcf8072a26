"""How every part of dedupectl connects to Kafka: the connection settings, client construction, reachability
and partition counts. Reconcile is the lowest layer that reads a topic, so this lives here and the worker,
the jobs and the CLI build on it.

librdkafka's own log lines go to the ``dedupectl.librdkafka`` logger (shown with --log-level debug): an
unreachable broker should read as one clear error, not a screen of connection retries.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from reconcile.errors import BrokerUnavailableError, TopicError
from store.errors import ConfigError

librdkafka_log = logging.getLogger("dedupectl.librdkafka")

_SECRET_KEY = re.compile(r"(password|secret|token|\.pem$|oauthbearer\.config|sasl\.jaas)", re.IGNORECASE)
REDACTED = "***"


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` with every secret-looking value replaced by ``***``."""
    return {key: (REDACTED if _SECRET_KEY.search(key) else value) for key, value in settings.items()}


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str
    settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    timeout_s: float = 15.0

    def client_settings(self) -> dict[str, Any]:
        """Settings shared by every client: bootstrap plus the user's passthrough settings."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.settings}

    def describe(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "settings": redact(self.settings)}


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


def unreachable(kafka: KafkaConfig, detail: str) -> BrokerUnavailableError:
    return BrokerUnavailableError(
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

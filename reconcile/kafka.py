"""How every part of dedupectl connects to Kafka: the connection settings, client construction, reachability
and partition counts. Reconcile is the lowest layer that reads a topic, so this lives here and the worker,
the jobs and the CLI build on it.

librdkafka's own log lines go to the ``dedupectl.librdkafka`` logger (shown with --log-level debug): an
unreachable broker should read as one clear error, not a screen of connection retries.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from reconcile.errors import AuthenticationError, BrokerUnavailableError, PermissionDeniedError, TopicError
from reconcile.handshake import SECURITY_DOC, HandshakeWatch
from store.errors import ConfigError

librdkafka_log = logging.getLogger("dedupectl.librdkafka")

_SECRET_KEY = re.compile(r"(password|secret|token|\.pem$|oauthbearer\.config|sasl\.jaas)", re.IGNORECASE)
REDACTED = "***"
HANDSHAKE_CHECK_S = 0.5  # how often a call waiting for a broker looks for a refused handshake
# librdkafka stops fetching a partition while its queue holds queued.min.messages (counted over the one queue
# every partition of the consumer feeds), then waits this long before it looks again; at its default of a
# second a consumer that keeps up drains the queue before the wait ends and stands idle
FETCH_QUEUE_BACKOFF_MS = 10


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


class _CheckedAdmin(AdminClient):
    """An AdminClient that watches its handshakes with the brokers (``reconcile.handshake``): the call that
    failed meanwhile only says the broker was not reached."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.watch = HandshakeWatch()
        super().__init__({**settings, **self.watch.settings()})


def admin_client(kafka: KafkaConfig) -> AdminClient:
    return build_client(_CheckedAdmin, _settings(kafka, {}))


def rejected(kafka: KafkaConfig, admin: AdminClient) -> AuthenticationError | None:
    """The broker refused this client's credentials or TLS: retrying will not help, the operator must act."""
    if not isinstance(admin, _CheckedAdmin):
        return None
    admin.poll(0.1)  # serves the error events and log lines of the failed call
    return None if admin.watch.fault is None else admin.watch.fault.error(kafka.bootstrap_servers)


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
    deadline = time.monotonic() + kafka.timeout_s
    while True:  # in slices: a refused handshake is reported at once, not after the whole timeout
        left = deadline - time.monotonic()
        try:
            return admin.list_topics(timeout=max(min(HANDSHAKE_CHECK_S, left), 0.01))
        except KafkaException as error:
            refused = rejected(kafka, admin)
            if refused is not None:
                raise refused from error
            if time.monotonic() >= deadline:
                raise unreachable(kafka, error.args[0].str() if error.args else str(error)) from error


# What each authorization failure is about, for the one line that names the missing ACL.
AUTHORIZATION_RESOURCES = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}


def is_authorization_error(error: KafkaError | None) -> bool:
    return error is not None and error.code() in AUTHORIZATION_RESOURCES


def permission_denied(
    operation: str, resource: str, name: str, detail: str, *, prefix: str | None = None
) -> PermissionDeniedError:
    """The one-line error of a missing ACL: ``operation`` (Read, Write…) on ``resource`` ``name``; with a
    ``prefix``, the ACL to grant is the prefixed one that covers ``name`` and its siblings."""
    grant = f"{resource} {name!r}" if prefix is None else f"{resource}s prefixed {prefix!r} (a prefixed ACL)"
    return PermissionDeniedError(
        f"Kafka denied this client {operation} on {resource} {name!r} ({detail})",
        f"grant its principal an ACL allowing {operation} on {grant} (the ACLs of each command: "
        f"{SECURITY_DOC}), then run it again",
    )


def partition_counts(
    kafka: KafkaConfig,
    topics: Sequence[str],
    admin: AdminClient | None = None,
    needs: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Partition count of each topic; a TopicError names the first one missing, a PermissionDeniedError the
    first one this principal may not see (with the operation it ``needs`` there: Read, Write; else Describe)."""
    admin = admin or admin_client(kafka)
    metadata = cluster_metadata(kafka, admin)
    counts = {}
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            _raise_missing(kafka, topic, (needs or {}).get(topic, "Describe"))
        counts[topic] = len(found.partitions)
    return counts


def _raise_missing(kafka: KafkaConfig, topic: str, operation: str) -> None:
    """A topic absent from the cluster's listing: missing, or hidden by the authorizer (asked by name, Kafka
    tells the two apart; never by a client that would have a broker auto-create it)."""
    probe = build_client(AdminClient, _settings(kafka, {"allow.auto.create.topics": False}))
    try:
        error = probe.list_topics(topic, timeout=kafka.timeout_s).topics[topic].error
    except (KafkaException, KeyError):
        error = None
    if is_authorization_error(error):
        raise permission_denied(operation, "topic", topic, error.str())
    raise TopicError(
        f"topic {topic!r} does not exist on {kafka.bootstrap_servers}",
        "create it (`dedupectl topics create`) or fix the topic name",
    )

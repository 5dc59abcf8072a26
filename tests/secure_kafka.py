"""Users and ACLs on the secured test broker: what each dedupectl role is granted, given and taken away.

The ACL sets here are the ones docs/reference/security.md documents; the secured tests prove each set is
enough (the command works) and that each of its ACLs is needed (without it the command fails naming it).
"""

from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from dedupectl.acls import role_acls as product_role_acls
from dedupectl.config import KafkaConfig
from dedupectl.devbroker import LocalBroker
from dedupectl.devbroker_security import add_scram_user
from dedupectl.kafka_clients import create_topics

RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional-id": ResourceType.TRANSACTIONAL_ID,
    "cluster": ResourceType.BROKER,  # the cluster resource (librdkafka calls it BROKER)
}


@dataclass(frozen=True)
class Acl:
    """Allow ``operation`` (READ, WRITE, DESCRIBE…) on a resource, named literally or by prefix."""

    operation: str
    resource: str
    name: str
    prefixed: bool = False

    def binding(self, principal: str) -> AclBinding:
        pattern = ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL
        return AclBinding(
            RESOURCES[self.resource], self.name, pattern, principal, "*",
            AclOperation[self.operation], AclPermissionType.ALLOW,
        )  # fmt: skip

    def filter(self, principal: str) -> AclBindingFilter:
        pattern = ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL
        return AclBindingFilter(
            RESOURCES[self.resource], self.name, pattern, principal, "*",
            AclOperation[self.operation], AclPermissionType.ALLOW,
        )  # fmt: skip

    def __str__(self) -> str:
        return f"{self.operation} on {self.resource} {self.name}{'*' if self.prefixed else ''}"


def role_acls(role: str, **names: str) -> list[Acl]:
    """A role's ACLs as ``dedupectl security grant`` creates them (``dedupectl.acls``, the table security.md
    is checked against), in the table's order."""
    return [
        Acl(acl.operation.upper(), acl.resource.replace(" ", "-"), acl.name, acl.prefixed)
        for acl in product_role_acls(role, "User:tests", names)
    ]


def worker_acls(input_topic: str, output_topic: str, dead_letter_topic: str, group_id: str) -> list[Acl]:
    """The worker's least privilege: read the input, read (recovery) and write the output, write dead letters,
    its group, and its transactional ids (``dedupectl-<group_id>-<worker_id>``: a prefix for all workers)."""
    names = {"input_topic": input_topic, "output_topic": output_topic, "dead_letter_topic": dead_letter_topic}
    return role_acls("worker", **names, group=group_id)


def reconcile_acls(output_topic: str) -> list[Acl]:
    """Reconcile reads the output topic, nothing else on Kafka."""
    return role_acls("reconcile", output_topic=output_topic)


def status_acls(input_topic: str, output_topic: str, group_id: str) -> list[Acl]:
    """status describes both topics (partition counts, end offsets) and the workers' group."""
    return role_acls("status", input_topic=input_topic, output_topic=output_topic, group=group_id)


def audit_acls(input_topic: str, output_topic: str) -> list[Acl]:
    """audit reads both topics (the driver for offsets and times, Spark's executors for the records)."""
    return role_acls("audit", input_topic=input_topic, output_topic=output_topic)


def replay_acls(input_topic: str, output_topic: str) -> list[Acl]:
    """replay reads both topics, reads the worker group's committed offsets (ids past them are not consumed
    yet) and re-drives what the output lacks into the input (idempotent producer)."""
    group = f"dedupectl.{input_topic}"  # the worker's default group_id
    return role_acls("replay", input_topic=input_topic, output_topic=output_topic, group=group)


def rebuild_acls(input_topic: str, output_topic: str) -> list[Acl]:
    """rebuild reads the output; of the input it needs only the partition count."""
    return role_acls("rebuild", input_topic=input_topic, output_topic=output_topic)


@dataclass(frozen=True)
class SecureUser:
    """A SCRAM user of the secured broker, with the client settings that connect as it."""

    broker: LocalBroker
    name: str
    password: str

    @property
    def principal(self) -> str:
        return f"User:{self.name}"

    def settings(self) -> dict[str, str]:
        assert self.broker.security is not None
        return self.broker.security.sasl_settings(self.name, self.password)

    def kafka(self, timeout_s: float = 10.0) -> KafkaConfig:
        return KafkaConfig(self.broker.bootstrap_servers, MappingProxyType(self.settings()), timeout_s)

    def env(self) -> dict[str, str]:
        """The same connection as DEDUPECTL_* variables: the password never on a command line."""
        return {
            "DEDUPECTL_BOOTSTRAP_SERVERS": self.broker.bootstrap_servers,
            **{"DEDUPECTL_KAFKA_" + key.upper().replace(".", "_"): value for key, value in self.settings().items()},
        }


def new_user(broker: LocalBroker, name: str) -> SecureUser:
    user = SecureUser(broker, name, secrets.token_urlsafe(16))
    add_scram_user(admin_settings(broker), user.name, user.password)
    return user


def admin_settings(broker: LocalBroker) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap_servers, **broker.client_settings()}


def admin_kafka(broker: LocalBroker) -> KafkaConfig:
    return KafkaConfig(broker.bootstrap_servers, MappingProxyType(broker.client_settings()))


def grant(broker: LocalBroker, principal: str, acls: Iterable[Acl]) -> None:
    admin = AdminClient(admin_settings(broker))
    for future in admin.create_acls([acl.binding(principal) for acl in acls], request_timeout=15).values():
        future.result()
    _settle()


def revoke(broker: LocalBroker, principal: str, acls: Sequence[Acl]) -> None:
    admin = AdminClient(admin_settings(broker))
    for future in admin.delete_acls([acl.filter(principal) for acl in acls], request_timeout=15).values():
        future.result()
    _settle()


def _settle() -> None:
    # an ACL change reaches the broker's authorizer through the metadata log a moment after the reply
    time.sleep(0.5)


@dataclass(frozen=True)
class Topics:
    input: str
    output: str
    dead_letter: str

    def produce(self, broker, ids: list[str], bad: int = 0) -> None:
        producer = Producer(admin_settings(broker))
        for message_id in ids:
            producer.produce(self.input, key=message_id, value=json.dumps({"messageId": message_id}))
        for _ in range(bad):
            producer.produce(self.input, value=b"{not json")
        assert producer.flush(30) == 0


def make_topics(broker, prefix: str) -> Topics:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    topics = Topics(name, f"{name}-out", f"{name}.dead-letter")
    create_topics(admin_kafka(broker), [topics.input, topics.output, topics.dead_letter], 2)
    return topics


def run_env(user_env: dict[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DEDUPECTL_")}
    return {**env, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000", **user_env}


def admin_env(broker: LocalBroker) -> dict[str, str]:
    """DEDUPECTL_* variables that connect a command as the broker's super user (through its config file)."""
    assert broker.security is not None
    config = broker.security.write_admin_config(broker.bootstrap_servers)
    return {"DEDUPECTL_BOOTSTRAP_SERVERS": broker.bootstrap_servers, "DEDUPECTL_CONFIG": str(config)}

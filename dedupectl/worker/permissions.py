"""Proving at start, before the first batch, every permission the worker will ever need: a permission
that is missing only when it is first used (Read on the output, used only when recovery has something to
read) would otherwise let the worker publish for hours and stop at its first crash.

Each is proven by the broker itself, never guessed from the ACLs (listing them needs a permission of its
own): Read on the output by a read_committed fetch at its end (which also proves Describe on the output
reader's group), the other topics' and the group's operations by what the broker's authorizer answers for
this principal (``include_authorized_operations``), the transactional id by ``init_transactions``, which
``Clients.start`` runs before the group is joined.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient

from dedupectl.config import WorkerConfig
from reconcile.broker_retry import kafka_error_of
from reconcile.kafka import AUTHORIZATION_RESOURCES, admin_client, permission_denied
from reconcile.scan import OutputReader


def topic_operations(config: WorkerConfig) -> dict[str, tuple[str, ...]]:
    """What the worker does on each topic (Read and Write imply Describe); an observer only reads the input."""
    forwards = config.misrouted == "forward"  # a misrouted record goes on to its own input partition
    operations: dict[str, tuple[str, ...]] = {config.input_topic: ("Read", "Write") if forwards else ("Read",)}
    if not config.observe:
        operations |= {config.output_topic: ("Read", "Write"), config.dead_letter_topic: ("Write",)}
    if config.duplicates_topic is not None:
        operations[config.duplicates_topic] = ("Write",)
    return operations


def prove_permissions(config: WorkerConfig, reader: OutputReader, retrying: Callable) -> None:
    """Raise the one-line PermissionDeniedError of the first permission missing (exit 77)."""
    admin = admin_client(config.kafka)
    topics = retrying(lambda: _topic_operations(config, admin), "reading this client's permissions on the topics")
    for topic, operations in topic_operations(config).items():
        _require(operations, "topic", topic, topics[topic])
    group = retrying(lambda: _group_operations(config, admin), "reading this client's permissions on the group")
    _require(("Read",), "group", config.group_id, group)
    if config.observe:  # it never reads the output: no recovery
        return
    # a fetch at the output's stable end: Read on it, and Describe on the reader's group, proven for real
    end = retrying(lambda: reader.bounds(config.output_topic, 0).end, "reading the output's stable end")
    retrying(lambda: _fetch_at(reader, config.output_topic, end), "reading the output's end")


def _fetch_at(reader: OutputReader, topic: str, offset: int) -> None:
    for _ in reader.scan(topic, 0, offset, stop_offset=offset + 1):
        return


def _require(operations: tuple[str, ...], resource: str, name: str, allowed: set[str] | None) -> None:
    if allowed is None:  # a broker that does not say: the operations are proven when first used
        return
    for operation in operations:
        if operation.upper() not in allowed:
            listed = ", ".join(sorted(allowed)) or "nothing"
            detail = f"the broker's authorizer allows this principal {listed} there"
            raise permission_denied(operation, resource, name, detail)


def _topic_operations(config: WorkerConfig, admin: AdminClient) -> Mapping[str, set[str] | None]:
    names = list(topic_operations(config))
    futures = admin.describe_topics(
        TopicCollection(names), include_authorized_operations=True, request_timeout=config.kafka.timeout_s
    )
    return {name: _allowed(futures[name], "topic", name, "Describe") for name in names}


def _group_operations(config: WorkerConfig, admin: AdminClient) -> set[str] | None:
    futures = admin.describe_consumer_groups(
        [config.group_id], include_authorized_operations=True, request_timeout=config.kafka.timeout_s
    )
    return _allowed(futures[config.group_id], "group", config.group_id, "Read")


def _allowed(future, resource: str, name: str, needed: str) -> set[str] | None:
    """The operations the authorizer allows on one resource (None: the broker did not say); a refusal to
    describe it names what is needed."""
    try:
        described = future.result()
    except KafkaException as error:
        found = kafka_error_of(error)
        if found is not None and found.code() in AUTHORIZATION_RESOURCES:
            raise permission_denied(needed, resource, name, found.str()) from error
        raise
    if described.authorized_operations is None:
        return None
    return {op.name for op in described.authorized_operations if isinstance(op, AclOperation)}

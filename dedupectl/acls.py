"""The least-privilege ACLs of each dedupectl role, in one table: ``dedupectl security grant`` creates them
(and a role's SCRAM credentials), and docs/reference/security.md's table of ACLs per role is checked against
it by a test, so what is granted and what is documented cannot drift apart.

Names in the table are templates: ``<input_topic>``, ``<output_topic>``, ``<dead_letter_topic>``,
``<duplicates_topic>``, ``<group>`` (the worker's group id) and ``<observer_group>`` (an observer's,
``<group>.observe``) are filled in from the command's options. An
optional grant is for a topic the worker uses only when given (``--duplicates-topic``): without its name it
is left out; a grant ``when`` an option is on (``misrouted = "forward"``) is left out unless the names given
hold that option's key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconcile.kafka import KafkaConfig, admin_client, cluster_metadata, permission_denied
from reconcile.scan import SCAN_GROUP
from store.errors import ConfigError

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
MISROUTED_FORWARD = "misrouted_forward"  # in the names given: the worker's config has misrouted = "forward"
SCRAM_ITERATIONS = 8192


@dataclass(frozen=True)
class Grant:
    """One row of the table: allow ``operation`` on ``resource`` ``names`` (templates), and why."""

    operation: str
    resource: str  # topic, group, transactional id
    names: tuple[str, ...]
    why: str
    prefixed: bool = False
    optional: bool = False  # left out when its name is not given
    when: str | None = None  # left out unless the worker's config turns this on (a key of the names given)


# role -> (its label in the docs, its grants); the order is the docs' order
ROLES: dict[str, tuple[str, tuple[Grant, ...]]] = {
    "worker": (
        "worker (`run`)",
        (
            Grant(
                "Read", "topic", ("<input_topic>",), "consume the input (Read implies Describe: partition counts, lag)"
            ),
            Grant("Read", "topic", ("<output_topic>",), "recovery reads the output back after a crash or a lost store"),
            Grant("Write", "topic", ("<output_topic>",), "publish new ids"),
            Grant("Write", "topic", ("<dead_letter_topic>",), "publish unusable records"),
            Grant(
                "Write", "topic", ("<duplicates_topic>",),
                "only with `--duplicates-topic`: publish the dropped copies", optional=True,
            ),
            Grant(
                "Write", "topic", ("<input_topic>",),
                "only with `--misrouted forward` (after a repartition): send misrouted records on to their own "
                "input partition", when=MISROUTED_FORWARD,
            ),
            Grant("Read", "group", ("<group>",), "join the group and commit input offsets inside each transaction"),
            Grant(
                "Write", "transactional id", ("dedupectl-<group>-",),
                "transactions; a restart fences its previous incarnation", prefixed=True,
            ),
            Grant(
                "Describe", "group", (SCAN_GROUP,),
                "the output reader (recovery) never joins a group, but librdkafka looks up the coordinator of its "
                "`group.id`",
            ),
        ),
    ),
    "observer": (
        "observer (`run --observe`)",
        (
            Grant("Read", "topic", ("<input_topic>",), "consume the input, as the worker it observes"),
            Grant("Read", "group", ("<observer_group>",), "its own group: it never joins the worker's"),
            Grant(
                "Write", "transactional id", ("dedupectl-<observer_group>-",),
                "its transactions commit its input offsets (and its dropped copies)", prefixed=True,
            ),
            Grant(
                "Write", "topic", ("<duplicates_topic>",),
                "only with `--duplicates-topic`: publish the dropped copies", optional=True,
            ),
        ),
    ),
    "reconcile": (
        "`reconcile`",
        (
            Grant("Read", "topic", ("<output_topic>",), "read the output"),
            Grant("Describe", "group", (SCAN_GROUP,), "as the worker's output reader"),
        ),
    ),
    "status": (
        "`status`",
        (
            Grant("Describe", "topic", ("<input_topic>", "<output_topic>"), "partition counts and end offsets"),
            Grant(
                "Describe", "group", ("<group>",),
                "the workers' committed offsets and which worker owns each partition",
            ),
        ),
    ),
    "audit": (
        "`audit`",
        (
            Grant(
                "Read", "topic", ("<input_topic>", "<output_topic>"),
                "the driver looks up offsets and times; Spark's Kafka source reads the records",
            ),
        ),
    ),
    "replay": (
        "`replay`",
        (
            Grant("Read", "topic", ("<input_topic>", "<output_topic>"), "as audit"),
            Grant(
                "Write", "topic", ("<input_topic>",),
                "re-drive the missing records through the worker (idempotent producer; without Write on any topic "
                "Kafka refuses it a producer id, reported as this missing Write)",
            ),
            Grant(
                "Describe", "group", ("<group>",),
                "the worker's (`--group-id`): read its committed offsets, as ids past them are not consumed yet, "
                "not missing",
            ),
        ),
    ),
    "rebuild": (
        "`rebuild`",
        (
            Grant("Read", "topic", ("<output_topic>",), "read the partition's output"),
            Grant("Describe", "topic", ("<input_topic>",), "the partition count (the store is named after the input)"),
        ),
    ),
}  # fmt: skip
# ``--role spark``: every Spark job's ACLs at once
ROLE_SETS = {**{role: (role,) for role in ROLES}, "spark": ("audit", "replay", "rebuild")}


@dataclass(frozen=True)
class Acl:
    """One ACL to create: allow ``principal`` ``operation`` on ``resource`` ``name`` (literal or prefixed)."""

    principal: str
    operation: str
    resource: str
    name: str
    prefixed: bool = False

    def __str__(self) -> str:
        pattern = " (prefixed)" if self.prefixed else ""
        return f"allow {self.principal} {self.operation} on {self.resource} {self.name!r}{pattern}"


def markdown_rows() -> list[str]:
    """The rows of security.md's table of ACLs per role, as the table above gives them."""
    rows = []
    for label, grants in ROLES.values():
        for index, grant in enumerate(grants):
            names = ", ".join(f"`{name}`" for name in grant.names) + (" (prefixed)" if grant.prefixed else "")
            role = f"| {label} |" if index == 0 else "| |"
            rows.append(f"{role} {grant.operation} | {grant.resource} | {names} | {grant.why} |")
    return rows


def role_acls(role: str, principal: str, names: Mapping[str, str]) -> list[Acl]:
    """The ACLs of ``role`` for ``principal``, the templates filled from ``names`` (``input_topic``…), each once."""
    if role not in ROLE_SETS:
        raise ConfigError(f"unknown role {role!r}", f"use one of {', '.join(ROLE_SETS)}")
    if not principal.startswith("User:") or principal == "User:":
        raise ConfigError(f"principal {principal!r} is not of the form User:<name>", "pass e.g. User:dedupectl-worker")
    acls: list[Acl] = []
    for part in ROLE_SETS[role]:
        for grant in ROLES[part][1]:
            if grant.optional and not all(_filled(template, names) for template in grant.names):
                continue
            if grant.when is not None and grant.when not in names:
                continue
            for template in grant.names:
                acl = Acl(principal, grant.operation, grant.resource, _fill(template, names), grant.prefixed)
                if acl not in acls:
                    acls.append(acl)
    return acls


def _filled(template: str, names: Mapping[str, str]) -> bool:
    """Whether ``names`` has a value for every placeholder of ``template``."""
    return "<" not in _fill(template, names)


def _fill(template: str, names: Mapping[str, str]) -> str:
    for key, value in names.items():
        template = template.replace(f"<{key}>", value)
    return template


@dataclass(frozen=True)
class ScramUser:
    """A SCRAM credential to create (or reset) for ``user``."""

    user: str
    password: str
    mechanism: str = "SCRAM-SHA-512"

    def __str__(self) -> str:
        return f"{self.mechanism} credential for user {self.user!r}"


def grant(kafka: KafkaConfig, acls: Sequence[Acl], scram: ScramUser | None = None) -> None:
    """Create ``scram``'s credential, then the ACLs (an ACL that exists already is left as it is). The admin
    principal needs Alter on the cluster."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = admin_client(kafka)
    cluster_metadata(kafka, admin)  # an unreachable broker or a refused handshake named as such, first
    if scram is not None:
        if scram.mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(f"unknown SCRAM mechanism {scram.mechanism!r}", f"use {' or '.join(SCRAM_MECHANISMS)}")
        info = ScramCredentialInfo(ScramMechanism[scram.mechanism.replace("-", "_")], SCRAM_ITERATIONS)
        upsert = UserScramCredentialUpsertion(scram.user, info, scram.password.encode())
        futures = admin.alter_user_scram_credentials([upsert], request_timeout=kafka.timeout_s)
        _settle(futures.values(), f"the {scram}")
    resources = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}
    resources["transactional id"] = ResourceType.TRANSACTIONAL_ID
    bindings = [
        AclBinding(
            resources[acl.resource], acl.name,
            ResourcePatternType.PREFIXED if acl.prefixed else ResourcePatternType.LITERAL,
            acl.principal, "*", AclOperation[acl.operation.upper()], AclPermissionType.ALLOW,
        )
        for acl in acls
    ]  # fmt: skip
    if bindings:
        _settle(admin.create_acls(bindings, request_timeout=kafka.timeout_s).values(), "the ACLs")


def _settle(futures, what: str) -> None:
    from confluent_kafka import KafkaError, KafkaException

    from reconcile.errors import BrokerError

    for future in futures:
        try:
            future.result()
        except KafkaException as error:
            found = error.args[0]
            if found.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                raise permission_denied("Alter", "cluster", "kafka-cluster", found.str()) from error
            raise BrokerError(f"Kafka did not create {what}: {found.str()}", "check the broker's log") from error

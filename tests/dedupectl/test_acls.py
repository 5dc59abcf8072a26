"""``dedupectl security grant``: a role's ACLs (and SCRAM user) from the one table security.md is checked
against; with them a worker runs on the secured broker, and ``--dry-run`` creates nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from secure_kafka import SecureUser, admin_env, admin_kafka, admin_settings, make_topics, run_env

from dedupectl.acls import MISROUTED_FORWARD, markdown_rows, role_acls
from dedupectl.kafka_clients import create_topics
from dedupectl.verify import count_ids

SECURITY_MD = Path(__file__).resolve().parents[2] / "docs" / "reference" / "security.md"
TIMEOUT_S = 60


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dedupectl.cli.app", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def test_the_docs_table_of_acls_is_the_code_table():
    header = "| Role | Operation | Resource | Name | Why |\n|---|---|---|---|---|\n"
    assert header + "\n".join(markdown_rows()) + "\n" in SECURITY_MD.read_text()


def test_spark_is_every_spark_job_at_once():
    names = {"input_topic": "i", "output_topic": "o", "dead_letter_topic": "d", "group": "g"}
    jobs = [acl for role in ("audit", "replay", "rebuild") for acl in role_acls(role, "User:x", names)]
    assert set(role_acls("spark", "User:x", names)) == set(jobs)


def test_a_forwarding_worker_also_writes_its_input_and_its_config_says_so(tmp_path):
    names = {"input_topic": "i", "output_topic": "o", "dead_letter_topic": "d", "group": "g"}
    plain = {(acl.operation, acl.name) for acl in role_acls("worker", "User:x", names)}
    assert ("Read", "i") in plain and ("Write", "i") not in plain
    forwarding = {
        (acl.operation, acl.name) for acl in role_acls("worker", "User:x", {**names, MISROUTED_FORWARD: "on"})
    }
    assert forwarding - plain == {("Write", "i")}
    config = tmp_path / "worker.toml"
    config.write_text('partitioner = "crc32"\nmisrouted = "forward"\n')
    shown = cli(
        "security", "grant", "--role", "worker", "--principal", "User:w", "-c", str(config), "-b", "127.0.0.1:9",
        "-t", "events", "-o", "events-deduped", "--dry-run", "--json", env=run_env({}),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert any("Write on topic 'events'" in acl for acl in json.loads(shown.stdout)["acls"])


def acls_of(broker, principal: str) -> list:
    admin = AdminClient(admin_settings(broker))  # kept until the answer: a destroyed client drops it
    found = admin.describe_acls(
        AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                         AclPermissionType.ANY),
        request_timeout=15,
    )  # fmt: skip
    return found.result()


def test_dry_run_lists_and_creates_nothing(secure_kafka_broker, tmp_path):
    broker = secure_kafka_broker
    principal = f"User:dry-{uuid.uuid4().hex[:6]}"
    password_file = tmp_path / "password"
    password_file.write_text("s3cret-not-shown\n")
    result = cli(
        "security", "grant", "--role", "reconcile", "--principal", principal, "-t", "ev", "-o", "ev-out",
        "--scram-password-file", str(password_file), "--dry-run", "--json", env=run_env(admin_env(broker)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert listed["dry_run"] is True and "SCRAM-SHA-512" in listed["scram"]
    assert listed["acls"] == [f"allow {principal} Read on topic 'ev-out'", f"allow {principal} Describe on group "
                              "'dedupectl-scan'"]  # fmt: skip
    assert "s3cret-not-shown" not in result.stdout + result.stderr
    assert acls_of(broker, principal) == []


def test_a_granted_worker_runs_exactly_once_on_the_secured_broker(secure_kafka_broker, tmp_path):
    broker = secure_kafka_broker
    topics = make_topics(broker, "granted")
    user = SecureUser(broker, f"granted-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex)
    password_file = tmp_path / "password"
    password_file.write_text(user.password)
    group = f"group-{topics.input}"
    granted = cli(
        "security", "grant", "--role", "worker", "--principal", user.principal, "-t", topics.input,
        "-o", topics.output, "--group-id", group, "--scram-password-file", str(password_file),
        env=run_env(admin_env(broker)),
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    assert user.password not in granted.stdout + granted.stderr
    assert len(acls_of(broker, user.principal)) == 7
    topics.produce(broker, [f"id-{n % 30}" for n in range(40)])

    result = cli(
        "run", "-i", topics.input, "-o", topics.output, "--group-id", group, "-d", str(tmp_path / "data"),
        "--worker-id", "w1", "--exit-on-idle", "3", "--json", env=run_env(user.env()),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["published"] == 30


def test_a_granted_observer_runs_with_its_own_acls_and_publishes_nothing(secure_kafka_broker, tmp_path):
    broker = secure_kafka_broker
    topics = make_topics(broker, "observed")
    duplicates = f"{topics.input}.duplicates"
    create_topics(admin_kafka(broker), [duplicates], 1)
    user = SecureUser(broker, f"observer-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex)
    password_file = tmp_path / "password"
    password_file.write_text(user.password)
    group = f"group-{topics.input}"
    granted = cli(
        "security", "grant", "--role", "observer", "--principal", user.principal, "-t", topics.input,
        "--group-id", group, "--duplicates-topic", duplicates, "--scram-password-file", str(password_file),
        "--json", env=run_env(admin_env(broker)),
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    assert json.loads(granted.stdout)["acls"] == [
        f"allow {user.principal} Read on topic '{topics.input}'",
        f"allow {user.principal} Read on group '{group}.observe'",
        f"allow {user.principal} Write on transactional id 'dedupectl-{group}.observe-' (prefixed)",
        f"allow {user.principal} Write on topic '{duplicates}'",
    ]
    topics.produce(broker, [f"id-{n % 30}" for n in range(40)])

    result = cli(
        "run", "--observe", "-i", topics.input, "--group-id", group, "-d", str(tmp_path / "data"),
        "--duplicates-topic", duplicates, "--worker-id", "w1", "--exit-on-idle", "3", "--json",
        env=run_env(user.env()),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["observed"], summary["published"], summary["duplicates_produced"]) == (True, 30, 10)
    assert count_ids(admin_kafka(broker), topics.output) == {}
    assert sum(count_ids(admin_kafka(broker), duplicates).values()) == 10

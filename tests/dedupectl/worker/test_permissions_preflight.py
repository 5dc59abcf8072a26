"""The worker proves every permission it needs at start, before the first batch: a permission used only later
(Read on the output, by recovery) stops it before anything is published, not at its next crash."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from secure_kafka import Acl, admin_kafka, grant, make_topics, new_user, revoke, role_acls, run_env, worker_acls

from dedupectl.config import resolve_worker_config
from dedupectl.kafka_clients import create_topics
from dedupectl.verify import count_ids
from dedupectl.worker.permissions import topic_operations

RUN_TIMEOUT_S = 60


def run_args(topics, group: str, data_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "dedupectl.cli.app", "run", "-i", topics.input, "-o", topics.output,
        "--group-id", group, "-d", str(data_dir), "--worker-id", "w1", "--exit-on-idle", "3",
        "--broker-retry-for", "5",
    ]  # fmt: skip


def test_missing_read_on_the_output_stops_before_anything_is_published(secure_kafka_broker, tmp_path):
    broker = secure_kafka_broker
    topics = make_topics(broker, "preflight")
    group = f"group-{topics.input}"
    user = new_user(broker, f"preflight-{uuid.uuid4().hex[:6]}")
    grant(broker, user.principal, worker_acls(topics.input, topics.output, topics.dead_letter, group))
    env, data_dir = run_env(user.env()), tmp_path / "data"
    topics.produce(broker, [f"id-{n}" for n in range(20)])
    first = subprocess.run(run_args(topics, group, data_dir), env=env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert len(count_ids(admin_kafka(broker), topics.output)) == 20

    # the store is intact and covers the whole output: recovery has nothing to read, yet Read is needed
    revoke(broker, user.principal, [Acl("READ", "topic", topics.output)])
    topics.produce(broker, [f"new-{n}" for n in range(5)])
    result = subprocess.run(run_args(topics, group, data_dir), env=env, capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S)  # fmt: skip

    assert result.returncode == 77, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"Kafka denied this client Read on topic '{topics.output}'" in line, result.stderr
    assert "Traceback" not in result.stderr
    assert set(count_ids(admin_kafka(broker), topics.output)) == {f"id-{n}".encode() for n in range(20)}


def test_missing_write_on_the_dead_letter_topic_stops_before_the_first_batch(secure_kafka_broker, tmp_path):
    """No record needs a dead letter here: without the check the run would publish and exit 0."""
    broker = secure_kafka_broker
    topics = make_topics(broker, "preflight-dl")
    group = f"group-{topics.input}"
    user = new_user(broker, f"preflight-dl-{uuid.uuid4().hex[:6]}")
    acls = worker_acls(topics.input, topics.output, topics.dead_letter, group)
    grant(broker, user.principal, [acl for acl in acls if acl.name != topics.dead_letter])
    topics.produce(broker, [f"id-{n}" for n in range(10)])

    result = subprocess.run(run_args(topics, group, tmp_path / "data"), env=run_env(user.env()),
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_S)  # fmt: skip

    assert result.returncode == 77, result.stderr
    assert f"Kafka denied this client Write on topic '{topics.dead_letter}'" in result.stderr
    assert count_ids(admin_kafka(broker), topics.output) == {}


def test_the_duplicates_topic_needs_its_write_and_the_role_grants_it(secure_kafka_broker, tmp_path):
    """Without Write on it the worker stops before its first batch; with the role's ACLs for it, it runs."""
    broker = secure_kafka_broker
    topics = make_topics(broker, "preflight-dup")
    duplicates = f"{topics.input}.duplicates"
    create_topics(admin_kafka(broker), [duplicates], 1)
    group = f"group-{topics.input}"
    names = {"input_topic": topics.input, "output_topic": topics.output, "dead_letter_topic": topics.dead_letter}
    acls = role_acls("worker", **names, group=group, duplicates_topic=duplicates)
    assert [acl for acl in acls if acl.name != duplicates] == worker_acls(*names.values(), group)
    assert Acl("WRITE", "topic", duplicates) in acls
    user = new_user(broker, f"preflight-dup-{uuid.uuid4().hex[:6]}")
    grant(broker, user.principal, [acl for acl in acls if acl.name != duplicates])
    topics.produce(broker, ["a", "a", "b"])
    args = [*run_args(topics, group, tmp_path / "data"), "--duplicates-topic", duplicates]

    denied = subprocess.run(args, env=run_env(user.env()), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert denied.returncode == 77, denied.stderr
    assert f"Kafka denied this client Write on topic '{duplicates}'" in denied.stderr
    assert count_ids(admin_kafka(broker), topics.output) == {}

    grant(broker, user.principal, [Acl("WRITE", "topic", duplicates)])
    granted = subprocess.run(args, env=run_env(user.env()), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert granted.returncode == 0, granted.stderr
    assert count_ids(admin_kafka(broker), duplicates) == {b"a": 1}


def test_forwarding_misrouted_records_needs_write_on_the_input():
    flags = {"input_topic": "in", "output_topic": "out", "bootstrap_servers": "127.0.0.1:9"}
    assert topic_operations(resolve_worker_config(env={}, flags=flags))["in"] == ("Read",)
    forwarding = resolve_worker_config(env={}, flags={**flags, "misrouted": "forward", "partitioner": "crc32"})
    assert topic_operations(forwarding)["in"] == ("Read", "Write")

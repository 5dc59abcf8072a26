"""The Spark jobs on a secured broker (SASL_SSL, an authorizer that denies what no ACL allows): the driver's
librdkafka calls and Spark's Kafka source (through the ``kafka.``-prefixed options derived from the same
settings) work with each job's documented ACLs, a missing one is named, and the password never shows in the
report, the Spark log or --print-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from secure_kafka import (
    Acl,
    SecureUser,
    Topics,
    admin_env,
    admin_kafka,
    audit_acls,
    grant,
    make_topics,
    new_user,
    rebuild_acls,
    replay_acls,
    revoke,
    run_env,
)
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.errors import DedupeError
from reconcile.scan import scan_output
from store.dedup_store import DedupStore

IDS = [f"id-{n % 90}" for n in range(120)]  # 90 distinct ids, 30 repeats


@pytest.fixture(scope="module")
def deduplicated(secure_kafka_broker, tmp_path_factory) -> Topics:
    """Topics a worker (as the super user) deduplicated: 122 input records, 90 output records."""
    broker = secure_kafka_broker
    topics = make_topics(broker, "spark")
    topics.produce(broker, IDS, bad=2)
    worker = subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", "run", "-i", topics.input, "-o", topics.output,
         "-d", str(tmp_path_factory.mktemp("spark-secured") / "data"), "--worker-id", "w1", "--exit-on-idle", "3"],
        env=run_env(admin_env(broker)), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    return topics


def as_user(monkeypatch, user: SecureUser) -> None:
    """The user's connection in the environment only (the password never on a command line)."""
    for name in [key for key in os.environ if key.startswith("DEDUPECTL_")]:
        monkeypatch.delenv(name)
    for name, value in user.env().items():
        monkeypatch.setenv(name, value)


def assert_no_password(user: SecureUser, output: str, report: dict) -> None:
    assert user.password not in output
    spark_log = report.get("spark_log")
    if spark_log and Path(spark_log).is_file():
        assert user.password not in Path(spark_log).read_text(errors="replace")


def assert_denied(result, wanted: str, user: SecureUser) -> None:
    """The job stopped with the error naming the missing ACL (``main()`` prints it as one line, exit 77)."""
    assert isinstance(result.exception, DedupeError), (result.output, result.exception)
    assert result.exception.exit_code == 77, result.exception
    assert f"Kafka denied this client {wanted}" in str(result.exception)
    assert user.password not in str(result.exception) + result.output


def test_audit_over_sasl_ssl_with_read_only_acls(secure_kafka_broker, deduplicated, spark_session, monkeypatch):
    broker, topics = secure_kafka_broker, deduplicated
    user = new_user(broker, f"audit-{uuid.uuid4().hex[:6]}")
    acls = audit_acls(topics.input, topics.output)
    grant(broker, user.principal, acls)
    as_user(monkeypatch, user)
    args = ["audit", "-i", topics.input, "-o", topics.output, "--json"]

    result = CliRunner().invoke(app, args, catch_exceptions=False)

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    totals = {key: sum(p[key] for p in report["partitions"]) for key in ("input_records", "output_records")}
    assert totals == {"input_records": 122, "output_records": 90}
    assert report["violations"] == 0
    assert_no_password(user, result.output, report)

    # the Spark side's ACL: with Describe on the output but no Read, the driver's offset look-ups pass and
    # Spark's Kafka source is refused: one error naming the missing Read
    revoke(broker, user.principal, [acls[1]])
    grant(broker, user.principal, [Acl("DESCRIBE", "topic", topics.output)])
    denied = CliRunner().invoke(app, args)
    assert_denied(denied, f"Read on topic '{topics.output}'", user)


def test_replay_over_sasl_ssl_with_its_acls(secure_kafka_broker, spark_session, monkeypatch):
    broker = secure_kafka_broker
    topics = make_topics(broker, "replay")
    topics.produce(broker, [f"r-{n}" for n in range(30)])  # no worker ran: the output lacks all 30
    user = new_user(broker, f"replay-{uuid.uuid4().hex[:6]}")
    acls = replay_acls(topics.input, topics.output)
    grant(broker, user.principal, acls)
    as_user(monkeypatch, user)

    result = CliRunner().invoke(app, ["replay", "-i", topics.input, "-o", topics.output, "--json"])

    assert result.exit_code == 0, (result.output, result.exception)
    report = json.loads(result.stdout)
    assert report["replayed"] == 30
    assert_no_password(user, result.output, report)
    redriven = Counter()
    for partition in range(2):
        for batch in scan_output(admin_kafka(broker), topics.input, partition, -1):
            redriven.update(batch.ids)
    assert set(redriven.values()) == {2}  # each id once as produced, once re-driven

    # the executors' producer: without Write on the input, one error naming it
    revoke(broker, user.principal, [acls[2]])
    denied = CliRunner().invoke(app, ["replay", "-i", topics.input, "-o", topics.output, "--json"])
    assert_denied(denied, f"Write on topic '{topics.input}'", user)


def test_rebuild_over_sasl_ssl_with_its_acls(secure_kafka_broker, deduplicated, spark_session, tmp_path, monkeypatch):
    broker, topics = secure_kafka_broker, deduplicated
    user = new_user(broker, f"rebuild-{uuid.uuid4().hex[:6]}")
    acls = rebuild_acls(topics.input, topics.output)
    grant(broker, user.principal, acls)
    as_user(monkeypatch, user)
    data_dir = tmp_path / "data"

    args = ["rebuild", "-i", topics.input, "-o", topics.output, "-p", "0", "-d", str(data_dir), "--json"]
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 0, (result.output, result.exception)
    report = json.loads(result.stdout)
    published = [i for batch in scan_output(admin_kafka(broker), topics.output, 0, -1) for i in batch.ids]
    assert report["ids"] == len(published) > 0
    with DedupStore.open_secondary(data_dir / f"{topics.input}-0") as store:
        assert all(store.contains_many(published))
    assert_no_password(user, result.output, report)

    revoke(broker, user.principal, [acls[1]])
    denied = CliRunner().invoke(app, [*args[:-3], "-d", str(tmp_path / "other"), "--json"])
    assert_denied(denied, f"Describe on topic '{topics.input}'", user)


def test_print_submit_redacts_a_password_given_as_a_flag(secure_kafka_broker):
    secret = f"pw-{uuid.uuid4().hex}"
    args = ["audit", "-i", "a", "-o", "b", "-X", f"sasl.password={secret}", "--print-submit"]
    env = run_env({"DEDUPECTL_BOOTSTRAP_SERVERS": secure_kafka_broker.bootstrap_servers})
    command = [sys.executable, "-m", "dedupectl.cli.app", *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    assert "sasl.password=***" in result.stdout


def test_a_job_names_the_setting_of_a_refused_handshake(secure_kafka_broker, deduplicated, spark_session, monkeypatch):
    broker, topics = secure_kafka_broker, deduplicated
    user = new_user(broker, f"handshake-{uuid.uuid4().hex[:6]}")
    grant(broker, user.principal, audit_acls(topics.input, topics.output))
    as_user(monkeypatch, user)
    for name in [key for key in os.environ if key.startswith("DEDUPECTL_KAFKA_SSL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DEDUPECTL_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")  # to the SASL_SSL port
    monkeypatch.setenv("DEDUPECTL_TIMEOUT_S", "120")  # a refusal waited out like an outage would take minutes

    result = CliRunner().invoke(app, ["audit", "-i", topics.input, "-o", topics.output, "--json"])

    assert isinstance(result.exception, DedupeError), (result.output, result.exception)
    assert result.exception.exit_code == 77, result.exception
    assert "refused this client's connection" in str(result.exception)
    assert "check security.protocol" in str(result.exception)
    assert user.password not in str(result.exception) + result.output

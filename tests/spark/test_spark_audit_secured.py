"""dedupectl audit on a secured broker: the driver's librdkafka calls and Spark's Kafka source (through the
``kafka.``-prefixed options derived from the same settings) read over SASL_SSL with the documented read-only
ACLs; the password never shows in the report, the Spark log or --print-submit."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from secure_kafka import Acl, admin_env, audit_acls, grant, make_topics, new_user, revoke, run_env
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.errors import DedupeError


def test_audit_over_sasl_ssl_with_read_only_acls(secure_kafka_broker, spark_session, tmp_path, monkeypatch):
    broker = secure_kafka_broker
    topics = make_topics(broker, "audit")
    ids = [f"id-{n % 90}" for n in range(120)]
    topics.produce(broker, ids, bad=2)
    worker = subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", "run", "-i", topics.input, "-o", topics.output,
         "-d", str(tmp_path / "data"), "--worker-id", "w1", "--exit-on-idle", "3"],
        env=run_env(admin_env(broker)), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    user = new_user(broker, f"audit-{uuid.uuid4().hex[:6]}")
    acls = audit_acls(topics.input, topics.output)
    grant(broker, user.principal, acls)
    for name in [key for key in __import__("os").environ if key.startswith("DEDUPECTL_")]:
        monkeypatch.delenv(name)
    for name, value in user.env().items():
        monkeypatch.setenv(name, value)
    args = ["audit", "-i", topics.input, "-o", topics.output, "--json"]

    result = CliRunner().invoke(app, args, catch_exceptions=False)

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    totals = {key: sum(p[key] for p in report["partitions"]) for key in ("input_records", "output_records")}
    assert totals == {"input_records": 122, "output_records": 90}
    assert report["violations"] == 0
    assert user.password not in result.output
    spark_log = report.get("spark_log")
    if spark_log and Path(spark_log).is_file():
        assert user.password not in Path(spark_log).read_text(errors="replace")

    # the Spark side's ACL: with Describe on the output but no Read, the driver's offset look-ups pass and
    # Spark's Kafka source is refused: one error naming the missing Read
    revoke(broker, user.principal, [acls[1]])
    grant(broker, user.principal, [Acl("DESCRIBE", "topic", topics.output)])
    denied = CliRunner().invoke(app, args)
    assert isinstance(denied.exception, DedupeError), denied.exception  # main() prints it as one line
    assert denied.exception.exit_code == 77
    assert f"Kafka denied this client Read on topic '{topics.output}'" in str(denied.exception)
    assert user.password not in str(denied.exception)


def test_print_submit_redacts_a_password_given_as_a_flag(secure_kafka_broker):
    secret = f"pw-{uuid.uuid4().hex}"
    args = ["audit", "-i", "a", "-o", "b", "-X", f"sasl.password={secret}", "--print-submit"]
    env = run_env({"DEDUPECTL_BOOTSTRAP_SERVERS": secure_kafka_broker.bootstrap_servers})
    command = [sys.executable, "-m", "dedupectl.cli.app", *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    assert "sasl.password=***" in result.stdout

"""``dedupectl status`` on a secured broker works with the read-only ACLs security.md gives it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from secure_kafka import grant, make_topics, new_user, run_env, status_acls


def test_status_works_with_its_documented_acls(secure_kafka_broker, tmp_path):
    broker = secure_kafka_broker
    topics = make_topics(broker, "status")
    group = f"group-{topics.input}"
    topics.produce(broker, [f"id-{n}" for n in range(10)])
    user = new_user(broker, f"status-{uuid.uuid4().hex[:6]}")
    grant(broker, user.principal, status_acls(topics.input, topics.output, group))
    args = ["status", "-t", topics.input, "-o", topics.output, "--group-id", group, "-d", str(tmp_path), "--json"]

    result = subprocess.run([sys.executable, "-m", "dedupectl.cli.app", *args], env=run_env(user.env()),
                            capture_output=True, text=True, timeout=60)  # fmt: skip

    assert result.returncode in (0, 1), result.stderr  # 1: no worker owns the partitions, not an error
    report = json.loads(result.stdout)
    assert "error" not in report, report
    assert user.password not in result.stdout + result.stderr

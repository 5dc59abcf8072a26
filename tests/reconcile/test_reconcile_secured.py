"""Reconcile on a secured broker (SASL_SSL, an authorizer that denies what no ACL allows): it works with its
documented read-only ACLs, given through a config file and the environment, and each missing ACL is one
line naming it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from secure_kafka import Topics, admin_env, grant, make_topics, new_user, reconcile_acls, run_env

TIMEOUT_S = 60


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dedupectl.cli.app", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def worked(secure_kafka_broker, tmp_path_factory) -> tuple[Topics, Path]:
    """Topics a worker (as the super user) deduplicated, and its data dir."""
    broker = secure_kafka_broker
    topics = make_topics(broker, "rec")
    topics.produce(broker, [f"id-{n % 120}" for n in range(150)])
    data_dir = tmp_path_factory.mktemp("reconcile-secured") / "data"
    result = cli(
        "run", "-i", topics.input, "-o", topics.output, "-d", str(data_dir), "--worker-id", "w1",
        "--exit-on-idle", "3", env=run_env(admin_env(broker)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return topics, data_dir


def reconcile_args(topics: Topics, data_dir: Path) -> list[str]:
    return ["reconcile", "--all", "-i", topics.input, "-o", topics.output, "-d", str(data_dir), "--json"]


def test_reconcile_reads_over_sasl_ssl_with_read_only_acls(secure_kafka_broker, worked, tmp_path):
    broker, (topics, data_dir) = secure_kafka_broker, worked
    user = new_user(broker, f"reconcile-{uuid.uuid4().hex[:6]}")
    grant(broker, user.principal, reconcile_acls(topics.output))
    # the connection from a config file, the password from the environment only
    settings = user.settings()
    password = settings.pop("sasl.password")
    config = tmp_path / "reconcile.toml"
    config.write_text("[kafka]\n" + "".join(f'"{key}" = "{value}"\n' for key, value in settings.items()))
    env = run_env({
        "DEDUPECTL_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "DEDUPECTL_CONFIG": str(config),
        "DEDUPECTL_KAFKA_SASL_PASSWORD": password,
    })  # fmt: skip

    result = cli(*reconcile_args(topics, data_dir), env=env)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["records_scanned"] == 120
    assert password not in result.stdout + result.stderr


@pytest.mark.parametrize("missing", [0, 1])
def test_reconcile_names_a_missing_acl(secure_kafka_broker, worked, missing):
    broker, (topics, data_dir) = secure_kafka_broker, worked
    user = new_user(broker, f"reconcile-denied-{uuid.uuid4().hex[:6]}")
    acls = reconcile_acls(topics.output)
    grant(broker, user.principal, [acl for index, acl in enumerate(acls) if index != missing])

    result = cli(*reconcile_args(topics, data_dir), env=run_env(user.env()))

    wanted = [f"Read on topic '{topics.output}'", "Describe on group 'dedupectl-scan'"][missing]
    assert result.returncode == 77, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"Kafka denied this client {wanted}" in line
    assert user.password not in result.stdout + result.stderr

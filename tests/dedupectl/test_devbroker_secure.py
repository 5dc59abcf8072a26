"""The local broker's secure mode: what `dedupectl dev broker start --secure` prints, that its authorizer
denies what no ACL allows, and that a state dir keeps the mode it was formatted in."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from secure_kafka import admin_kafka, new_user

from dedupectl.devbroker import LocalBroker
from dedupectl.kafka_clients import create_topics


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {key: value for key, value in os.environ.items() if not key.startswith("DEDUPECTL_")}
    command = [sys.executable, "-m", "dedupectl.cli.app", *args]
    return subprocess.run(command, env={**base, **(env or {})}, capture_output=True, text=True, timeout=120)


def test_start_secure_prints_a_config_file_not_the_password(secure_kafka_broker: LocalBroker) -> None:
    broker = secure_kafka_broker
    result = cli("dev", "broker", "start", "--secure", "--state-dir", str(broker.state_dir))  # already running

    assert result.returncode == 0, result.stderr
    password = broker.security.admin_password()
    assert password not in result.stdout + result.stderr
    words = shlex.split(result.stdout.strip().splitlines()[-1])
    assert words[0] == "export"
    exported = dict(word.split("=", 1) for word in words[1:])
    assert exported["DEDUPECTL_BOOTSTRAP_SERVERS"] == broker.bootstrap_servers
    config = Path(exported["DEDUPECTL_CONFIG"])
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    # the exported line is all a command needs to connect as the super user
    name = f"tour-{uuid.uuid4().hex[:6]}"
    created = cli("topics", "create", "-i", name, "-o", f"{name}-out", "-p", "1", "--json", env=exported)
    assert created.returncode == 0, created.stderr
    assert password not in created.stdout + created.stderr


def test_the_authorizer_denies_what_no_acl_allows(secure_kafka_broker: LocalBroker) -> None:
    broker = secure_kafka_broker
    topic = f"guarded-{uuid.uuid4().hex[:6]}"
    create_topics(admin_kafka(broker), [topic], 1)
    nobody = new_user(broker, f"nobody-{uuid.uuid4().hex[:6]}")

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, **nobody.settings()})
    errors: list[KafkaError] = []
    producer.produce(topic, b"x", on_delivery=lambda error, _message: errors.append(error))
    producer.flush(15)

    assert [error.code() for error in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_plaintext_is_not_served_on_the_secure_listener(secure_kafka_broker: LocalBroker) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": secure_kafka_broker.bootstrap_servers, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)


def test_secure_on_a_plain_state_dir_is_refused(kafka_broker: LocalBroker) -> None:
    result = cli("dev", "broker", "start", "--secure", "--state-dir", str(kafka_broker.state_dir))

    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "was formatted plain, not secure" in line and "Traceback" not in result.stderr

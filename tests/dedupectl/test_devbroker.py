"""The local Kafka broker: lifecycle of its process, and that it enforces transactions (the reason it exists).

Most tests use the session broker; the lifecycle tests start one more broker at a time in their own folder.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import typer
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from dedupectl.cli.commands import dev as dev_command
from dedupectl.devbroker import LocalBroker
from dedupectl.errors import LocalBrokerError
from dedupectl.kafka_jars import VERSION_ENV, kafka_libs_dir, kafka_version, resolve_kafka_version

# --- helpers --------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def read_values(bootstrap: str, topic: str, isolation: str, until: bytes) -> list[bytes]:
    """Values of partition 0 from the beginning up to and including ``until`` (a sentinel message)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while until not in values and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    return producer


@pytest.fixture
def extra_broker(tmp_path: Path, broker_kafka_version: str) -> Iterator[LocalBroker]:
    """A second, small broker (not started) in this test's folder, always stopped afterwards."""
    broker = LocalBroker(tmp_path / "broker", heap_mb=256, kafka_version=broker_kafka_version)
    try:
        yield broker
    finally:
        broker.stop()


# --- lifecycle ------------------------------------------------------------------------------------------


def test_start_status_stop_restart(
    extra_broker: LocalBroker, unique_name: Callable[[str], str], broker_kafka_version: str
) -> None:
    bootstrap = extra_broker.start()
    topic = unique_name("kept")
    create_topic(bootstrap, topic)

    status = extra_broker.status()
    assert bootstrap.startswith("127.0.0.1:")
    assert status.running and status.bootstrap == bootstrap and status.pid is not None
    assert status.kafka_version == broker_kafka_version
    record = json.loads((extra_broker.state_dir / "broker.json").read_text())
    assert (record["pid"], record["kafka_version"]) == (status.pid, broker_kafka_version)
    server_log = (extra_broker.logs_dir / "server.log").read_text()
    assert "] INFO " in server_log, "the logging config of this Kafka line is read"
    assert extra_broker.start() == bootstrap, "a second start finds the running broker"

    reattached = LocalBroker.from_state_dir(extra_broker.state_dir)
    assert reattached.status() == status
    reattached.stop()

    assert not reattached.status().running
    assert not (extra_broker.state_dir / "broker.json").exists()
    assert not psutil.pid_exists(status.pid) or psutil.Process(status.pid).status() == psutil.STATUS_ZOMBIE

    assert extra_broker.start() == bootstrap, "a restart reuses the free port"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert topic in admin.list_topics(timeout=10).topics, "a restart keeps the data"


def test_killed_broker_is_reported_not_running(extra_broker: LocalBroker) -> None:
    extra_broker.start()
    pid = extra_broker.status().pid
    assert pid is not None

    psutil.Process(pid).send_signal(signal.SIGKILL)
    psutil.Process(pid).wait(10)

    assert not extra_broker.status().running
    assert not LocalBroker.from_state_dir(extra_broker.state_dir).status().running
    extra_broker.stop()  # clears the stale broker.json
    assert not (extra_broker.state_dir / "broker.json").exists()


def test_status_ignores_a_reused_pid(tmp_path: Path) -> None:
    # broker.json naming a live process that is not this state dir's broker (pid reused after a crash)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"pid": stranger.pid, "bootstrap": "127.0.0.1:1", "started_at": "2024-01-01T00:00:00+00:00"}
        (tmp_path / "broker.json").write_text(json.dumps(record))
        broker = LocalBroker.from_state_dir(tmp_path)

        assert not broker.status().running
        broker.stop()
        assert stranger.poll() is None, "stop must never signal a process that is not the broker"
        assert not (tmp_path / "broker.json").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_state_dir_without_broker_is_an_actionable_error(tmp_path: Path) -> None:
    with pytest.raises(LocalBrokerError, match="no local broker in") as caught:
        LocalBroker.from_state_dir(tmp_path / "nothing-here")
    assert "dedupectl dev broker start" in str(caught.value)


# --- choosing the version -------------------------------------------------------------------------------


def test_the_version_is_the_one_asked_for_else_the_environment_else_the_pom(monkeypatch) -> None:
    monkeypatch.delenv(VERSION_ENV, raising=False)
    assert resolve_kafka_version() == kafka_version()
    monkeypatch.setenv(VERSION_ENV, "3.9.1")
    assert resolve_kafka_version() == "3.9.1"
    assert resolve_kafka_version("4.1.0") == "4.1.0"
    assert kafka_libs_dir("3.9.1").parent.name == "kafka-3.9.1", "jars are cached per version"


@pytest.mark.parametrize("version", ["2.8.2", "latest", "4.0", "5.0.0"])
def test_an_unsupported_version_is_refused_in_one_line(version: str) -> None:
    with pytest.raises(LocalBrokerError, match="is not supported by the local broker") as caught:
        resolve_kafka_version(version)
    assert "3.x or 4.x" in str(caught.value)


def test_a_state_dir_keeps_the_version_that_formatted_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(VERSION_ENV, raising=False)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.properties").write_text("version=1\n")
    (tmp_path / "kafka-version").write_text("3.9.1\n")

    assert LocalBroker(tmp_path)._version_to_run() == "3.9.1", "no version asked for: the state dir's"
    with pytest.raises(LocalBrokerError, match=re.escape("holds the data of Kafka 3.9.1, not 4.4.0")) as caught:
        LocalBroker(tmp_path, kafka_version="4.4.0").start()
    assert "--kafka-version 3.9.1" in str(caught.value)
    assert not (tmp_path / "broker.json").exists(), "nothing was started"


# --- transactions on the session broker -----------------------------------------------------------------


@pytest.mark.kafka_compat
def test_read_committed_sees_committed_not_aborted(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique_name("txn")
    create_topic(bootstrap, topic)
    producer = transactional_producer(bootstrap, unique_name("txn-producer"))

    for value, commit in ((b"committed", True), (b"aborted", False), (b"sentinel", True)):
        producer.begin_transaction()
        producer.produce(topic, value, partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the aborted record really reaches the log
            producer.abort_transaction(30)

    assert read_values(bootstrap, topic, "read_committed", b"sentinel") == [b"committed", b"sentinel"]
    assert read_values(bootstrap, topic, "read_uncommitted", b"sentinel") == [
        b"committed",
        b"aborted",
        b"sentinel",
    ]


@pytest.mark.kafka_compat
def test_offsets_commit_inside_a_transaction(kafka_broker: LocalBroker, unique_name: Callable[[str], str]) -> None:
    # The worker's step 3: output records and input offsets in one transaction (needs __consumer_offsets).
    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique_name("offsets"), unique_name("group")
    create_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = transactional_producer(bootstrap, unique_name("offsets-producer"))
    try:
        producer.begin_transaction()
        producer.produce(topic, b"out", partition=0)
        offsets = [TopicPartition(topic, 0, 42)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)

        assert consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 42
    finally:
        consumer.close()


# --- CLI ------------------------------------------------------------------------------------------------


def dev_app() -> typer.Typer:
    """Just the ``dev`` commands: the full app also imports command modules written elsewhere."""
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    dev_command.register(app)
    return app


def test_cli_status_json(kafka_broker: LocalBroker) -> None:
    args = ["dev", "broker", "status", "--state-dir", str(kafka_broker.state_dir), "--json"]
    result = CliRunner().invoke(dev_app(), args)

    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["running"] is True
    assert status["bootstrap"] == kafka_broker.bootstrap_servers
    assert status["kafka_version"] == kafka_broker.formatted_version()


def test_cli_fetch_kafka_for_a_chosen_version(broker_kafka_version: str) -> None:
    # the run's own version: its jars are in the cache already, so nothing is downloaded
    args = ["dev", "fetch-kafka", "--kafka-version", broker_kafka_version, "--json"]
    result = CliRunner().invoke(dev_app(), args)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["libs_dir"] == str(kafka_libs_dir(broker_kafka_version))


def test_cli_status_without_broker_raises_the_operator_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(dev_app(), ["dev", "broker", "status", "--state-dir", str(tmp_path)])

    assert isinstance(result.exception, LocalBrokerError)  # app.main prints it in one line, exit 2

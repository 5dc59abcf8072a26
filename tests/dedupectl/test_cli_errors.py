"""Bad input and faults: each is one line on stderr, no traceback, and a non-zero exit."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from dedupectl.kafka_clients import create_topics
from store.dedup_store import DedupStore
from store.layout import store_path


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_broker_is_named_once_the_retry_bound_runs_out(tmp_path):
    started = time.monotonic()
    result = run_cli(
        "run", "-b", f"127.0.0.1:{free_port()}", "-i", "in", "-o", "out", "-d", str(tmp_path),
        "--broker-retry-for", "5s", env={"DEDUPECTL_TIMEOUT_S": "3"},
    )  # fmt: skip
    *retries, last = [line for line in result.stderr.splitlines() if line.strip()]
    assert retries and all(
        "reading the topics: cannot reach Kafka" in line and "retrying in" in line for line in retries
    )
    assert_one_line_error(
        subprocess.CompletedProcess(result.args, result.returncode, result.stdout, last),
        "Kafka still failing after 5s of retries",
        "cannot reach Kafka at 127.0.0.1:",
    )
    assert time.monotonic() - started < 40


def test_output_with_another_partition_count_is_refused(make_pipeline):
    pipeline = make_pipeline(partitions=2, output_partitions=3)
    result = run_cli(*pipeline.cli_args("w", pipeline.root / "data")[3:])
    assert_one_line_error(result, "has 3 partitions but input", "has 2", "give the output 2 partitions")


def test_missing_topic_is_named(kafka_broker, tmp_path):
    result = run_cli("run", "-b", kafka_broker.bootstrap_servers, "-i", "no-such-topic", "-o", "x", "-d", str(tmp_path))
    assert_one_line_error(result, "topic 'no-such-topic' does not exist", "dedupectl topics create")


def test_data_dir_that_cannot_be_created(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=1)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_cli(*pipeline.cli_args("w", blocker / "data")[3:])
    assert_one_line_error(result, "cannot create data directory", "--data-dir")


def test_store_locked_by_another_process(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    data_dir = pipeline.root / "data"
    holder = DedupStore.open(store_path(data_dir, pipeline.input_topic, 0), topic=pipeline.input_topic, partition=0)
    try:
        pipeline.produce([(b"a", b'{"messageId": "a"}')])
        result = run_cli(*pipeline.cli_args("w", data_dir)[3:])
    finally:
        holder.close()
    assert_one_line_error(result, "is locked by another process", "stop the worker that holds it")


def test_busy_metrics_port_is_an_operator_error(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_cli(*pipeline.cli_args("w", pipeline.root / "data", "--metrics-port", str(port))[3:], timeout=30)
    assert_one_line_error(result, f"cannot serve metrics on 0.0.0.0:{port}", "in use", "another --metrics-port")


def test_invalid_librdkafka_setting(tmp_path):
    result = run_cli("run", "-b", "127.0.0.1:9", "-i", "a", "-o", "b", "-X", "no.such.setting=1", "-d", str(tmp_path))
    assert_one_line_error(result, "invalid Kafka client setting", "no.such.setting")


def test_unknown_config_key(tmp_path):
    config = tmp_path / "dedupectl.toml"
    config.write_text('bootstrap_servers = "127.0.0.1:9"\ninput_topic = "in"\noutput_topic = "out"\nbatch_size = 5\n')
    result = run_cli("run", "--config", str(config))
    assert_one_line_error(result, "unknown config key 'batch_size'", "known keys:")


@pytest.mark.parametrize("args", [["run", "--batch-max-messages", "-5", "-b", "x", "-i", "a", "-o", "b"]])
def test_invalid_values(args):
    assert_one_line_error(run_cli(*args), "--batch-max-messages must be positive")


def test_topics_create_refuses_mismatched_existing_topic(kafka_broker, unique_name):
    from dedupectl.config import KafkaConfig

    name = unique_name("t")
    create_topics(KafkaConfig(kafka_broker.bootstrap_servers), [f"{name}-out"], 3)
    result = run_cli(
        "topics", "create", "-b", kafka_broker.bootstrap_servers, "-i", name, "-o", f"{name}-out", "-p", "2"
    )
    assert_one_line_error(result, "exists with 3 partitions, not 2")
    ok = run_cli(
        "topics", "create", "-b", kafka_broker.bootstrap_servers, "-i", name, "-o", f"{name}-x", "-p", "2", "--json"
    )
    assert ok.returncode == 0, ok.stderr
    assert '"created": true' in ok.stdout


def test_version_and_help():
    assert run_cli("--version").stdout.startswith("dedupectl ")
    for command in (["run"], ["topics", "create"], ["demo"], ["dev", "broker", "start"]):
        result = run_cli(*command, "-h")
        assert result.returncode == 0
        assert "Example" in result.stdout

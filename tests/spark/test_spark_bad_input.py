"""Bad input to the Spark jobs: one line on stderr, no traceback, exit 2, within a bounded time. Each is
caught before a JVM starts (topics, ranges, Java, connector jars, the master)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from spark_support import assert_one_line_error, event, run_cli

BOUND_S = 30  # every one of these fails long before Spark would have


@pytest.fixture
def pipeline(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce_input([event(f"e{i}") for i in range(5)])
    return pipeline


def run_bounded(*args: str, env: dict[str, str] | None = None):
    started = time.monotonic()
    result = run_cli(*args, env=env, timeout=BOUND_S * 3)
    assert time.monotonic() - started < BOUND_S, f"took {time.monotonic() - started:.0f}s"
    return result


@pytest.mark.parametrize("command", ["audit", "replay"])
def test_topic_that_does_not_exist(kafka_broker, command):
    result = run_bounded(command, "-b", kafka_broker.bootstrap_servers, "-i", "no-such-topic", "-o", "no-such-out")
    assert_one_line_error(result, "topic 'no-such-topic' does not exist", "dedupectl topics create")


@pytest.mark.parametrize(
    ("bounds", "fragments"),
    [
        (("--from", "10", "--to", "5"), ("--from 10 is after --to 5", "swap them")),
        (("--from", "3", "--to", "3"), ("make an empty range",)),
        (("--from", "999999"), ("the input range holds no records",)),
        (("--from", "2026-13-01"), ("is not an offset or a time",)),
    ],
)
def test_empty_or_reversed_range(pipeline, bounds, fragments):
    result = run_bounded(*pipeline.cli_args("audit", *bounds))
    assert_one_line_error(result, *fragments)


def test_replay_of_a_reversed_range(pipeline):
    result = run_bounded(*pipeline.cli_args("replay", "--from", "2026-11-22T10:00Z", "--to", "2026-11-22T09:00Z"))
    assert_one_line_error(result, "is after --to", "swap them")


def test_partition_that_does_not_exist(pipeline):
    result = run_bounded(*pipeline.cli_args("audit", "-p", "3"))
    assert_one_line_error(result, "partition 3 does not exist", "has 1 partitions")


def test_missing_java(pipeline, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # python is started by absolute path; no java anywhere
    result = run_bounded(*pipeline.cli_args("audit"), env={**env, "JAVA_HOME": ""})
    assert_one_line_error(result, "Java is not installed", "install a Java 17+ runtime")


def test_java_home_without_java(pipeline, tmp_path):
    result = run_bounded(*pipeline.cli_args("audit"), env={"JAVA_HOME": str(tmp_path)})
    assert_one_line_error(result, f"JAVA_HOME={tmp_path} holds no bin/java")


def test_missing_connector_jars_and_no_maven(pipeline, tmp_path):
    java = Path(os.path.realpath(_which("java")))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java)  # Java is there, Maven is not, and the jar cache is empty
    env = {"PATH": str(bin_dir), "JAVA_HOME": "", "DEDUPECTL_CACHE_DIR": str(tmp_path / "empty-cache")}
    result = run_bounded(*pipeline.cli_args("replay"), env=env)
    assert_one_line_error(result, "Kafka connector jars are not in", "`mvn` is not on PATH", "install Maven")


def test_unreachable_master(pipeline):
    result = run_bounded(*pipeline.cli_args("audit", "--master", "spark://127.0.0.1:1"))
    assert_one_line_error(result, "cannot reach the Spark master spark://127.0.0.1:1", "check --master")


def test_malformed_master_and_options(pipeline):
    assert_one_line_error(run_bounded(*pipeline.cli_args("audit", "--master", "nowhere")), "not a Spark master URL")
    assert_one_line_error(run_bounded(*pipeline.cli_args("audit", "--window", "soon")), "--window 'soon'")
    assert_one_line_error(run_bounded(*pipeline.cli_args("audit", "--conf", "novalue")), "--conf 'novalue'")


def test_archive_that_does_not_exist(pipeline, tmp_path):
    result = run_bounded(*pipeline.cli_args("audit", "--input-files", str(tmp_path / "nothing.parquet")))
    assert_one_line_error(result, "no such file or directory", "nothing.parquet")


def _which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    assert found, f"{name} is needed for the Spark tests"
    return found


def test_rebuild_refuses_an_existing_store_and_a_held_one(pipeline, tmp_path):
    from store.dedup_store import DedupStore

    data_dir = tmp_path / "data"
    args = pipeline.cli_args("rebuild", "-p", "0", "-d", str(data_dir))
    with DedupStore.open(data_dir / f"{pipeline.input_topic}-0", topic=pipeline.input_topic, partition=0):
        assert_one_line_error(run_bounded(*args), "a store already exists at", "pass --replace")
        assert_one_line_error(run_bounded(*args, "--replace"), "is locked by another process", "stop the worker")
    assert_one_line_error(run_bounded(*pipeline.cli_args("rebuild", "-p", "4")), "partition 4 does not exist")

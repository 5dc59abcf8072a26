"""The Spark commands through the CLI: JSON and tables, --print-submit, and Spark's own failures made one
line (in-process, in the shared session: a second JVM would cost more than the test)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from spark_support import check_lost_and_extra_audit, lost_and_extra, run_cli
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.errors import BrokerError, SparkError
from dedupectl.spark.runner import run_job
from dedupectl.spark.session import SparkSettings


@pytest.fixture
def incident(make_pipeline):
    """A one-partition pipeline whose output lacks e3 and holds x1 that never came in."""
    return lost_and_extra(make_pipeline(partitions=1))


def test_audit_and_replay_commands(incident, spark_session):
    runner = CliRunner()
    result = runner.invoke(app, incident.cli_args("audit", "--json"), catch_exceptions=False)
    assert result.exit_code == 1
    check_lost_and_extra_audit(json.loads(result.stdout))

    table = runner.invoke(app, incident.cli_args("audit"), catch_exceptions=False)
    assert table.exit_code == 1
    assert "VIOLATED" in table.stdout and "e3" in table.stdout and "2 violations" in table.stdout

    dry = runner.invoke(app, incident.cli_args("replay", "--dry-run", "--json"), catch_exceptions=False)
    assert dry.exit_code == 0
    replay = json.loads(dry.stdout)
    assert replay["dry_run"] is True and replay["replayed"] == 0
    assert replay["partitions"][0]["missing"] == 1 and replay["samples"][0]["id"] == "e3"

    table = runner.invoke(app, incident.cli_args("replay", "--dry-run"), catch_exceptions=False)
    assert table.exit_code == 0
    assert "1 records would be replayed" in table.stdout and "e3" in table.stdout
    assert "invalid" in table.stdout and "committed" not in table.stdout  # the group has committed nothing


def test_print_submit(incident):
    result = run_cli(
        *incident.cli_args("audit", "--master", "spark://spark-master:7077", "--window", "24h", "--print-submit"),
        "-X", "sasl.password=hunter2", "--conf", "spark.executor.memory=4g",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    command = result.stdout.strip()
    submit, rest = command.split(" ", 1)
    assert submit.endswith("spark-submit") and Path(submit).name == "spark-submit"
    assert rest.startswith("--master spark://spark-master:7077 --name dedupectl-audit --jars ")
    assert "spark-sql-kafka-0-10_2.13" in command and "kafka-clients" in command
    assert "--conf spark.executor.memory=4g" in command
    assert f"--conf spark.pyspark.python={sys.executable}" in command  # the driver and executors import dedupectl
    job = command.split("dedupectl/spark/submit.py ", 1)[1]
    assert job.startswith(f"audit -b {incident.kafka.bootstrap_servers} -i {incident.input_topic}")
    assert "--window 24h" in job and "--print-submit" not in job and "--master" not in job
    assert "sasl.password=***" in job and "hunter2" not in command
    assert "secrets were redacted" in result.stderr


def test_spark_failures_are_one_line(spark_session):
    settings = SparkSettings(master="local[2]")

    def fails_in_the_jvm(spark):
        return spark.range(3).select(F.raise_error(F.lit("boom at the executor"))).collect()

    with pytest.raises(SparkError) as failure:
        run_job(settings, fails_in_the_jvm)
    assert str(failure.value).startswith("Spark job failed: ") and "boom at the executor" in str(failure.value)
    assert "\n" not in str(failure.value)

    def fails_in_python(spark):
        def explode(_value):
            raise BrokerError("cannot reach Kafka at nowhere:9092", "check bootstrap_servers")

        return spark.range(2).select(F.udf(explode, useArrow=False)(F.col("id"))).collect()

    with pytest.raises(SparkError) as failure:
        run_job(settings, fails_in_python)
    assert str(failure.value) == "cannot reach Kafka at nowhere:9092: check bootstrap_servers"


def test_rebuild_command_replaces_a_store(incident, spark_session, tmp_path):
    from store.dedup_store import DedupStore

    data_dir = tmp_path / "data"
    with DedupStore.open(data_dir / f"{incident.input_topic}-0", topic=incident.input_topic, partition=0) as store:
        store.record([b"stale"], [0])
    args = incident.cli_args("rebuild", "-p", "0", "-d", str(data_dir), "--replace", "--json")
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    assert (report["ids"], report["records_read"], report["duplicate_records"]) == (6, 6, 0)  # e0-e2, e4, e5, x1
    aside = Path(report["replaced"])
    assert aside.parent == data_dir and aside.name.startswith(f"{incident.input_topic}-0.replaced-")
    assert (aside / "CURRENT").exists()
    with DedupStore.open_secondary(data_dir / f"{incident.input_topic}-0") as store:
        assert store.contains_many([b"e0", b"x1", b"e3", b"stale"]) == [True, True, False, False]
        assert store.state.next_seq == 6

    # what alerting and on-call run against the data dir sees the one live store, the moved-aside one is no
    # store of a topic "<topic>-0.replaced-…" (nor is one whose stamp is in local time)
    aside.rename(data_dir / f"{incident.input_topic}-0.replaced-20261101-120000")
    for command in (["window", "--min", "1s"], ["window"], ["lookup", "e0", "stale"]):
        result = CliRunner().invoke(app, [*command, "-d", str(data_dir), "--json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)
        assert {row["topic"] for row in rows} == {incident.input_topic}
        assert {row["partition"] for row in rows} <= {0, None}
    found = {row["id"]: row["partition"] for row in rows}
    assert found == {"e0": 0, "stale": None}

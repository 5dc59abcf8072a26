"""audit, replay and rebuild on a Spark standalone cluster (``spark_cluster``: a master and a worker from
pyspark's own distribution on 127.0.0.1, the worker with a plain node's environment): the same scenarios
and expectations as on local[2] (spark_support), the command ``--print-submit`` prints run through pyspark's
own spark-submit with the same result, and docs/spark-cluster.md's account of how the jars and the project's
code reach the executors checked against what the executors did.

Each job is the CLI in a process of its own (the shared local[2] session would otherwise be reused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spark_standalone import BARE_PATH, StandaloneCluster, spark_home
from spark_support import (
    assert_one_line_error,
    check_lost_and_extra_audit,
    check_messy_output_rebuild,
    check_worker_behind_replay,
    latest_copies,
    lost_and_extra,
    messy_output,
    run_cli,
    store_contents,
    worker_behind,
    worker_behind_replay_args,
)

from dedupectl.spark.jars import find_connector_jars
from store.layout import store_path

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark-cluster.md"
VENV_BIN = Path(sys.executable).parent
JOB_TIMEOUT_S = 600
SMALL = ("--conf", "spark.sql.shuffle.partitions=4")  # as the local tests' session: the data is tiny


def _doc_says(*claims: str) -> None:
    """The doc states each claim (compared with its whitespace folded, as Markdown reads)."""
    text = " ".join(DOC.read_text().split())
    for claim in claims:
        assert " ".join(claim.split()) in text, f"docs/spark-cluster.md no longer says: {claim}"


def _bare_env() -> dict[str, str]:
    """A scheduler's environment (cron, a systemd unit): no virtualenv on PATH, no PYSPARK_* of the developer."""
    drop = ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PATH": BARE_PATH}


def _by_path(*args: str) -> subprocess.CompletedProcess:
    """``/path/to/venv/bin/dedupectl …`` as a scheduler runs it."""
    command = [str(VENV_BIN / "dedupectl"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=_bare_env())


def _executor_of_the_job(cluster: StandaloneCluster, before: list[Path]) -> Path:
    """The working directory of the one executor the job's application had on the worker."""
    (application,) = [app for app in cluster.applications() if app not in before]
    (executor,) = [folder for folder in application.iterdir() if folder.is_dir()]
    return executor


def _same_result(first: dict, second: dict) -> None:
    for report in (first, second):
        for where_and_when in ("seconds", "spark_log"):
            report.pop(where_and_when, None)
    assert first == second


def test_audit_on_the_cluster_and_through_its_spark_submit_command(make_pipeline, spark_cluster):
    pipeline = lost_and_extra(make_pipeline(partitions=1))
    args = pipeline.cli_args("audit", "--json", "--master", spark_cluster.master_url, *SMALL)
    before = spark_cluster.applications()
    result = run_cli(*args, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 1, result.stderr  # 1: the audit found violations
    on_the_cluster = json.loads(result.stdout)
    check_lost_and_extra_audit(on_the_cluster)
    assert on_the_cluster["master"] == spark_cluster.master_url
    executor = _executor_of_the_job(spark_cluster, before)

    # the connector jars: named by their paths on the driver's host, fetched by the executor from the driver
    _doc_says(
        "The driver names them by their paths on its own host",
        "each executor fetches them from the driver into its working directory when it starts",
    )
    jars = find_connector_jars()
    assert jars is not None
    bundled = {jar.name for jar in (spark_home() / "jars").glob("*.jar")}
    for jar in jars.jars:
        assert jar.name not in bundled  # the worker's own Spark lacks it
        assert (executor / jar.name).is_file(), sorted(p.name for p in executor.iterdir())
    # the driver: bound to 127.0.0.1 for a master on loopback, and the executor connected to it there
    _doc_says("For a `spark://` master on a loopback address", "dedupectl binds the driver to 127.0.0.1")
    executor_log = (executor / "stderr").read_text()
    assert "--driver-url spark://CoarseGrainedScheduler@127.0.0.1:" in executor_log.replace('"', "")
    # the code: the worker's python3 fails (spark_standalone), so the executors ran the CLI's interpreter
    _doc_says(
        "the interpreter the `dedupectl` command runs in",
        "the nodes' own `python3` is not used",
        "That interpreter, at that path, with the same dedupectl version installed",
    )

    # --print-submit, where a scheduler prints and runs it: pyspark's own spark-submit, the same result
    printed = _by_path(*args, "--print-submit")
    assert printed.returncode == 0, printed.stderr
    command = printed.stdout.strip()
    assert command.startswith(f"{spark_home() / 'bin' / 'spark-submit'} --master {spark_cluster.master_url} ")
    assert f"--conf spark.pyspark.python={sys.executable}" in command
    assert "--conf spark.driver.host=127.0.0.1" in command
    _doc_says("`spark-submit` on PATH, else the one in pyspark's own distribution")
    before = spark_cluster.applications()
    submitted = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=_bare_env()
    )
    assert submitted.returncode == 1, submitted.stderr[-3000:]
    _same_result(json.loads(submitted.stdout), on_the_cluster)
    executor = _executor_of_the_job(spark_cluster, before)
    assert all((executor / jar.name).is_file() for jar in jars.jars)  # --jars reach the executors the same way


def test_replay_on_the_cluster_run_by_path(make_pipeline, spark_cluster):
    pipeline = make_pipeline(partitions=1)
    records = worker_behind(pipeline)
    result = _by_path(*worker_behind_replay_args(pipeline), "--master", spark_cluster.master_url, *SMALL)
    assert result.returncode == 0, result.stderr
    check_worker_behind_replay(pipeline, records, json.loads(result.stdout))


def test_rebuild_on_the_cluster_holds_each_id_at_its_latest_copy(make_pipeline, spark_cluster, tmp_path):
    pipeline = make_pipeline(partitions=1)
    messy_output(pipeline)
    data_dir = tmp_path / "rebuilt"
    args = pipeline.cli_args("rebuild", "-p", "0", "-d", str(data_dir), "--json")
    result = run_cli(*args, "--master", spark_cluster.master_url, *SMALL, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    check_messy_output_rebuild(report)
    rebuilt = store_path(data_dir, pipeline.input_topic, 0)
    assert report["store"] == str(rebuilt)
    # the SST files came back from the executors to the driver, which wrote the store on its own host
    _doc_says("The SST files of `rebuild` travel back to the driver, which writes the store")
    assert store_contents(rebuilt) == latest_copies(pipeline)


def test_the_code_is_not_shipped_an_interpreter_without_dedupectl_fails_in_one_line(
    make_pipeline, spark_cluster, tmp_path
):
    """The doc's other half: nothing of dedupectl travels with the job, the executors' interpreter must have it."""
    bare = tmp_path / "python-without-dedupectl"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    pipeline = lost_and_extra(make_pipeline(partitions=1))
    args = pipeline.cli_args("audit", "--master", spark_cluster.master_url, *SMALL)
    python = ("--conf", f"spark.pyspark.python={bare / 'bin' / 'python'}")
    once = ("--conf", "spark.task.maxFailures=1")  # the first failed task fails the job: no retries to wait for
    result = run_cli(*args, *python, *once, timeout=JOB_TIMEOUT_S)
    _doc_says("Not shipped.", "`--conf spark.pyspark.python=…`")
    line = assert_one_line_error(result, "the executors' Python cannot import", "No module named 'dedupectl'")
    assert "spark.pyspark.python" in line and "see the Spark log" in line

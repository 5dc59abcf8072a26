"""The engine peers of benchmarks/bench_peers.py: Spark Structured Streaming on a tiny input through the suite's
own runner (the project's pyspark and connector jars, so nothing is skipped on a fresh machine), and the parts
of the harness the engines rely on: a crash kills a driver's JVM with it, and Flink's restart finds the
newest checkpoint.

Flink itself is not run here: its environment (PyFlink and Apache Beam, ~850 MB) is too heavy for the suite,
so its smoke run is part of the benchmark (``benchmarks/peers/engines.py``), which must pass before Flink is
measured. The crash runs are left to the benchmark too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from peers_context import tiny_run_context  # noqa: E402

from benchmarks.peers._process_tree import descendants  # noqa: E402
from benchmarks.peers.flink_sql import latest_checkpoint  # noqa: E402
from benchmarks.peers.runner import Context, _kill_tree, clean_run  # noqa: E402
from benchmarks.peers.systems import SYSTEMS  # noqa: E402
from dedupectl.sample_events import SampleSpec  # noqa: E402

SPEC = SampleSpec(3_000, duplicate_ratio=0.02, seed=5)


@pytest.fixture(scope="module")
def context(kafka_broker, tmp_path_factory: pytest.TempPathFactory) -> Context:
    return tiny_run_context(kafka_broker, tmp_path_factory.mktemp("engines"), "engines", SPEC, process_timeout=300)


def test_spark_streaming_publishes_each_id_once(context: Context) -> None:
    figures = clean_run(context, SYSTEMS["spark"])

    check = figures["output_check"]
    assert (check["duplicated_ids"], check["missing_ids"], check["unexpected_ids"]) == (0, 0, 0)
    assert check["records"] == len(context.expected_ids)
    assert figures["consumed"] == SPEC.count and figures["busy_seconds"] > 0
    # the JVM's memory is counted with its Python driver's, and the checkpoint holds the dedup state
    assert figures["peak_rss_mb"] > figures["report"]["driver_peak_rss_mb"]
    assert figures["state_bytes"] > 0 and figures["state_bytes_per_id"] is not None


def test_a_crash_kills_the_driver_and_the_process_it_started() -> None:
    parent = textwrap.dedent("""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(child.pid, flush=True)
        time.sleep(120)
    """)
    driver = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    child_pid = int(driver.stdout.readline())
    assert child_pid in descendants(driver.pid)

    _kill_tree(driver)

    driver.wait(10)
    deadline = time.monotonic() + 10
    while not _gone(child_pid):
        assert time.monotonic() < deadline, "the child outlived its killed parent"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_flink_restarts_from_the_newest_completed_checkpoint(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    for job, number, complete in [("job-a", 3, True), ("job-a", 4, False), ("job-b", 2, True)]:
        folder = checkpoints / job / f"chk-{number}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "_metadata").write_bytes(b"x")
        time.sleep(0.01)  # distinct modification times: job-b's checkpoint is the newest
    assert latest_checkpoint(checkpoints) == checkpoints / "job-b" / "chk-2"
    assert latest_checkpoint(tmp_path / "none") is None

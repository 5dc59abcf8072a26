"""The Spark commands run the way systemd, cron or a Kubernetes command runs them: the CLI by its path from
a virtualenv that is not on PATH, against a worker that is still catching up, and pointed at a port where
something other than a Spark master listens."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from spark_support import (
    assert_one_line_error,
    check_worker_behind_replay,
    event,
    run_cli,
    worker_behind,
    worker_behind_replay_args,
)

from dedupectl.spark.rpc_probe import spark_rpc_problem
from dedupectl.spark.session import check_master

VENV_BIN = Path(sys.executable).parent
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"  # what a unit's or a cron job's PATH holds: not the venv


def _bare_env() -> dict[str, str]:
    """The environment of a supervisor's command: no activated virtualenv, no PYSPARK_* of the developer."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = BARE_PATH
    return env


def test_replay_by_path_outside_the_venv_while_the_worker_is_behind(make_pipeline):
    python3 = shutil.which("python3", path=BARE_PATH)
    if python3 is None or subprocess.run([python3, "-c", "import pyspark"], capture_output=True).returncode == 0:
        pytest.skip("needs a python3 on the bare PATH that lacks pyspark (what executors find on a plain host)")
    pipeline = make_pipeline(partitions=1)
    records = worker_behind(pipeline)
    result = subprocess.run(
        [str(VENV_BIN / "dedupectl"), *worker_behind_replay_args(pipeline)],
        capture_output=True,
        text=True,
        timeout=240,
        env=_bare_env(),
    )
    assert result.returncode == 0, result.stderr
    check_worker_behind_replay(pipeline, records, json.loads(result.stdout))


def test_a_port_where_no_spark_master_answers_is_one_line_at_once(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce_input([event("e0")])
    started = time.monotonic()  # the master given is the broker's own port: it listens, it is no Spark master
    result = run_cli(*pipeline.cli_args("audit", "--master", f"spark://{pipeline.kafka.bootstrap_servers}"))
    elapsed = time.monotonic() - started
    line = assert_one_line_error(result, "cannot reach the Spark master spark://", "not a Spark master", exit_code=2)
    assert "Py4J" not in line and elapsed < 15, (elapsed, line)


@pytest.fixture
def silent_port():
    """A port that accepts connections and never says a word (a stuck service, a proxy without a backend)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for connection in held:
        connection.close()
    server.close()


def test_the_master_probe_tells_spark_from_the_rest(silent_port, spark_cluster):
    spark_master_port = spark_cluster.master_port  # a real standalone master from pyspark's distribution
    assert spark_rpc_problem("127.0.0.1", spark_master_port, 3.0) is None
    check_master(f"spark://127.0.0.1:{silent_port},127.0.0.1:{spark_master_port}")  # one answering is enough
    started = time.monotonic()
    problem = spark_rpc_problem("127.0.0.1", silent_port, 1.0)
    assert problem is not None and "no Spark reply within 1s" in problem
    assert time.monotonic() - started < 3
    # a master that wants an authentication handshake first is only connected to
    assert spark_rpc_problem("127.0.0.1", silent_port, 1.0, speak=False) is None
    check_master(f"spark://127.0.0.1:{silent_port}", conf={"spark.authenticate": "true"})

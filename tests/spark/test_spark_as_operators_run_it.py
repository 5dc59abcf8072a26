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
from confluent_kafka import Consumer, TopicPartition
from spark_support import Record, assert_one_line_error, event, run_cli

from dedupectl.spark.rpc_probe import spark_rpc_problem
from dedupectl.spark.session import check_master
from store.dedup_store import DedupStore

VENV_BIN = Path(sys.executable).parent
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"  # what a unit's or a cron job's PATH holds: not the venv


def _bare_env() -> dict[str, str]:
    """The environment of a supervisor's command: no activated virtualenv, no PYSPARK_* of the developer."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = BARE_PATH
    return env


def _commit(pipeline, offsets: dict[int, int]) -> None:
    """Commit the worker group's input offsets, as a worker that has consumed up to there leaves them."""
    consumer = Consumer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "group.id": pipeline.group_id})
    try:
        consumer.commit(
            offsets=[TopicPartition(pipeline.input_topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def test_replay_by_path_outside_the_venv_while_the_worker_is_behind(make_pipeline):
    python3 = shutil.which("python3", path=BARE_PATH)
    if python3 is None or subprocess.run([python3, "-c", "import pyspark"], capture_output=True).returncode == 0:
        pytest.skip("needs a python3 on the bare PATH that lacks pyspark (what executors find on a plain host)")
    pipeline = make_pipeline(partitions=1)
    records = [event(f"e{i}") for i in range(6)] + [Record(None, b"not json")]
    records += [event(f"e{i}") for i in range(6, 10)]  # offsets: e0-e5 0-5, the record without an id 6, e6-e9 7-10
    pipeline.produce_input(records)
    # The worker consumed offsets 0-4 (committed 5) and published them, but e2 is lost from the output. Then
    # it went on: e5 is in its store, not yet in the output replay reads (the output was read a moment before
    # the store, while the worker published e5). e6-e9 and the record without an id it has not reached.
    pipeline.publish([event(i) for i in ("e0", "e1", "e3", "e4")])
    _commit(pipeline, {0: 5})
    with DedupStore.open(pipeline.store_path(0), topic=pipeline.input_topic, partition=0) as store:
        store.record([b"e0", b"e1", b"e3", b"e4", b"e5"], [0] * 5)

    args = pipeline.cli_args("replay", "--group-id", pipeline.group_id, "-d", str(pipeline.data_dir), "--json")
    result = subprocess.run(
        [str(VENV_BIN / "dedupectl"), *args], capture_output=True, text=True, timeout=240, env=_bare_env()
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (p0,) = report["partitions"]
    assert (p0["committed_offset"], p0["not_yet_consumed"], p0["invalid_records"]) == (5, 5, 1)
    assert (p0["missing"], p0["held_by_store"], p0["replayed"]) == (1, 0, 1)
    assert [s["id"] for s in report["samples"]] == ["e2"]
    assert (report["not_yet_consumed"], report["invalid_records"]) == (5, 1)

    consumer = Consumer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "group.id": "check"})
    try:  # the one replayed record is e2, appended to the input with where it came from
        consumer.assign([TopicPartition(pipeline.input_topic, 0, len(records))])
        message = consumer.poll(15)
        assert message is not None and message.key() == b"e2"
        assert dict(message.headers())["dedupectl.replayed-from"] == f"{pipeline.input_topic}[0]@2".encode()
    finally:
        consumer.close()


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


def test_the_master_probe_tells_spark_from_the_rest(silent_port, spark_master_port):
    assert spark_rpc_problem("127.0.0.1", spark_master_port, 3.0) is None
    check_master(f"spark://127.0.0.1:{silent_port},127.0.0.1:{spark_master_port}")  # one answering is enough
    started = time.monotonic()
    problem = spark_rpc_problem("127.0.0.1", silent_port, 1.0)
    assert problem is not None and "no Spark reply within 1s" in problem
    assert time.monotonic() - started < 3
    # a master that wants an authentication handshake first is only connected to
    assert spark_rpc_problem("127.0.0.1", silent_port, 1.0, speak=False) is None
    check_master(f"spark://127.0.0.1:{silent_port}", conf={"spark.authenticate": "true"})


@pytest.fixture(scope="module")
def spark_master_port(tmp_path_factory):
    """A real Spark standalone master from pyspark's own distribution, on 127.0.0.1."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path_factory.mktemp("spark-master") / "master.log"
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    command = [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while b"ALIVE" not in log.read_bytes():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

"""``dedupectl status`` against two real worker processes on the project's broker: owners from the group,
lag and rate from Kafka, window, store size and last commit from the metrics endpoints (or, when an endpoint
does not answer, from the data directory), verdicts and exit codes; and the metrics parser on a real registry."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from pipeline_support import Pipeline
from prometheus_client import generate_latest
from waiting import wait_for

from dedupectl.config import KafkaConfig
from dedupectl.fleet import (
    BELOW_FLOOR,
    ENDPOINT_DOWN,
    LAGGING,
    MISROUTED,
    NO_OWNER,
    OK,
    REFUSED,
    STALLED,
    UNKEYED,
    KafkaSample,
    StatusRequest,
    StoreFigures,
    fleet_status,
    partition_status,
)
from dedupectl.kafka_clients import create_topics
from dedupectl.metrics import WorkerMetrics
from dedupectl.scrape import PartitionFigures, parse_metrics, scrape
from store.worker_status import read_statuses

LOCAL = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_parser_reads_a_real_workers_exposition() -> None:
    metrics = WorkerMetrics()
    metrics.window_seconds.labels("3").set(90_000)
    metrics.window_seconds.labels("5").set(float("nan"))
    metrics.store_bytes.labels("3").set(4096)
    metrics.refused.labels("5", "retention").set(1)
    metrics.last_commit.set(1_700_000_000)
    metrics.routing.misrouted.labels("3").inc(7)
    metrics.routing.unkeyed.labels("3").inc(2)
    metrics.routing.unkeyed.labels("5").inc(0)
    found = parse_metrics("http://w/metrics", generate_latest(metrics.registry).decode())
    assert (found.partitions[3].misrouted, found.partitions[3].unkeyed) == (7, 2)
    assert (found.partitions[5].misrouted, found.partitions[5].unkeyed) == (0, 0)
    assert found.partitions[3].window_seconds == 90_000 and found.partitions[3].store_bytes == 4096
    assert found.partitions[5].window_seconds is None and found.partitions[5].refused == "retention"
    assert found.last_commit_at == 1_700_000_000 and found.version


@pytest.mark.parametrize(
    ("figures", "lag", "owner", "commit_age_s", "verdict"),
    [
        (PartitionFigures(10.0, 1, "retention"), 0, "w1", 1, REFUSED),  # worst first: refused over below the floor
        (PartitionFigures(10.0, 1), 0, None, None, BELOW_FLOOR),
        (PartitionFigures(None, 1), 5, None, None, NO_OWNER),  # an empty store is not below the floor
        (PartitionFigures(99.0, 1), 5, "w1", 600, STALLED),
        (PartitionFigures(99.0, 1), 0, "w1", 600, OK),  # no input waiting: an idle worker does not commit
        (PartitionFigures(99.0, 1), 50, "w1", 1, LAGGING),
        (PartitionFigures(99.0, 1, misrouted=3, unkeyed=2), 50, "w1", 1, MISROUTED),  # pages, over lagging
        (PartitionFigures(99.0, 1, misrouted=3), 5, "w1", 600, STALLED),
        (PartitionFigures(99.0, 1, unkeyed=2), 50, "w1", 1, LAGGING),
        (PartitionFigures(99.0, 1, unkeyed=2), 0, "w1", 1, UNKEYED),  # a warning: exit 0
    ],
)
def test_verdicts(figures, lag: int, owner, commit_age_s, verdict: str) -> None:
    request = StatusRequest(KafkaConfig("unused:9092"), "t", "g", floor_s=60, stall_s=300, max_lag=10)
    owners = {} if owner is None else {0: (owner, "10.0.0.1")}
    sample = KafkaSample(time.monotonic(), 1, {0: 100}, {0: 100 - lag}, owners, "stable")
    last = {} if commit_age_s is None else {0: time.time() - commit_age_s}
    stores = StoreFigures({0: figures}, {0: "test"}, last)
    assert partition_status(request, sample, None, stores, 0).verdict == verdict


@pytest.mark.parametrize(
    ("down_hosts", "answering", "verdict"),
    [
        ({"10.0.0.1"}, False, ENDPOINT_DOWN),  # its host's endpoint refuses, and no endpoint speaks for it
        ({"10.0.0.9"}, False, LAGGING),  # the refusing endpoint is on another host: not this owner's
        ({"10.0.0.1"}, True, LAGGING),  # another endpoint reports its partitions: this worker is alive
    ],
)
def test_an_owner_whose_endpoint_refuses_is_endpoint_down(down_hosts, answering, verdict: str) -> None:
    request = StatusRequest(KafkaConfig("unused:9092"), "t", "g", floor_s=60, max_lag=10)
    owners = {0: ("w1", "10.0.0.1"), 1: ("w1", "10.0.0.1")}
    sample = KafkaSample(time.monotonic(), 2, {0: 100, 1: 100}, {0: 50, 1: 50}, owners, "stable")
    live = {1: PartitionFigures(99.0, 1)} if answering else {}
    stores = StoreFigures(live, {}, {p: time.time() for p in live}, down_hosts=frozenset(down_hosts))
    assert partition_status(request, sample, None, stores, 0).verdict == verdict


def test_an_endpoint_that_is_not_a_worker_is_named_not_trusted() -> None:
    refused = scrape(f"127.0.0.1:{free_port()}")
    assert "Connection refused" in (refused.error or "") and refused.refused and refused.host == "127.0.0.1"
    with pytest.raises(ValueError):  # text without dedupectl_build_info is some other server's
        parse_metrics("u", "# TYPE other gauge\nother 1\n")


@pytest.fixture(scope="module")
def fleet(kafka_broker, tmp_path_factory):
    """Two `dedupectl run` processes sharing a 4-partition input, each with its own data dir and metrics port.
    Shared by the tests below in their order: the last one stops the fleet."""
    kafka, name = KafkaConfig(kafka_broker.bootstrap_servers), f"fleet-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [name, f"{name}-out", f"{name}.dead-letter"], 4)
    tmp_path = tmp_path_factory.mktemp("fleet")
    pipeline = Pipeline(kafka, name, f"{name}-out", f"{name}.dead-letter", 4, tmp_path)
    workers = {}
    for name in ("w1", "w2"):
        port = free_port()
        process = pipeline.spawn_worker(name, tmp_path / name, "--metrics-port", str(port), "--metrics-host", LOCAL)
        workers[name] = (process, f"127.0.0.1:{port}", tmp_path / name)
    request = StatusRequest(
        kafka=pipeline.kafka,
        input_topic=pipeline.input_topic,
        group_id=f"group-{pipeline.input_topic}",
        metrics=tuple(endpoint for _, endpoint, _ in workers.values()),
        floor_s=1.0,
    )

    def settled_owners() -> dict[int, str] | None:
        """Owners once the group is stable and each worker's status file agrees with it (assignment done)."""
        report = fleet_status(request, rate_over_s=0)
        owners = {p.partition: p.worker_id for p in report.partitions}
        files = {p: name for name, (_, _, d) in workers.items() for s in read_statuses(d) for p in s.partitions}
        settled = report.group_state == "stable" and set(owners.values()) == {"w1", "w2"} and files == owners
        return owners if settled else None

    def drained() -> bool:
        report = fleet_status(request, rate_over_s=0)
        # the store size gauge is refreshed every few seconds, so it may appear after the window's
        figures = all(p.lag == 0 and p.window_seconds and p.store_bytes for p in report.partitions)
        return figures and settled_owners() == owners

    wait_for(settled_owners, 60, "both workers holding partitions")
    owners = settled_owners()
    # produced once both hold their partitions: a store only learns what its worker published or recovered
    pipeline.produce((f"id-{n}".encode(), json.dumps({"messageId": f"id-{n}"}).encode()) for n in range(2000))
    wait_for(drained, 60, "the input drained into every store")
    yield pipeline, workers, request
    for process, _, _ in workers.values():
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.communicate(timeout=30)


def _cli(pipeline, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dedupectl.cli.app", "status", "-b", pipeline.kafka.bootstrap_servers]
    command += ["-i", pipeline.input_topic, "-o", pipeline.output_topic, "--group-id", f"group-{pipeline.input_topic}"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, env=dict(os.environ))


def test_status_shows_the_running_fleet(fleet) -> None:
    pipeline, workers, _ = fleet
    endpoints = [arg for _, endpoint, _ in workers.values() for arg in ("-m", endpoint)]
    began = time.monotonic()
    result = _cli(pipeline, *endpoints, "--min", "0s", "--json")
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    assert took < 10, f"status took {took:.1f}s"
    report = json.loads(result.stdout)
    held = {name: set(read_statuses(data_dir)[0].partitions) for name, (_, _, data_dir) in workers.items()}
    for p in report["partitions"]:
        assert p["partition"] in held[p["worker_id"]], "the owner is the worker whose status file holds it"
        assert p["window_seconds"] is not None, report
        assert p["host"] == "127.0.0.1"  # no data dir given: the address the group saw the worker connect from
        assert p["lag"] == 0 and p["committed_offset"] == p["end_offset"]
        assert p["window_seconds"] > 0 and p["store_bytes"] > 0
        assert 0 <= p["last_commit_age_s"] < 120
        assert p["verdict"] == OK and p["store_figures_from"].startswith("http://127.0.0.1:")
    assert sum(p["end_offset"] for p in report["partitions"]) == 2000

    below = _cli(pipeline, *endpoints, "--min", "24h")
    assert below.returncode == 1, below.stdout + below.stderr
    assert below.stdout.count(BELOW_FLOOR) == 4 and "w1 @" in below.stdout and "w2 @" in below.stdout


def test_status_measures_the_rate_while_records_flow(fleet) -> None:
    pipeline, _, request = fleet
    stop = threading.Event()

    def feed() -> None:
        n = 0
        while not stop.is_set():
            pipeline.produce((f"flow-{n + k}".encode(), b'{"messageId": "x"}') for k in range(200))
            n += 200
            time.sleep(0.05)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        time.sleep(1)
        report = fleet_status(request, rate_over_s=2.0)
    finally:
        stop.set()
        feeder.join()
    assert sum(p.messages_per_s for p in report.partitions) > 100
    assert report.seconds < 10


def test_a_stopped_worker_shows_as_lagging_with_its_figures_from_its_data_dir(fleet) -> None:
    pipeline, workers, request = fleet
    process, endpoint, data_dir = workers["w2"]
    w2_partitions = set(read_statuses(data_dir)[0].partitions)
    process.send_signal(signal.SIGSTOP)  # alive to the group for the session timeout, but doing nothing
    pipeline.produce((f"late-{n}".encode(), b'{"messageId": "late"}') for n in range(400))
    report = fleet_status(StatusRequest(**{**request.__dict__, "data_dirs": (data_dir,), "max_lag": 10}), rate_over_s=0)
    assert any(endpoint in note and "timed out" in note for note in report.unavailable), report.unavailable
    for p in report.partitions:
        if p.partition in w2_partitions:
            assert p.worker_id == "w2" and p.lag > 10 and p.verdict == LAGGING
            assert p.store_figures_from == f"data dir {data_dir}" and p.window_seconds > 0
            assert p.host == socket.gethostname()  # from w2's status file
        else:
            assert p.worker_id == "w1"
    process.send_signal(signal.SIGCONT)


def test_partitions_nobody_holds_fail_the_check(fleet) -> None:
    pipeline, workers, request = fleet
    for process, _, _ in workers.values():
        process.kill()
        process.wait(timeout=30)
    # static members stay in the group until their session times out (6 s here)
    wait_for(lambda: all(p.verdict == NO_OWNER for p in fleet_status(request, rate_over_s=0).partitions), 30)
    result = _cli(pipeline, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert {p["verdict"] for p in report["partitions"]} == {NO_OWNER}
    assert any("window and store size of partition(s) 0-3" in note for note in report["unavailable"])


def _status_cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dedupectl.cli.app", "status", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=dict(os.environ))


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_killed_worker_is_endpoint_down_until_its_session_times_out(make_pipeline) -> None:
    pipeline = make_pipeline(partitions=2)
    port = free_port()
    worker = pipeline.spawn_worker(
        "w1", pipeline.root / "w1", "--metrics-port", str(port), "--metrics-host", LOCAL,
        env={"DEDUPECTL_SESSION_TIMEOUT_MS": "120000"},  # the group counts it as the owner all through the test
    )  # fmt: skip
    request = StatusRequest(
        pipeline.kafka, pipeline.input_topic, f"group-{pipeline.input_topic}", metrics=(f"{LOCAL}:{port}",)
    )

    def held() -> bool:
        return all(p.worker_id == "w1" and p.store_figures_from for p in fleet_status(request, 0).partitions)

    try:
        wait_for(held, 60, "the worker holding both partitions")
    finally:
        worker.kill()
        worker.communicate(timeout=30)
    pipeline.produce((f"after-{n}".encode(), b'{"messageId": "x"}') for n in range(100))
    result = _status_cli(
        "-b", pipeline.kafka.bootstrap_servers, "-i", pipeline.input_topic, "-o", pipeline.output_topic,
        "--group-id", f"group-{pipeline.input_topic}", "-m", f"{LOCAL}:{port}", "--max-lag", "10", "--json",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [(p["worker_id"], p["verdict"]) for p in report["partitions"]] == [("w1", ENDPOINT_DOWN)] * 2
    assert any("Connection refused" in note for note in report["unavailable"]), report["unavailable"]


def test_status_refuses_an_output_topic_that_does_not_exist(make_pipeline) -> None:
    pipeline = make_pipeline(partitions=2)
    result = _status_cli("-b", pipeline.kafka.bootstrap_servers, "-i", pipeline.input_topic, "-o", "no-such-topic")
    line = _one_line_error(result)
    assert "topic 'no-such-topic' does not exist" in line, line


def test_status_names_an_unreachable_broker_within_seconds_as_a_read_only_look() -> None:
    began = time.monotonic()
    result = _status_cli("-b", f"127.0.0.1:{free_port()}", "-i", "events", "-o", "events-deduped")
    took = time.monotonic() - began
    line = _one_line_error(result)
    assert "cannot reach Kafka at 127.0.0.1:" in line and "check bootstrap_servers" in line, line
    assert "restart" not in line, line  # the worker's advice; status has nothing to restart
    assert took < 12, f"status took {took:.1f}s"

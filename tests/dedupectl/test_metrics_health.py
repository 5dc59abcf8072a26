"""The health endpoints served beside /metrics, over a real HTTP server on 127.0.0.1: /healthz fails once the
worker's loop stops beating, /readyz holds from the loop's first beat on, and /metrics is still the registry;
and a real worker's loop, on the shared broker, is what beats."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from dedupectl.metrics import WorkerMetrics
from dedupectl.worker import Worker
from store.errors import ConfigError

STALE_S = 0.5


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def served() -> tuple[WorkerMetrics, int]:
    metrics = WorkerMetrics(stale_after_s=STALE_S)
    return metrics, metrics.serve(_free_port(), "127.0.0.1")


def test_liveness_follows_the_loops_beat(served):
    metrics, port = served
    status, body = _get(port, "/healthz")
    assert status == 200 and "the worker started" in body  # starting: the limit counts from the start
    time.sleep(STALE_S + 0.2)
    status, body = _get(port, "/healthz")
    assert status == 503 and body.startswith("unhealthy: the worker started") and "limit 0.5 s" in body

    metrics.beat()
    status, body = _get(port, "/healthz")
    assert status == 200 and body.startswith("ok: the worker's loop last beat")
    time.sleep(STALE_S + 0.2)  # a loop stuck since: the metrics thread still answers, the check does not pass
    assert _get(port, "/healthz")[0] == 503
    metrics.beat()
    assert _get(port, "/healthz")[0] == 200


def test_the_loops_data_dir_measurement_is_its_beat(served, tmp_path):
    metrics, port = served
    time.sleep(STALE_S + 0.2)
    assert _get(port, "/healthz")[0] == 503
    metrics.measure_data_dir(tmp_path)  # what the worker's loop calls every few seconds
    assert _get(port, "/healthz")[0] == 200 and _get(port, "/readyz")[0] == 200


def test_readiness_holds_from_the_first_beat_on(served):
    metrics, port = served
    status, body = _get(port, "/readyz")
    assert status == 503 and "has not run yet" in body
    metrics.beat()
    assert _get(port, "/readyz") == (200, "ok: the worker's loop is running\n")
    time.sleep(STALE_S + 0.2)  # a stall (or a long rebalance) is the liveness check's: readiness does not flap
    assert _get(port, "/readyz")[0] == 200 and _get(port, "/healthz")[0] == 503


def test_metrics_are_still_served_beside_them(served):
    metrics, port = served
    metrics.store_keys.labels("3").set(42)
    status, body = _get(port, "/metrics")
    assert status == 200 and 'dedupectl_store_keys{partition="3"} 42.0' in body
    assert "dedupectl_build_info" in body and "process_cpu" not in body  # its own registry only


def test_a_port_in_use_is_the_operators_to_change(served):
    _, port = served
    with pytest.raises(ConfigError, match="the port is in use by another process"):
        WorkerMetrics().serve(port, "127.0.0.1")


def test_a_running_workers_loop_keeps_it_live_and_ready(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    metrics = WorkerMetrics(stale_after_s=15)
    port = metrics.serve(_free_port(), "127.0.0.1")
    worker, stop = Worker(pipeline.config(), metrics), threading.Event()
    running = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    running.start()
    try:
        deadline = time.monotonic() + 60
        while _get(port, "/readyz")[0] != 200:  # its start-up checks, then a maintenance step of its loop
            assert running.is_alive() and time.monotonic() < deadline, "the worker's loop never beat"
            time.sleep(0.5)
        for _ in range(3):  # a maintenance step every 5 s, input or not: never a beat older than that
            time.sleep(2.5)
            status, body = _get(port, "/healthz")
            since = float(re.search(r"last beat ([\d.]+) s ago", body).group(1))
            assert status == 200 and since < 5 + 3, body  # 3 s for a loaded machine
    finally:
        stop.set()
        running.join(60)

"""A stop with no work in hand is honoured at once: a worker that cannot reach its broker (starting up, its
retries running) ends within a few seconds of Ctrl-C or SIGTERM, whatever Kafka call it is blocked in."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest
from waiting import wait_for


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_that_cannot_reach_its_broker_stops_within_seconds(tmp_path, signum):
    log = tmp_path / "worker.log"
    command = [
        sys.executable, "-m", "dedupectl.cli.app", "--log-format", "text", "run", "-b", f"127.0.0.1:{_unused_port()}",
        "-t", "events", "-o", "events-deduped", "-d", str(tmp_path / "data"), "--worker-id", "w1",
        "--group-id", "g1", "--log-level", "info",
    ]  # fmt: skip
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: "retrying in" in log.read_text(), 60, "the worker retrying the unreachable broker")
        began = time.monotonic()
        process.send_signal(signum)
        code = process.wait(timeout=15)
        took = time.monotonic() - began
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert took < 4, f"{took:.1f}s to stop:\n{text[-2000:]}"
    assert code == -signal.SIGTERM
    assert f"{signum.name} received" in text
    assert "no transaction in flight and nothing being written: exiting now" in text

"""Log lines off a terminal: one line per event, never wrapped; ``--log-format json``: one object per line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

LONG = "partition 0 recovered: read output offsets 74997..76984 (1985 records), recorded 1985 missing ids " + "x" * 110
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING|ERROR) dedupectl\.[\w.]+: .+$")

# a process that sets logging up as a command does and logs a long line, a warning and an exception
LOGGING_PROCESS = f"""
import logging
from dedupectl.cli.logs import setup_logging, use_log_format
import sys
use_log_format(sys.argv[1])
setup_logging("info")
log = logging.getLogger("dedupectl.worker")
log.info({LONG!r})
log.warning("commit retry after: %s", "COORDINATOR_LOAD_IN_PROGRESS")
try:
    raise ValueError("boom")
except ValueError:
    log.exception("the batch failed")
"""


def _stderr_of(log_format: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", LOGGING_PROCESS, log_format],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.parametrize("log_format", ["auto", "text"])
def test_piped_text_logs_are_one_line_per_event(log_format: str):
    assert len(LONG) > 200
    lines = _stderr_of(log_format).splitlines()
    assert TEXT_LINE.match(lines[0]) and lines[0].endswith(f"INFO dedupectl.worker: {LONG}"), lines[0]
    assert TEXT_LINE.match(lines[1]) and lines[1].endswith("commit retry after: COORDINATOR_LOAD_IN_PROGRESS")
    assert TEXT_LINE.match(lines[2]) and lines[2].endswith("ERROR dedupectl.worker: the batch failed")
    assert lines[3] == "Traceback (most recent call last):", "the traceback follows its event"


def test_json_logs_are_one_object_per_line():
    events = [json.loads(line) for line in _stderr_of("json").splitlines()]
    assert [event["level"] for event in events] == ["INFO", "WARNING", "ERROR"]
    assert events[0] == {"time": events[0]["time"], "level": "INFO", "logger": "dedupectl.worker", "message": LONG}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", events[0]["time"])
    assert "exception" not in events[1]
    assert events[2]["message"] == "the batch failed" and "ValueError: boom" in events[2]["exception"]


def test_the_worker_logs_json_from_the_environment(make_pipeline):
    """The global option's variable reaches a real ``dedupectl run`` (and is not taken for a config field)."""
    pipeline = make_pipeline(partitions=1)
    pipeline.produce([(b"a", b'{"messageId": "a"}'), (b"b", b'{"messageId": "b"}')])
    args = pipeline.cli_args("w1", pipeline.root / "data", "--exit-on-idle", "2", "--json")
    args[args.index("--log-level") + 1] = "info"
    env = {
        **os.environ,
        "DEDUPECTL_LOG_FORMAT": "json",
        "DEDUPECTL_SESSION_TIMEOUT_MS": "6000",
        "COLUMNS": "80",
    }
    done = subprocess.run(args, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines()]
    messages = [event["message"] for event in events]
    assert any(message.startswith("worker w1: ") for message in messages), messages
    assert any(message.startswith("partition 0 ") for message in messages), messages
    assert json.loads(done.stdout)["published"] == 2


def test_with_json_logs_a_failed_command_ends_with_a_json_object():
    env = {key: value for key, value in os.environ.items() if not key.startswith("DEDUPECTL_")}
    done = subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", "--log-format", "json", "reconcile", "--all", "-i", "in",
         "-o", "out"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    event = json.loads(line)
    assert event["level"] == "ERROR" and event["message"].startswith("no Kafka bootstrap servers given")
    assert event["error"] == {
        "message": "no Kafka bootstrap servers given",
        "hint": event["error"]["hint"],
        "kind": "ConfigError",
        "exit_code": 2,
    }

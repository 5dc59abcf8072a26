"""Every inspection command works on a store another process holds read-write and keeps writing to, without
taking its lock or slowing it down; the maintenance verbs refuse while it holds the store."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dedupectl.cli.app import app

WRITER = Path(__file__).with_name("store_live_writer.py")
runner = CliRunner()


def _status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {"batches": 0, "dropped": 0, "latencies": []}


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def live_store(tmp_path: Path):
    """``(data_dir, status_file)`` of a store written by a separate process for the test's duration."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    status, stop = tmp_path / "status.json", tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir / "live-0"), str(status), str(stop)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # enough batches for flushed files, an aging step that dropped a generation, and a statistics dump
        ready = lambda: _status(status)["batches"] >= 80 and _status(status)["dropped"] >= 1  # noqa: E731
        _wait_for(lambda: ready() or writer.poll() is not None, "the writer to flush, age and drop a generation")
        assert writer.poll() is None, writer.stderr.read()
        yield data_dir, status
    finally:
        stop.touch()
        try:
            code = writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            writer.kill()
            raise
        assert code == 0, writer.stderr.read()


def _run_json(*args: str) -> object:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_inspection_commands_follow_a_live_writer_without_blocking_it(live_store):
    data_dir, status = live_store
    before = _status(status)["batches"]
    d = ["-d", str(data_dir)]

    (window,) = _run_json("window", *d)
    assert window["partition"] == 0 and window["topic"] == "live"
    assert 0 < window["live_ids"] <= 20_000 + 25 * 500, window  # aged to 20,000 every 25 batches
    assert window["oldest_seq"] >= 500 and window["disk_bytes"] > 0

    (stats,) = _run_json("stats", *d)
    families = {family["family"]: family for family in stats["families"]}
    assert set(families) == {"ids", "times", "meta"}
    in_files = any(level["files"] >= 1 for level in families["ids"]["levels"] if level["level"] != "Sum")
    assert in_files or stats["arrays"]["ids"] > 0  # the newest generation flushed, or sealed ones in their arrays
    assert stats["dumped_at"] is not None  # the writer's LOG dump (I/O columns, bloom counters)
    assert stats["bloom"]["useful"] > 0  # the writer's lookups of new ids: filters saved reads

    ssts = _run_json("sst", *d, "-f", "ids")  # the newest generation's, once flushed: the others are in arrays
    assert all(row["family"] == "ids" and row["smallest"].startswith("ajs-") for row in ssts)
    ranges = sorted({(row["first_seq"], row["last_seq"]) for row in ssts})
    assert all(a[1] < b[0] for a, b in pairwise(ranges))  # generations hold disjoint runs
    assert all(first > 0 for first, _ in ranges)  # the oldest generation was dropped by aging

    jobs = _run_json("compactions", *d, "-n", "50")
    kinds = {job["kind"] for job in jobs}
    assert "flush" in kinds and "compaction" in kinds, jobs  # flushes, and generations sealed
    assert all(job["family"] in ("ids", "times", "meta", "default") for job in jobs if job["kind"] == "flush"), jobs

    # the writer goes on meanwhile and ages ids out within a second or two: look up every 100th id from the
    # newest `window` saw to far past it; those in the window the lookup read must be one unbroken run
    candidates = range(window["newest_seq"], window["newest_seq"] + 2_000_000, 100)
    gone, *answers = _run_json("lookup", *d, f"ajs-{0:032x}", *(f"ajs-{n:032x}" for n in candidates))
    assert not gone["in_window"]  # id 0 was aged out
    held = [(n, answer) for n, answer in zip(candidates, answers, strict=True) if answer["in_window"]]
    assert held, "the lookup found none of the ids the writer recorded since `window`"
    assert all(answer["seq"] == n and answer["partition"] == 0 for n, answer in held)
    first = candidates.index(held[0][0])
    assert [n for n, _ in held] == list(candidates[first : first + len(held)])  # no holes in the window

    (dry,) = _run_json("age", *d, "--max-keys", "1000", "--dry-run")
    assert dry["dry_run"] and dry["reason"] == "max_keys" and dry["live_ids_after"] == 1000
    assert dry["ids_aged"] == dry["live_ids_before"] - 1000 and dry["window_seconds_after"] is not None

    result = runner.invoke(app, ["compactions", *d, "--follow", "--follow-seconds", "2"])
    assert result.exit_code == 0, result.output

    after = _status(status)
    assert after["batches"] > before, "the writer stopped while being inspected"
    during = after["latencies"][before:]
    assert max(during) < 5.0, f"a write batch took {max(during):.2f}s while inspected"  # stalled, not slow


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    from dedupectl.cli import app as cli

    monkeypatch.setattr(sys, "argv", ["dedupectl", *args])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    return exit_info.value.code, capsys.readouterr().err


def test_compact_and_age_refuse_while_the_writer_holds_the_store(live_store, monkeypatch, capsys):
    data_dir, status = live_store
    before = _status(status)["batches"]
    code, err = _main(monkeypatch, capsys, "compact", "-d", str(data_dir))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "cannot compact" in err and "a worker holds it" in err and "stop the worker" in err
    code, err = _main(monkeypatch, capsys, "age", "-d", str(data_dir), "--max-keys", "10")
    assert code == 2 and "a worker holds it" in err and "--dry-run" in err
    _wait_for(lambda: _status(status)["batches"] > before, "the writer to carry on")

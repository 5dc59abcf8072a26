"""The effective window: the age of the oldest live id, per partition, and ``dedupectl window --min``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dedupectl.cli.app import app
from store.aging import AgingPolicy, age_step
from store.dedup_store import DedupStore
from store.window import effective_window_seconds, window_info

HOUR_MS = 3_600_000
runner = CliRunner()


def _ids(first: int, count: int) -> list[bytes]:
    return [f"ajs-{n:032x}".encode() for n in range(first, first + count)]


def test_the_window_is_the_age_of_the_oldest_live_id(tmp_path: Path):
    now_ms = 1_700_000_000_000
    with DedupStore.open(tmp_path / "events-0", topic="events", partition=0) as store:
        assert effective_window_seconds(store, now_ms) is None  # nothing recorded: no window yet
        # 48 ids, one an hour: id n was published n hours after the first, 48 hours ago
        store.record(_ids(0, 48), [now_ms - 48 * HOUR_MS + n * HOUR_MS for n in range(48)])
        assert effective_window_seconds(store, now_ms) == 48 * 3600
        age_step(store, AgingPolicy(max_keys=30))  # the 18 oldest go: the oldest left is 30 hours old
        assert effective_window_seconds(store, now_ms) == 30 * 3600
        info = window_info(store, now_ms=now_ms)
        assert (info.live_ids, info.oldest_seq, info.newest_seq) == (30, 18, 47)
        assert (info.oldest_ts_ms, info.newest_ts_ms) == (now_ms - 30 * HOUR_MS, now_ms - HOUR_MS)
        assert info.below(31 * 3600) and not info.below(30 * 3600)
        assert info.disk_bytes > 0 and info.bytes_per_id is not None


@pytest.fixture
def two_partitions(tmp_path: Path) -> Path:
    """Partition 0 remembers 48 hours, partition 1 only 6; partition 2 is empty."""
    now_ms = int(time.time() * 1000)
    data_dir = tmp_path / "data"
    for partition, hours in ((0, 48), (1, 6), (2, 0)):
        with DedupStore.open(data_dir / f"events-{partition}", topic="events", partition=partition) as store:
            if hours:
                store.record(_ids(partition * 100, 10), [now_ms - hours * HOUR_MS + n for n in range(10)])
    return data_dir


def test_window_min_exit_codes(two_partitions: Path):
    d = ["-d", str(two_partitions)]
    result = runner.invoke(app, ["window", *d, "--json"])
    assert result.exit_code == 0, result.output
    windows = {row["partition"]: row["window_seconds"] for row in json.loads(result.stdout)}
    assert windows[2] is None and 47.9 * 3600 < windows[0] < 48.1 * 3600 and 5.9 * 3600 < windows[1] < 6.1 * 3600

    assert runner.invoke(app, ["window", *d, "--min", "5h"]).exit_code == 0  # the empty store is not below
    below = runner.invoke(app, ["window", *d, "--min", "24h", "--json"])
    assert below.exit_code == 1
    assert [row["partition"] for row in json.loads(below.stdout) if row["below_min"]] == [1]
    assert runner.invoke(app, ["window", *d, "-p", "0", "--min", "24h"]).exit_code == 0
    assert runner.invoke(app, ["window", *d, "-p", "0", "--min", "2d1h"]).exit_code == 1


@pytest.fixture
def a_day_of_ids(tmp_path: Path) -> Path:
    """Partition 0 holds 2,400 ids published over the last 24 hours: 100 ids per hour."""
    now_ms = int(time.time() * 1000)
    data_dir = tmp_path / "data"
    with DedupStore.open(data_dir / "events-0", topic="events", partition=0) as store:
        store.record(_ids(0, 2_400), [now_ms - 24 * HOUR_MS + n * 36_000 for n in range(2_400)])
        store.flush()
    return data_dir


def test_window_prints_ids_per_hour(a_day_of_ids: Path):
    result = runner.invoke(app, ["window", "-d", str(a_day_of_ids), "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert 99 < row["ids_per_hour"] < 101
    table = runner.invoke(app, ["window", "-d", str(a_day_of_ids)], terminal_width=200)
    assert "ids/h" in table.stdout and "100" in table.stdout


@pytest.mark.parametrize(("bound", "hours"), [("9600", 96), ("1200", 12)])
def test_age_dry_run_gives_the_window_a_bound_would_keep(a_day_of_ids: Path, bound: str, hours: int):
    """A larger bound ages nothing now, but answers what window it gives once full; a smaller one both."""
    result = runner.invoke(app, ["age", "-d", str(a_day_of_ids), "--max-keys", bound, "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert 99 < row["ids_per_hour"] < 101
    assert hours * 0.99 * 3600 < row["window_seconds_at_bound"] < hours * 1.01 * 3600
    if hours > 24:
        assert row["ids_aged"] == 0
    else:
        assert 11.9 * 3600 < row["window_seconds_after"] < 12.1 * 3600


def test_age_dry_run_with_a_byte_bound_uses_the_store_bytes_per_id(a_day_of_ids: Path):
    d = ["-d", str(a_day_of_ids)]
    (info,) = json.loads(runner.invoke(app, ["window", *d, "--json"]).stdout)
    twice = str(2 * info["sst_bytes"])  # twice the SST bytes hold twice the ids: 48 hours at 100 ids per hour
    (row,) = json.loads(runner.invoke(app, ["age", *d, "--max-bytes", twice, "--dry-run", "--json"]).stdout)
    assert 47.5 * 3600 < row["window_seconds_at_bound"] < 48.5 * 3600


def test_window_reports_partitions_without_a_store(two_partitions: Path):
    d = ["-d", str(two_partitions)]
    result = runner.invoke(app, ["window", *d, "--partitions", "4", "--json"])
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert [(row["partition"], row["no_store"]) for row in rows] == [(0, False), (1, False), (2, False), (3, True)]
    shown = runner.invoke(app, ["window", *d, "--partitions", "4"])
    assert shown.exit_code == 1
    assert "partition 3: no store in" in " ".join(shown.output.split())
    assert runner.invoke(app, ["window", *d, "--partitions", "3"]).exit_code == 0  # every partition has one

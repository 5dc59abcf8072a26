"""Tables for people fit an 80-column terminal or pipe: one line per row, ids whole, full values in --json."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.cli.output import print_table
from store.dedup_store import DedupStore

HOUR_MS = 3_600_000
WIDTH = 80
runner = CliRunner()


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(WIDTH)}, catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def _rows(output: str, title: str) -> list[str]:
    """The lines of the table under ``title``: from the rule under its header to the next blank line."""
    lines = output.splitlines()
    start = next(at for at, line in enumerate(lines) if line.startswith(title))
    rule = next(at for at in range(start, len(lines)) if lines[at].startswith("──"))
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip():
            break
        rows.append(line)
    return rows


def _assert_fits(output: str) -> None:
    too_wide = [line for line in output.splitlines() if len(line.rstrip()) > WIDTH]
    assert not too_wide, "\n".join(too_wide)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Three stores of topic events: a day of ids, six hours of them, and an empty one."""
    now_ms = int(time.time() * 1000)
    data_dir = tmp_path / "data"
    for partition, count, hours in ((0, 2_400, 24), (1, 600, 6), (2, 0, 0)):
        with DedupStore.open(data_dir / f"events-{partition}", topic="events", partition=partition) as store:
            if count:
                ids = [f"ajs-{partition:04x}{n:028x}".encode() for n in range(count)]
                step_ms = hours * HOUR_MS // count
                store.record(ids, [now_ms - hours * HOUR_MS + n * step_ms for n in range(count)])
                store.flush()
    return data_dir


def test_window_rows_are_one_line_each(data_dir: Path):
    output = _invoke("window", "-d", str(data_dir), "--min", "12h", "--partition-count", "4")
    _assert_fits(output)
    rows = _rows(output, "effective window")
    assert [row.split()[0] for row in rows] == ["0", "1", "2", "3"], output  # one line per partition
    assert "BELOW" in rows[1] and "no store" in rows[3]
    assert "ago" in rows[0], "the newest record's time, as an age"

    records = json.loads(_invoke("window", "-d", str(data_dir), "--json"))
    assert {"oldest_ts_ms", "newest_ts_ms", "oldest_seq", "newest_seq"} <= set(records[0]), "--json keeps them"


def test_snapshot_list_keeps_ids_whole_on_one_line(data_dir: Path):
    created = runner.invoke(app, ["snapshot", "create", "-d", str(data_dir), "--all", "--json"])
    assert created.exit_code == 0, created.output
    ids = [snapshot["snapshot_id"] for snapshot in json.loads(created.stdout)]
    output = _invoke("snapshot", "list", "-d", str(data_dir))
    _assert_fits(output)
    rows = _rows(output, "snapshots in")
    assert len(rows) == len(ids) == 3, output
    for snapshot_id, row in zip(sorted(ids), rows, strict=True):
        assert row.startswith(snapshot_id + " "), row


def test_lookup_keeps_the_id_and_its_time_on_one_line(data_dir: Path):
    wanted = f"ajs-{0:04x}{7:028x}"
    output = _invoke("lookup", "-d", str(data_dir), wanted, "never-seen")
    _assert_fits(output)
    rows = _rows(output, "lookup")
    assert len(rows) == 2 and rows[0].startswith(wanted + " "), output
    assert rows[0].rstrip().endswith("Z"), "the record time, to the minute, in UTC"


def test_ids_too_wide_for_the_terminal_widen_the_table_instead_of_breaking(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    long_ids = ["x" * 60 + "-first", "y" * 60 + "-second"]
    print_table("wide", ["id", "location", "note"], [(i, f"s3://bucket/{i}/", "folds") for i in long_ids], whole={"id"})
    output = capsys.readouterr().out
    rows = _rows(output, "wide")
    assert all(any(line.startswith(i + " ") for line in rows) for i in long_ids), output

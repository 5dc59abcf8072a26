"""Tables for people fit an 80-column terminal or pipe: one line per row where the table fits (ids whole),
else one record per row; never a header, a number or an id broken inside; full values in --json. Every
command that prints a table is run here at 80 columns (those that need Kafka through their renderers)."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
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


def test_ids_too_wide_for_the_terminal_are_kept_whole_one_record_per_row(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    long_ids = ["x" * 60 + "-first", "y" * 60 + "-second"]
    print_table("wide", ["id", "location", "note"], [(i, f"s3://b/{i[:40]}/", "kept") for i in long_ids], whole={"id"})
    output = capsys.readouterr().out
    _assert_fits(output)
    lines = output.splitlines()
    assert all(f"id        {i}" in lines for i in long_ids), output  # a field a line, the id whole


def _assert_whole(output: str, *tokens: str) -> None:
    """Each token appears unbroken (a header, a number with its separators, a size with its unit)."""
    missing = [token for token in tokens if token not in output]
    assert not missing, f"broken or missing: {missing}\n{output}"


@pytest.mark.parametrize("seed", range(40))
def test_any_table_fits_80_columns_and_breaks_no_word(capsys, monkeypatch, seed: int):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    rng = random.Random(seed)
    words = ["partition", "142,342", "1.7 MiB", "871.4 KiB", "Manual Flush", "memtable", "L0", "-", "ok", "a" * 30]
    columns = [
        rng.choice(["partition", "ids before", "window at bound", "bytes", "x"]) + str(n)
        for n in range(rng.randint(2, 12))
    ]
    rows = [[" ".join(rng.sample(words, rng.randint(1, 3))) for _ in columns] for _ in range(rng.randint(1, 4))]
    print_table("random", columns, rows, whole=set(rng.sample(columns, 1)) if seed % 2 else ())
    output = capsys.readouterr().out
    _assert_fits(output)
    for token in ("142,342", "1.7 MiB", "871.4 KiB", "a" * 30):
        if any(token in cell for row in rows for cell in row):
            _assert_whole(output, token)
    for column in columns:
        for word in column.split():
            assert word in output, (word, output)


def test_store_tables_read_at_80_columns(data_dir: Path):
    for args, tokens in (
        (["age", "--max-keys", "1000", "--dry-run"], ["partition", "2,400", "1,400", "within policy"]),
        (["stats", "-p", "0"], ["KeyDrop", "2,400", "estimated"]),
        (["sst"], ["partition", "deletions", "2,400", f"ajs-{0:04x}{0:028x}"]),
        (["compactions"], ["partition", "Manual Flush", "2,400", "seconds"]),
        (["compact", "-p", "1"], ["partition", "tombstones", "seconds"]),
    ):
        output = _invoke(*args, "-d", str(data_dir))
        _assert_fits(output)
        _assert_whole(output, *tokens)


@pytest.fixture
def short_dir():
    # locations are printed whole: a short directory, so that a whole location fits the 80 columns
    short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    yield short
    shutil.rmtree(short, ignore_errors=True)


def test_snapshot_tables_read_at_80_columns(data_dir: Path, tmp_path: Path, short_dir: Path):
    data_dir = Path(shutil.copytree(data_dir, short_dir / "d"))
    created = _invoke("snapshot", "create", "-d", str(data_dir), "-p", "0")
    _assert_fits(created)
    snapshot_id = json.loads(_invoke("snapshot", "list", "-d", str(data_dir), "--json"))[0]["snapshot_id"]
    _assert_whole(created, snapshot_id, "2,400", str(data_dir / "snapshots" / snapshot_id))
    for args in (
        ["snapshot", "verify", snapshot_id, "-d", str(data_dir)],
        ["snapshot", "restore", snapshot_id, "--location", str(data_dir / "snapshots"), "-d", str(tmp_path / "new")],
        ["snapshot", "prune", "-d", str(data_dir), "--keep", "1", "--dry-run"],
    ):
        output = _invoke(*args)
        _assert_fits(output)
        _assert_whole(output, snapshot_id)


def test_the_run_summary_groups_thousands(capsys, monkeypatch):
    from dedupectl.cli.commands.run import _render
    from dedupectl.worker import RunSummary

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    summary = RunSummary(consumed=300_000, published=285_714, duplicates=14_286, dead_letters=0)
    _render(summary, json_output=False)
    output = capsys.readouterr().out
    _assert_fits(output)
    _assert_whole(output, "300,000", "285,714", "14,286")


def test_the_status_table_reads_at_80_columns(capsys, monkeypatch):
    from dedupectl.cli.commands.status import _print
    from dedupectl.fleet import FleetStatus, PartitionStatus

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    partitions = tuple(
        PartitionStatus(
            partition=p,
            worker_id=f"dedup-{p}",
            host="worker-host-1.example.internal",
            end_offset=1_388_230,
            committed_offset=1_204_311,
            lag=183_919,
            messages_per_s=124_332.0,
            window_seconds=86_400.0 + p,
            store_bytes=42 * 2**30,
            last_commit_age_s=2.0,
            refused=None,
            store_figures_from="metrics",
            verdict="LAGGING",
        )
        for p in range(3)
    )
    report = FleetStatus("events", "dedupectl.events", "stable", 86_400.0, time.time(), 0.4, partitions, ())
    _print(report)
    output = capsys.readouterr().out
    _assert_fits(output)
    _assert_whole(output, "183,919", "124,332", "dedup-0 @ worker-host-1.example.internal", "42.0 GiB")


def test_the_reconcile_table_reads_at_80_columns(capsys, monkeypatch):
    from dedupectl.cli.commands.reconcile import _render
    from reconcile.report import Coverage, PartitionReport, ReconcileReport

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    coverage = Coverage(output_offset=1_388_230, input_offset=2_004_311, next_seq=183_919, first_live_seq=0)
    partition = PartitionReport(
        partition=3,
        store="/var/lib/dedupectl/events-3",
        start_offset=1_204_311,
        end_offset=1_388_230,
        records_scanned=183_919,
        missing_from_store=12_345,
        duplicate_records=0,
        duplicate_ids=0,
        unpublished=0,
        unpublished_verified=True,
        older_than_window=0,
        unkeyed_records=0,
        seq_window=None,
        applied=False,
        recorded=0,
        put_back=0,
        unplaceable=0,
        removed=0,
        published_outside_range=0,
        removal_skipped=None,
        coverage_before=coverage,
        coverage_after=coverage,
        seconds=1.5,
        status="out of sync",
    )
    _render(ReconcileReport("events-deduped", "events", False, (partition,), 1.5, (4,), "/var/lib/dedupectl"))
    output = capsys.readouterr().out
    _assert_fits(output)
    _assert_whole(output, "1204311-1388230", "183,919", "12,345", "missing from store", "out of sync")

"""Bad input to the store commands: one line on stderr saying what to do, and exit 2 (never a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from dedupectl.cli import app as cli
from dedupectl.errors import ConfigError
from store.dedup_store import DedupStore
from store.sizes import format_age, format_duration, format_size, parse_duration, parse_size


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory with one store, events partition 0."""
    with DedupStore.open(tmp_path / "data" / "events-0", topic="events", partition=0) as store:
        store.record([b"ajs-" + b"0" * 32], [1_700_000_000_000])
    return tmp_path / "data"


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["dedupectl", *args])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exit_info.value.code, " ".join(err.split())


def _plain_rocksdb(path: Path) -> None:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options=options)
    db[b"k"] = b"v"
    db.close()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["window", "-d", "{missing}"], "data directory {missing} does not exist: pass the worker's --data-dir"),
        (["stats", "-d", "{empty}"], "holds no dedup store"),
        (["sst", "-d", "{data}", "-p", "7"], "no store for partition 7 of 'events' in {data}: partitions there: 0"),
        (["lookup", "-d", "{data}", "-t", "orders", "x"], "no store of topic 'orders' in {data}: topics there: events"),
        (["window", "-d", "{data}/events-0"], "is a store directory itself: pass its parent as --data-dir"),
        (["age", "-d", "{data}", "--max-bytes", "10XB"], "--max-bytes '10XB' is not a size"),
        (["age", "-d", "{data}", "--max-keys", "-1"], "--max-keys must be a positive whole number, got -1"),
        (["age", "-d", "{data}"], "no bound given: pass --max-keys and/or --max-bytes"),
        (["window", "-d", "{data}", "--min", "a day"], "--min 'a day' is not a duration"),
        (["compactions", "-d", "{data}", "--last", "0"], "--last must be positive"),
        (["compactions", "-d", "{data}", "-k", "merge"], "unknown job kind 'merge': use flush, compaction or deletion"),
        (["compactions", "-d", "{data}", "-f", "seq"], "unknown family 'seq': use ids, times or meta"),
        (["sst", "-d", "{data}", "-f", "seq"], "unknown family 'seq': use ids, times or meta"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, data_dir, args, expected):
    (tmp_path / "empty").mkdir()
    names = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "data": data_dir}
    code, err = _main(monkeypatch, capsys, *(arg.format(**names) for arg in args))
    assert code == 2
    assert expected.format(**names) in err
    assert err.startswith("error:") and err.count("error:") == 1


def test_a_directory_that_is_not_a_dedup_store(monkeypatch, capsys, tmp_path):
    _plain_rocksdb(tmp_path / "data" / "events-0")
    code, err = _main(monkeypatch, capsys, "stats", "-d", str(tmp_path / "data"))
    assert code == 2 and "is a RocksDB database but not a dedup store" in err


def test_a_store_of_the_old_layout_is_refused_with_what_to_do(monkeypatch, capsys, tmp_path):
    path = tmp_path / "data" / "events-0"
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    families = {name: Options(raw_mode=True) for name in ("ids", "seq", "meta")}  # schema 1's families
    Rdict(str(path), options=options, column_families=families).close()
    code, err = _main(monkeypatch, capsys, "window", "-d", str(tmp_path / "data"))
    assert code == 2 and "has an earlier layout (one ids family)" in err and "dedupectl rebuild -p 0 --replace" in err


def test_errors_are_one_line_from_the_real_console_script(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", "age", "-d", str(tmp_path), "--max-bytes", "10XB"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().count("\n") == 0 and "'10XB' is not a size" in completed.stderr


@pytest.mark.parametrize(
    ("text", "size"), [("40GiB", 40 * 1024**3), ("512MB", 512 * 10**6), ("1000000", 10**6), ("1.5 KiB", 1536)]
)
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "seconds"), [("24h", 86_400), ("1d12h", 129_600), ("90m", 5_400), ("30s", 30), ("45", 45), ("0s", 0)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0s", "0", "-1h", "soon", ""])
def test_an_interval_must_be_a_positive_duration(text):
    with pytest.raises(ConfigError):
        parse_duration(text, what="--every", positive=True)


def test_human_formats():
    assert (format_size(42_949_672_960), format_size(512)) == ("40.0 GiB", "512 B")
    assert (format_duration(86_400), format_duration(93_784), format_duration(59), format_duration(5_400)) == (
        "1d",
        "1d 2h",
        "59s",
        "1h 30m",
    )
    assert (format_age(10_800), format_age(93_784), format_age(None), format_age(-3)) == (
        "3h ago",
        "1d 2h ago",
        "-",
        "in 3s",
    )

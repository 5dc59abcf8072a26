"""Bad input: unknown partition, empty or reversed range, unreachable broker, a data dir that is not a
store, no partition chosen. Each is one line on stderr, no traceback, exit 2."""

from __future__ import annotations

import socket
import sys
import time

import pytest
from reconcile_support import ids, run_cli

from dedupectl.cli import app as cli_app


def run_main(args: list[str], capsys) -> tuple[int, list[str]]:
    """``dedupectl …`` through the console entry point (its error handler), in this process."""
    capsys.readouterr()
    argv = sys.argv
    sys.argv = ["dedupectl", *args]
    try:
        cli_app.main()
        code = 0
    except SystemExit as done:
        code = done.code
    finally:
        sys.argv = argv
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def assert_one_line_error(code: int, lines: list[str], *fragments: str) -> None:
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "Traceback" not in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def pipeline(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    published = ids("x", 10)
    pipeline.publish(published)
    pipeline.record(published, output_offset=pipeline.end_offset())
    pipeline.record([], partition=1)
    return pipeline


def test_unknown_partition(pipeline, capsys):
    code, lines = run_main(pipeline.args("-p", "7"), capsys)
    assert_one_line_error(code, lines, "partition 7 does not exist", "has 2 partition(s), 0-1")


@pytest.mark.parametrize(
    ("bounds", "fragment"),
    [
        (["--from", "5", "--to", "5"], "make an empty range"),
        (["--from", "9", "--to", "3"], "--from 9 is after --to 3"),
        (["--from", "1h", "--to", "2h"], "--from 1h is after --to 2h"),
        (["--from", "500"], "the range holds no records in any partition asked for"),
        (["--from", "2099-01-01"], "the range holds no records"),
        (["--from", "soon"], "is not an offset or a time"),
        (["--to", "-3"], "is a negative offset"),
    ],
)
def test_empty_reversed_or_malformed_range(pipeline, capsys, bounds, fragment):
    code, lines = run_main(pipeline.args("-p", "0", *bounds), capsys)
    assert_one_line_error(code, lines, fragment)


def test_a_data_dir_that_is_not_a_store(pipeline, capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, lines = run_main([*pipeline.args("-p", "0"), "-d", str(empty)], capsys)
    assert_one_line_error(code, lines, "no dedup store at", "check --data-dir and --partition")
    code, lines = run_main([*pipeline.args("--all"), "-d", str(empty)], capsys)
    assert_one_line_error(code, lines, f"no dedup stores of topic '{pipeline.input_topic}'")
    (empty / f"{pipeline.input_topic}-0").mkdir()
    (empty / f"{pipeline.input_topic}-0" / "notes.txt").write_text("not a database")
    code, lines = run_main([*pipeline.args("-p", "0"), "-d", str(empty)], capsys)
    assert_one_line_error(code, lines, "is not a dedup store")


def test_a_partition_or_all_must_be_chosen(pipeline, capsys):
    code, lines = run_main(pipeline.args(), capsys)
    assert_one_line_error(code, lines, "give --partition P (repeatable) or --all")


def test_unreachable_broker_fails_fast_in_one_line(pipeline):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = run_cli(*pipeline.args("-p", "0"), "-b", f"127.0.0.1:{port}", env={"DEDUPECTL_TIMEOUT_S": "2"})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert_one_line_error(result.returncode, lines, f"cannot reach Kafka at 127.0.0.1:{port} within 2s")
    assert time.monotonic() - started < 20

"""The demo's summary: for people, labels, thousands separators and yes/no; for scripts (``--json``), the
field names and plain values. The pipeline itself is replaced by a fixed result: the worker, the broker and
the output check have tests of their own."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import dedupectl.demo
from dedupectl.cli.app import app
from dedupectl.demo import DemoResult
from dedupectl.sample_events import SampleReport
from dedupectl.verify import OutputCheck
from dedupectl.worker import RunSummary


def _result(duplicated: int = 0) -> DemoResult:
    run = RunSummary(
        consumed=20_000,
        published=19_867,
        duplicates=113,
        dead_letters=20,
        first_consumed_at=100.0,
        last_committed_at=101.5,
    )
    output = OutputCheck(
        records=19_867 + duplicated, distinct_ids=19_867, duplicated_ids=duplicated, missing_ids=0, unexpected_ids=0
    )
    return DemoResult(SampleReport(produced=20_000, distinct_ids=19_867, duplicates=113, invalid=20), run, output, 20)


@pytest.fixture
def demo_result(monkeypatch: pytest.MonkeyPatch):
    holder = {"result": _result()}
    # the command imports run_demo when it runs: replaced where it is defined
    monkeypatch.setattr(dedupectl.demo, "run_demo", lambda *args, **kwargs: holder["result"])
    return holder


def test_the_summary_reads_as_words_and_grouped_numbers(demo_result) -> None:
    result = CliRunner().invoke(app, ["demo", "--count", "20000"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    out = result.output
    for label, value in [
        ("events produced", "20,000"),
        ("distinct valid ids", "19,867"),
        ("ids published twice", "0"),
        ("messages per second", "13,333"),
        ("exactly once", "yes"),
    ]:
        line = next(line for line in out.splitlines() if label in line)
        assert line.rstrip(" │").endswith(value), line
    assert "Output check: exactly once" in out
    for raw in ("distinct_valid_ids_in", "output_ids_published_twice", "True", "20000"):
        assert raw not in out


def test_a_failed_check_says_no_and_exits_1(demo_result) -> None:
    demo_result["result"] = _result(duplicated=3)
    result = CliRunner().invoke(app, ["demo"], env={"COLUMNS": "80"})
    assert result.exit_code == 1
    line = next(line for line in result.output.splitlines() if "exactly once" in line and "│" in line)
    assert line.rstrip(" │").endswith("no")
    assert "NOT exactly once" in result.output


def test_json_keeps_the_field_names_and_plain_values(demo_result) -> None:
    result = CliRunner().invoke(app, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures == {
        "messages_in": 20_000,
        "distinct_valid_ids_in": 19_867,
        "duplicates_in": 113,
        "invalid_in": 20,
        "published": 19_867,
        "duplicates_dropped": 113,
        "dead_letters": 20,
        "output_records": 19_867,
        "output_ids_published_twice": 0,
        "valid_ids_missing_from_output": 0,
        "dead_letter_topic_records": 20,
        "messages_per_second": 13_333.3,
        "exactly_once": True,
    }

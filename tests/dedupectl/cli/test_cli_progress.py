"""The one progress display: bars on a terminal, silence or plain lines elsewhere, each core protocol shown."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from dedupectl.cli import progress as progress_module
from dedupectl.cli.progress import DemoSteps, JobSteps, PartitionBars, ProgressDisplay, Transfers, status_line


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """stderr as a 100-column terminal: what the bars draw lands here."""
    screen = io.StringIO()
    monkeypatch.setattr(progress_module, "err_console", Console(file=screen, force_terminal=True, width=100))
    return screen


def test_plain_lines_for_long_transfer_steps_in_mib(capsys):
    with ProgressDisplay(plain_every_s=0.0) as display:  # every step counts as long here
        transfers = Transfers(display)
        transfers.start("uploading s-0-20260101T000000.000Z", 3 * 1024 * 1024)
        transfers.advance(1024 * 1024)
        transfers.finish()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "uploading s-0-20260101T000000.000Z: 1.0 MiB of 3.0 MiB"
    assert lines[1].startswith("uploading s-0-20260101T000000.000Z: 3.0 MiB in ")
    assert len(lines) == 2


def test_silent_off_a_terminal_without_plain_lines(capsys):
    with ProgressDisplay() as display:
        bars = PartitionBars(display)
        bars.started(0, SimpleNamespace(start=100, stop=200))
        bars.advanced(0, 150, 50)
        bars.finished(0, SimpleNamespace(records_scanned=100))
        steps = JobSteps(display)
        steps.step("audit: reading the input")
        steps.tasks(3, 10)
        transfers = Transfers(display)
        transfers.start("hashing", 10)
        transfers.advance(10)
        transfers.finish()
    assert capsys.readouterr().err == ""


def test_reconcile_bars_show_records_and_stay(terminal):
    with ProgressDisplay(transient=False) as display:
        bars = PartitionBars(display)
        bars.started(3, SimpleNamespace(start=1_000, stop=3_000))
        bars.advanced(3, 2_000, 1_234)
        bars.finished(3, SimpleNamespace(records_scanned=1_999))
    screen = terminal.getvalue()
    assert "partition 3" in screen and "1,999 records" in screen


def test_job_steps_and_demo_lines_on_a_terminal(terminal):
    with ProgressDisplay() as display:
        steps = JobSteps(display)
        steps.notify("starting Spark (local[2])")
        steps.tasks(3, 10)
        demo = DemoSteps(display, events=20_000)
        demo.step("producing 20,000 events")
        demo.advance(SimpleNamespace(consumed=5_000))
        display.note("a line of its own")
    screen = terminal.getvalue()
    assert "• producing 20,000 events" in screen and "a line of its own" in screen


def test_a_status_line_follows_its_steps(terminal, capsys):
    with status_line("aging") as step:
        step("aging partition 3")
    assert "aging partition 3" in terminal.getvalue()
    assert capsys.readouterr().err == "", "only the display writes"

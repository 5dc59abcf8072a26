"""The one progress display of every command: rich bars on stderr, so ``--json`` on stdout stays clean.

The core reports progress through small protocols of its own and never imports rich: reconcile's
``ProgressSink``, the Spark jobs' ``ProgressSink`` and step notes, snapshots' ``TransferProgress``, the demo's
callbacks. The adapters below turn each into tasks of one ``ProgressDisplay``. On a terminal the bars
animate; when stderr is not a terminal (a log, a pipe) they are silent, or with ``plain_every_s`` a long task
prints a plain line that often and one when it ends (a quick one prints nothing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from dedupectl.cli.output import err_console
from store.sizes import format_size

BYTES = "bytes"
TRANSFER_LINES_EVERY_S = 10.0  # on a pipe, how often a long transfer says how far it got


def _figures(task: Task, *, with_rate: bool = True) -> str:
    """What a task has done, in its unit: ``1.0 MiB of 3.0 MiB``, ``3/10 tasks``, ``1,234 records 5,000/s``."""
    unit, count = task.fields["unit"], task.fields.get("count")
    elapsed = (task.finished_time if task.finished else task.elapsed) or 0.0  # a finished rate stays put
    if unit == BYTES:
        done = f"{format_size(task.completed)} of {format_size(task.total or 0)}"
        speed = task.finished_speed or task.speed
        return f"{done} {format_size(speed)}/s" if with_rate and speed is not None else done
    if count is not None:  # progress is measured in something else (offsets): the count is what people read
        rate = f" {count / elapsed:,.0f}/s" if with_rate and elapsed > 0 else ""
        return f"{count:,} {unit}{rate}"
    if task.total is None:
        return ""
    return f"{task.completed:,.0f}/{task.total:,.0f} {unit}"


class _FiguresColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(_figures(task), style="progress.data.speed")


class _TimeColumn(ProgressColumn):
    """Time left while the end is known, else (and once done) the time taken."""

    _elapsed, _remaining = TimeElapsedColumn(), TimeRemainingColumn(elapsed_when_finished=True)

    def render(self, task: Task) -> Text:
        return (self._elapsed if task.total is None else self._remaining).render(task)


@dataclass
class _PlainTask:
    """A task as plain lines show it: when it began, when it last printed, its whole size."""

    description: str
    total: float | None
    started: float
    last_line: float


class ProgressDisplay:
    """Named tasks with a bar, their figures and time; a context manager that starts and stops the display.

    Thread-safe: transfers advance their task from several threads at once."""

    def __init__(self, *, transient: bool = True, plain_every_s: float | None = None) -> None:
        self._progress = Progress(
            SpinnerColumn(finished_text=" "),
            TextColumn("{task.description}"),
            BarColumn(),
            _FiguresColumn(),
            _TimeColumn(),
            console=err_console,
            transient=transient,
            disable=not err_console.is_terminal,
        )
        self._plain_every_s = None if err_console.is_terminal else plain_every_s
        self._plain: dict[TaskID, _PlainTask] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> ProgressDisplay:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def add(self, description: str, *, unit: str, total: float | None = None) -> TaskID:
        # an empty step still gets a bar that fills
        task = self._progress.add_task(description, total=None if total is None else max(total, 1), unit=unit)
        if self._plain_every_s is not None:
            now = time.monotonic()
            with self._lock:
                self._plain[task] = _PlainTask(description, total, now, now)
        return task

    def update(
        self,
        task: TaskID,
        *,
        description: str | None = None,
        completed: float | None = None,
        total: float | None = None,
        count: int | None = None,
    ) -> None:
        fields = {} if count is None else {"count": count}
        self._progress.update(task, description=description, completed=completed, total=total, **fields)
        self._plain_line(task)

    def restart(self, task: TaskID, description: str) -> None:
        """The same task, on to a new step whose end is not known yet."""
        self._progress.update(task, description=description, completed=0, total=None)

    def advance(self, task: TaskID, amount: float) -> None:
        self._progress.advance(task, amount)
        self._plain_line(task)

    def finish(self, task: TaskID) -> None:
        """Done: the task leaves the display (and, plain, gets its closing line if it took long)."""
        shown = self._progress.tasks[self._progress.task_ids.index(task)]
        self._progress.remove_task(task)
        with self._lock:
            plain = self._plain.pop(task, None)
        taken = None if plain is None else time.monotonic() - plain.started
        if plain is not None and taken >= (self._plain_every_s or 0.0):
            done = format_size(plain.total or 0) if shown.fields["unit"] == BYTES else _figures(shown, with_rate=False)
            self.note(f"{plain.description}: {done} in {taken:.1f}s")

    def note(self, text: str) -> None:
        """A line of its own, above the bars (or alone on a pipe)."""
        err_console.print(text, highlight=False, markup=False, soft_wrap=True)

    def _plain_line(self, task: TaskID) -> None:
        if self._plain_every_s is None:
            return
        with self._lock:
            plain = self._plain.get(task)
            now = time.monotonic()
            if plain is None or now - plain.last_line < self._plain_every_s:
                return
            plain.last_line = now
            shown = self._progress.tasks[self._progress.task_ids.index(task)]
            text = f"{plain.description}: {_figures(shown, with_rate=False)}"
        self.note(text)


# -- the core's progress protocols, shown on a display -------------------------------------------------------


class PartitionBars:
    """reconcile's ``ProgressSink``: a bar per partition over its offsets, with records read and their rate."""

    def __init__(self, display: ProgressDisplay) -> None:
        self._display = display
        self._tasks: dict[int, tuple[TaskID, int, int]] = {}

    def started(self, partition: int, offsets) -> None:
        total = max(offsets.stop - offsets.start, 1)
        task = self._display.add(f"partition {partition}", unit="records", total=total)
        self._display.update(task, count=0)
        self._tasks[partition] = (task, offsets.start, total)

    def advanced(self, partition: int, position: int, records: int) -> None:
        task, start, _ = self._tasks[partition]
        self._display.update(task, completed=position - start, count=records)

    def finished(self, partition: int, report) -> None:
        task, _, total = self._tasks[partition]
        self._display.update(task, completed=total, count=report.records_scanned)


class Status:
    """One line that says what is under way (a spinner on a terminal); call it with each new step."""

    def __init__(self, display: ProgressDisplay, text: str, *, unit: str = "") -> None:
        self._display = display
        self._task = display.add(text, unit=unit)

    def __call__(self, text: str) -> None:
        self._display.restart(self._task, text)


@contextmanager
def status_line(text: str) -> Iterator[Status]:
    """A display with one status line, started and stopped around the block."""
    with ProgressDisplay() as display:
        yield Status(display, text)


class JobSteps(Status):
    """A Spark job's ``ProgressSink`` and its step notes: the step, and the running stages' tasks."""

    def __init__(self, display: ProgressDisplay) -> None:
        super().__init__(display, "preparing", unit="tasks")

    def notify(self, message: str) -> None:
        self(message)

    def step(self, description: str) -> None:
        self(description)

    def tasks(self, completed: int, total: int) -> None:
        self._display.update(self._task, completed=completed, total=total)


class Transfers:
    """snapshots' ``TransferProgress``: one step of bytes at a time (hashing, copying, uploading…)."""

    def __init__(self, display: ProgressDisplay) -> None:
        self._display = display
        self._task: TaskID | None = None

    def start(self, label: str, total_bytes: int) -> None:
        if self._task is not None:
            self._display.finish(self._task)
        self._task = self._display.add(label, unit=BYTES, total=total_bytes)

    def advance(self, nbytes: int) -> None:
        if self._task is not None:
            self._display.advance(self._task, nbytes)

    def finish(self) -> None:
        if self._task is not None:
            self._display.finish(self._task)
            self._task = None


@contextmanager
def transfers() -> Iterator[Transfers]:
    """A display for snapshots' transfers, started and stopped around the block."""
    with ProgressDisplay(plain_every_s=TRANSFER_LINES_EVERY_S) as display:
        yield Transfers(display)


class DemoSteps:
    """The demo's callbacks: each step a line, then the worker's progress as a bar of events consumed."""

    def __init__(self, display: ProgressDisplay, events: int) -> None:
        self._display, self._events = display, events
        self._task: TaskID | None = None

    def step(self, text: str) -> None:
        self._display.note(f"• {text}")

    def advance(self, summary) -> None:
        if self._task is None:
            self._task = self._display.add("deduplicating", unit="events", total=self._events)
        self._display.update(self._task, completed=summary.consumed)

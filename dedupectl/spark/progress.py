"""Progress of a Spark job as dedupectl shows it: the job's current step, and its tasks done of all.

Spark's console progress bar is off (it interleaves with everything else on the terminal); a thread polls
the status tracker instead and reports to a ``ProgressSink``, which the CLI draws on stderr.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Protocol

POLL_SECONDS = 0.5


class ProgressSink(Protocol):
    def step(self, description: str) -> None:
        """A new step of the job began (reading the input, joining, writing SST files…)."""

    def tasks(self, completed: int, total: int) -> None:
        """Tasks of the running Spark stages: completed so far, out of all."""


class NoProgress:
    def step(self, description: str) -> None:
        pass

    def tasks(self, completed: int, total: int) -> None:
        pass


class JobSteps:
    """Names each step for the sink and for Spark (the job description shows in the Spark UI)."""

    def __init__(self, spark, sink: ProgressSink | None) -> None:
        self._spark = spark
        self.sink: ProgressSink = sink or NoProgress()

    def __call__(self, description: str) -> None:
        self._spark.sparkContext.setJobDescription(description)
        self.sink.step(description)


@contextmanager
def tracking(spark, sink: ProgressSink | None) -> Iterator[JobSteps]:
    """Poll Spark's status tracker while the block runs; yields the step announcer."""
    steps = JobSteps(spark, sink)
    if sink is None:
        yield steps
        return
    stop = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            with suppress(Exception):  # the context may stop under us; progress is best effort
                completed = total = 0
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        completed += info.numCompletedTasks
                        total += info.numTasks
                if total:
                    steps.sink.tasks(completed, total)

    thread = threading.Thread(target=poll, name="dedupectl-spark-progress", daemon=True)
    thread.start()
    try:
        yield steps
    finally:
        stop.set()
        thread.join(timeout=2)

"""What every peer script shares: its arguments, client settings, its own timing, and the one JSON line it
prints.

Stdlib and confluent-kafka only: this runs in the project's environment and in the peers' virtualenv.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

# The same session timeout as dedupectl's default, for every peer: after a SIGKILL the dead member stays in
# the group until its session expires, and librdkafka's 45 s default would dominate the crash figures.
SESSION_TIMEOUT_MS = 10_000
BATCH = 20_000  # records per consume() call and per transaction, as dedupectl's default batch_max_messages


def peer_arguments(description: str | None, state: str | None = None) -> argparse.ArgumentParser:
    """The arguments every peer takes first, in this order: the bootstrap servers, its input and output
    topics, and (named ``state``) the directory of its state where it keeps one; a peer adds its own."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("bootstrap", "input_topic", "output_topic", *([state] if state else [])):
        parser.add_argument(name)
    return parser


def consumer_settings(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        **extra,
    }


def producer_settings(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        **extra,
    }


def peak_rss_mb() -> float:
    """This process's own peak (VmHWM): ru_maxrss would report the benchmark parent's peak, inherited at exec."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


@dataclass
class Progress:
    """A peer's own account of its run: throughput is measured from its first record consumed to its last
    transaction (or offset commit) completed, on its own clock."""

    consumed: int = 0
    published: int = 0
    first_consumed_at: float | None = None  # time.time(), so the harness can relate it to its own samples
    last_consumed_at: float | None = None
    last_committed_at: float | None = None
    commits: int = 0  # transactions (or offset commits) completed: the output's pace of becoming readable

    def consumed_some(self, count: int) -> None:
        if not count:
            return
        self.last_consumed_at = time.time()
        if self.first_consumed_at is None:
            self.first_consumed_at = self.last_consumed_at
        self.consumed += count

    def committed(self) -> None:
        self.last_committed_at = time.time()
        self.commits += 1

    @property
    def busy_seconds(self) -> float:
        if self.first_consumed_at is None or self.last_committed_at is None:
            return 0.0
        return max(self.last_committed_at - self.first_consumed_at, 0.0)

    def emit(self, **extra: Any) -> None:
        """Print the report as one JSON object on stdout (the harness parses the last stdout line)."""
        report = {**asdict(self), "busy_seconds": round(self.busy_seconds, 3), "peak_rss_mb": peak_rss_mb(), **extra}
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()


class IdleClock:
    """Tells a loop to stop after ``idle_seconds`` without input; the first records get ``startup_seconds``
    more (joining the group and a rebalance after a crash take a while)."""

    def __init__(self, idle_seconds: float, startup_seconds: float = 2 * SESSION_TIMEOUT_MS / 1000) -> None:
        self._idle = idle_seconds
        self._since = time.monotonic() + startup_seconds

    def active(self) -> None:
        self._since = time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() - self._since > self._idle

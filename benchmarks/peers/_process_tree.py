"""A peer whose work runs in a child JVM (PySpark, PyFlink) reports the memory of its whole process tree.

Stdlib only: this runs in the project's environment and in the Flink peer's virtualenv.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def descendants(pid: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (default: this process), from /proc's children lists."""
    found, pending = [], [pid or os.getpid()]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(child) for child in (task / "children").read_text().split()]
            except OSError:  # the task ended while we looked
                continue
            found.extend(children)
            pending.extend(children)
    return found


def _peak_kib(pid: int | str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_peak_rss_mb() -> float:
    """This process's peak RSS plus each live descendant's (the JVM's): an upper bound of the tree's peak,
    close to it when, as here, one process (the JVM) does the work and the Python driver stays flat."""
    return round((_peak_kib("self") + sum(_peak_kib(child) for child in descendants())) / 1024, 1)


def dir_bytes(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file the engine deleted while we walked
                total += (Path(folder) / name).stat().st_size
    return total

"""Which worker serves which partition, from the status files workers keep in their data directory.

A worker writes ``<data_dir>/worker-<id>.json`` (pid, host, topics, partitions, updated_at) while it runs and
deletes it on a clean exit; a killed worker leaves a stale one. A status is *live* when its pid runs on this
host and that process started before the file was last written (so a recycled pid does not count).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from dedupectl.errors import ReattachError

log = logging.getLogger(__name__)

STATUS_GLOB = "worker-*.json"


@dataclass(frozen=True)
class WorkerStatus:
    path: Path
    pid: int
    host: str
    worker_id: str
    input_topic: str
    partitions: tuple[int, ...]
    updated_at: float

    @property
    def local(self) -> bool:
        return self.host == socket.gethostname()

    def serves(self, topic: str, partition: int) -> bool:
        return self.input_topic == topic and partition in self.partitions


def read_statuses(data_dir: Path) -> list[WorkerStatus]:
    statuses = []
    for path in sorted(Path(data_dir).glob(STATUS_GLOB)) if Path(data_dir).is_dir() else []:
        try:
            raw = json.loads(path.read_text())
            statuses.append(
                WorkerStatus(
                    path=path,
                    pid=int(raw["pid"]),
                    host=str(raw.get("host", "")),
                    worker_id=str(raw.get("worker_id", "")),
                    input_topic=str(raw.get("input_topic", "")),
                    partitions=tuple(int(p) for p in raw.get("partitions", [])),
                    updated_at=float(raw.get("updated_at", 0)),
                )
            )
        except (OSError, ValueError, KeyError, TypeError) as error:  # half-written or foreign: not ours to judge
            log.warning("ignoring unreadable worker status file %s: %s", path, error)
    return statuses


def _process(status: WorkerStatus) -> psutil.Process | None:
    """The running process the status describes, or None when it has exited (zombies count as exited)."""
    try:
        process = psutil.Process(status.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        # a pid recycled after the worker died belongs to a process started after the file was written
        if process.create_time() > status.updated_at + 1:
            return None
        return process
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def is_live(status: WorkerStatus) -> bool:
    """Whether the worker still runs; a status written on another host cannot be checked and counts as live."""
    if not status.local:
        return True
    return _process(status) is not None


def live_worker_for(data_dir: Path, topic: str, partition: int) -> WorkerStatus | None:
    for status in read_statuses(data_dir):
        if status.serves(topic, partition) and is_live(status):
            return status
    return None


def describe(status: WorkerStatus) -> str:
    return f"worker {status.worker_id!r} (pid {status.pid} on {status.host}, status file {status.path})"


def stop_worker(status: WorkerStatus, timeout_s: float = 60.0, poll_s: float = 0.2) -> float:
    """SIGTERM the worker (it finishes its batch, commits, closes its stores) and wait for it to exit;
    returns the seconds it took."""
    if not status.local:
        raise ReattachError(
            f"{describe(status)} runs on another host; it cannot be stopped from here",
            f"stop it on {status.host}, or remove {status.path} if that worker is gone",
        )
    started = time.monotonic()
    process = _process(status)
    if process is None:
        return 0.0
    try:
        os.kill(status.pid, signal.SIGTERM)
    except ProcessLookupError:
        return time.monotonic() - started
    except PermissionError as error:
        raise ReattachError(
            f"not allowed to signal {describe(status)}", "run as the worker's user, or stop it with systemctl"
        ) from error
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        if _process(status) is None:
            return time.monotonic() - started
        time.sleep(poll_s)
    raise ReattachError(
        f"{describe(status)} did not exit within {timeout_s:.0f}s of SIGTERM",
        "check its log; it may be stuck on the broker. Kill it only if you accept a recovery on restart",
    )

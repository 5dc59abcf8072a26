"""The status file a worker keeps in its data directory: written and removed by the worker, read by the tools
that must not act on a partition behind a running worker's back (snapshot, restore, reattach, reconcile).

A worker writes ``<data_dir>/worker-<id>.json`` (pid, host, topics, partitions, updated_at) while it runs and
deletes it on a clean exit; a killed worker leaves a stale one. A status is *live* when its pid runs on this
host and that process started before the file was last written (so a recycled pid does not count).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

STATUS_GLOB = "worker-*.json"


def status_path(data_dir: Path, worker_id: str) -> Path:
    return Path(data_dir) / f"worker-{worker_id}.json"


def write_status(path: Path, fields: dict) -> None:
    """Replace the status file atomically with ``fields`` plus this process's pid, host and the time."""
    status = {"pid": os.getpid(), "host": socket.gethostname(), **fields, "updated_at": time.time()}
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(status, indent=2))
    temporary.replace(path)


def remove_status(path: Path) -> None:
    """Delete the status file only if it is ours: a misconfigured twin must not erase a live worker's."""
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


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


def running_process(status: WorkerStatus) -> psutil.Process | None:
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
    return running_process(status) is not None


def live_worker_for(data_dir: Path, topic: str, partition: int) -> WorkerStatus | None:
    for status in read_statuses(data_dir):
        if status.serves(topic, partition) and is_live(status):
            return status
    return None


def describe(status: WorkerStatus) -> str:
    return f"worker {status.worker_id!r} (pid {status.pid} on {status.host}, status file {status.path})"

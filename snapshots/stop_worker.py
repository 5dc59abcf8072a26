"""Stopping the local worker that serves a partition, before its volume is moved."""

from __future__ import annotations

import os
import signal
import time

from snapshots.errors import ReattachError
from store.worker_status import WorkerStatus, describe, running_process


def stop_worker(status: WorkerStatus, timeout_s: float = 60.0, poll_s: float = 0.2) -> float:
    """SIGTERM the worker (it finishes its batch, commits, closes its stores) and wait for it to exit;
    returns the seconds it took."""
    if not status.local:
        raise ReattachError(
            f"{describe(status)} runs on another host; it cannot be stopped from here",
            f"stop it on {status.host}, or remove {status.path} if that worker is gone",
        )
    started = time.monotonic()
    process = running_process(status)
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
        if running_process(status) is None:
            return time.monotonic() - started
        time.sleep(poll_s)
    raise ReattachError(
        f"{describe(status)} did not exit within {timeout_s:.0f}s of SIGTERM",
        "check its log; it may be stuck on the broker. Kill it only if you accept a recovery on restart",
    )

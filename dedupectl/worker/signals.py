"""How a worker process stops: a signal finishes the work in hand; with none in hand, or a second signal, or a
bound running out, the process ends at once.

A signal is seen by a thread of its own (through Python's wakeup fd), not by the main thread: the main thread
may be inside a blocking Kafka call (a metadata request, a retry's wait) that would hide it for seconds.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

IDLE_STOP_S = 2.0  # a stop with no work in hand (no transaction, no store being closed) ends within this
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_POLL_S = 0.1


class StopRequest(threading.Event):
    """Set by SIGTERM or SIGINT. The worker tells, through ``busy``, whether it has work in hand that a stop
    waits for (a transaction open or committing, its stores being closed, a snapshot being published)."""

    def __init__(self) -> None:
        super().__init__()
        self.busy: Callable[[], bool] = lambda: True
        self.over = threading.Event()  # the worker has returned or raised: the process's own exit follows

    def end(self) -> None:
        """The worker has returned or raised: its summary or error decides the exit code. A signal from now on
        is ignored, since Python's exit restores the default action before it destroys the Kafka and RocksDB
        handles left, and a supervisor's late SIGTERM would otherwise replace the documented code."""
        self.over.set()
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                signal.signal(signum, signal.SIG_IGN)


def stop_on_signals(stop_timeout_s: float | None = None) -> StopRequest:
    """A ``StopRequest`` set by SIGTERM or SIGINT: the worker finishes the batch in hand, commits, and exits 0.

    With nothing in hand for ``IDLE_STOP_S`` (starting up, retrying an unreachable broker), a second signal, or
    ``stop_timeout_s`` running out after the first, the process ends at once, as a crash would: a store records
    a batch only after its transaction committed, so nothing half done is kept, and the next owner's recovery
    (or the restarted worker's fencing of its open transaction) covers the rest. Call from the main thread."""
    stop = StopRequest()
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for signum in _SIGNALS:  # a Python handler, so that no thread the signal lands on dies of it
        signal.signal(signum, _seen_by_the_watcher)
    watcher = threading.Thread(
        target=_watch, args=(reader, writer, stop, stop_timeout_s), name="stop-watch", daemon=True
    )
    watcher.start()
    return stop


def _seen_by_the_watcher(_signum: int, _frame: object) -> None:
    """The watcher thread acts on the signal (it reads the wakeup fd); nothing is left for the main thread."""


def _watch(reader: socket.socket, writer: socket.socket, stop: StopRequest, bound_s: float | None) -> None:
    first = _next_signal(reader, None)
    log.info("%s received: finishing the batch in hand", first.name)
    stop.set()
    started = quiet_since = time.monotonic()
    while not stop.over.is_set():
        second = _next_signal(reader, _POLL_S)
        now = time.monotonic()
        if second is not None:
            _end_now(f"{second.name} received again: exiting now")
        if bound_s is not None and now - started >= bound_s:
            log.error(
                "still stopping after --stop-timeout %gs: exiting now; the next recovery covers the batch in hand",
                bound_s,
            )
            _end_now(None)
        if stop.busy():
            quiet_since = now
        elif now - quiet_since >= IDLE_STOP_S:
            _end_now("no transaction in flight and nothing being written: exiting now")


def _next_signal(reader: socket.socket, timeout_s: float | None) -> signal.Signals | None:
    """The next stop signal read from the wakeup fd (others pass), or None once ``timeout_s`` passed."""
    reader.settimeout(timeout_s)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            data = reader.recv(1)
        except TimeoutError:
            return None
        if data and data[0] in _SIGNALS:
            return signal.Signals(data[0])
        if deadline is not None:
            reader.settimeout(max(deadline - time.monotonic(), 0.001))


def _end_now(why: str | None) -> None:
    """End the process as SIGTERM's default action does: a supervisor sees it killed by SIGTERM, as it would
    after a second signal of its own."""
    if why is not None:
        log.warning("%s", why)
    logging.shutdown()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal(signal.SIGTERM, signal.SIG_DFL.value)  # from this thread: Python's signal() is the main thread's
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)
    os._exit(128 + signal.SIGTERM)  # not reached while SIGTERM ends the process

"""How a worker process stops: a signal finishes the batch in hand; a second one, or a bound, ends it at once."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it


def stop_on_signals(stop_timeout_s: float | None = None) -> threading.Event:
    """An event set by SIGTERM or SIGINT: the worker finishes the batch in hand, commits, and exits 0.

    A second signal, or ``stop_timeout_s`` running out after the first, ends the process at once, as a crash
    would: a store records a batch only after its transaction committed, so nothing half done is kept, and
    the next owner's recovery (or the restarted worker's fencing of its open transaction) covers the rest."""
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        # the next signal is the kernel's to act on: it ends the process even while a Kafka call blocks
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        log.info("%s received: finishing the batch in hand", signal.Signals(signum).name)
        stop.set()
        if stop_timeout_s is not None:
            threading.Thread(target=_force_stop_after, args=(stop_timeout_s,), name="stop-bound", daemon=True).start()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def _force_stop_after(seconds: float) -> None:
    time.sleep(seconds)
    log.error(
        "still stopping after --stop-timeout %gs: exiting now; the next recovery covers the batch in hand", seconds
    )
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGTERM)  # the default action by now: the same end as a second SIGTERM

"""A secondary instance's catch-up with the store's writer, to a view without holes.

RocksDB's secondary instance catches up in two steps: it reads the writer's MANIFEST (the files flushed so
far), then lists the write-ahead logs and replays those past what it read before. When the writer records a
flush between the two steps and deletes that flush's log before the listing, the instance never reads the rest
of that log, yet replays the newer one: it holds the writer's later batches (the store's state among them)
without some earlier ones. The writer deletes a log only after it recorded the flush that holds the log's
writes, so a catch-up during which the MANIFEST did not change lost no log that way, and its MANIFEST read
names the files of every log an earlier catch-up lost. ``catch_up`` therefore catches up again until one
catch-up saw the MANIFEST still. Opening an instance takes the same two steps, so an open across which the
MANIFEST stayed still needs no catch-up after it.
"""

from __future__ import annotations

import time
from pathlib import Path

from rocksdict import Rdict

from store.errors import StoreError

CATCH_UP_SECONDS = 30.0  # how long a reader tries for a still MANIFEST before it gives up
_FIRST_PAUSE = 0.005
_LONGEST_PAUSE = 0.5

ManifestMark = tuple[str, int]


def manifest_mark(path: Path) -> ManifestMark | None:
    """The writer's current MANIFEST and its size: it grows with every flush, compaction or family the writer
    records, and is replaced by a new file when it rolls over. None while it is being replaced."""
    try:
        name = (path / "CURRENT").read_text().strip()
        return name, (path / name).stat().st_size
    except (OSError, ValueError):
        return None


class Backoff:
    """Pauses between tries of a read the writer's own work can spoil (a catch-up, an open that races a new
    generation): doubling from ``_FIRST_PAUSE`` to ``_LONGEST_PAUSE``, for ``seconds`` in all."""

    def __init__(self, seconds: float):
        self._deadline = time.monotonic() + seconds
        self._pause = _FIRST_PAUSE

    def wait(self) -> bool:
        """Pause before the next try; False, at once, when the time is up."""
        if time.monotonic() > self._deadline:
            return False
        time.sleep(self._pause)
        self._pause = min(2 * self._pause, _LONGEST_PAUSE)
        return True


def catch_up(db: Rdict, path: Path, opened_at: ManifestMark | None = None) -> None:
    """Catch ``db``, a secondary instance of the store at ``path``, up with its writer to a view without holes.
    ``opened_at``: the MANIFEST's mark taken just before ``db`` was opened; opening reads the MANIFEST, then
    the logs, as a catch-up does, so an open across which the MANIFEST stayed still needs none (a stopped
    writer's store is read without one). A writer that records to its MANIFEST during every catch-up for
    ``CATCH_UP_SECONDS`` gets a StoreError (each catch-up takes milliseconds; a worker records a flush or a
    compaction every few seconds)."""
    if opened_at is not None and manifest_mark(path) == opened_at:
        return
    backoff = Backoff(CATCH_UP_SECONDS)
    while True:
        before = manifest_mark(path)
        db.try_catch_up_with_primary()
        if before is not None and manifest_mark(path) == before:
            return
        if not backoff.wait():
            raise StoreError(
                f"store {path}: its worker changed the store's files during every read for {CATCH_UP_SECONDS:.0f} s",
                "run the command again; if it fails again, run it while the worker is stopped",
            )

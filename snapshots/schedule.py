"""Snapshots taken by the worker itself: on a schedule (``--snapshot-every 1h --snapshot-to …``) and when
``dedupectl snapshot create`` asks for a partition the worker holds.

The worker calls ``SnapshotSchedule.maybe_run(stores)`` between batches, in the thread that owns the stores.
That call only ever takes checkpoints (hard links plus a memtable flush: bounded by the write buffer, not the
store); hashing, uploading and pruning run on one background thread. The destination is checked when the
schedule is made (the worker's start): a bad one stops the worker there with a ConfigError. After that nothing
here raises into the worker: a failure is logged at error level, kept in ``stats`` and reported to
``on_failure`` with its step (the worker counts it in a metric), and processing goes on.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from snapshots.checkpoint import CheckpointFacts, take_checkpoint
from snapshots.errors import SnapshotError
from snapshots.ids import new_snapshot_id
from snapshots.manifest import STORE_DIR
from snapshots.progress import NO_PROGRESS
from snapshots.requests import STAGING_DIR, remove_if_empty, remove_staging, serve_requests, staging_dir
from store import clock
from store.dedup_store import DedupStore
from store.errors import ConfigError, DedupeError

if TYPE_CHECKING:
    from snapshots.backends import AwsOptions

log = logging.getLogger(__name__)

STALE_STAGING_S = 6 * 3600  # staging left by a crash; a live checkpoint is published within minutes

# What failed, as ``on_failure`` hears it: a partition's checkpoint, a snapshot's publish, a whole round before
# any checkpoint (the destination is gone, say), the pruning after a round.
FAILURE_STEPS = ("checkpoint", "publish", "round", "prune")


@dataclass(frozen=True)
class ScheduleConfig:
    every_s: float | None = None  # None: serve `snapshot create` requests only
    destination: str | None = None  # None: <data_dir>/snapshots
    keep: int | None = None  # prune to the newest N per partition after each round
    aws: AwsOptions | None = None  # None: the environment's (region, DEDUPECTL_S3_ENDPOINT_URL)
    request_poll_s: float = 0.5  # how often to look for `snapshot create` requests


@dataclass
class ScheduleStats:
    rounds: int = 0
    published: int = 0
    failed: int = 0
    skipped_rounds: int = 0  # the previous round was still publishing
    last_success_ms: int | None = None
    last_error: str | None = None


class SnapshotSchedule:
    def __init__(
        self,
        data_dir: Path,
        topic: str,
        config: ScheduleConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_failure: Callable[[str], None] | None = None,
        on_published: Callable[[], None] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.topic = topic
        self.config = config or ScheduleConfig()
        self.stats = ScheduleStats()
        self._clock = clock
        self._on_failure = on_failure  # called with one of FAILURE_STEPS, from the publishing thread too
        self._on_published = on_published
        now = clock()
        self._next_due = None if self.config.every_s is None else now + self.config.every_s
        self._next_request_check = now
        # a daemon thread, not an executor: a worker told to stop must not wait out an hour-long upload (an
        # abandoned upload has no manifest, so it is never listed; its staging is removed on a later start)
        self._publishing: threading.Thread | None = None
        self._lock = threading.Lock()
        self._local_root: Path | None = None  # a local destination, re-checked before every round
        if self.config.every_s is not None:
            self._check_destination()
        self._remove_stale_staging()

    def _check_destination(self) -> None:
        """At start, not at the first round: a mistyped or unmounted destination stops the worker with one
        line (ConfigError) before it takes any partition."""
        from snapshots.backends import EbsBackend, LocalBackend, open_backend

        spec = self.config.destination
        try:
            backend = open_backend(spec, data_dir=self.data_dir, aws=self.config.aws)
            if isinstance(backend, EbsBackend):
                backend.check_data_dir(self.topic)
            elif not (isinstance(backend, LocalBackend) and spec is None):  # the default is made on first use
                backend.check_writable()
        except DedupeError as error:
            shown = spec if spec is not None else f"{self.data_dir}/snapshots"
            raise ConfigError(f"--snapshot-to {shown}: {error.message}", error.hint) from error
        if isinstance(backend, LocalBackend) and spec is not None:
            self._local_root = backend.root

    def maybe_run(self, stores: Mapping[int, DedupStore]) -> None:
        """Between batches: answer checkpoint requests, and take the scheduled snapshots when due."""
        now = self._clock()
        if now >= self._next_request_check:
            self._next_request_check = now + self.config.request_poll_s
            try:
                serve_requests(self.data_dir, self.topic, stores)
            except Exception as error:  # never into the worker
                log.error("answering snapshot requests failed: %s", error)
        if self._next_due is None or now < self._next_due or not stores:
            return
        self._next_due = now + self.config.every_s
        try:
            self._run_round(stores)
        except Exception as error:
            self._failed("round", "scheduled snapshot round", error)

    def _run_round(self, stores: Mapping[int, DedupStore]) -> None:
        self.stats.rounds += 1
        if self._publishing is not None and self._publishing.is_alive():
            self.stats.skipped_rounds += 1
            log.warning("the previous scheduled snapshots are still being published: skipping this round")
            return
        if self._local_root is not None and not self._local_root.is_dir():  # no checkpoint for nowhere to go
            raise SnapshotError(
                f"snapshot destination {self._local_root} does not exist (any more)",
                "check that its disk is mounted; no checkpoint was taken",
            )
        staged: list[tuple[str, CheckpointFacts]] = []
        for partition, store in sorted(stores.items()):
            snapshot_id = str(new_snapshot_id(self.topic, partition, clock.now_ms()))
            staging = staging_dir(self.data_dir, snapshot_id)
            try:
                staged.append((snapshot_id, take_checkpoint(store, staging / STORE_DIR)))
            except Exception as error:
                remove_staging(self.data_dir, snapshot_id)
                self._failed("checkpoint", f"checkpoint of {self.topic}[{partition}]", error)
        if staged:
            self._publishing = threading.Thread(
                target=self._publish_round, args=(staged,), name="dedupectl-snapshot", daemon=True
            )
            self._publishing.start()

    def _publish_round(self, staged: list[tuple[str, CheckpointFacts]]) -> None:
        try:
            # imported here, on the publishing thread: importing boto3 would slow every worker start
            from snapshots.backends import open_backend

            backend = open_backend(self.config.destination, data_dir=self.data_dir, aws=self.config.aws)
        except Exception as error:
            for snapshot_id, _ in staged:
                remove_staging(self.data_dir, snapshot_id)
                self._failed("publish", f"snapshot {snapshot_id}", error)
            return
        for snapshot_id, facts in staged:
            staging = staging_dir(self.data_dir, snapshot_id)
            try:
                from snapshots.create import publish_staged

                _, location = publish_staged(backend, snapshot_id, facts, staging / STORE_DIR, NO_PROGRESS)
                with self._lock:
                    self.stats.published += 1
                    self.stats.last_success_ms = clock.now_ms()
                if self._on_published is not None:
                    self._on_published()
                log.info("snapshot %s published to %s", snapshot_id, location)
            except Exception as error:
                self._failed("publish", f"snapshot {snapshot_id}", error)
            finally:
                remove_staging(self.data_dir, snapshot_id)
        if self.config.keep is not None:
            try:
                from snapshots.catalog import prune_backend

                result = prune_backend(backend, keep=self.config.keep, older_than_s=None, topic=self.topic)
                if result.deleted:
                    log.info("pruned %d old snapshot(s)", len(result.deleted))
            except Exception as error:
                self._failed("prune", "pruning old snapshots", error)

    def _failed(self, step: str, what: str, error: Exception) -> None:
        with self._lock:
            self.stats.failed += 1
            self.stats.last_error = f"{what}: {error}"
        log.error("%s failed (processing continues): %s", what, error)
        if self._on_failure is not None:
            self._on_failure(step)

    def _remove_stale_staging(self) -> None:
        root = self.data_dir / STAGING_DIR
        cutoff = time.time() - STALE_STAGING_S
        for child in root.iterdir() if root.is_dir() else []:
            try:
                if child.stat().st_mtime < cutoff:
                    shutil.rmtree(child, ignore_errors=True)
            except OSError:
                continue
        remove_if_empty(root)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the round being published; True when none is left running."""
        if self._publishing is not None:
            self._publishing.join(timeout_s)
            return not self._publishing.is_alive()
        return True

    def close(self, timeout_s: float | None = 30.0) -> None:
        """At shutdown (after the last batch): give the round being published ``timeout_s`` to finish, then
        abandon it. The checkpoint no longer needs the stores, so they may close meanwhile."""
        if not self.wait(timeout_s):
            log.warning("abandoning a snapshot upload still running after %.0fs: it stays incomplete", timeout_s)

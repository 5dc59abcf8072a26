"""Taking a RocksDB checkpoint of a partition's store: hard links to its SST files plus a copy of its MANIFEST
and WAL, consistent across the column families.

Only the process that holds the store open read-write can take one. A secondary or read-only instance in
another process can call Checkpoint too, but it cannot flush or copy the writer's memtables: tried against a
live worker, such a "checkpoint" came back without the meta family at all. So a live worker takes it
itself, between batches (``snapshots.schedule``), and a stopped partition's store is opened here.

The checkpoint flushes the memtables first, so its cost is bounded by the write buffer, not the store size.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from snapshots.errors import SnapshotError
from store import clock
from store.checkpoint import write_checkpoint
from store.dedup_store import DedupStore
from store.errors import StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointFacts:
    """What the store held at the checkpoint, read in the same thread with no write in between."""

    topic: str
    partition: int
    schema_version: int
    next_seq: int
    first_live_seq: int
    input_offset: int
    output_offset: int
    oldest_id_timestamp_ms: int | None
    checkpointed_ms: int

    @property
    def id_count(self) -> int:
        # aging deletes the oldest ids and advances first_live_seq in the same batch: the live ids are
        # exactly the sequence range
        return self.next_seq - self.first_live_seq

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> CheckpointFacts:
        return cls(**raw)


def _oldest_timestamp_ms(store: DedupStore) -> int | None:
    """The record timestamp of the oldest live id (the one at ``first_live_seq``), or None when the store is
    empty or cannot say. It runs in the worker's thread, so it must cost a seek, not a scan."""
    state = store.state
    if state.next_seq <= state.first_live_seq:
        return None
    try:
        if hasattr(store, "timestamps"):  # schema 2: one seek in the times family
            return store.ledger.timestamps([state.first_live_seq])[0]
        oldest = store.iter_by_seq(state.first_live_seq, state.first_live_seq + 1)  # schema 1: one seek
        first = next(oldest, None)
        oldest.close()
        found = None if first is None else store.lookup_many([first[1]])[0]
        return None if found is None else found[1]
    except StoreError as error:  # the window is informational: never fail a snapshot over it
        log.warning("cannot read the oldest id's timestamp of %s: %s", store.path, error)
        return None


def take_checkpoint(store: DedupStore, target: Path) -> CheckpointFacts:
    """Checkpoint ``store`` into ``target`` (which must not exist; its parent must be on the store's
    filesystem for the SSTs to be hard links). Call it from the thread that owns the store."""
    target = Path(target)
    if target.exists():
        raise SnapshotError(f"checkpoint target {target} already exists", "remove it or pick another snapshot id")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SnapshotError(
            f"cannot create {target.parent}: {error.strerror}", "the data directory must be writable"
        ) from error
    state, identity = store.state, store.identity
    oldest = _oldest_timestamp_ms(store)
    try:
        write_checkpoint(store, target)
    except Exception as error:
        raise SnapshotError(f"RocksDB could not checkpoint {store.path}: {error}") from error
    return CheckpointFacts(
        topic=identity.topic,
        partition=identity.partition,
        schema_version=identity.schema_version,
        next_seq=state.next_seq,
        first_live_seq=state.first_live_seq,
        input_offset=state.input_offset,
        output_offset=state.output_offset,
        oldest_id_timestamp_ms=oldest,
        checkpointed_ms=clock.now_ms(),
    )


def checkpoint_idle_store(path: Path, target: Path) -> CheckpointFacts:
    """Checkpoint a store no process has open: open it read-write (its lock keeps a worker out for the few
    moments this takes), checkpoint, close. Raises StoreLockedError when a process holds it."""
    with DedupStore.open_existing(path) as store:
        return take_checkpoint(store, target)

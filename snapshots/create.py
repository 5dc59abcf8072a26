"""``snapshot create``: checkpoint each partition's store, describe it in a manifest, publish it.

Who checkpoints: a live worker serving the partition, asked through its data directory (the only process that
can take a consistent checkpoint of a store it holds); otherwise this process, which opens the idle store for
the moment it takes. The checkpoint is staged in ``<data_dir>/.snapshot-staging/<id>/store`` and removed once
published, whatever happens.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from snapshots.backends import AwsOptions, Backend, EbsBackend, LocalBackend, SnapshotInfo, open_backend
from snapshots.checkpoint import CheckpointFacts, checkpoint_idle_store
from snapshots.errors import SnapshotError
from snapshots.ids import new_snapshot_id
from snapshots.manifest import STORE_DIR, TOOL_VERSION, Manifest, describe_files, directory_bytes
from snapshots.progress import NO_PROGRESS, TransferProgress
from snapshots.requests import remove_if_empty, remove_staging, request_checkpoint, staging_dir
from store import clock
from store.errors import ConfigError, StoreLockedError, StoreNotFoundError
from store.layout import list_store_dirs
from store.worker_status import describe, live_worker_for

SELF = "this process (store idle)"


@dataclass(frozen=True, kw_only=True)
class CreatedSnapshot(SnapshotInfo):
    """A snapshot just taken: its catalog row, plus the window it holds and how it was taken."""

    effective_window_s: float | None
    taken_by: str
    checkpoint_seconds: float
    publish_seconds: float


def build_manifest(
    snapshot_id: str, facts: CheckpointFacts, checkpoint_dir: Path, progress: TransferProgress = NO_PROGRESS
) -> Manifest:
    """Hash every file of the checkpoint and record what the store held when it was taken."""
    progress.start(f"hashing {snapshot_id}", directory_bytes(checkpoint_dir))
    files = describe_files(checkpoint_dir, progress.advance)
    progress.finish()
    oldest = facts.oldest_id_timestamp_ms
    return Manifest(
        snapshot_id=snapshot_id,
        topic=facts.topic,
        partition=facts.partition,
        input_offset=facts.input_offset,
        output_offset=facts.output_offset,
        first_seq=facts.first_live_seq,
        next_seq=facts.next_seq,
        id_count=facts.id_count,
        oldest_id_timestamp_ms=oldest,
        effective_window_s=None if oldest is None else max(facts.checkpointed_ms - oldest, 0) / 1000,
        schema_version=facts.schema_version,
        tool_version=TOOL_VERSION,
        created_ms=facts.checkpointed_ms,
        files=files,
    )


def publish_staged(
    backend: Backend, snapshot_id: str, facts: CheckpointFacts, checkpoint_dir: Path, progress: TransferProgress
) -> tuple[Manifest, str]:
    manifest = build_manifest(snapshot_id, facts, checkpoint_dir, progress)
    return manifest, backend.publish(checkpoint_dir, manifest, progress)


def resolve_stores(data_dir: Path, topic: str | None, partitions: list[int] | None) -> list[tuple[str, int, Path]]:
    """The ``(topic, partition, path)`` stores to act on; ``partitions`` None means all of them."""
    stores = [store for store in list_store_dirs(data_dir) if topic is None or store[0] == topic]
    topics = sorted({store[0] for store in stores})
    if not stores:
        raise StoreNotFoundError(
            f"no partition stores{f' of {topic}' if topic else ''} in {data_dir}", "check --data-dir and --topic"
        )
    if len(topics) > 1:
        raise ConfigError(f"{data_dir} holds stores of several topics ({', '.join(topics)})", "pass --topic")
    if partitions is None:
        return stores
    by_partition = {store[1]: store for store in stores}
    missing = [p for p in partitions if p not in by_partition]
    if missing:
        raise StoreNotFoundError(
            f"no store for partition(s) {', '.join(map(str, missing))} of {topics[0]} in {data_dir}",
            f"this data directory holds partition(s) {', '.join(str(p) for p in sorted(by_partition))}",
        )
    return [by_partition[p] for p in partitions]


def checkpoint_partition(
    data_dir: Path, topic: str, partition: int, path: Path, snapshot_id: str, wait_s: float
) -> tuple[CheckpointFacts, str]:
    """Checkpoint one store into its staging directory; returns the facts and who took it."""
    target = staging_dir(data_dir, snapshot_id) / STORE_DIR
    worker = live_worker_for(data_dir, topic, partition)
    if worker is None:
        try:
            return checkpoint_idle_store(path, target), SELF
        except StoreLockedError as error:
            worker = live_worker_for(data_dir, topic, partition)  # it may have started meanwhile
            if worker is None:
                raise SnapshotError(
                    f"store {path} is locked by a process that is not a worker of this data directory",
                    "wait for that process (a repair?) to finish, then retry",
                ) from error
    taker = describe(worker)
    facts = request_checkpoint(data_dir, topic, partition, snapshot_id, target, timeout_s=wait_s, worker=taker)
    return facts, taker


def snapshot_partition(
    data_dir: Path,
    topic: str,
    partition: int,
    path: Path,
    backend: Backend,
    *,
    wait_s: float,
    progress: TransferProgress,
) -> CreatedSnapshot:
    snapshot_id = str(new_snapshot_id(topic, partition, clock.now_ms()))
    staging = staging_dir(data_dir, snapshot_id)
    try:
        started = time.perf_counter()
        facts, taker = checkpoint_partition(data_dir, topic, partition, path, snapshot_id, wait_s)
        checkpointed = time.perf_counter()
        manifest, location = publish_staged(backend, snapshot_id, facts, staging / STORE_DIR, progress)
        published = time.perf_counter()
    finally:
        remove_staging(data_dir, snapshot_id)
    return CreatedSnapshot(
        **asdict(SnapshotInfo.from_manifest(manifest, location)),
        effective_window_s=manifest.effective_window_s,
        taken_by=taker,
        checkpoint_seconds=checkpointed - started,
        publish_seconds=published - checkpointed,
    )


def create_snapshots(
    data_dir: Path,
    *,
    topic: str | None = None,
    partitions: list[int] | None = None,
    destination: str | None = None,
    create_destination: bool = False,
    aws: AwsOptions | None = None,
    wait_s: float = 60.0,
    progress: TransferProgress = NO_PROGRESS,
) -> list[CreatedSnapshot]:
    """Snapshot the given partitions (None: every store in ``data_dir``) to ``destination``; a local one must
    exist unless ``create_destination``."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise StoreNotFoundError(f"data directory {data_dir} does not exist", "check --data-dir")
    backend = open_backend(destination, data_dir=data_dir, aws=aws, create=create_destination)
    stores = resolve_stores(data_dir, topic, partitions)
    if isinstance(backend, EbsBackend):  # first: a volume of other partitions is the sharper message
        for store_topic, partition, _ in stores:
            backend.check_partition(store_topic, partition)
    made = []  # the local destination and its parents that check_writable creates, deepest first
    folder = backend.root if isinstance(backend, LocalBackend) else None
    while folder is not None and not folder.exists() and folder != folder.parent:
        made.append(folder)
        folder = folder.parent
    backend.check_writable()  # before any checkpoint: a bad destination costs nothing
    try:
        return [
            snapshot_partition(data_dir, t, p, path, backend, wait_s=wait_s, progress=progress) for t, p, path in stores
        ]
    finally:
        for folder in made:  # a failed create leaves no empty folder behind (one that holds a snapshot stays)
            remove_if_empty(folder)

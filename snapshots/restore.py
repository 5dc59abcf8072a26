"""``snapshot restore``: place a verified snapshot as a partition's store; the worker's recovery does the rest.

Order of work, so that nothing live is ever touched on failure:
1. refuse when a live worker serves the partition in that data directory, or a store exists without
   ``--replace``;
2. download/copy into ``<data_dir>/.restore-<id>.partial``, checking every file's size and SHA-256;
3. read the whole copy back, every block and side file against its own checksum (``store.verify``), then open
   it and check it is that partition's store;
4. only then, with ``--replace``, check no process holds the existing store (its RocksDB lock), move it aside
   (it is kept) and rename the copy into place.
When the worker starts it reads the output topic from the snapshot's output offset to the end and records
what the snapshot lacks, as after any restart.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from snapshots.backends import AwsOptions, EbsBackend, open_backend
from snapshots.errors import SnapshotCorruptError, SnapshotError
from snapshots.ids import parse_snapshot_id
from snapshots.progress import NO_PROGRESS, TransferProgress
from store.dedup_store import DedupStore
from store.errors import DataDirError, StoreError, StoreLockedError
from store.layout import moved_aside_path, store_path
from store.verify import verify_store
from store.worker_status import describe, live_worker_for


@dataclass(frozen=True)
class RestoreResult:
    snapshot_id: str
    topic: str
    partition: int
    store_path: Path
    input_offset: int
    output_offset: int
    id_count: int
    files: int
    total_bytes: int
    moved_aside: Path | None
    seconds: float


@dataclass(frozen=True)
class VolumeRestoreResult:
    snapshot_id: str
    ebs_snapshot_id: str
    volume_id: str
    availability_zone: str


def _refuse_if_live(data_dir: Path, topic: str, partition: int, target: Path, replace: bool) -> None:
    """Checks that read nothing but status files and directory entries: run before any download."""
    worker = live_worker_for(data_dir, topic, partition)
    if worker is not None:
        raise SnapshotError(
            f"refusing to restore over a live store: {describe(worker)} serves {topic}[{partition}]",
            "stop that worker first; nothing was changed",
        )
    if target.exists() and not replace:
        raise SnapshotError(
            f"a store already exists at {target}",
            "pass --replace to move it aside (it is kept) or restore into another --data-dir",
        )


def _refuse_if_locked(target: Path) -> None:
    """The lock is the last word on whether some process (a repair, a foreign worker) holds the store. Taking
    it opens the old store, so this runs only once the snapshot has been verified and is about to replace it."""
    try:
        DedupStore.open_existing(target).close()
    except StoreLockedError as error:
        raise SnapshotError(
            f"refusing to restore over {target}: another process holds it open", "stop that process first"
        ) from error
    except StoreError:
        pass  # a corrupt or unreadable store is exactly what one replaces


def _check_restored(path: Path, topic: str, partition: int, snapshot_id: str) -> None:
    """The copy is a whole store of that partition: its files read back whole (not only as the manifest's hashes
    say: a file damaged before the snapshot was taken passes those), then opened as its worker will."""
    try:
        verify_store(path)
        with DedupStore.open_existing(path) as store:
            identity = store.identity
    except StoreError as error:
        raise SnapshotCorruptError(
            f"snapshot {snapshot_id} passed its checksums but is not a usable store ({error.message})",
            "restore an older snapshot",
        ) from error
    if (identity.topic, identity.partition) != (topic, partition):
        raise SnapshotCorruptError(
            f"snapshot {snapshot_id} holds the store of {identity.topic}[{identity.partition}], "
            f"not {topic}[{partition}] as its manifest says",
            "restore another snapshot",
        )


def _missing_parents(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def restore_snapshot(
    source: str | None,
    snapshot_id: str,
    data_dir: Path,
    *,
    replace: bool = False,
    aws: AwsOptions | None = None,
    progress: TransferProgress = NO_PROGRESS,
) -> RestoreResult:
    started = time.perf_counter()
    parse_snapshot_id(snapshot_id)
    data_dir = Path(data_dir)
    backend = open_backend(source, data_dir=data_dir, aws=aws)
    if isinstance(backend, EbsBackend):
        raise SnapshotError(
            "an EBS snapshot is restored as a new volume",
            "pass --availability-zone to create it, then attach it with `dedupectl reattach`",
        )
    manifest = backend.read_manifest(snapshot_id)
    topic, partition = manifest.topic, manifest.partition
    target = store_path(data_dir, topic, partition)
    _refuse_if_live(data_dir, topic, partition, target, replace)
    created = _missing_parents(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataDirError(f"cannot create data directory {data_dir}: {error.strerror}") from error
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise DataDirError(f"data directory {data_dir} is not writable", "fix its permissions or choose another")
    staging = data_dir / f".restore-{snapshot_id}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    moved_aside = None
    placed = False
    try:
        backend.fetch(snapshot_id, staging, progress)
        _check_restored(staging, topic, partition, snapshot_id)
        if target.exists():
            _refuse_if_locked(target)
            moved_aside = moved_aside_path(target)
            os.rename(target, moved_aside)
        try:
            os.rename(staging, target)
        except OSError:
            if moved_aside is not None:  # put the old store back rather than leave the partition without one
                os.rename(moved_aside, target)
            raise
        placed = True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not placed:  # "nothing was placed" includes the directories made for it
            for folder in created:
                with contextlib.suppress(OSError):
                    folder.rmdir()
    return RestoreResult(
        snapshot_id=snapshot_id,
        topic=topic,
        partition=partition,
        store_path=target,
        input_offset=manifest.input_offset,
        output_offset=manifest.output_offset,
        id_count=manifest.id_count,
        files=len(manifest.files),
        total_bytes=manifest.total_bytes,
        moved_aside=moved_aside,
        seconds=time.perf_counter() - started,
    )


def restore_volume(
    source: str, snapshot_id: str, availability_zone: str, *, aws: AwsOptions | None = None
) -> VolumeRestoreResult:
    """Create a volume from an EBS snapshot in ``availability_zone``, tagged with its partition."""
    parse_snapshot_id(snapshot_id)
    backend = open_backend(source, aws=aws)
    if not isinstance(backend, EbsBackend):
        raise SnapshotError("--availability-zone applies to EBS snapshots only", "restore with --location ebs:")
    ebs_snapshot, volume = backend.create_volume(snapshot_id, availability_zone)
    return VolumeRestoreResult(snapshot_id, ebs_snapshot, volume, availability_zone)

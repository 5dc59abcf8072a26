"""Snapshots in a local directory: ``<root>/<snapshot id>/manifest.json`` and ``<root>/<snapshot id>/store/…``.

A snapshot is assembled in ``<root>/.<id>.partial`` and renamed into place once its manifest is written, so a
crash never leaves something that looks complete. Its files are copies, re-hashed on the way, even on the
data directory's filesystem: a snapshot that shared inodes with the live store (as the checkpoint's hard links
do) would share its fate, and damage to one would show in the other. Only the EBS backend, whose on-volume
copy lives for the moment of CreateSnapshot, keeps the hard links (``link=True``). Keep snapshots on another
disk, or in S3, to survive the loss of the data disk.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from snapshots.backends.base import SnapshotInfo, VerifyReport
from snapshots.errors import SnapshotCorruptError, SnapshotError, SnapshotNotFoundError
from snapshots.ids import is_snapshot_id
from snapshots.manifest import (
    HASH_CHUNK,
    MANIFEST_NAME,
    STORE_DIR,
    FileProblem,
    Manifest,
    check_file,
    check_identity,
    sha256_file,
)
from snapshots.progress import TransferProgress


def copy_hashed(source: Path, target: Path, progress: TransferProgress) -> tuple[int, str]:
    """Copy one file, hashing the bytes as they pass; returns (size, sha256). The copy is fsynced."""
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as reader, open(target, "wb") as writer:
        while chunk := reader.read(HASH_CHUNK):
            writer.write(chunk)
            digest.update(chunk)
            size += len(chunk)
            progress.advance(len(chunk))
        writer.flush()
        os.fsync(writer.fileno())
    return size, digest.hexdigest()


def copy_verified(source_dir: Path, target_dir: Path, manifest: Manifest, progress: TransferProgress) -> None:
    """Copy every file of ``manifest`` from ``source_dir`` to ``target_dir``, checking each against it;
    raises SnapshotCorruptError naming the first bad file."""
    target_dir.mkdir(parents=True, exist_ok=True)
    for entry in manifest.files:
        source = source_dir / entry.name
        if not source.is_file():
            problem: FileProblem | None = check_file(entry, None, None)
        else:
            problem = check_file(entry, *copy_hashed(source, target_dir / entry.name, progress))
        if problem is not None:
            raise SnapshotCorruptError(problem.describe(manifest.snapshot_id), "nothing was placed or changed")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalBackend:
    kind = "local"

    def __init__(self, root: Path, *, link: bool = False, create: bool = False) -> None:
        self.root = Path(root)
        self.link = link  # move the checkpoint (its hard links) in place instead of copying it
        self.create = create  # a missing root is made (the default destination, or --mkdir); else refused

    def describe(self) -> str:
        return str(self.root)

    def check_writable(self) -> None:
        if not self.root.exists():
            if not self.create:
                raise SnapshotError(
                    f"snapshot destination {self.root} does not exist",
                    "check the path and that its disk is mounted; create it (mkdir -p) or pass --mkdir",
                )
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise SnapshotError(
                    f"snapshot destination {self.root} cannot be created: {error.strerror}",
                    "pass --location a writable directory (or s3://bucket/prefix)",
                ) from error
        if not self.root.is_dir():
            raise SnapshotError(f"snapshot destination {self.root} is not a directory", "pass --location a directory")
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise SnapshotError(
                f"snapshot destination {self.root} is not writable",
                "fix its permissions or pass --location another directory",
            )

    def _exists(self) -> bool:
        """Whether the location holds anything to read; a named directory that is missing is an error."""
        if self.root.is_dir():
            return True
        if self.create and not self.root.exists() and self.root.parent.is_dir():
            return False  # the default location before the first snapshot
        what = "is not a directory" if self.root.exists() else "does not exist"
        raise SnapshotError(
            f"snapshot location {self.root} {what}", "check the path (--location) and that its disk is mounted"
        )

    def _dir(self, snapshot_id: str) -> Path:
        return self.root / snapshot_id

    def publish(self, checkpoint_dir: Path, manifest: Manifest, progress: TransferProgress) -> str:
        final = self._dir(manifest.snapshot_id)
        if final.exists():
            raise SnapshotError(f"snapshot {final} already exists", "snapshot ids are unique per millisecond: retry")
        partial = self.root / f".{manifest.snapshot_id}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            partial.mkdir()  # never parents: a destination gone since the check must not reappear on this disk
        except FileNotFoundError as error:
            raise SnapshotError(
                f"snapshot destination {self.root} does not exist (any more)",
                "check that its disk is mounted; nothing was written",
            ) from error
        progress.start(f"storing {manifest.snapshot_id}", manifest.total_bytes)
        try:
            if self.link and os.stat(checkpoint_dir).st_dev == os.stat(self.root).st_dev:
                os.rename(checkpoint_dir, partial / STORE_DIR)
                progress.advance(manifest.total_bytes)
            else:
                copy_verified(checkpoint_dir, partial / STORE_DIR, manifest, progress)
            (partial / MANIFEST_NAME).write_text(manifest.to_json())
            _fsync_dir(partial)
            os.rename(partial, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        finally:
            progress.finish()
        return str(final)

    def read_manifest(self, snapshot_id: str, *, checked: bool = True) -> Manifest:
        """The manifest of ``<root>/<snapshot_id>``; ``checked``: refuse one that names another snapshot."""
        path = self._dir(snapshot_id) / MANIFEST_NAME
        if not self._exists() or not path.is_file():
            raise SnapshotNotFoundError(
                f"no snapshot {snapshot_id} in {self.root}", f"see `dedupectl snapshot list --location {self.root}`"
            )
        manifest = Manifest.from_json(path.read_bytes(), str(path))
        if checked:
            check_identity(snapshot_id, manifest, str(self._dir(snapshot_id)))
        return manifest

    def list(self) -> list[SnapshotInfo]:
        found = []
        for child in sorted(self.root.iterdir()) if self._exists() else []:
            if is_snapshot_id(child.name) and (child / MANIFEST_NAME).is_file():
                manifest = self.read_manifest(child.name, checked=False)
                found.append(SnapshotInfo.from_manifest(manifest, str(child), listed_as=child.name))
        return found

    def empty_note(self) -> str:
        """What the location holds when it holds no snapshot, in a line."""
        if not self._exists():
            return f"no snapshots in {self.root} (none taken yet)"
        incomplete = self.list_incomplete()
        if incomplete:
            return f"no complete snapshot in {self.root}: {len(incomplete)} incomplete (a publish that never finished)"
        others = sorted(child.name for child in self.root.iterdir())
        if not others:
            return f"no snapshots in {self.root} (it is empty)"
        shown = ", ".join(others[:3]) + (", …" if len(others) > 3 else "")
        return f"no snapshots in {self.root}: it holds {len(others)} other entries ({shown}), none <id>/{MANIFEST_NAME}"

    def list_incomplete(self) -> list[str]:
        """Ids of publishes that never finished (no manifest): leftovers of a crash."""
        found = set()
        for child in self.root.iterdir() if self._exists() else []:
            name = child.name.removeprefix(".").removesuffix(".partial")
            if is_snapshot_id(name) and not (self.root / name / MANIFEST_NAME).is_file():
                found.add(name)
        return sorted(found)

    def verify(self, snapshot_id: str, progress: TransferProgress) -> VerifyReport:
        manifest = self.read_manifest(snapshot_id)
        store = self._dir(snapshot_id) / STORE_DIR
        progress.start(f"verifying {snapshot_id}", manifest.total_bytes)
        problems, checked = [], 0
        for entry in manifest.files:
            path = store / entry.name
            if path.is_file():
                size = path.stat().st_size
                problem = check_file(entry, size, sha256_file(path, progress.advance))
                checked += size
            else:
                problem = check_file(entry, None, None)
            if problem is not None:
                problems.append(problem.describe(snapshot_id))
        progress.finish()
        return VerifyReport(snapshot_id, str(self._dir(snapshot_id)), len(manifest.files), checked, tuple(problems))

    def fetch(self, snapshot_id: str, target_dir: Path, progress: TransferProgress) -> Manifest:
        manifest = self.read_manifest(snapshot_id)
        progress.start(f"copying {snapshot_id}", manifest.total_bytes)
        copy_verified(self._dir(snapshot_id) / STORE_DIR, target_dir, manifest, progress)
        progress.finish()
        return manifest

    def delete(self, snapshot_id: str) -> None:
        folder = self._dir(snapshot_id)
        (folder / MANIFEST_NAME).unlink(missing_ok=True)  # first: a half-deleted snapshot reads as incomplete
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(self.root / f".{snapshot_id}.partial", ignore_errors=True)

"""What every snapshot destination offers, and the records they return."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from snapshots.ids import parse_snapshot_id
from snapshots.manifest import Manifest, identity_problem
from snapshots.progress import TransferProgress

COMPLETED = "completed"  # the one word for a usable snapshot, as EC2 says it for EBS snapshots
INVALID = "invalid"


@dataclass(frozen=True)
class SnapshotInfo:
    """One row of ``snapshot list``."""

    snapshot_id: str
    topic: str
    partition: int
    input_offset: int
    output_offset: int
    id_count: int
    total_bytes: int
    created_ms: int
    location: str  # a directory, an s3:// URL, or an EBS snapshot id
    state: str = COMPLETED  # EBS snapshots also: pending, error; any: invalid (see problem)
    problem: str | None = None  # why it is invalid: its name and its manifest disagree

    @property
    def usable(self) -> bool:
        return self.state != INVALID

    @classmethod
    def from_manifest(cls, manifest: Manifest, location: str, listed_as: str | None = None) -> SnapshotInfo:
        """The row of a snapshot stored as ``listed_as`` (its directory or key prefix): a manifest that names
        another snapshot makes it invalid, listed under the name it is stored as."""
        info = cls(
            snapshot_id=manifest.snapshot_id,
            topic=manifest.topic,
            partition=manifest.partition,
            input_offset=manifest.input_offset,
            output_offset=manifest.output_offset,
            id_count=manifest.id_count,
            total_bytes=manifest.total_bytes,
            created_ms=manifest.created_ms,
            location=location,
        )
        problem = None if listed_as is None else identity_problem(listed_as, manifest)
        if problem is None:
            return info
        named = parse_snapshot_id(listed_as)
        return replace(
            info,
            snapshot_id=listed_as,
            topic=named.topic,
            partition=named.partition,
            created_ms=named.created_ms,
            state=INVALID,
            problem=problem,
        )


@dataclass(frozen=True)
class VerifyReport:
    snapshot_id: str
    location: str
    files_checked: int
    bytes_checked: int
    problems: tuple[str, ...]  # one line each, naming the file
    note: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


class Backend(Protocol):
    kind: str

    def describe(self) -> str:
        """The destination as the operator wrote it (path, s3:// URL, ebs:…)."""
        ...

    def check_writable(self) -> None:
        """Fail now, before any checkpoint is taken, if publishing here cannot work."""
        ...

    def publish(self, checkpoint_dir: Path, manifest: Manifest, progress: TransferProgress) -> str:
        """Store the checkpoint's files and then the manifest; return the snapshot's location. May consume
        (move) ``checkpoint_dir``."""
        ...

    def list(self) -> list[SnapshotInfo]: ...

    def list_incomplete(self) -> list[str]:
        """Ids of publishes that never finished (no manifest)."""
        ...

    def empty_note(self) -> str:
        """When ``list`` finds nothing: what the location holds instead, in a line."""
        ...

    def verify(self, snapshot_id: str, progress: TransferProgress) -> VerifyReport: ...

    def delete(self, snapshot_id: str) -> None: ...

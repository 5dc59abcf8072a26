"""The manifest: what a snapshot holds and how to check it, stored next to its files as ``manifest.json``.

It is written last, so a snapshot without one is incomplete (a publish that died half way) and is never
listed or restored. Offsets are the store's *next* offsets (Kafka's commit convention; -1: none yet): the
worker's recovery reads the output topic from ``output_offset`` after a restore.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from snapshots.errors import SnapshotCorruptError
from snapshots.ids import is_snapshot_id, parse_snapshot_id

# the installed package's version (pyproject.toml is its one source), recorded with every snapshot
TOOL_VERSION = version("dedupectl")

MANIFEST_NAME = "manifest.json"
STORE_DIR = "store"  # the checkpoint's files live under <snapshot>/store/
MANIFEST_FORMAT = 1
HASH_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class FileEntry:
    name: str  # relative to the checkpoint directory (RocksDB keeps a flat directory)
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    snapshot_id: str
    topic: str
    partition: int
    input_offset: int
    output_offset: int
    first_seq: int
    next_seq: int
    id_count: int
    oldest_id_timestamp_ms: int | None
    effective_window_s: float | None  # age of the oldest live id when the checkpoint was taken
    schema_version: int
    tool_version: str
    created_ms: int
    files: tuple[FileEntry, ...] = field(default_factory=tuple)
    format: int = MANIFEST_FORMAT

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    @property
    def created_at(self) -> str:
        return datetime.fromtimestamp(self.created_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")

    def to_json(self) -> str:
        document = asdict(self)
        document["files"] = [asdict(entry) for entry in self.files]
        document["created_at"] = self.created_at
        document["total_bytes"] = self.total_bytes
        return json.dumps(document, indent=2)

    @classmethod
    def from_json(cls, text: str | bytes, where: str) -> Manifest:
        try:
            raw = json.loads(text)
            if raw.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"manifest format {raw.get('format')!r}, this dedupectl reads {MANIFEST_FORMAT}")
            files = tuple(FileEntry(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in raw["files"])
            return cls(
                snapshot_id=str(raw["snapshot_id"]),
                topic=str(raw["topic"]),
                partition=int(raw["partition"]),
                input_offset=int(raw["input_offset"]),
                output_offset=int(raw["output_offset"]),
                first_seq=int(raw["first_seq"]),
                next_seq=int(raw["next_seq"]),
                id_count=int(raw["id_count"]),
                oldest_id_timestamp_ms=raw.get("oldest_id_timestamp_ms"),
                effective_window_s=raw.get("effective_window_s"),
                schema_version=int(raw["schema_version"]),
                tool_version=str(raw["tool_version"]),
                created_ms=int(raw["created_ms"]),
                files=files,
            )
        except (ValueError, KeyError, TypeError) as error:
            raise SnapshotCorruptError(
                f"the manifest of {where} is unreadable ({error})",
                "the snapshot cannot be trusted: restore an older one",
            ) from error


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest()


def describe_files(directory: Path, on_bytes: Callable[[int], None] | None = None) -> tuple[FileEntry, ...]:
    """Size and SHA-256 of every file of a checkpoint directory, by name."""
    entries = []
    for name in sorted(os.listdir(directory)):
        path = directory / name
        if path.is_file():
            entries.append(FileEntry(name, path.stat().st_size, sha256_file(path, on_bytes)))
    return tuple(entries)


def directory_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.iterdir() if path.is_file())


@dataclass(frozen=True)
class FileProblem:
    name: str
    problem: str  # "missing", "truncated", "too long", "corrupt" (checksum mismatch)
    detail: str

    def describe(self, snapshot_id: str) -> str:
        return f"snapshot {snapshot_id}: file {STORE_DIR}/{self.name} is {self.problem} ({self.detail})"


def check_file(entry: FileEntry, size: int | None, sha256: str | None) -> FileProblem | None:
    """Compare what was found (``size`` None: the file is missing) with the manifest's entry."""
    if size is None:
        return FileProblem(entry.name, "missing", f"expected {entry.size} bytes")
    if size < entry.size:
        return FileProblem(entry.name, "truncated", f"{size} of {entry.size} bytes")
    if size > entry.size:
        return FileProblem(entry.name, "too long", f"{size} bytes, expected {entry.size}")
    if sha256 != entry.sha256:
        found = sha256[:12] if sha256 else "?"
        return FileProblem(entry.name, "corrupt", f"sha256 {found}…, expected {entry.sha256[:12]}…")
    return None


def identity_problem(name: str, manifest: Manifest) -> str | None:
    """How the name a snapshot is stored under (its directory or key prefix, the id asked for) and its manifest
    disagree, or None when they agree: the manifest's id must be that name, and its topic and partition the
    ones the name says (the id's time is when it was asked for, the manifest's when the checkpoint was taken)."""
    if not is_snapshot_id(name):
        return f"{name!r} is not a snapshot id"
    from_name = parse_snapshot_id(name)
    if manifest.snapshot_id == name and (manifest.topic, manifest.partition) == (from_name.topic, from_name.partition):
        return None
    return (
        f"stored as {name} ({from_name.topic}[{from_name.partition}]) but its manifest is for "
        f"{manifest.snapshot_id} ({manifest.topic}[{manifest.partition}])"
    )


def check_identity(name: str, manifest: Manifest, where: str) -> None:
    problem = identity_problem(name, manifest)
    if problem is not None:
        raise SnapshotCorruptError(
            f"snapshot {where} is not what its name says: {problem}",
            "it was renamed or copied under another name: nothing was restored; use the snapshot under its own id",
        )

"""Where partition stores live inside a data directory: ``<data_dir>/<topic>-<partition>/``, like Kafka's logs."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

_STORE_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# a store moved aside by --replace: <topic>-<partition>.replaced-<UTC time>, never a live store
_MOVED_ASIDE = re.compile(r"\.replaced-\d{8}(?:T\d{6}Z|-\d{6})$")


def store_path(data_dir: Path, topic: str, partition: int) -> Path:
    return Path(data_dir) / f"{topic}-{partition}"


def moved_aside_path(target: Path) -> Path:
    """Where a replaced store goes: beside ``target``, as ``<store>.replaced-<UTC time>``, which no reader
    of the data directory takes for a store."""
    return target.with_name(f"{target.name}.replaced-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}")


def is_moved_aside(path: Path) -> bool:
    return bool(_MOVED_ASIDE.search(Path(path).name))


def holds_database_files(path: Path) -> bool:
    """Whether ``path`` holds what only a RocksDB database writes (a MANIFEST or table files): a store, whole or
    damaged (one that lost its CURRENT file is still a store, to be refused as damaged)."""
    path = Path(path)
    return path.is_dir() and (any(path.glob("MANIFEST-*")) or any(path.glob("*.sst")))


def list_store_dirs(data_dir: Path) -> list[tuple[str, int, Path]]:
    """Return ``(topic, partition, path)`` of every store directory under ``data_dir``, sorted (stores moved
    aside by ``--replace`` are not among them)."""
    found = []
    for child in sorted(Path(data_dir).iterdir()) if Path(data_dir).is_dir() else []:
        if is_moved_aside(child):
            continue
        match = _STORE_DIR.match(child.name)
        if match and ((child / "CURRENT").exists() or holds_database_files(child)):
            found.append((match["topic"], int(match["partition"]), child))
    return sorted(found, key=lambda item: (item[0], item[1]))

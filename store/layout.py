"""Where partition stores live inside a data directory: ``<data_dir>/<topic>-<partition>/``, like Kafka's logs."""

from __future__ import annotations

import re
from pathlib import Path

_STORE_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def store_path(data_dir: Path, topic: str, partition: int) -> Path:
    return Path(data_dir) / f"{topic}-{partition}"


def list_store_dirs(data_dir: Path) -> list[tuple[str, int, Path]]:
    """Return ``(topic, partition, path)`` of every store directory under ``data_dir``, sorted."""
    found = []
    for child in sorted(Path(data_dir).iterdir()) if Path(data_dir).is_dir() else []:
        match = _STORE_DIR.match(child.name)
        if match and child.is_dir() and (child / "CURRENT").exists():
            found.append((match["topic"], int(match["partition"]), child))
    return sorted(found, key=lambda item: (item[0], item[1]))

"""Keeping an observer's stores (``dedupectl run --observe``) apart from a worker's: their ids were recorded,
never published, so a worker that deduplicated against them would drop ids nobody received.

An observer marks its data directory; a worker refuses a directory so marked, and an observer refuses one
that already holds a worker's stores without the mark.
"""

from __future__ import annotations

import glob
from pathlib import Path

from dedupectl.config import WorkerConfig
from store.errors import ConfigError

MARK = "OBSERVER"  # the file that marks an observer's data directory
MARK_TEXT = "the stores here belong to `dedupectl run --observe`: their ids were never published\n"


def claim_data_dir(config: WorkerConfig) -> None:
    """Mark an observer's data directory, or refuse one that is the other kind's (exit 2)."""
    data_dir = Path(config.data_dir)
    marked = (data_dir / MARK).exists()
    if config.observe and not marked:
        if _holds_stores(data_dir, config.input_topic):
            raise ConfigError(
                f"{data_dir} holds a worker's stores: an observer records ids it never published",
                "give the observer a data directory of its own (it derives <data_dir>.observe from the worker's)",
            )
        (data_dir / MARK).write_text(MARK_TEXT)
    elif not config.observe and marked:
        raise ConfigError(
            f"{data_dir} holds an observer's stores (dedupectl run --observe): their ids were never published, "
            "so a worker would drop ids nobody received",
            "give the worker its own data directory, and build its stores from the output with `dedupectl rebuild`",
        )


def _holds_stores(data_dir: Path, topic: str) -> bool:
    """Whether ``data_dir`` holds a store of ``topic``'s (``<topic>-<partition>``)."""
    prefix = f"{topic}-"
    return any(path.name.removeprefix(prefix).isdigit() for path in data_dir.glob(f"{glob.escape(topic)}-*"))

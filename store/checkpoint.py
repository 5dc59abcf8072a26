"""A store's checkpoint: RocksDB's own, consistent across the families, plus the sealed arrays its metadata
names (files of the store's own, outside RocksDB). ``snapshots`` uploads what this writes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rocksdict import Checkpoint

if TYPE_CHECKING:
    from store.dedup_store import DedupStore


def write_checkpoint(store: DedupStore, target: Path) -> None:
    """Write a checkpoint of the whole store into ``target`` (which must not exist): SST files hard-linked when
    ``target`` is on the same filesystem. RocksDB flushes the memtables first, so only the process that has the
    store open read-write gets a complete one."""
    checkpoint = Checkpoint(store.db)
    try:
        checkpoint.create_checkpoint(str(target))
    finally:
        del checkpoint  # it references the DB: the store could not close while it lives
    for _, source, _ in store.arrays_files():  # the files its metadata names: nothing changes them meanwhile
        try:  # a hard link, as RocksDB's checkpoint makes of its files, or a copy on another filesystem
            os.link(source, Path(target) / source.name)
        except OSError:
            shutil.copy2(source, Path(target) / source.name)

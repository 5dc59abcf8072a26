"""Read every byte a store answers from and check it: what a restore runs before it places a store.

A checksum over a snapshot's files (its manifest's SHA-256) proves only that they arrived as they were sent; a
file damaged before the snapshot was taken passes it. This reads the store itself: every block of every family
(RocksDB checks each block it reads), every sealed-arrays file and the saved id filter against their CRCs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocksdict import ReadOptions

from store import generation_arrays
from store.codec import CF_META, CF_TIMES
from store.damage import damaged, scan
from store.dedup_store import DedupStore
from store.filter_keeper import FILTER_FILE
from store.id_filter import damage_of
from store.sealed_arrays import SealedArrays


@dataclass(frozen=True)
class StoreCheck:
    """What a whole check read: the keys of every family, and the ids of the sealed arrays."""

    keys: int
    arrays_ids: int


def verify_store(path: Path) -> StoreCheck:
    """Read the whole store at ``path`` (no writer may hold it); a damaged file raises ``StoreCorruptError``."""
    path = Path(path)
    read = ReadOptions()
    read.set_verify_checksums(True)
    read.fill_cache(False)  # each block is read once
    keys = 0
    with DedupStore.open_secondary(path) as store:  # read-only: its open checks every file the MANIFEST names
        families = [CF_TIMES, CF_META, *(name for name, _, _ in store.id_families())]
        for name in families:
            keys += sum(1 for _ in scan(store.family(name), read=read))
        arrays = [SealedArrays.open(file) for _, file, _ in store.arrays_files()]
        generation_arrays.verify(arrays)
        arrays_ids = sum(len(each) for each in arrays)
    problem = damage_of(path / FILTER_FILE)
    if problem is not None:
        raise damaged(f"the saved id filter {path / FILTER_FILE}", problem)
    return StoreCheck(keys=keys, arrays_ids=arrays_ids)

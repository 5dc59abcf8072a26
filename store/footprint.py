"""What a store occupies: its SST files per column family (with the sequence range of the generation each
``ids`` file belongs to) and its bytes on disk."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from store.codec import CF_IDS, COLUMN_FAMILIES
from store.dedup_store import DedupStore

_SSTABLE_LINE = re.compile(r"^\s*(\d+):\d+\[")
_LEVEL_LINE = re.compile(r"^--- level (\d+) ---")
# Files in a store directory that are not its data: RocksDB's info log and its rotations, the lock.
_NOT_DATA = re.compile(r"^(LOG(\.old\.\d+)?|LOCK)$")


@dataclass(frozen=True)
class SstFile:
    family: str  # ``ids`` for a file of any generation
    level: int
    number: int
    size: int
    smallest: bytes
    largest: bytes
    entries: int
    deletions: int
    # ``(first, last)`` sequence numbers an ``ids`` file may hold: its generation's; None for other families,
    # and for the newest generation before it has recorded anything
    seq_range: tuple[int, int] | None = None


def _file_number(name: str) -> int:
    """``"/000013.sst"`` -> 13."""
    return int(name[name.rfind("/") + 1 : name.rfind(".")])


def family_file_levels(store: DedupStore, family: str) -> dict[int, int]:
    """``{file number: level}`` of one column family's live SST files (the binding's file list has no family)."""
    text = store.family(family).property_value("rocksdb.sstables") or ""
    numbers: dict[int, int] = {}
    level = 0
    for line in text.splitlines():
        header = _LEVEL_LINE.match(line)
        if header:
            level = int(header[1])
            continue
        entry = _SSTABLE_LINE.match(line)
        if entry:
            numbers[int(entry[1])] = level
    return numbers


def sst_files(store: DedupStore, families: tuple[str, ...] = COLUMN_FAMILIES) -> list[SstFile]:
    """The live SST files of ``families``, oldest data first within a family."""
    live = {_file_number(entry["name"]): entry for entry in store.db.live_files()}
    files = []
    for family in families:
        places: list[tuple[str, tuple[int, int] | None]] = [(family, None)]
        if family == CF_IDS:
            places = [(name, (first, end - 1) if end > first else None) for name, first, end in store.id_families()]
        for name, generation_range in places:
            for number, level in family_file_levels(store, name).items():
                entry = live.get(number)
                if entry is None:  # deleted between the two reads
                    continue
                smallest, largest = entry["start_key"], entry["end_key"]
                seq_range = generation_range
                files.append(
                    SstFile(
                        family=family,
                        level=level,
                        number=number,
                        size=entry["size"],
                        smallest=smallest,
                        largest=largest,
                        entries=entry["num_entries"],
                        deletions=entry["num_deletions"],
                        seq_range=seq_range,
                    )
                )
    return sorted(files, key=lambda f: (COLUMN_FAMILIES.index(f.family), f.seq_range or (-1, -1), f.level, f.number))


def ids_files(store: DedupStore) -> list[SstFile]:
    """The ``ids`` files of every generation, the oldest generation first."""
    return sst_files(store, (CF_IDS,))


def sst_bytes(store: DedupStore) -> int:
    """Bytes of every live SST file."""
    return sum(entry["size"] for entry in store.db.live_files())


def data_bytes(store: DedupStore) -> int:
    """Bytes of the store's data, what ``max_bytes`` bounds: its SST files and its generations' sealed arrays."""
    return sst_bytes(store) + store.arrays_bytes()


def dir_bytes(path: Path) -> int:
    """Bytes on disk of a store directory: SST files, write-ahead log, manifest (not RocksDB's info LOG)."""
    total = 0
    for child in Path(path).iterdir():
        if child.is_file() and not _NOT_DATA.match(child.name):
            try:
                total += child.stat().st_size
            except FileNotFoundError:  # rotated or deleted by the writer meanwhile
                continue
    return total

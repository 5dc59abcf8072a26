"""``dedupectl stats``: RocksDB's per-level compaction table per column family, and the store's key figures.

Two sources, because inspection never takes the worker's lock:
- the live structure (files, sizes, scores, estimated keys, memtables) from a secondary instance, current;
- the cumulative I/O of compactions (read/write GB, write amplification, keys in/dropped) and the bloom-filter
  counters, which only the writing process knows, from its last statistics dump in the LOG (every
  ``STATS_DUMP_SECONDS``; the report says when).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from store.codec import CF_IDS, CF_META, CF_TIMES
from store.dedup_store import DedupStore
from store.rocks_log import StatsDump, last_stats_dump, parse_count, parse_size
from store.selection import StoreRef

_LEVEL_ROW = re.compile(r"^\s*(L\d+|Sum)\s")


@dataclass(frozen=True)
class LevelStats:
    level: str  # "L0".."L6" or "Sum"
    files: int
    size_bytes: int
    score: float | None
    read_gb: float | None = None
    write_gb: float | None = None
    write_amp: float | None = None
    comp_seconds: float | None = None
    comp_count: int | None = None
    keys_in: int | None = None
    keys_dropped: int | None = None


@dataclass(frozen=True)
class FamilyStats:
    family: str
    levels: list[LevelStats]
    estimated_keys: int | None
    live_data_bytes: int | None
    sst_bytes: int | None
    memtable_bytes: int | None
    pending_compaction_bytes: int | None


@dataclass(frozen=True)
class BloomStats:
    useful: int  # lookups a filter answered "definitely not here" (a disk read saved)
    positive: int  # lookups a filter let through
    true_positive: int  # of those, the key was there

    @property
    def checked(self) -> int:
        return self.useful + self.positive

    @property
    def useful_ratio(self) -> float | None:
        return self.useful / self.checked if self.checked else None

    @property
    def false_positive_rate(self) -> float | None:
        negatives = self.useful + self.positive - self.true_positive
        return (self.positive - self.true_positive) / negatives if negatives > 0 else None


@dataclass(frozen=True)
class ArraysStats:
    """The sealed arrays of the store's sealed generations (``store.generation_arrays``): their ids are not in
    the ``ids`` families' keys and bytes."""

    files: int
    ids: int
    bytes: int


@dataclass(frozen=True)
class StoreStats:
    topic: str
    partition: int
    path: str
    live_ids: int
    families: list[FamilyStats]
    bloom: BloomStats | None
    dumped_at: str | None  # when the writer last dumped its statistics (None: no dump in the LOG)
    arrays: ArraysStats = ArraysStats(0, 0, 0)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _live_levels(cfstats: str) -> list[LevelStats]:
    """Files, size and score per level from a secondary's ``rocksdb.cfstats`` (its I/O columns are its own,
    i.e. zero: those come from the writer's dump)."""
    levels = []
    for line in cfstats.splitlines():
        if line.startswith("** Compaction Stats") and levels:
            break  # the second table (per priority) repeats nothing we need
        if not _LEVEL_ROW.match(line):
            continue
        tokens = line.split()
        levels.append(
            LevelStats(
                level=tokens[0],
                files=int(tokens[1].split("/")[0]),
                size_bytes=parse_size(tokens[2], tokens[3]),
                score=_number(tokens[4]),
            )
        )
    return levels


def _with_io(levels: list[LevelStats], rows: list[dict[str, str]]) -> list[LevelStats]:
    by_level = {row.get("Level"): row for row in rows}
    merged = []
    for level in levels:
        row = by_level.get(level.level)
        if row is None:
            merged.append(level)
            continue
        merged.append(
            LevelStats(
                level=level.level,
                files=level.files,
                size_bytes=level.size_bytes,
                score=level.score,
                read_gb=_number(row.get("Read(GB)")),
                write_gb=_number(row.get("Write(GB)")),
                write_amp=_number(row.get("W-Amp")),
                comp_seconds=_number(row.get("Comp(sec)")),
                comp_count=int(_number(row.get("Comp(cnt)")) or 0),
                keys_in=parse_count(row["KeyIn"]) if "KeyIn" in row else None,
                keys_dropped=parse_count(row["KeyDrop"]) if "KeyDrop" in row else None,
            )
        )
    return merged


def _bloom(dump: StatsDump | None) -> BloomStats | None:
    if dump is None or "rocksdb.bloom.filter.useful" not in dump.counters:
        return None
    counters = dump.counters
    return BloomStats(
        useful=counters.get("rocksdb.bloom.filter.useful", 0),
        positive=counters.get("rocksdb.bloom.filter.full.positive", 0),
        true_positive=counters.get("rocksdb.bloom.filter.full.true.positive", 0),
    )


def _family_stats(store: DedupStore, name: str, dump: StatsDump | None, aged: bool = False) -> FamilyStats:
    family = store.family(name)
    levels = _live_levels(family.property_value("rocksdb.cfstats") or "")
    if dump is not None and name in dump.tables:
        levels = _with_io(levels, dump.tables[name])
    return FamilyStats(
        family=name,
        levels=levels,
        estimated_keys=family.property_int_value("rocksdb.estimate-num-keys"),
        live_data_bytes=0 if aged else family.property_int_value("rocksdb.estimate-live-data-size"),
        sst_bytes=family.property_int_value("rocksdb.total-sst-files-size"),
        memtable_bytes=family.property_int_value("rocksdb.cur-size-all-mem-tables"),
        pending_compaction_bytes=family.property_int_value("rocksdb.estimate-pending-compaction-bytes"),
    )


def _merged(name: str, parts: list[FamilyStats]) -> FamilyStats:
    """One row for the families of the ``ids`` generations: counts and bytes added up level by level."""

    def total(values) -> int | None:
        known = [value for value in values if value is not None]
        return sum(known) if known else None

    by_level: dict[str, list[LevelStats]] = {}
    for part in parts:
        for level in part.levels:
            by_level.setdefault(level.level, []).append(level)
    levels = [
        LevelStats(
            level=level,
            files=sum(row.files for row in rows),
            size_bytes=sum(row.size_bytes for row in rows),
            score=max((row.score for row in rows if row.score is not None), default=None),
            read_gb=total(row.read_gb for row in rows),
            write_gb=total(row.write_gb for row in rows),
            write_amp=None,  # a ratio: not added up
            comp_seconds=total(row.comp_seconds for row in rows),
            comp_count=total(row.comp_count for row in rows),
            keys_in=total(row.keys_in for row in rows),
            keys_dropped=total(row.keys_dropped for row in rows),
        )
        for level, rows in sorted(by_level.items(), key=lambda item: (item[0] == "Sum", item[0]))
    ]
    return FamilyStats(
        family=name,
        levels=levels,
        estimated_keys=total(part.estimated_keys for part in parts),
        live_data_bytes=total(part.live_data_bytes for part in parts),
        sst_bytes=total(part.sst_bytes for part in parts),
        memtable_bytes=total(part.memtable_bytes for part in parts),
        pending_compaction_bytes=total(part.pending_compaction_bytes for part in parts),
    )


def store_stats(ref: StoreRef) -> StoreStats:
    """Stats of one store, read without its lock."""
    dump = last_stats_dump(ref.path)
    with DedupStore.open_secondary(ref.path) as store:
        families = []
        cut = store.state.first_live_seq
        generations = [
            _family_stats(store, name, dump, aged=end <= cut) for name, _, end in store.id_families()
        ]  # a generation wholly below the cut goes at the next aging step: none of its data is live
        families = [_merged(CF_IDS, generations), *(_family_stats(store, name, dump) for name in (CF_TIMES, CF_META))]
        return StoreStats(
            topic=ref.topic,
            partition=ref.partition,
            path=str(ref.path),
            live_ids=store.state.live_ids,
            families=families,
            bloom=_bloom(dump),
            dumped_at=dump.time if dump is not None else None,
            arrays=ArraysStats(
                files=len(store.arrays_files()),
                ids=sum(ids for *_, ids in store.arrays_files()),
                bytes=store.arrays_bytes(),
            ),
        )

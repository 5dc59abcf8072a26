"""Size-bounded aging: keep at most ``max_keys`` ids and/or ``max_bytes`` of SST files, oldest ids first.

A step has two halves, both cheap whatever the store's size:

1. the cut. ``first_live_seq`` (the seek hint) moves forward by at most ``max_deletes`` sequence numbers in
   one small write. From that write on, every id below the cut is absent for every reader: aging is exact
   to the sequence number, and never touches a newer id.
2. the files. The ``ids`` family is FIFO-compacted, so each of its SST files holds one stretch of sequence
   numbers (its batch markers say which). A file whose whole stretch is below the cut is dropped whole:
   FIFO's size limit is lowered to the bytes of the files that stay, a compaction pass deletes the oldest
   files down to it, and the limit goes back out of reach. No tombstone is written for an id; one range
   tombstone then clears the ``times`` batches below the cut.

The worker calls ``age_step`` between batches, so ingest never waits for more than one small step; ``dedupectl
age`` runs steps until the policy holds, on a stopped store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from rocksdict import WriteBatch

from store.codec import CF_IDS, CF_TIMES, NO_KEYS, StoreState, decode_seq, encode_seq
from store.dedup_store import DedupStore
from store.errors import ConfigError
from store.footprint import SstFile, ids_files, sst_bytes
from store.options import IDS_MUTABLE_OPTIONS

log = logging.getLogger(__name__)

DEFAULT_MAX_DELETES = 1_000_000  # ids one step may age: a step costs microseconds whatever this is
DRAIN_TIMEOUT_S = 60.0

# Per store, the last sequence number of its oldest ``ids`` file (None: not known yet): a step looks at the
# files only once the cut passes it. New files only ever come after it; merges only move it later.
_oldest_end: WeakKeyDictionary[DedupStore, int | None] = WeakKeyDictionary()


@dataclass(frozen=True)
class AgingPolicy:
    """How much one partition's store may keep; ``None`` means no bound of that kind."""

    max_keys: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_keys", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"{name} must be a positive whole number, got {value!r}")

    @property
    def bounded(self) -> bool:
        return self.max_keys is not None or self.max_bytes is not None


@dataclass(frozen=True)
class AgingPlan:
    """Where the policy puts the cut now, and why."""

    current_cut: int
    target_cut: int
    live_ids: int
    sst_bytes: int | None
    reason: str  # "max_keys", "max_bytes" or "within policy"

    @property
    def ids_to_age(self) -> int:
        return self.target_cut - self.current_cut


@dataclass(frozen=True)
class AgingResult:
    aged: int  # ids taken out of the window by this step
    first_live_seq: int  # the cut after the step
    live_ids: int
    files_dropped: int
    bytes_dropped: int
    done: bool  # the policy holds: nothing left to age for now
    seconds: float


def plan_aging(store: DedupStore, policy: AgingPolicy) -> AgingPlan:
    """The cut the policy asks for (pure reading: works on a secondary instance too)."""
    state = store.state
    cut = target = state.first_live_seq
    reason = "within policy"
    if policy.max_keys is not None and state.next_seq - policy.max_keys > target:
        target, reason = state.next_seq - policy.max_keys, "max_keys"
    total = None
    if policy.max_bytes is not None:
        total = sst_bytes(store)
        if total > policy.max_bytes:
            bytes_cut = _cut_for_bytes(ids_files(store), total - policy.max_bytes, state.next_seq)
            if bytes_cut > target:
                target, reason = bytes_cut, "max_bytes"
    return AgingPlan(
        current_cut=cut,
        target_cut=target,
        live_ids=state.next_seq - cut,
        sst_bytes=total,
        reason=reason,
    )


def _cut_for_bytes(files: list[SstFile], excess: int, next_seq: int) -> int:
    """The cut that lets the oldest files whose sizes add up to ``excess`` go (everything, if they do not)."""
    freed = 0
    for file in files:
        seq_range = file.seq_range
        if seq_range is None:
            continue
        freed += file.size
        if freed >= excess:
            return seq_range[1] + 1
    return next_seq  # only the memtable is left to give: age everything recorded so far


def age_step(store: DedupStore, policy: AgingPolicy, max_deletes: int = DEFAULT_MAX_DELETES) -> AgingResult:
    """One bounded step of aging on a store open for writing (the worker's, between batches)."""
    started = time.perf_counter()
    if max_deletes <= 0:
        raise ConfigError(f"max_deletes must be positive, got {max_deletes}")
    before = store.state.first_live_seq
    plan = plan_aging(store, policy) if policy.bounded else None
    target = before if plan is None else plan.target_cut
    cut = min(target, before + max_deletes)
    if cut > before:
        advance_cut(store, cut)
    dropped = freed = 0
    oldest_end = _oldest_end.get(store)
    if oldest_end is None or store.state.first_live_seq > oldest_end:
        dropped, freed = drop_dead_files(store)
    state = store.state
    return AgingResult(
        aged=cut - before,
        first_live_seq=state.first_live_seq,
        live_ids=state.live_ids,
        files_dropped=dropped,
        bytes_dropped=freed,
        done=cut >= target,
        seconds=time.perf_counter() - started,
    )


def advance_cut(store: DedupStore, cut: int) -> StoreState:
    """Move ``first_live_seq`` to ``cut`` (never back, never past the next sequence number): one small write,
    after which every id below it is absent for every reader."""
    state = store.state
    cut = min(max(cut, state.first_live_seq), state.next_seq)
    if cut == state.first_live_seq:
        return state
    new_state = StoreState(state.next_seq, cut, state.input_offset, state.output_offset)
    store.write_state(new_state)
    return new_state


def trim_times(store: DedupStore) -> bool:
    """Range-delete the ``times`` batches wholly below the cut (one tombstone; done when files drop, not every
    step, so tombstones stay few). Returns whether there was anything to delete."""
    keep_from = _times_batch_start(store, store.state.first_live_seq)
    it = store.family(CF_TIMES).iter()
    try:
        it.seek_to_first()
        if not it.valid() or decode_seq(it.key()) >= keep_from:
            return False
    finally:
        del it
    batch = WriteBatch(raw_mode=True)
    batch.delete_range(encode_seq(0), encode_seq(keep_from), store.family_handle(CF_TIMES))
    store.write_state(store.state, batch)
    return True


def _times_batch_start(store: DedupStore, seq: int) -> int:
    """First sequence number of the ``times`` batch that holds ``seq`` (``seq`` itself past the last one)."""
    it = store.family(CF_TIMES).iter()
    try:
        it.seek_for_prev(encode_seq(seq))
        return decode_seq(it.key()) if it.valid() else 0
    finally:
        del it


def _dead_prefix(files: list[SstFile], cut: int) -> list[SstFile]:
    dead = []
    for file in files:  # oldest first: the dead files are a prefix
        seq_range = file.seq_range
        if seq_range is None or seq_range[1] >= cut:
            break
        dead.append(file)
    return dead


def drop_dead_files(store: DedupStore) -> tuple[int, int]:
    """Delete the ``ids`` files wholly below the cut; returns ``(files, bytes)`` dropped.

    Skipped (and retried by the next step) while a flush or a compaction is under way: FIFO deletes the
    oldest files until the total fits the limit, so no file may appear or change between reading the sizes
    and the deletion. The caller is the only writer, so none can.
    """
    ids = store.family(CF_IDS)
    if not ids.property_int_value("rocksdb.num-files-at-level0"):  # everything still in memtables
        return 0, 0
    files = ids_files(store)
    dead = _dead_prefix(files, store.state.first_live_seq)
    _remember_oldest(store, files, len(dead))
    if not dead or _busy(store):
        return 0, 0
    # FIFO deletes oldest files while the total exceeds the limit: at ``keep`` + (smallest dead file - 1) it
    # still deletes every dead file, and tolerates that much growth of the live ones (none is expected)
    limit = sum(file.size for file in files) - sum(file.size for file in dead) + min(file.size for file in dead) - 1
    try:
        ids.set_options({"compaction_options_fifo": f"{{max_table_files_size={max(limit, 1)};allow_compaction=true}}"})
        # a key range no memtable ever holds: a manual compaction over it flushes nothing (a flush would add
        # a file and make FIFO delete a live one to fit the limit), and FIFO picks by size anyway
        ids.compact_range(NO_KEYS[0], NO_KEYS[1])
    finally:
        ids.set_options(IDS_MUTABLE_OPTIONS)
    trim_times(store)
    after = ids_files(store)
    _remember_oldest(store, after, 0)
    remaining = {file.number for file in after}
    gone = [file for file in files if file.number not in remaining]
    unexpected = [file for file in gone if file not in dead]
    if unexpected:  # never seen: FIFO deleted past the dead files, so raise the cut past what it took
        log.error("aging dropped live files %s; advancing the cut past them", [f.number for f in unexpected])
        last = max(file.seq_range[1] for file in unexpected if file.seq_range is not None)
        advance_cut(store, last + 1)
    return len(gone), sum(file.size for file in gone)


def _remember_oldest(store: DedupStore, files: list[SstFile], skip: int) -> None:
    """Note the end of the oldest file that stays (``skip`` dead files go); -1 when a dead one must be retried."""
    if skip:
        _oldest_end[store] = -1  # dead files wait (a flush or compaction was under way): look again next step
        return
    ends = [file.seq_range[1] for file in files if file.seq_range is not None]
    _oldest_end[store] = ends[0] if ends else None


def _busy(store: DedupStore) -> bool:
    """A flush or compaction is under way (either could add or replace an ``ids`` file)."""
    if (store.family(CF_IDS).property_int_value("rocksdb.num-immutable-mem-table") or 0) > 0:
        return True
    return (store.db.property_int_value("rocksdb.num-running-compactions") or 0) > 0


def age_fully(store: DedupStore, policy: AgingPolicy, max_deletes: int = DEFAULT_MAX_DELETES) -> AgingResult:
    """Run steps until the policy holds (``dedupectl age`` on a stopped store)."""
    started = time.perf_counter()
    aged = files = freed = 0
    while True:
        result = age_step(store, policy, max_deletes)
        aged, files, freed = aged + result.aged, files + result.files_dropped, freed + result.bytes_dropped
        if result.done and result.aged == 0:
            break
    if _dead_prefix(ids_files(store), store.state.first_live_seq):  # a step found a flush under way
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while _busy(store) and time.monotonic() < deadline:
            time.sleep(0.05)
        more_files, more_bytes = drop_dead_files(store)
        files, freed = files + more_files, freed + more_bytes
    state = store.state
    return AgingResult(
        aged=aged,
        first_live_seq=state.first_live_seq,
        live_ids=state.live_ids,
        files_dropped=files,
        bytes_dropped=freed,
        done=True,
        seconds=time.perf_counter() - started,
    )

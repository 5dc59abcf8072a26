"""Size-bounded aging: keep at most ``max_keys`` ids and/or ``max_bytes`` of SST files, oldest ids first.

A step has two halves, both cheap whatever the store's size:

1. the cut. ``first_live_seq`` (the seek hint) moves forward by at most ``max_deletes`` sequence numbers in
   one small write. From that write on, every id below the cut is absent for every reader: aging is exact
   to the sequence number, and never touches a newer id.
2. the generations. Each holds one stretch of sequence numbers in a column family of its own
   (``store.generations``); one whose whole stretch is below the cut is dropped whole, a column family drop.
   No tombstone is written for an id; one range tombstone then clears the ``times`` batches below the cut.

The worker calls ``age_step`` between batches, so ingest never waits for more than one small step; ``dedupectl
age`` runs steps until the policy holds, on a stopped store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from rocksdict import WriteBatch

from store.codec import CF_TIMES, StoreState, decode_seq, encode_seq
from store.damage import check_ended
from store.dedup_store import DedupStore
from store.errors import ConfigError
from store.footprint import data_bytes

log = logging.getLogger(__name__)

DEFAULT_MAX_DELETES = 1_000_000  # ids one step may age: a step costs microseconds whatever this is
DRAIN_TIMEOUT_S = 60.0


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
    data_bytes: int | None  # SST files and sealed arrays, when the policy bounds bytes
    reason: str  # "max_keys", "max_bytes" or "within policy"

    @property
    def ids_to_age(self) -> int:
        return self.target_cut - self.current_cut


@dataclass(frozen=True)
class AgingResult:
    aged: int  # ids taken out of the window by this step
    first_live_seq: int  # the cut after the step
    live_ids: int
    generations_dropped: int
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
        total = data_bytes(store)
        if total > policy.max_bytes:
            bytes_cut = _cut_for_bytes(store.generation_bytes(), total - policy.max_bytes, state.next_seq)
            if bytes_cut > target:
                target, reason = bytes_cut, "max_bytes"
    return AgingPlan(
        current_cut=cut,
        target_cut=target,
        live_ids=state.next_seq - cut,
        data_bytes=total,
        reason=reason,
    )


def _cut_for_bytes(generations: list[tuple[int, int, int]], excess: int, next_seq: int) -> int:
    """The cut that lets the oldest generations whose sizes add up to ``excess`` go (everything, if they do
    not)."""
    freed = 0
    for _, end, size in generations:
        freed += size
        if freed >= excess:
            return end
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
    dropped, freed = drop_dead_generations(store)
    state = store.state
    return AgingResult(
        aged=cut - before,
        first_live_seq=state.first_live_seq,
        live_ids=state.live_ids,
        generations_dropped=dropped,
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
        if not it.valid():
            check_ended(it)
            return False
        if decode_seq(it.key()) >= keep_from:
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
        if it.valid():
            return decode_seq(it.key())
        check_ended(it)
        return 0
    finally:
        del it


def drop_dead_generations(store: DedupStore) -> tuple[int, int]:
    """Drop the generations wholly below the cut, and the ``times`` batches below it with them; returns
    ``(generations, bytes)`` dropped. A generation being sealed waits for a later step."""
    dropped, freed = store.drop_generations_below(store.state.first_live_seq)  # stops at the first live one
    if dropped:
        trim_times(store)
    return dropped, freed


def age_fully(store: DedupStore, policy: AgingPolicy, max_deletes: int = DEFAULT_MAX_DELETES) -> AgingResult:
    """Run steps until the policy holds (``dedupectl age`` on a stopped store)."""
    started = time.perf_counter()
    aged = files = freed = 0
    while True:
        result = age_step(store, policy, max_deletes)
        aged, files, freed = aged + result.aged, files + result.generations_dropped, freed + result.bytes_dropped
        if result.done and result.aged == 0:
            break
    families = store.id_families()
    if families and families[0][2] <= store.state.first_live_seq:  # a step found the generation being sealed
        store.wait_for_seals(DRAIN_TIMEOUT_S)
        more_files, more_bytes = drop_dead_generations(store)
        files, freed = files + more_files, freed + more_bytes
    state = store.state
    return AgingResult(
        aged=aged,
        first_live_seq=state.first_live_seq,
        live_ids=state.live_ids,
        generations_dropped=files,
        bytes_dropped=freed,
        done=True,
        seconds=time.perf_counter() - started,
    )

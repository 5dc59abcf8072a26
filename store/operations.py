"""The store operations behind ``dedupectl age``, ``lookup``, ``sst``, ``compact`` and ``accept-gap``, one
function each.

Reading operations open secondary instances (no lock: safe while the worker runs); ``age`` (without
``--dry-run``), ``compact`` and ``accept-gap`` need the store to themselves and refuse while a worker holds it.
"""

from __future__ import annotations

import getpass
import socket
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace

from rocksdict import BottommostLevelCompaction, CompactOptions

from store import clock
from store.aging import AgingPlan, AgingPolicy, age_fully, drop_dead_generations, plan_aging
from store.codec import CF_IDS, CF_META, CF_TIMES, AcceptedGap, decode_id, decode_seq
from store.dedup_store import DedupStore
from store.errors import ConfigError, StoreLockedError
from store.footprint import SstFile, data_bytes, dir_bytes, sst_files
from store.selection import StoreRef
from store.window import WindowInfo, oldest_live, window_info


def _open_writable(ref: StoreRef, verb: str, hint: str) -> DedupStore:
    try:
        return DedupStore.open_existing(ref.path)
    except StoreLockedError as error:
        raise StoreLockedError(f"cannot {verb} {ref.path}: a worker holds it", hint) from error


# -- age -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgeOutcome:
    topic: str
    partition: int
    dry_run: bool
    reason: str  # what bound applies: max_keys, max_bytes or "within policy"
    live_ids_before: int
    ids_aged: int
    live_ids_after: int
    first_live_seq_after: int
    bytes_before: int
    bytes_freed: int  # dry run: bytes of the files that would be dropped
    window_seconds_before: float | None
    window_seconds_after: float | None
    ids_per_hour: float | None  # the rate the present window filled at
    window_seconds_at_bound: float | None  # the window once the store is full at this bound, at that rate


def _window_at(store: DedupStore, seq: int, now_ms: int) -> float | None:
    if seq >= store.state.next_seq:
        return None
    return max((now_ms - store.ledger.timestamps([seq])[0]) / 1000, 0.0)


def age_stores(
    refs: Sequence[StoreRef],
    policy: AgingPolicy,
    *,
    dry_run: bool = False,
    on_store: Callable[[StoreRef], None] | None = None,
) -> list[AgeOutcome]:
    """Apply (or, with ``dry_run``, only work out) the policy on each store."""
    outcomes = []
    for ref in refs:
        if on_store is not None:
            on_store(ref)
        outcomes.append(_plan_only(ref, policy) if dry_run else _age_one(ref, policy))
    return outcomes


@dataclass(frozen=True)
class _Before:
    """A store's figures before aging, as an outcome reports them."""

    plan: AgingPlan
    data_bytes: int
    window_seconds: float | None
    info: WindowInfo
    now_ms: int


def _before(store: DedupStore, ref: StoreRef, policy: AgingPolicy) -> _Before:
    now_ms = clock.now_ms()
    oldest = oldest_live(store)
    window = None if oldest is None else max((now_ms - oldest[1]) / 1000, 0.0)
    return _Before(plan_aging(store, policy), data_bytes(store), window, window_info(store, ref, now_ms), now_ms)


def _outcome(
    ref: StoreRef,
    policy: AgingPolicy,
    before: _Before,
    *,
    dry_run: bool,
    aged: int,
    cut: int,
    freed: int,
    window: float | None,
) -> AgeOutcome:
    return AgeOutcome(
        topic=ref.topic,
        partition=ref.partition,
        dry_run=dry_run,
        reason=before.plan.reason,
        live_ids_before=before.plan.live_ids,
        ids_aged=aged,
        live_ids_after=before.plan.live_ids - aged,
        first_live_seq_after=cut,
        bytes_before=before.data_bytes,
        bytes_freed=freed,
        window_seconds_before=before.window_seconds,
        window_seconds_after=window,
        ids_per_hour=before.info.ids_per_hour,
        window_seconds_at_bound=before.info.window_at_bound(policy),
    )


def _plan_only(ref: StoreRef, policy: AgingPolicy) -> AgeOutcome:
    with DedupStore.open_secondary(ref.path) as store:
        before = _before(store, ref, policy)
        cut = before.plan.target_cut
        freed = sum(size for _, end, size in store.generation_bytes() if end <= cut)
        window = _window_at(store, cut, before.now_ms)
        return _outcome(
            ref, policy, before, dry_run=True, aged=before.plan.ids_to_age, cut=cut, freed=freed, window=window
        )


def _age_one(ref: StoreRef, policy: AgingPolicy) -> AgeOutcome:
    store = _open_writable(
        ref,
        "age",
        "stop the worker first (a running worker ages its stores itself, from its max_keys/max_bytes), "
        "or add --dry-run to see what aging would do",
    )
    with store:
        before = _before(store, ref, policy)
        result = age_fully(store, policy)
        window = _window_at(store, result.first_live_seq, before.now_ms)
        outcome = _outcome(
            ref,
            policy,
            before,
            dry_run=False,
            aged=result.aged,
            cut=result.first_live_seq,
            freed=result.bytes_dropped,
            window=window,
        )
        return replace(outcome, live_ids_after=result.live_ids)


# -- lookup ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LookupResult:
    id: str
    topic: str
    partition: int | None  # where it was found (None: in none of the stores searched)
    in_window: bool
    seq: int | None
    timestamp_ms: int | None
    age_seconds: float | None


def lookup_ids(refs: Sequence[StoreRef], ids: Sequence[str]) -> list[LookupResult]:
    """For each id, the store that holds it within its window, with sequence number, timestamp and age."""
    raw = [message_id.encode() for message_id in ids]
    found: dict[int, tuple[StoreRef, int, int]] = {}
    for ref in refs:
        with DedupStore.open_secondary(ref.path) as store:
            for index, hit in enumerate(store.lookup_many(raw)):
                if hit is not None and index not in found:
                    found[index] = (ref, hit[0], hit[1])
    now_ms = clock.now_ms()
    topic = refs[0].topic if refs else ""
    results = []
    for index, message_id in enumerate(ids):
        if index in found:
            ref, seq, stamp = found[index]
            results.append(
                LookupResult(message_id, ref.topic, ref.partition, True, seq, stamp, max((now_ms - stamp) / 1000, 0.0))
            )
        else:
            results.append(LookupResult(message_id, topic, None, False, None, None, None))
    return results


# -- sst -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SstRow:
    topic: str
    partition: int
    family: str
    level: int
    file: str
    size: int
    smallest: str
    largest: str
    entries: int
    deletions: int
    first_seq: int | None  # ids files: the sequence range of their generation
    last_seq: int | None


def readable_key(family: str, key: bytes) -> str:
    """Ids as text, sequence numbers as integers, metadata keys as they are."""
    if family == CF_IDS:
        try:
            return decode_id(key).decode("utf-8", "backslashreplace")
        except ValueError:
            return key.hex()
    if family == CF_TIMES and len(key) == 8:
        return f"seq {decode_seq(key)}"
    return key.decode("utf-8", "backslashreplace")


def _row(ref: StoreRef, file: SstFile) -> SstRow:
    seq_range = file.seq_range
    return SstRow(
        topic=ref.topic,
        partition=ref.partition,
        family=file.family,
        level=file.level,
        file=f"{file.number:06d}.sst",
        size=file.size,
        smallest=readable_key(file.family, file.smallest),
        largest=readable_key(file.family, file.largest),
        entries=file.entries,
        deletions=file.deletions,
        first_seq=seq_range[0] if seq_range else None,
        last_seq=seq_range[1] if seq_range else None,
    )


def list_sst(refs: Sequence[StoreRef], families: Sequence[str] | None = None) -> list[SstRow]:
    rows = []
    for ref in refs:
        with DedupStore.open_secondary(ref.path) as store:
            selected = tuple(families) if families else (CF_IDS, CF_TIMES, CF_META)
            rows.extend(_row(ref, file) for file in sst_files(store, selected))
    return rows


# -- compact ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactOutcome:
    topic: str
    partition: int
    files_before: int
    files_after: int
    tombstones_before: int
    tombstones_after: int
    bytes_before: int
    bytes_after: int
    dead_generations_dropped: int
    seconds: float


def compact_stores(
    refs: Sequence[StoreRef], on_store: Callable[[StoreRef], None] | None = None
) -> list[CompactOutcome]:
    """Drop the generations wholly aged out, compact each other one into its one sorted run, and compact
    ``times``/``meta`` to the bottom level so range tombstones left by aging go. Needs the worker stopped."""
    outcomes = []
    for ref in refs:
        if on_store is not None:
            on_store(ref)
        store = _open_writable(
            ref,
            "compact",
            "stop the worker first: compaction competes with ingest for disk and CPU, and the running worker "
            "already drops aged-out generations as it goes",
        )
        with store:
            started = time.perf_counter()
            bytes_before = dir_bytes(ref.path)
            store.flush()  # so the memtables' tombstones count among the files' and go with them
            before = sst_files(store)
            dead, _ = drop_dead_generations(store)
            options = CompactOptions()
            options.set_bottommost_level_compaction(BottommostLevelCompaction.force())
            for name in (*(name for name, _, _ in store.id_families()), CF_TIMES, CF_META):
                store.family(name).compact_range(None, None, options)
            after = sst_files(store)
            outcomes.append(
                CompactOutcome(
                    topic=ref.topic,
                    partition=ref.partition,
                    files_before=len(before),
                    files_after=len(after),
                    tombstones_before=sum(file.deletions for file in before),
                    tombstones_after=sum(file.deletions for file in after),
                    bytes_before=bytes_before,
                    bytes_after=dir_bytes(ref.path),
                    dead_generations_dropped=dead,
                    seconds=time.perf_counter() - started,
                )
            )
    return outcomes


# -- accept-gap ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcceptGapOutcome:
    topic: str
    partition: int
    accepted: AcceptedGap
    covered_before: int  # the store's next covered output offset before and after: recovery resumes at after
    covered_after: int


def operator_name() -> str:
    """Who runs this command, as ``user@host``, for the record an override leaves."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's numeric uid)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def accept_gaps(refs: Sequence[StoreRef], reason: str, by: str | None = None) -> list[AcceptGapOutcome]:
    """Accept the output gap each store's worker refused its partition for (``DedupStore.accept_gap``): not
    repeat-safe, since the ids published in a gap are unknown to the store. Needs the worker stopped."""
    if not reason.strip():
        raise ConfigError("--reason is empty", "say why the gap is accepted: it is kept in the store with the gap")
    by = by or operator_name()
    outcomes = []
    with ExitStack() as stack:
        hint = "stop the worker first; it refuses the partition anyway"
        stores = [(ref, stack.enter_context(_open_writable(ref, "accept the output gap of", hint))) for ref in refs]
        for _, store in stores:  # every partition can be accepted, or none is
            store.gaps.to_accept(store.state)
        for ref, store in stores:
            before = store.state.output_offset
            accepted = store.accept_gap(reason.strip(), by, clock.now_ms())
            outcomes.append(AcceptGapOutcome(ref.topic, ref.partition, accepted, before, store.state.output_offset))
    return outcomes

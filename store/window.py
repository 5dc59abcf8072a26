"""The effective window: how far back a partition's store remembers, i.e. the age of its oldest live id.

Aging is bounded by size, so the window is what shrinks when traffic grows; when it falls under the floor
(24 h by default) a duplicate arriving later than that is no longer caught, and on-call must act (see
docs/runbooks/effective-window-below-24h.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from store import clock
from store.aging import AgingPolicy
from store.codec import AcceptedGap, OutputGap
from store.dedup_store import DedupStore
from store.footprint import dir_bytes, sst_bytes
from store.selection import StoreRef

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class WindowInfo:
    topic: str
    partition: int
    path: Path
    live_ids: int
    sst_bytes: int
    arrays_bytes: int  # the sealed arrays of the generations (store.generation_arrays)
    disk_bytes: int
    oldest_seq: int | None
    oldest_ts_ms: int | None
    newest_seq: int | None
    newest_ts_ms: int | None
    window_seconds: float | None  # None: the store holds no id
    refused_gap: OutputGap | None = None  # the worker refuses the partition until this is dealt with
    accepted_gaps: tuple[AcceptedGap, ...] = ()  # operators' overrides: ids in them may be published once more

    @property
    def bytes_per_id(self) -> float | None:
        """Bytes on disk per live id: includes aged files not dropped yet, the write-ahead log and the LOG."""
        return self.disk_bytes / self.live_ids if self.live_ids else None

    @property
    def ids_per_hour(self) -> float | None:
        """The rate the window filled at: live ids over the time between the oldest and the newest."""
        if self.oldest_ts_ms is None or self.newest_ts_ms is None or self.newest_ts_ms <= self.oldest_ts_ms:
            return None
        return self.live_ids * HOUR_MS / (self.newest_ts_ms - self.oldest_ts_ms)

    def window_at_bound(self, policy: AgingPolicy) -> float | None:
        """Seconds of ids the store would hold once full at ``policy``, at its present ids per hour and bytes of
        data (SST files and sealed arrays) per id: what a bound gives, larger or smaller than the present one."""
        rate = self.ids_per_hour
        if rate is None or not policy.bounded:
            return None
        bounds = [] if policy.max_keys is None else [float(policy.max_keys)]
        data = self.sst_bytes + self.arrays_bytes
        if policy.max_bytes is not None and data:
            bounds.append(policy.max_bytes * self.live_ids / data)
        return min(bounds) / rate * 3600 if bounds else None

    def below(self, floor_seconds: float) -> bool:
        """Under the floor; an empty store protects nothing yet but has nothing to lose either: not below."""
        return self.window_seconds is not None and self.window_seconds < floor_seconds


def oldest_live(store: DedupStore) -> tuple[int, int] | None:
    """``(seq, timestamp_ms)`` of the oldest id in the window, ``None`` when there is none."""
    state = store.state
    if state.live_ids <= 0:
        return None
    return state.first_live_seq, store.ledger.timestamps([state.first_live_seq])[0]


def effective_window_seconds(store: DedupStore, now_ms: int | None = None) -> float | None:
    """Age in seconds of the oldest live id (one seek: cheap enough for the worker's gauge every batch)."""
    oldest = oldest_live(store)
    if oldest is None:
        return None
    return max(((now_ms if now_ms is not None else clock.now_ms()) - oldest[1]) / 1000, 0.0)


def window_info(store: DedupStore, ref: StoreRef | None = None, now_ms: int | None = None) -> WindowInfo:
    state = store.state
    oldest = oldest_live(store)
    newest = None
    if oldest is not None:
        newest_seq = state.next_seq - 1
        newest = (newest_seq, store.ledger.timestamps([newest_seq])[0])
    now_ms = now_ms if now_ms is not None else clock.now_ms()
    return WindowInfo(
        topic=ref.topic if ref else store.identity.topic,
        partition=ref.partition if ref else store.identity.partition,
        path=store.path,
        live_ids=state.live_ids,
        sst_bytes=sst_bytes(store),
        arrays_bytes=store.arrays_bytes(),
        disk_bytes=dir_bytes(store.path),
        oldest_seq=oldest[0] if oldest else None,
        oldest_ts_ms=oldest[1] if oldest else None,
        newest_seq=newest[0] if newest else None,
        newest_ts_ms=newest[1] if newest else None,
        window_seconds=None if oldest is None else max((now_ms - oldest[1]) / 1000, 0.0),
        refused_gap=store.gaps.refused,
        accepted_gaps=store.gaps.accepted,
    )


def read_windows(refs: Sequence[StoreRef], now_ms: int | None = None) -> list[WindowInfo]:
    """Window of each store, read through secondary instances (no lock: the worker keeps running)."""
    infos = []
    for ref in refs:
        with DedupStore.open_secondary(ref.path) as store:
            infos.append(window_info(store, ref, now_ms))
    return infos

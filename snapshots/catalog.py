"""``snapshot list``, ``verify`` and ``prune`` over any destination."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from snapshots.backends import AwsOptions, Backend, SnapshotInfo, VerifyReport, open_backend
from snapshots.errors import SnapshotCorruptError
from snapshots.ids import parse_snapshot_id
from snapshots.progress import NO_PROGRESS, TransferProgress
from store import clock
from store.errors import ConfigError


def _filter(infos: list[SnapshotInfo], topic: str | None, partition: int | None) -> list[SnapshotInfo]:
    return [
        info
        for info in infos
        if (topic is None or info.topic == topic) and (partition is None or info.partition == partition)
    ]


def list_snapshots(
    source: str | None,
    *,
    data_dir: Path | None = None,
    topic: str | None = None,
    partition: int | None = None,
    aws: AwsOptions | None = None,
) -> list[SnapshotInfo]:
    """Complete snapshots at ``source``, oldest first within each partition."""
    backend = open_backend(source, data_dir=data_dir, aws=aws)
    infos = _filter(backend.list(), topic, partition)
    return sorted(infos, key=lambda info: (info.topic, info.partition, info.created_ms))


def empty_location_note(source: str | None, *, data_dir: Path | None = None, aws: AwsOptions | None = None) -> str:
    """When a listing found nothing: what the location holds instead, in a line."""
    return open_backend(source, data_dir=data_dir, aws=aws).empty_note()


def verify_snapshot(
    source: str | None,
    snapshot_id: str,
    *,
    data_dir: Path | None = None,
    aws: AwsOptions | None = None,
    progress: TransferProgress = NO_PROGRESS,
) -> VerifyReport:
    """Re-check every file of the snapshot against its manifest (see VerifyReport.problems)."""
    parse_snapshot_id(snapshot_id)
    return open_backend(source, data_dir=data_dir, aws=aws).verify(snapshot_id, progress)


def require_ok(report: VerifyReport) -> None:
    if not report.ok:
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        raise SnapshotCorruptError(report.problems[0] + more, "do not restore it: use an older snapshot")


INCOMPLETE_AFTER_S = 24 * 3600  # no publish takes a day: a manifest-less snapshot that old was abandoned


@dataclass(frozen=True)
class PruneResult:
    deleted: tuple[SnapshotInfo, ...]
    kept: tuple[SnapshotInfo, ...]
    incomplete_deleted: tuple[str, ...]  # ids of abandoned uploads/copies (no manifest), older than a day
    dry_run: bool


def check_policy(keep: int | None, older_than_s: float | None) -> None:
    if keep is None and older_than_s is None:
        raise ConfigError("prune needs --keep N and/or --older-than AGE", "e.g. --keep 24 or --older-than 7d")
    if keep is not None and keep < 1:
        raise ConfigError(f"--keep must be at least 1, got {keep}", "a partition always keeps its newest snapshot")
    if older_than_s is not None and older_than_s <= 0:
        raise ConfigError(f"--older-than must be positive, got {older_than_s}s")


def select_for_pruning(
    infos: list[SnapshotInfo], *, keep: int | None, older_than_s: float | None, now_ms: int
) -> list[SnapshotInfo]:
    """Per partition, the snapshots beyond the newest ``keep`` and/or older than ``older_than_s`` (both when
    both are given). The newest snapshot of a partition is never selected."""
    check_policy(keep, older_than_s)
    groups: dict[tuple[str, int], list[SnapshotInfo]] = defaultdict(list)
    for info in infos:
        groups[(info.topic, info.partition)].append(info)
    selected = []
    for group in groups.values():
        newest_first = sorted(group, key=lambda info: info.created_ms, reverse=True)
        for rank, info in enumerate(newest_first):
            beyond_keep = rank >= (keep if keep is not None else 1)
            too_old = older_than_s is None or now_ms - info.created_ms > older_than_s * 1000
            if beyond_keep and too_old:
                selected.append(info)
    return sorted(selected, key=lambda info: (info.topic, info.partition, info.created_ms))


def prune_backend(
    backend: Backend,
    *,
    keep: int | None,
    older_than_s: float | None,
    topic: str | None = None,
    partition: int | None = None,
    dry_run: bool = False,
) -> PruneResult:
    check_policy(keep, older_than_s)  # before any call to the destination
    now_ms = clock.now_ms()
    infos = _filter(backend.list(), topic, partition)
    # an invalid snapshot (its name and manifest disagree) neither counts towards --keep nor goes unseen
    usable = [info for info in infos if info.usable]
    doomed = select_for_pruning(usable, keep=keep, older_than_s=older_than_s, now_ms=now_ms)
    abandoned = []
    for name in backend.list_incomplete():
        parsed = parse_snapshot_id(name)
        ours = (topic is None or parsed.topic == topic) and (partition is None or parsed.partition == partition)
        if ours and now_ms - parsed.created_ms > INCOMPLETE_AFTER_S * 1000:
            abandoned.append(name)
    if not dry_run:
        for info in doomed:
            backend.delete(info.snapshot_id)
        for name in abandoned:
            backend.delete(name)
    doomed_ids = {info.snapshot_id for info in doomed}
    kept = tuple(info for info in infos if info.snapshot_id not in doomed_ids)
    return PruneResult(deleted=tuple(doomed), kept=kept, incomplete_deleted=tuple(abandoned), dry_run=dry_run)


def prune_snapshots(
    source: str | None,
    *,
    keep: int | None,
    older_than_s: float | None,
    data_dir: Path | None = None,
    topic: str | None = None,
    partition: int | None = None,
    dry_run: bool = False,
    aws: AwsOptions | None = None,
) -> PruneResult:
    backend = open_backend(source, data_dir=data_dir, aws=aws)
    return prune_backend(
        backend, keep=keep, older_than_s=older_than_s, topic=topic, partition=partition, dry_run=dry_run
    )

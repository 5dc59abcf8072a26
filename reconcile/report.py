"""What a reconcile found, per partition and overall: counts, capped samples, the store's coverage before and
after. Plain frozen dataclasses, so ``--json`` prints them as they are."""

from __future__ import annotations

from dataclasses import dataclass, field

from store.codec import OutputGap, StoreState

IN_SYNC = "in sync"
REPAIRED = "repaired"
OUT_OF_SYNC = "out of sync"
DUPLICATES = "duplicates in output"
NO_STORE = "no store"
OUTPUT_GAP = "output gap"  # the output lost offsets the store needs: the worker refuses the partition


def show_id(message_id: bytes) -> str:
    return message_id.decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class Coverage:
    """The store's counters: ``output_offset``/``input_offset`` are the NEXT offsets covered (-1: none)."""

    output_offset: int
    input_offset: int
    next_seq: int
    first_live_seq: int

    @classmethod
    def of(cls, state: StoreState) -> Coverage:
        return cls(state.output_offset, state.input_offset, state.next_seq, state.first_live_seq)


@dataclass(frozen=True)
class MissingSample:
    """An id in the output that the store lacks, where it was first seen."""

    id: str
    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class DuplicateSample:
    """An id the output holds more than once: the offsets of its repeated copies (the first copy is the one
    that should be there; up to a few offsets are kept)."""

    id: str
    repeat_offsets: tuple[int, ...]


@dataclass(frozen=True)
class UnpublishedSample:
    """An id the store holds, within the range's sequence window, that the output range does not."""

    id: str
    seq: int
    timestamp_ms: int | None


@dataclass(frozen=True)
class Samples:
    missing_from_store: tuple[MissingSample, ...] = ()
    duplicates: tuple[DuplicateSample, ...] = ()
    unpublished: tuple[UnpublishedSample, ...] = ()


@dataclass(frozen=True)
class PartitionReport:
    partition: int
    store: str
    start_offset: int
    end_offset: int  # where reading stopped (exclusive); transaction markers make it more than start + records
    records_scanned: int
    missing_from_store: int  # distinct ids in the output the store lacks
    duplicate_records: int  # output records whose id appeared earlier in the range
    duplicate_ids: int  # distinct ids among them
    unpublished: int  # ids in the store's sequence window missing from the output
    unpublished_verified: bool  # False: too many to check against the rest of the output (counted, kept)
    older_than_window: int  # output ids the store aged out (before its oldest live id): expected, not a difference
    unkeyed_records: int  # output records without a key: not written by the worker
    seq_window: tuple[int, int] | None  # store sequence numbers the range maps to, [first, last)
    applied: bool
    recorded: int  # ids --apply added to the store
    put_back: int  # of the missing ids, those the store lost inside its window (back under their own numbers)
    unplaceable: int  # missing ids inside the recorded stretch that no batch recorded: --apply leaves them out
    removed: int  # ids --apply removed from the store (unpublished, and absent from the whole output)
    published_outside_range: int  # window ids missing from the range that the output holds elsewhere
    removal_skipped: str | None
    coverage_before: Coverage
    coverage_after: Coverage
    seconds: float
    status: str
    samples: Samples = field(default_factory=Samples)
    output_gap: OutputGap | None = None  # offsets the output lost that the store needs (reconcile.gaps)

    @property
    def records_per_second(self) -> float:
        return self.records_scanned / self.seconds if self.seconds > 0 else 0.0


def partition_status(
    *,
    applied: bool,
    missing: int,
    unpublished: int,
    removed: int,
    removal_skipped: str | None,
    duplicates: int,
    unplaceable: int = 0,
    output_gap: bool = False,
) -> str:
    """The one-word verdict: output gap (the worker refuses the partition; no repair closes it) > out of sync
    (left to repair) > duplicates (reconcile cannot repair the output) > repaired > in sync."""
    if output_gap:
        return OUTPUT_GAP
    left_missing = unplaceable if applied else missing
    left_unpublished = unpublished - removed if applied else unpublished
    if left_missing or left_unpublished or removal_skipped:
        return OUT_OF_SYNC
    if duplicates:
        return DUPLICATES
    if missing or unpublished:
        return REPAIRED
    return IN_SYNC


@dataclass(frozen=True)
class ReconcileReport:
    output_topic: str
    input_topic: str
    applied: bool
    partitions: tuple[PartitionReport, ...]
    seconds: float
    without_store: tuple[int, ...] = ()  # partitions of the topic (--all) with no store in the data dir
    data_dir: str = ""

    @property
    def exit_code(self) -> int:
        """0: in sync (or repaired); 1: differences left (not applied, duplicates the output holds, an output
        gap), or a partition without a store."""
        if self.without_store:
            return 1
        return 0 if all(report.status in (IN_SYNC, REPAIRED) for report in self.partitions) else 1

    @property
    def records_scanned(self) -> int:
        return sum(report.records_scanned for report in self.partitions)

"""The worker's recovery: make a store agree with the tail of its output partition.

Recovery *is* reconcile over the tail with ``apply`` (``reconcile.diff.reconcile_partition``): read the
output partition from the store's covered output offset to its end (read_committed), record every id found
there that the store lacks (in output order, so sequence numbers follow publication), and advance the
covered offset. The worker runs it on every newly assigned partition before it dedups anything there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reconcile.diff import ScanRange, reconcile_partition
from reconcile.scan import OutputReader
from store.dedup_store import DedupStore


@dataclass(frozen=True)
class CatchUpResult:
    start_offset: int
    end_offset: int
    scanned: int
    recorded: int


def catch_up(
    store: DedupStore,
    reader: OutputReader,
    output_topic: str,
    partition: int,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> CatchUpResult:
    """Read ``output_topic[partition]`` from the store's covered output offset to the end, record every id
    the store lacks, and advance the offset. ``progress(scanned, recorded)`` after each batch."""
    start = store.state.output_offset
    bounds = reader.bounds(output_topic, partition)
    if bounds.end == start or (start < 0 and bounds.end == bounds.low):
        # nothing committed past what the store covers (a clean restart, a new partition): one offsets
        # request instead of a fetch that waits out end-of-partition. Anything odder (the output shorter
        # than the store's covered offset, retention past it) takes the scan, which reports it.
        return CatchUpResult(start_offset=start, end_offset=start, scanned=0, recorded=0)
    recorded_before = store.state.next_seq

    def on_batch(_position: int, scanned: int) -> None:
        if progress is not None:
            progress(scanned, store.state.next_seq - recorded_before)

    report = reconcile_partition(
        store,
        reader,
        output_topic,
        partition,
        ScanRange(start=start, stop=None),
        apply=True,
        # ids in the store the output lacks are an operator's question (reconcile): recovery only adds
        find_unpublished=False,
        on_batch=on_batch,
    )
    return CatchUpResult(
        start_offset=start, end_offset=report.end_offset, scanned=report.records_scanned, recorded=report.recorded
    )

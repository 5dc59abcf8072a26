"""The worker's recovery: make a store agree with the tail of its output partition.

Recovery *is* reconcile over the tail with ``apply`` (``reconcile.diff.reconcile_partition``): read the
output partition from the store's covered output offset to its end (read_committed), record every id found
there that the store lacks (in output order, so sequence numbers follow publication), and advance the
covered offset. The worker runs it on every newly assigned partition before it dedups anything there.

When the output no longer holds the covered offset (``reconcile.gaps``), recovery cannot make the store
exact: it notes the gap in the store, for the operator to see and accept, and refuses the partition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from reconcile.comparison import ScanRange
from reconcile.diff import reconcile_partition
from reconcile.errors import OutputGapError
from reconcile.gaps import find_gap, refusal
from reconcile.scan import OffsetBounds, OutputReader
from store.dedup_store import DedupStore

log = logging.getLogger(__name__)


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
    bounds: OffsetBounds | None = None,
) -> CatchUpResult:
    """Read ``output_topic[partition]`` from the store's covered output offset to the end, record every id
    the store lacks, and advance the offset. ``progress(scanned, recorded)`` after each batch. ``bounds``: the
    partition's bounds as the caller has just read them (else they are asked of the broker).

    Raises an OutputGapError (noted in the store) when the output no longer holds that offset."""
    start = store.state.output_offset
    if bounds is None:
        bounds = reader.bounds(output_topic, partition)
    gap = find_gap(store, reader, output_topic, partition, bounds)
    if gap is not None:
        store.gaps.note_refused(gap)
        raise refusal(gap, store, output_topic, partition)
    if store.gaps.refused is not None:  # the output holds what the store needs again (a topic restored)
        store.gaps.clear_refused()
    _say_accepted_gap(store, output_topic, partition)
    if bounds.end == start or (start < 0 and bounds.end == bounds.low):
        # nothing committed past what the store covers (a clean restart, a new partition): one offsets
        # request instead of a fetch that waits out end-of-partition
        return CatchUpResult(start_offset=start, end_offset=start, scanned=0, recorded=0)
    recorded_before = store.state.next_seq

    def on_batch(_position: int, scanned: int) -> None:
        if progress is not None:
            progress(scanned, store.state.next_seq - recorded_before)

    # below the first retained offset lies at most the commit marker of the store's newest batch (gaps)
    scan_from = max(start, bounds.low) if start >= 0 else start
    try:
        report = reconcile_partition(
            store,
            reader,
            output_topic,
            partition,
            ScanRange(start=scan_from, stop=None, low=bounds.low, strict_start=True),
            apply=True,
            # ids in the store the output lacks are an operator's question (reconcile): recovery only adds
            find_unpublished=False,
            on_batch=on_batch,
        )
    except OutputGapError as deleted:  # retention passed the start as reading began: nothing was recorded
        gap = replace(deleted.gap, covered=start)
        store.gaps.note_refused(gap)
        raise refusal(gap, store, output_topic, partition) from deleted
    return CatchUpResult(
        start_offset=start, end_offset=report.end_offset, scanned=report.records_scanned, recorded=report.recorded
    )


def _say_accepted_gap(store: DedupStore, output_topic: str, partition: int) -> None:
    """Warn, on the recovery that resumes past it, that a gap was accepted and what that costs."""
    accepted = store.gaps.accepted[-1] if store.gaps.accepted else None
    if accepted is None or store.state.output_offset != accepted.gap.low or store.state.next_seq != accepted.from_seq:
        return
    log.warning(
        "partition %d resumes at output %s[%d] offset %d past an accepted gap (%s, covered %d; accepted %s by %s: "
        "%s): ids published in the gap may be published once more",
        partition, output_topic, partition, accepted.gap.low, accepted.gap.kind, accepted.gap.covered,
        datetime.fromtimestamp(accepted.accepted_ms / 1000, UTC).isoformat(timespec="seconds"), accepted.by,
        accepted.reason,
    )  # fmt: skip

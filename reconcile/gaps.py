"""Output gaps: offsets a store needs that the output topic no longer holds (store.codec, "Output gaps").

Recovery reads the output from the store's covered output offset. When retention has deleted past it, or the
output's log ends below it (the topic deleted and recreated, or records lost), the ids published there are
unknown to the store and repeats of them would be published again. Such a partition is refused, in one line
that says what to do, until an operator restores a newer snapshot, rebuilds the store, or accepts the gap.

The one offset retention may take without loss is the commit marker right after the store's newest id: a
worker records its batch as covered up to that marker, and an idle partition's whole log, marker included,
goes once it is older than the retention.
"""

from __future__ import annotations

from typing import Protocol

from reconcile.errors import OutputGapError
from store import clock
from store.codec import GAP_RETENTION, GAP_TRUNCATED, OutputGap
from store.dedup_store import DedupStore

RUNBOOK = "docs/runbooks/worker-crashed.md#a-partition-is-refused-the-output-lost-offsets-exit-3"


class Bounds(Protocol):
    low: int
    end: int


class LogEnd(Protocol):
    def log_end(self, topic: str, partition: int) -> int: ...


def find_gap(store: DedupStore, reader: LogEnd, topic: str, partition: int, bounds: Bounds) -> OutputGap | None:
    """The gap between what ``store`` covers and what ``topic[partition]`` holds (``bounds``: its first
    retained offset and last stable offset), or None. A fresh store (nothing covered) has none."""
    covered = store.state.output_offset
    if covered < 0:
        return None
    if covered < bounds.low and not only_a_commit_marker(store, covered, bounds.low):
        return OutputGap(GAP_RETENTION, covered, bounds.low, bounds.end, clock.now_ms())
    if covered > bounds.end:  # an open transaction holds the stable offset back; only the log end tells
        log_end = reader.log_end(topic, partition)
        if covered > log_end:
            return OutputGap(GAP_TRUNCATED, covered, bounds.low, log_end, clock.now_ms())
    return None


def only_a_commit_marker(store: DedupStore, covered: int, low: int) -> bool:
    """Whether the one offset below ``low`` that ``store`` lacks is the commit marker of its newest batch."""
    return low == covered + 1 and store.ledger.newest_output_offset() == covered - 1


def describe(gap: OutputGap, topic: str, partition: int) -> str:
    """What happened, in a clause."""
    if gap.kind == GAP_RETENTION:
        return (
            f"output {topic}[{partition}] starts at offset {gap.low}, past offset {gap.covered} the store covers: "
            f"retention deleted offsets {gap.covered}-{gap.low - 1} before the store recorded their ids"
        )
    return (
        f"output {topic}[{partition}] ends at offset {gap.end}, below offset {gap.covered} the store covers: the "
        f"topic was deleted and recreated, or lost records"
    )


def remedy(gap: OutputGap, store: DedupStore, partition: int) -> str:
    """What the operator can do, in a clause."""
    accept = (
        f"accept the gap (`dedupectl accept-gap -d {store.path.parent} -t {store.identity.topic} -p {partition} "
        f"--reason …`; ids published in it may be published once more)"
    )
    rebuild = f"rebuild the store from the output (`dedupectl rebuild -p {partition} --replace`)"
    if gap.kind == GAP_RETENTION:
        return f"restore a snapshot covering offset {gap.low} or later, {rebuild}, or {accept}; see {RUNBOOK}"
    return f"{rebuild}, or {accept}; see {RUNBOOK}"


def refusal(gap: OutputGap, store: DedupStore, topic: str, partition: int) -> OutputGapError:
    """The one-line error that refuses the partition."""
    return OutputGapError(
        f"partition {partition} refused: {describe(gap, topic, partition)}",
        remedy(gap, store, partition),
        gap,
        partition,
    )

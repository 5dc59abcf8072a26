"""Making a store agree with its output partition: record every published id the store lacks.

The worker runs ``catch_up`` on every newly assigned partition before it dedups anything there (that is
its crash recovery); ``dedupectl reconcile --apply`` runs the same over an operator's range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
    the store lacks (in output order, so sequence numbers follow publication), and advance the offset."""
    start = store.state.output_offset
    scanned = recorded = 0
    end = start
    for batch in reader.scan(output_topic, partition, start):
        scanned += len(batch.ids)
        # ids repeated inside the scanned range count once: the first publication is the one recorded
        fresh_ids, fresh_ts, seen = [], [], set()
        present = store.contains_many(batch.ids)
        for message_id, timestamp_ms, known in zip(batch.ids, batch.timestamps_ms, present, strict=True):
            if not known and message_id and message_id not in seen:
                seen.add(message_id)
                fresh_ids.append(message_id)
                fresh_ts.append(timestamp_ms)
        end = max(end, batch.position)
        store.record(fresh_ids, fresh_ts, output_offset=end)
        recorded += len(fresh_ids)
        if progress is not None:
            progress(scanned, recorded)
    return CatchUpResult(start_offset=start, end_offset=end, scanned=scanned, recorded=recorded)

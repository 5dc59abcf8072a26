"""One partition's store against a range of its output, and (with ``apply``) the store made to agree.

This is the only comparison in the product: the worker's recovery is this over the tail with ``apply``
(``reconcile.recovery.catch_up``), ``dedupectl reconcile`` is this over an operator's range.

How it stays fast and bounded over tens of millions of records:

- **large lookups, one group ahead.** Every record's id is looked up in the store, a group of 200,000
  records at a time in key order (each store block is decompressed about once per group), in a helper
  thread while the previous group is compared and librdkafka fetches the next: RocksDB and librdkafka
  release the GIL (``reconcile.lookup``). Batches are read ``compact`` (ids, offsets, timestamps; not the
  consumer's messages), so holding two groups costs little memory per record.
- **a healthy group is one run.** When a group's numbers are exactly ``first..first+n-1`` (in any order)
  and none was matched before, the whole group is matched at once (``Comparison.feed_run``); any other
  group is compared record by record (``Comparison.feed``), so the counts and samples stay exact.
- **what was matched** is a bitmap of sequence numbers (``reconcile.seqset``) that folds full chunks: flat
  memory for a healthy store, one bit per number at worst. A number matched twice is a repeat in the output.
- **ids the store lacks** get the next sequence numbers, in output order: recorded in the store at once
  with ``apply`` (so their own repeats are found there), else kept in an on-disk scratch map.
- **ids in the store missing from the output**: the sequence numbers the scanned records matched span a
  window ``[first, last]``; every live number in it that nobody matched is a candidate. Numbers are dense
  (every number from the store's cut to its next is an id), so the bitmap alone says whether there is any
  candidate; only then is the store walked in sequence order (one pass). The window reaches
  down to the oldest live id when the scan started at offset 0, and up to the store's newest id when the
  store covers no output past the scan's end (then everything it holds was published by the end). A
  healthy range has no candidates; when there are some, the rest of the partition is read for them, so
  an id published outside the range (a range starting with repeats of older ids stretches the window
  back) is never reported, nor removed.

With ``apply`` the store's covered output offset advances only when the scan started at or before it:
advancing past offsets nobody read would hide them from the worker's recovery. Candidates the whole
output lacks are removed from the store: the output is the truth, and a store id it never published
would make the worker drop that message's next copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from reconcile.comparison import MAX_CANDIDATES, Comparison, ScanRange
from reconcile.errors import Interrupted
from reconcile.lookup import GROUP_RECORDS, GroupLookup, Prefetcher
from reconcile.report import (
    OUTPUT_GAP,
    Coverage,
    PartitionReport,
    partition_status,
)
from reconcile.scan import OutputBatch, OutputReader
from store.codec import GAP_TRUNCATED, OutputGap
from store.dedup_store import DedupStore

log = logging.getLogger(__name__)

SAMPLE_SIZE = 10
SCAN_BATCH = 10_000  # records per consume() call; lookups and comparisons go by groups of batches


def reconcile_partition(
    store: DedupStore,
    reader: OutputReader,
    output_topic: str,
    partition: int,
    scan_range: ScanRange,
    *,
    apply: bool,
    find_unpublished: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
    sample_size: int = SAMPLE_SIZE,
    writer_may_run: bool = True,
    output_gap: OutputGap | None = None,
) -> PartitionReport:
    """Compare (and with ``apply`` repair) ``store`` against ``output_topic[partition]`` over ``scan_range``.

    ``on_batch(position, records_scanned)`` is called after every batch. ``writer_may_run``: a read-only
    store may have a worker writing it, so ids missing at the tail are re-checked for being in flight.
    ``output_gap`` (``reconcile.gaps``) is reported, and never advanced over; after a truncated output nothing
    is compared: the store's offsets describe a topic that is no longer there.
    """
    started = time.monotonic()
    if output_gap is not None and output_gap.kind == GAP_TRUNCATED:
        return _not_compared(store, partition, scan_range, apply, output_gap, started)
    with Comparison(store, apply, sample_size) as comparison:
        before = store.state
        low = max(scan_range.low, 0)
        # reading from -1 (a fresh store) or from before retention's cut starts at the first retained offset
        may_advance = apply and output_gap is None and max(scan_range.start, low) <= max(before.output_offset, low)
        position = _scan(comparison, reader, output_topic, partition, scan_range, may_advance, on_batch, cancel)
        if not store.writable and writer_may_run:
            comparison.drop_in_flight()
        window = comparison.window(scan_range, position) if find_unpublished else None
        candidates = comparison.find_unpublished(window) if window else {}
        verdict = _judge_unpublished(comparison, reader, output_topic, partition, scan_range, position, candidates)
        unpublished = comparison.unpublished - len(verdict.elsewhere)
        return PartitionReport(
            partition=partition,
            store=str(store.path),
            start_offset=max(scan_range.start, low),
            end_offset=position,
            records_scanned=comparison.scanned,
            missing_from_store=comparison.missing,
            duplicate_records=comparison.duplicate_records,
            duplicate_ids=comparison.duplicate_ids,
            unpublished=unpublished,
            unpublished_verified=verdict.verified,
            older_than_window=comparison.older_than_window,
            unkeyed_records=comparison.unkeyed,
            seq_window=window,
            applied=apply,
            recorded=comparison.missing - comparison.unplaceable if apply else 0,
            put_back=comparison.placed,
            unplaceable=comparison.unplaceable,
            removed=verdict.removed,
            published_outside_range=len(verdict.elsewhere),
            removal_skipped=verdict.removal_skipped,
            coverage_before=Coverage.of(before),
            coverage_after=Coverage.of(store.state) if apply else Coverage.of(before),
            seconds=round(time.monotonic() - started, 3),
            status=partition_status(
                applied=apply,
                missing=comparison.missing,
                unplaceable=comparison.unplaceable,
                unpublished=unpublished,
                removed=verdict.removed,
                removal_skipped=verdict.removal_skipped,
                duplicates=comparison.duplicate_records,
                output_gap=output_gap is not None,
            ),
            samples=comparison.samples(candidates, exclude=verdict.elsewhere),
            output_gap=output_gap,
        )


def _not_compared(
    store: DedupStore, partition: int, scan_range: ScanRange, apply: bool, gap: OutputGap, started: float
) -> PartitionReport:
    """The report of a partition whose output was truncated below what the store covers: the gap alone."""
    start = max(scan_range.start, scan_range.low, 0)
    coverage = Coverage.of(store.state)
    return PartitionReport(
        partition=partition,
        store=str(store.path),
        start_offset=start,
        end_offset=start,
        records_scanned=0,
        missing_from_store=0,
        duplicate_records=0,
        duplicate_ids=0,
        unpublished=0,
        unpublished_verified=True,
        older_than_window=0,
        unkeyed_records=0,
        seq_window=None,
        applied=apply,
        recorded=0,
        put_back=0,
        unplaceable=0,
        removed=0,
        published_outside_range=0,
        removal_skipped=None,
        coverage_before=coverage,
        coverage_after=coverage,
        seconds=round(time.monotonic() - started, 3),
        status=OUTPUT_GAP,
        output_gap=gap,
    )


def _scan(
    comparison: Comparison,
    reader: OutputReader,
    topic: str,
    partition: int,
    scan_range: ScanRange,
    may_advance: bool,
    on_batch: Callable[[int, int], None] | None,
    cancel: threading.Event | None,
) -> int:
    """Feed the range to the comparison in groups of batches, each group looked up while the previous one
    is compared; return where reading stopped."""
    position = max(scan_range.start, scan_range.low, 0)
    group: list[OutputBatch] = []
    pending: tuple[list[OutputBatch], Future[GroupLookup]] | None = None
    prefetcher = Prefetcher(comparison.store)

    def compare(batches: list[OutputBatch], looked_up: Future[GroupLookup]) -> int:
        reached = max(position, batches[-1].position)
        found = looked_up.result()
        first_offset = next((batch.offset(0) for batch in batches if batch.ids), None)
        if not comparison.feed_run(found, advance_to=reached if may_advance else None, first_offset=first_offset):
            for batch, lookup in zip(batches, found.per_batch(comparison.store), strict=True):
                comparison.feed(batch, lookup, advance_to=batch.position if may_advance else None)
        if on_batch is not None:
            on_batch(reached, comparison.scanned)
        return reached

    try:
        records = 0
        batches = reader.scan(
            topic,
            partition,
            scan_range.start,
            stop_offset=scan_range.stop,
            batch_size=SCAN_BATCH,
            compact=True,
            strict_start=scan_range.strict_start,
        )
        for batch in batches:
            if cancel is not None and cancel.is_set():
                raise Interrupted("interrupted")
            group.append(batch)
            records += len(batch.ids)
            if records >= GROUP_RECORDS:
                looked_up = prefetcher.submit([b.ids for b in group])
                if pending is not None:
                    position = compare(*pending)
                pending, group, records = (group, looked_up), [], 0
        if group:
            looked_up = prefetcher.submit([b.ids for b in group])
            if pending is not None:
                position = compare(*pending)
            pending = (group, looked_up)
        if pending is not None:
            position = compare(*pending)
    finally:
        prefetcher.close()
    return position


@dataclass(frozen=True)
class _Verdict:
    elsewhere: frozenset[bytes]  # candidates the output holds outside the range
    verified: bool
    removed: int
    removal_skipped: str | None


def _judge_unpublished(
    comparison: Comparison,
    reader: OutputReader,
    topic: str,
    partition: int,
    scan_range: ScanRange,
    position: int,
    candidates: dict[bytes, int],
) -> _Verdict:
    """Check the window's unmatched ids against the rest of the partition; with apply, remove those the
    whole output lacks."""
    verified = comparison.unpublished <= MAX_CANDIDATES
    if not candidates:
        return _Verdict(frozenset(), verified, 0, None)
    if not verified:
        skipped = (
            f"{comparison.unpublished} ids of the store are missing from the range, more than the "
            f"{MAX_CANDIDATES} it checks against the whole output: check the store belongs to {topic}"
        )
        return _Verdict(frozenset(), False, 0, skipped if comparison.apply else None)
    # the window says where these ids should be; the rest of the partition may still hold them (a range
    # that starts with repeats of older ids stretches the window back): look before judging
    elsewhere = frozenset(_seen_elsewhere(reader, topic, partition, scan_range, position, candidates))
    removed = 0
    if comparison.apply:
        removed = comparison.store.forget_many([message_id for message_id in candidates if message_id not in elsewhere])
    return _Verdict(elsewhere, True, removed, None)


def _seen_elsewhere(
    reader: OutputReader,
    topic: str,
    partition: int,
    scan_range: ScanRange,
    position: int,
    candidates: dict[bytes, int],
) -> set[bytes]:
    """Which candidates the output holds outside the scanned range (read from the first retained offset
    to the start, and from where the scan stopped to the end)."""
    found: set[bytes] = set()
    spans = []
    if max(scan_range.start, 0) > scan_range.low:
        spans.append((scan_range.low, scan_range.start))
    if scan_range.stop is not None:
        spans.append((position, None))
    for start, stop in spans:
        for batch in reader.scan(topic, partition, start, stop_offset=stop):
            if not candidates.keys().isdisjoint(batch.ids):
                found.update(message_id for message_id in batch.ids if message_id in candidates)
    return found

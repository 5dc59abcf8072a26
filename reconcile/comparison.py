"""The running state of one partition's comparison of its store against its output (``reconcile.diff``): what
was matched, what the store lacks (recorded or kept aside), the repeats, and the candidates the output may lack.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from itertools import islice

from reconcile.lookup import GroupLookup, Lookup, look_up
from reconcile.report import (
    DuplicateSample,
    MissingSample,
    Samples,
    UnpublishedSample,
    show_id,
)
from reconcile.scan import OutputBatch
from reconcile.scratch import ScratchIds
from reconcile.seqset import SeqBitmap
from store.dedup_store import DedupStore
from store.errors import StoreCorruptError

log = logging.getLogger(__name__)

REPEAT_OFFSETS_KEPT = 5
# Ids of the store missing from the range are checked against the rest of the partition, held in memory
# meanwhile: above this many they are reported unchecked and never removed (so many mean a wrong store).
MAX_CANDIDATES = 100_000
# Numbers given to ids that have no place in the store, to find their repeats: far above any real sequence
UNPLACED_NUMBERS = 1 << 62


@dataclass(frozen=True)
class ScanRange:
    """Offsets to compare: ``start`` inclusive (-1: the beginning), ``stop`` exclusive (None: the end as
    reading reaches it); ``low`` is the partition's first retained offset."""

    start: int
    stop: int | None
    low: int = 0
    strict_start: bool = False  # a start retention deleted meanwhile is refused, not skipped (recovery)


class Comparison:
    """The running state of one partition's comparison (one thread)."""

    def __init__(self, store: DedupStore, apply: bool, sample_size: int) -> None:
        self.store = store
        self.apply = apply
        self.sample_size = sample_size
        self.before = store.state
        self.limit = self.before.next_seq  # numbers below existed before this run; above are ids found now
        self.next_new = self.limit
        self.aged = self.before.first_live_seq > 0
        self.seen = SeqBitmap()  # numbers matched by a scanned record
        self.repeated = SeqBitmap()  # numbers already counted as duplicated ids
        self.scratch = None if apply else ScratchIds()
        self.unplaced = ScratchIds()  # ids missing inside the recorded stretch that have no place to go back to
        self.next_unplaced = UNPLACED_NUMBERS
        # the output offset of the oldest live id (None: its batch has no offsets) and where the recorded
        # stretch ends: an id the store lacks goes back in its place before that, is appended after it
        self.cut_offset = store.ledger.window_start_offset()
        newest = store.ledger.newest_output_offset()
        self.tail_from = newest + 1 if newest is not None else max(self.before.output_offset, 0)
        self.placed = self.unplaceable = 0
        self.window_low: int | None = None
        self.window_high: int | None = None  # exclusive
        self.scanned = self.missing = self.missing_in_tail = self.unkeyed = self.older_than_window = 0
        self.duplicate_records = self.duplicate_ids = self.unpublished = 0
        self._missing_samples: list[MissingSample] = []
        self._duplicate_samples: dict[int, tuple[bytes, list[int]]] = {}

    def __enter__(self) -> Comparison:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.scratch is not None:
            self.scratch.close()
        self.unplaced.close()

    # -- scanning ------------------------------------------------------------------------------------

    def feed_run(self, group: GroupLookup, advance_to: int | None, first_offset: int | None = None) -> bool:
        """The fast path: a whole group that matched one run of numbers nobody matched before (the common
        case, a healthy store read in publication order). False, changing nothing, when it is not that."""
        first = group.run_start
        if first is None or self.reaches_before_cut(first_offset):
            return False
        stop = first + group.count
        if stop > self.limit or not self.seen.run_is_clear(first, stop):
            return False  # numbers found by this run (apply) or matched before (repeats): the exact path
        self.seen.add_run(first, stop)
        self._widen(first, stop - 1)
        self.scanned += group.count
        if self.apply and advance_to is not None:
            self.store.record([], [], output_offset=advance_to)
        return True

    def feed(self, batch: OutputBatch, looked_up: Lookup, advance_to: int | None) -> None:
        ids = batch.ids
        self.scanned += len(ids)
        new_ids: list[bytes] = []
        new_timestamps: list[int] = []
        new_offsets: list[int] = []  # appended ids come after every offset recorded before: ascending
        if looked_up.run_start is not None and not self.reaches_before_cut(batch.offset(0) if ids else None):
            # all present, in order: the common case, one run
            first = looked_up.run_start
            for seq in self.seen.add_run(first, first + len(ids)):
                self._duplicate(ids[seq - first], seq, batch, seq - first)
            self._widen(first, first + len(ids) - 1)
        elif ids:
            self._compare_each(batch, list(looked_up.seqs), new_ids, new_timestamps, new_offsets)
        if self.apply and (new_ids or advance_to is not None):
            state = self.store.record(new_ids, new_timestamps, output_offset=advance_to, output_offsets=new_offsets)
            if state.next_seq != self.next_new:  # only this process writes: the lock says so
                raise StoreCorruptError(
                    f"store {self.store.path} moved to sequence {state.next_seq} under reconcile, not {self.next_new}",
                    "another process wrote the store despite its lock: stop it, then run reconcile again",
                )
        elif new_ids:
            self.scratch.put_many(new_ids, range(self.next_new - len(new_ids), self.next_new))

    def _found_since(self, ids: list[bytes], seqs: list[int | None]) -> None:
        """Fill in ids absent from the look-up made ahead: found since (recorded by the previous batch with
        ``apply``), or remembered in the scratch map (a dry run)."""
        absent = [i for i, seq in enumerate(seqs) if seq is None]
        if self.scratch is not None:
            found = self.scratch.lookup_many([ids[i] for i in absent])
        else:
            found = look_up(self.store, [ids[i] for i in absent]).seqs
        for i, seq in zip(absent, found, strict=True):
            seqs[i] = seq
        if self.unplaced.size:  # ids with no place in the store (--apply): their repeats are repeats
            still = [i for i in absent if seqs[i] is None]
            for i, seq in zip(still, self.unplaced.lookup_many([ids[i] for i in still]), strict=True):
                seqs[i] = seq

    def _seen_again(self, message_id: bytes, seq: int, batch: OutputBatch, i: int) -> None:
        if seq < self.limit:
            self._widen(seq, seq)
        if self.seen.add(seq):
            self._duplicate(message_id, seq, batch, i)

    def _unseen(
        self,
        message_id: bytes,
        batch: OutputBatch,
        i: int,
        unplaced: list[tuple[bytes, int]],
        new: tuple[list[bytes], list[int], list[int]],
    ) -> int | None:
        """An id neither the store nor this batch holds: the number it takes (a new one after the tail, or an
        unplaced one inside the recorded stretch), or None when it needs none (unkeyed, older than the window)."""
        offset = batch.offset(i)
        if not message_id:
            self.unkeyed += 1
            return None
        if self._older_than_window(offset):
            self.older_than_window += 1
            return None
        if offset < self.tail_from:  # inside the recorded stretch, and no batch recorded it: no place for it
            seq = self.next_unplaced
            self.next_unplaced += 1
            unplaced.append((message_id, seq))
            self.unplaceable += 1
        else:
            seq = self.next_new
            self.next_new += 1
            new_ids, new_timestamps, new_offsets = new
            new_ids.append(message_id)
            new_timestamps.append(batch.timestamp_ms(i))
            new_offsets.append(offset)
            self.tail_from = offset + 1
        self.seen.add(seq)
        self._count_missing(message_id, batch, i)
        return seq

    def _compare_each(
        self,
        batch: OutputBatch,
        seqs: list[int | None],
        new_ids: list[bytes],
        new_timestamps: list[int],
        new_offsets: list[int],
    ) -> None:
        ids = batch.ids
        if None in seqs:
            self._found_since(ids, seqs)
        placed = self._places(batch, seqs)
        found_now: dict[bytes, int] = {}
        unplaced: list[tuple[bytes, int]] = []
        for i, (message_id, seq) in enumerate(zip(ids, seqs, strict=True)):
            offset = batch.offset(i)
            if seq is None:
                seq = found_now.get(message_id)
            if seq is not None and self.cut_offset is not None and offset < self.cut_offset:
                # an earlier copy of an id published again after it aged out: older than the window, as designed
                self.older_than_window += 1
                continue
            if seq is None and message_id and offset in placed:
                seq = placed[offset]  # lost from the store: it goes back under the number it was recorded with
                found_now[message_id] = seq
                self._count_missing(message_id, batch, i)
                self.placed += 1
            if seq is not None:
                self._seen_again(message_id, seq, batch, i)
                continue
            seq = self._unseen(message_id, batch, i, unplaced, (new_ids, new_timestamps, new_offsets))
            if seq is not None:
                found_now[message_id] = seq
        if unplaced:
            self.unplaced.put_many(*zip(*unplaced, strict=True))

    def _count_missing(self, message_id: bytes, batch: OutputBatch, index: int) -> None:
        offset = batch.offset(index)
        self.missing += 1
        if offset >= self.before.output_offset:
            self.missing_in_tail += 1
        if len(self._missing_samples) < self.sample_size:
            self._missing_samples.append(MissingSample(show_id(message_id), offset, batch.timestamp_ms(index)))

    def _older_than_window(self, offset: int) -> bool:
        """Whether an output record the store lacks was published before the store's oldest live id."""
        if self.cut_offset is not None:
            return offset < self.cut_offset  # exact: the cut's own batch says where it stands in the output
        # a cut in a batch recorded without offsets (schema 3): before the first id the range matched
        return self.aged and self.window_low is None and offset < self.before.output_offset

    def reaches_before_cut(self, first_offset: int | None) -> bool:
        """Records from ``first_offset`` on may include copies older than the window (the exact path sorts
        them out)."""
        return self.cut_offset is not None and first_offset is not None and first_offset < self.cut_offset

    def _places(self, batch: OutputBatch, seqs: list[int | None]) -> dict[int, int]:
        """For the batch's ids the store lacks inside its recorded stretch, the number each was recorded with
        (by its output offset; with apply, put back now): offset -> seq."""
        if self.cut_offset is None:
            return {}
        cut, tail = self.cut_offset, self.tail_from
        lost = [i for i, seq in enumerate(seqs) if seq is None and batch.ids[i] and cut <= batch.offset(i) < tail]
        if not lost:
            return {}
        offsets = [batch.offset(i) for i in lost]
        lost_ids = [batch.ids[i] for i in lost]
        if self.apply:
            numbers = self.store.place(lost_ids, offsets)
            return {offset: seq for offset, seq in zip(offsets, numbers, strict=True) if seq is not None}
        places = self.store.ledger.seqs_published_at(offsets)
        found = [(message_id, places[offset]) for message_id, offset in zip(lost_ids, offsets, strict=True)
                 if offset in places]  # fmt: skip
        if found:  # a dry run remembers them where their repeats further on look
            self.scratch.put_many(*zip(*found, strict=True))
        return places

    def _widen(self, low: int, high: int) -> None:
        """Extend the window by numbers ``low..high`` (only those that existed before this run)."""
        if low >= self.limit:
            return
        high = min(high, self.limit - 1)
        if self.window_low is None or low < self.window_low:
            self.window_low = low
        if self.window_high is None or high + 1 > self.window_high:
            self.window_high = high + 1

    def _duplicate(self, message_id: bytes, seq: int, batch: OutputBatch, index: int) -> None:
        self.duplicate_records += 1
        if not self.repeated.add(seq):
            self.duplicate_ids += 1
            if len(self._duplicate_samples) < self.sample_size:
                self._duplicate_samples[seq] = (message_id, [])
        sample = self._duplicate_samples.get(seq)
        if sample is not None and len(sample[1]) < REPEAT_OFFSETS_KEPT:
            sample[1].append(batch.offset(index))

    # -- after the scan ------------------------------------------------------------------------------

    def drop_in_flight(self, attempts: int = 5, pause_s: float = 0.2) -> None:
        """Read-only against a running worker: ids it published before the scan's end but recorded after
        the store was opened are not missing, just in flight. Only ids past the store's covered offset can
        be; catch up (a few times: the worker records a batch just after committing it) and drop those."""
        for attempt in range(attempts):
            if not self.missing_in_tail:
                return
            if attempt:
                time.sleep(pause_s)
            self.store.refresh()
            in_flight = self.scratch.forget_present(self.store)
            if in_flight:
                log.info("%d ids were recorded by the running worker during the scan: not missing", in_flight)
                self.missing -= in_flight
                self.missing_in_tail -= in_flight
                present = self.store.contains_many([sample.id.encode() for sample in self._missing_samples])
                self._missing_samples = [
                    sample for sample, known in zip(self._missing_samples, present, strict=True) if not known
                ]

    def window(self, scan_range: ScanRange, position: int) -> tuple[int, int] | None:
        """The store's sequence numbers the scanned range must hold, ``(first, end)``; None if unknown."""
        low, high = self.window_low, self.window_high
        if max(scan_range.start, 0) <= scan_range.low == 0:  # the whole history was read from offset 0
            low = self.before.first_live_seq
        if self.before.output_offset <= position:  # the store covers nothing past the scan: all it has
            high = self.limit
        if low is None or high is None or low >= high:
            return None
        return low, high

    def find_unpublished(self, window: tuple[int, int]) -> dict[bytes, int]:
        """Count the window's live ids nobody matched; return them (id -> seq) for removal, up to the cap."""
        candidates: dict[bytes, int] = {}
        # sequence numbers are dense (every number from the cut to the next is an id), so the bitmap alone
        # says whether any is unmatched; only then is the store read, in one ordered pass over the span
        first = end = None
        for low, high in self.seen.missing_runs(*window):
            first = low if first is None else first
            end = high
        if first is None:
            return candidates
        for seq, message_id in self.store.iter_by_seq(first, end):
            if seq in self.seen:
                continue
            self.unpublished += 1
            if len(candidates) < MAX_CANDIDATES:
                candidates[message_id] = seq
        return candidates

    def samples(self, candidates: dict[bytes, int], exclude: frozenset[bytes]) -> Samples:
        kept = ((seq, message_id) for message_id, seq in candidates.items() if message_id not in exclude)
        unpublished = list(islice(kept, self.sample_size))
        stamps = self.store.lookup_many([message_id for _, message_id in unpublished])
        return Samples(
            missing_from_store=tuple(self._missing_samples),
            duplicates=tuple(
                DuplicateSample(show_id(message_id), tuple(offsets))
                for message_id, offsets in self._duplicate_samples.values()
            ),
            unpublished=tuple(
                UnpublishedSample(show_id(message_id), seq, None if stamp is None else stamp[1])
                for (seq, message_id), stamp in zip(unpublished, stamps, strict=True)
            ),
        )

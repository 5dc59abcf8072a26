"""The dropped copies a worker produces to ``--duplicates-topic``: each one as it came (key, value, headers),
plus headers that say where it came from and which record it repeats.

A copy's original is either in an earlier batch (held in the store, or in the batch committed just before,
whose ids the plan counted as held): its output offset is known; or earlier in the same batch: published in
the same transaction as the copy, so its output offset is known only once that commits, and the copy names
the original's input offset instead. The age is the copy's record timestamp minus the original's (the
time a record without a timestamp was planned, as the store keeps), so the same copy gets the same age when
an aborted batch is read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Protocol

from confluent_kafka import Message

from dedupectl.worker.plan import Plan, Verdict
from store import clock
from store.codec import encode_ids

SOURCE_TOPIC = "dedupectl.source.topic"  # the same names as a dead letter's
SOURCE_PARTITION = "dedupectl.source.partition"
SOURCE_OFFSET = "dedupectl.source.offset"
ORIGINAL_WHERE = "dedupectl.original.where"  # EARLIER_BATCH or SAME_BATCH
ORIGINAL_OUTPUT_OFFSET = "dedupectl.original.output.offset"  # an earlier batch's original, where the store knows it
ORIGINAL_INPUT_OFFSET = "dedupectl.original.input.offset"  # a same batch's original
ORIGINAL_AGE_MS = "dedupectl.original.age.ms"
EARLIER_BATCH = "earlier-batch"
SAME_BATCH = "same-batch"


class RecordedBatches(Protocol):
    """What the copies ask of a store's ledger (``store.ledger.Ledger`` is one) about its numbers."""

    def output_offsets(self, seqs: Sequence[int]) -> list[int | None]: ...

    def timestamps(self, seqs: Sequence[int]) -> list[int]: ...


class HeldOriginals(Protocol):
    """What the copies ask of a store (``DedupStore`` is one) about the ids it holds."""

    @property
    def ledger(self) -> RecordedBatches: ...

    def live_seqs(self, keys: list[bytes]) -> list[int | None]: ...


@dataclass(frozen=True)
class EarlierBatch:
    """One partition's share of the batch committed just before, not yet in its store."""

    keys: list[bytes]  # its published ids, as store keys, in publish order
    output_offsets: range | None  # where each was published (None: not known)
    timestamps_ms: list[int]


@dataclass(frozen=True)
class DroppedCopy:
    message: Message  # the input record dropped
    headers: list[tuple[str, bytes]]  # its own, then where it came from and what it repeats


def dropped_copies(
    plan: Plan, messages: list[Message], store: HeldOriginals, earlier: EarlierBatch | None = None
) -> list[DroppedCopy]:
    """Every record ``plan`` dropped as a duplicate, in input order, with the headers naming its original."""
    verdicts = plan.verdicts()
    positions = [position for position, verdict in enumerate(verdicts) if verdict is Verdict.DUPLICATE]
    if not positions:
        return []
    ids = plan.record_ids
    published_at = {plan.positions[index]: index for index in range(len(plan.positions))}
    first_at: dict[bytes, int] = {}
    for position, message_id in enumerate(ids):
        if message_id is not None:
            first_at.setdefault(message_id, position)
    earlier_ids = sorted({ids[p] for p in positions if first_at[ids[p]] not in published_at})
    found = _in_earlier_batches(earlier_ids, store, earlier)
    now_ms = clock.now_ms()
    copies = []
    for position in positions:
        message = messages[position]
        copied_ms = _timestamp(message) or now_ms
        first = first_at[ids[position]]
        if first in published_at:
            original_ms = plan.timestamps_ms[published_at[first]]
            extra = [(ORIGINAL_WHERE, SAME_BATCH), (ORIGINAL_INPUT_OFFSET, messages[first].offset())]
        else:
            output_offset, original_ms = found.get(ids[position], (None, None))
            extra = [(ORIGINAL_WHERE, EARLIER_BATCH)]
            if output_offset is not None:
                extra.append((ORIGINAL_OUTPUT_OFFSET, output_offset))
        if original_ms is not None:
            extra.append((ORIGINAL_AGE_MS, copied_ms - original_ms))
        copies.append(DroppedCopy(message, _headers(message, extra)))
    return copies


def _in_earlier_batches(
    ids: list[bytes], store: HeldOriginals, earlier: EarlierBatch | None
) -> dict[bytes, tuple[int | None, int]]:
    """Each id's output offset (None: not known) and timestamp, from the batch committed just before or the
    store; an id in neither (aged out meanwhile) is left out."""
    keys = encode_ids(ids)
    found: dict[bytes, tuple[int | None, int]] = {}
    in_store = list(zip(ids, keys, strict=True))
    if earlier is not None:
        index = {key: at for at, key in enumerate(earlier.keys)}
        in_store = []
        for message_id, key in zip(ids, keys, strict=True):
            at = index.get(key)
            if at is None:
                in_store.append((message_id, key))
                continue
            offset = None if earlier.output_offsets is None else earlier.output_offsets[at]
            found[message_id] = (offset, earlier.timestamps_ms[at])
    if not in_store:
        return found
    seqs = store.live_seqs(list(map(itemgetter(1), in_store)))
    held = sorted({seq for seq in seqs if seq is not None})
    offsets = dict(zip(held, store.ledger.output_offsets(held), strict=True))
    stamps = dict(zip(held, store.ledger.timestamps(held), strict=True))
    for (message_id, _), seq in zip(in_store, seqs, strict=True):
        if seq is not None:
            found[message_id] = (offsets[seq], stamps[seq])
    return found


def _timestamp(message: Message) -> int | None:
    timestamp = message.timestamp()[1]
    return timestamp if timestamp > 0 else None


def _headers(message: Message, extra: list[tuple[str, object]]) -> list[tuple[str, bytes]]:
    return [
        *(message.headers() or []),
        (SOURCE_TOPIC, message.topic().encode()),
        (SOURCE_PARTITION, str(message.partition()).encode()),
        (SOURCE_OFFSET, str(message.offset()).encode()),
        *((name, str(value).encode()) for name, value in extra),
    ]

"""The dedup decision for one partition's share of a batch, from plain values: which records are published,
which are dropped as duplicates, which go to the dead-letter topic and why.

A record is published when it has a usable id that neither the store holds nor an earlier record of the same
batch carries (the first occurrence wins); ``seen`` are ids held as if recorded (the batch still committing).
No Kafka client and no worker is needed: the store is anything that answers ``contains_keys``, and the
partition check's answer (``routing.RouteCheck``) comes in as plain values: a misrouted record is counted,
and with ``misrouted_dead`` it is a dead letter (reason ``misrouted``) instead of a candidate. The lists are
parallel and the hot loops C-level map/zip over them, not per-record objects.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import compress
from operator import itemgetter, not_, or_
from typing import Protocol

from dedupectl.messages import DeadLetter, DeadLetterReason, Headers, extract_ids
from dedupectl.schemas import SchemaSource
from dedupectl.worker.routing import NOTHING_MISROUTED, Routing
from store import clock
from store.codec import encode_ids


class HeldKeys(Protocol):
    """What a plan asks of a store (``DedupStore`` is one): whether it holds each of these keys."""

    def contains_keys(self, keys: list[bytes]) -> list[bool]: ...


class Verdict(StrEnum):
    PUBLISH = "publish"
    DUPLICATE = "duplicate"
    DEAD_LETTER = "dead-letter"
    FORWARD = "forward"


@dataclass(frozen=True)
class Records:
    """One partition's share of a batch as parallel lists, in input order."""

    keys: Sequence[bytes | None]  # the record keys: the messageId unless the value carries it
    values: Sequence[bytes | None]
    offsets: Sequence[int]  # input offsets
    timestamps_ms: Sequence[int]  # record timestamps; 0 or below when the record has none
    headers: Sequence[Headers] | None = None  # each record's headers: read only where the id is a header


@dataclass(frozen=True)
class Plan:
    """What a partition's share of a batch becomes. The records to publish are parallel lists, in input order."""

    partition: int
    positions: list[int]  # of the records to publish, in the input
    ids: list[bytes]  # their messageIds
    keys: list[bytes]  # the same ids as store keys (encoded once, for the lookup and for record)
    values: list[bytes | None]
    timestamps_ms: list[int]  # a record without a usable timestamp has the time it was planned
    dead: list[tuple[int, DeadLetter]]  # position in the input and reason of each dead letter
    consumed: int
    duplicates: int
    next_input_offset: int
    record_ids: list[bytes | None]  # every input record's id, None for a dead letter: what each duplicate repeats
    misrouted: int = 0  # keyed records in another partition than their partitioner's (published or dead)
    unkeyed: int = 0  # records without a key whose id came from the value or a header
    # misrouted records sent on to their partitioner's input partition (position, partition): its worker's
    # store is the one that holds their ids
    forward: list[tuple[int, int]] = field(default_factory=list)

    def verdicts(self) -> list[Verdict]:
        """Each input record's fate, in input order."""
        verdicts = [Verdict.DUPLICATE] * self.consumed
        for position in self.positions:
            verdicts[position] = Verdict.PUBLISH
        for position, _ in self.dead:
            verdicts[position] = Verdict.DEAD_LETTER
        for position, _ in self.forward:
            verdicts[position] = Verdict.FORWARD
        return verdicts


def plan(
    partition: int,
    records: Records,
    store: HeldKeys,
    *,
    value_format: str,
    id_field: str,
    id_header: str | None = None,
    schemas: SchemaSource | None = None,
    seen: Collection[bytes] | None = None,
    now_ms: Callable[[], int] = clock.now_ms,
    routing: Routing = NOTHING_MISROUTED,
    misrouted_dead: bool = False,
    count_unkeyed: bool = False,
    misrouted_forward: bool = False,
) -> Plan:
    """Decide a non-empty share of a batch. ``seen``: store keys held as if recorded (the batch committing);
    ``routing``: the records of another partition; ``misrouted_dead``: they go to the dead-letter topic;
    ``misrouted_forward``: to the input partition their partitioner gives them; ``schemas``: writer schemas,
    for value_format avro and protobuf."""
    ids, dead = extract_ids(records.keys, records.values, value_format, id_field, records.headers, id_header, schemas)
    if routing.positions and misrouted_dead:
        dead = _dead_letter_misrouted(partition, ids, dead, routing)
    forward = _forward_misrouted(ids, routing) if routing.positions and misrouted_forward else []
    unkeyed = _unkeyed(records.keys, ids) if count_unkeyed else 0
    # where each id first occurs (built from the end, so earlier positions overwrite later ones): a
    # repeat inside the batch is a duplicate, and the first occurrence is the one published
    first_at = dict(zip(reversed(ids), range(len(ids) - 1, -1, -1), strict=True))
    first_at.pop(None, None)  # dead letters
    positions = sorted(first_at.values())
    candidates = list(map(ids.__getitem__, positions))
    store_keys = encode_ids(candidates)
    held = store.contains_keys(store_keys)
    if seen and not seen.isdisjoint(store_keys):  # C-level: most batches repeat no id of the one committing
        held = list(map(or_, held, map(seen.__contains__, store_keys)))
    absent = list(map(not_, held))
    positions = list(compress(positions, absent))
    timestamps = list(map(records.timestamps_ms.__getitem__, positions))
    if timestamps and min(timestamps) <= 0:  # no usable record timestamp: the time it was seen
        planned_ms = now_ms()
        timestamps = [timestamp if timestamp > 0 else planned_ms for timestamp in timestamps]
    consumed = len(records.offsets)
    return Plan(
        partition=partition,
        positions=positions,
        ids=list(compress(candidates, absent)),
        keys=list(compress(store_keys, absent)),
        values=list(map(records.values.__getitem__, positions)),
        timestamps_ms=timestamps,
        dead=dead,
        consumed=consumed,
        duplicates=consumed - len(dead) - len(positions) - len(forward),
        # after a rebalance inside one batch, offsets may not be ascending: cover the furthest read
        next_input_offset=max(records.offsets) + 1,
        record_ids=ids,
        misrouted=len(routing.positions),
        unkeyed=unkeyed,
        forward=forward,
    )


def _forward_misrouted(ids: list[bytes | None], routing: Routing) -> list[tuple[int, int]]:
    """The misrouted records with an id, taken out of the plan (``ids`` in place): (position, partition)."""
    forward = []
    for position, expected in zip(routing.positions, routing.expected, strict=True):
        if ids[position] is not None:
            ids[position] = None
            forward.append((position, expected))
    return forward


def _dead_letter_misrouted(
    partition: int, ids: list[bytes | None], dead: list[tuple[int, DeadLetter]], routing: Routing
) -> list[tuple[int, DeadLetter]]:
    """Turn the misrouted records into dead letters (``ids`` in place); one already dead keeps its reason."""
    added = []
    for position, expected in zip(routing.positions, routing.expected, strict=True):
        if ids[position] is not None:
            ids[position] = None
            detail = f"in partition {partition}, but {routing.partitioner} puts its key in partition {expected}"
            added.append((position, DeadLetter(DeadLetterReason.MISROUTED, detail)))
    return sorted([*dead, *added], key=itemgetter(0)) if dead else added


def _unkeyed(keys: Sequence[bytes | None], ids: list[bytes | None]) -> int:
    """Records without a key that still have an id: their copies meet only if the producer routes by that id."""
    if all(keys):  # C-level: the usual batch is all keyed
        return 0
    return sum(1 for key, found in zip(keys, ids, strict=True) if not key and found is not None)

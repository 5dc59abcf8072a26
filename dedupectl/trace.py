"""Where did a message go (``dedupectl trace ID``): every occurrence of one id in the input, what the worker
did with each, and whether the partition's store still holds the id.

One partition is read, not the topic: the one the producer's partitioner put the id in (the input is keyed by
``messageId``), or the one given. Three reads, each of that partition only:
- the input over the range (default: the partition's effective window, else the last 24 h): the occurrences;
- the output from the range's start to its end: the published copies (key = the id; the worker copies the
  input record's value and timestamp, which is how a copy is matched to its occurrence);
- the dead-letter partition the worker writes that input partition's dead letters to (its number modulo the
  dead-letter topic's partitions), from the range's start to its end: records whose headers name the
  occurrence's offset.
An occurrence at or past the group's committed offset has not been consumed yet. A consumed one that was
neither published nor dead-lettered was dropped as a duplicate of the last published occurrence before it.

An id the store does not hold either aged out or was never published. The store knows the output offset its
aging cut stands at; when the range read holds no copy below it, the output is read (by key) from its first
retained offset up to the cut too, so a copy there tells an aged-out id from one never sent.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException, Message, TopicPartition

from dedupectl.fleet import committed_offsets, offsets_reader
from dedupectl.messages import DeadLetter, extract_id
from dedupectl.partitioner import PARTITIONERS
from dedupectl.schemas import SchemaSource
from reconcile.broker_retry import describe
from reconcile.errors import BrokerError
from reconcile.kafka import KafkaConfig, partition_counts
from reconcile.ranges import Bound, check_order, resolve_range
from reconcile.scan import OutputReader
from store import clock
from store.dedup_store import DedupStore
from store.errors import ConfigError, DedupeError
from store.operations import lookup_ids
from store.selection import select_stores
from store.sizes import format_duration
from store.window import read_windows
from store.worker_status import live_worker_for

PUBLISHED, DUPLICATE, DEAD_LETTERED, NOT_CONSUMED = "published", "duplicate", "dead-lettered", "not consumed"
DEFAULT_RANGE_S = 24 * 3600


@dataclass(frozen=True)
class TraceRequest:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str
    dead_letter_topic: str
    group_id: str
    message_id: str
    start: Bound | None = None  # None: the effective window
    stop: Bound | None = None  # None: the end
    partition: int | None = None  # None: from the partitioner
    partitioner: str = "murmur2"
    data_dir: Path | None = None
    value_format: str = "json"
    id_field: str = "messageId"
    id_header: str | None = None
    schemas: SchemaSource | None = None  # writer schemas, for value_format avro and protobuf


@dataclass(frozen=True)
class Occurrence:
    offset: int
    timestamp_ms: int
    outcome: str  # PUBLISHED, DUPLICATE, DEAD_LETTERED or NOT_CONSUMED
    output_offset: int | None = None
    duplicate_of: int | None = None  # input offset of the published occurrence it repeats (None: before the range)
    dead_letter_offset: int | None = None
    reason: str | None = None  # a dead letter's reason and detail


@dataclass(frozen=True)
class Publication:
    """A copy of the id in the output that no occurrence in the range accounts for (published before it)."""

    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class StoreAnswer:
    checked: bool
    note: str  # why it was not checked, or what the answer means
    held: bool = False
    seq: int | None = None
    timestamp_ms: int | None = None
    age_seconds: float | None = None
    window_seconds: float | None = None
    live: bool = False  # a worker running from that data directory holds the partition (else it may be behind)
    cut_offset: int | None = None  # output offset of the oldest live id (-1: nothing aged; None: unknown)
    published_at: int | None = None  # for an id not held: the output offset of its latest copy read
    aged_out: bool = False  # not held because that copy is below the cut


@dataclass(frozen=True)
class Scanned:
    topic: str
    partition: int
    start_offset: int
    stop_offset: int
    records: int


@dataclass(frozen=True)
class TraceReport:
    message_id: str
    input_topic: str
    partition: int
    partition_from: str
    range_from: str  # what the range's start is: the option, or the window it defaults to
    committed_offset: int | None
    occurrences: tuple[Occurrence, ...]
    other_publications: tuple[Publication, ...]
    store: StoreAnswer
    scanned: tuple[Scanned, ...]
    seconds: float

    @property
    def records_scanned(self) -> int:
        return sum(s.records for s in self.scanned)


@dataclass
class _Found:
    """Records of one partition read for the id: (offset, timestamp, message) each, and how much was read."""

    records: list[tuple[int, int, Message]] = field(default_factory=list)
    scanned: Scanned | None = None


# -- reading ------------------------------------------------------------------------------------------------


def _is_the_id(message: Message, key: bytes, request: TraceRequest) -> bool:
    """Whether the record's id, read as the worker reads it, is ``key``."""
    value = message.value()
    # cheap filters before parsing a value: the id's bytes must be in the value, or be the header's value
    if request.id_header is None and (not value or key not in value):
        return False
    if request.id_header is not None and (request.id_header, key) not in (message.headers() or ()):
        return False
    try:
        found = extract_id(
            message.key(),
            value,
            request.value_format,
            request.id_field,
            message.headers(),
            request.id_header,
            schemas=request.schemas,
        )
    except DeadLetter:
        return False
    return found == key


def _read(reader: OutputReader, topic: str, partition: int, start: int, stop: int | None, keep) -> _Found:
    found, read, last = _Found(), 0, start
    for batch in reader.scan(topic, partition, start, stop_offset=stop):
        read += len(batch.ids)
        last = batch.position
        for index, message in enumerate(batch.messages):
            if keep(batch.ids[index], message):
                found.records.append((message.offset(), message.timestamp()[1], message))
    found.scanned = Scanned(topic, partition, start, last if stop is None else max(stop, start), read)
    return found


def _read_input(reader: OutputReader, request: TraceRequest, partition: int, start: Bound) -> _Found:
    key = request.message_id.encode()
    span = resolve_range(reader, request.input_topic, partition, start, request.stop)
    if span.empty:
        return _Found(scanned=Scanned(request.input_topic, partition, span.start, span.start, 0))

    def keep(record_id: bytes, message: Message) -> bool:
        if request.id_header is None and record_id:  # a keyed record's id is its key
            return record_id == key
        return _is_the_id(message, key, request)

    return _read(reader, request.input_topic, partition, span.start, span.stop, keep)


def _from_time(reader: OutputReader, topic: str, partition: int, timestamp_ms: int) -> int:
    found = reader.offset_for_time(topic, partition, timestamp_ms)
    return reader.bounds(topic, partition).end if found is None else found


def _read_by_key(reader: OutputReader, topic: str, partition: int, since_ms: int, key: bytes) -> _Found:
    return _read(reader, topic, partition, _from_time(reader, topic, partition, since_ms), None, lambda k, _: k == key)


def _headers(message: Message) -> dict[str, str]:
    return {name: (value or b"").decode("utf-8", "replace") for name, value in message.headers() or []}


def _dead_letters(found: _Found, topic: str, partition: int) -> dict[int, tuple[int, str]]:
    """Input offset -> (dead-letter offset, reason) for the dead letters of ``topic[partition]``."""
    letters = {}
    for offset, _, message in found.records:
        headers = _headers(message)
        if headers.get("dedupectl.source.topic") == topic and headers.get("dedupectl.source.partition") == str(
            partition
        ):
            reason = headers.get("dedupectl.reason", "?")
            detail = headers.get("dedupectl.detail")
            letters[int(headers["dedupectl.source.offset"])] = (offset, f"{reason}: {detail}" if detail else reason)
    return letters


def _committed(request: TraceRequest, partition: int) -> int | None:
    reader = offsets_reader(request.kafka, request.group_id)
    try:
        tps = [TopicPartition(request.input_topic, partition)]
        return committed_offsets(reader, tps, request.kafka.timeout_s).get(partition)
    except KafkaException as error:
        raise BrokerError(f"reading group {request.group_id}'s offsets: {describe(error)}") from error
    finally:
        reader.close()


# -- what happened to each occurrence ----------------------------------------------------------------------


def _classify(
    occurrences: list[tuple[int, int, Message]],
    copies: list[tuple[int, int, Message]],
    letters: dict[int, tuple[int, str]],
    committed: int | None,
) -> tuple[list[Occurrence], list[Publication]]:
    """Pair each published copy with the first unpaired consumed occurrence of the same value and timestamp
    (the worker copies both); consumed occurrences left over were dropped as duplicates."""
    consumed = [o for o in occurrences if committed is not None and o[0] < committed and o[0] not in letters]
    paired: dict[int, int] = {}  # input offset -> output offset
    unpaired = []
    for out_offset, out_ts, copy in copies:
        match = next(
            (o for o in consumed if o[0] not in paired and o[1] == out_ts and o[2].value() == copy.value()), None
        )
        if match is None:
            unpaired.append(Publication(out_offset, out_ts))
        else:
            paired[match[0]] = out_offset
    results, last_published = [], None
    for offset, timestamp, _ in occurrences:
        if committed is None or offset >= committed:
            results.append(Occurrence(offset, timestamp, NOT_CONSUMED))
        elif offset in letters:
            letter_offset, reason = letters[offset]
            results.append(
                Occurrence(offset, timestamp, DEAD_LETTERED, dead_letter_offset=letter_offset, reason=reason)
            )
        elif offset in paired:
            results.append(Occurrence(offset, timestamp, PUBLISHED, output_offset=paired[offset]))
            last_published = offset
        else:
            results.append(Occurrence(offset, timestamp, DUPLICATE, duplicate_of=last_published))
    return results, unpaired


# -- the store ----------------------------------------------------------------------------------------------


def _store(request: TraceRequest, partition: int) -> tuple[StoreAnswer, float | None]:
    """What the partition's store says about the id, and its window (for the default range)."""
    if request.data_dir is None:
        return StoreAnswer(False, "not checked: give --data-dir of the worker that holds the partition"), None
    try:
        refs = select_stores(request.data_dir, request.input_topic, [partition])
        window = read_windows(refs)[0].window_seconds
        (hit,) = lookup_ids(refs, [request.message_id])
    except DedupeError as error:
        return StoreAnswer(False, f"not checked: {error}"), None
    live = live_worker_for(request.data_dir, request.input_topic, partition) is not None
    if not hit.in_window:
        with DedupStore.open_secondary(refs[0].path) as store:
            cut = store.ledger.window_start_offset()
        return StoreAnswer(True, "not held", window_seconds=window, live=live, cut_offset=cut), window
    note = "held: a repeat now is dropped"
    answer = StoreAnswer(True, note, True, hit.seq, hit.timestamp_ms, hit.age_seconds, window, live)
    return answer, window


def _below_cut(reader: OutputReader, request: TraceRequest, partition: int, store: StoreAnswer, copies: _Found):
    """The id's copies in the output below the store's cut that the range read left out (None: nothing to read)."""
    cut, read_from = store.cut_offset, copies.scanned.start_offset
    if cut is None or cut <= 0 or any(offset < cut for offset, _, _ in copies.records):
        return None
    low = reader.bounds(request.output_topic, partition).low
    if min(cut, read_from) <= low:
        return None
    key = request.message_id.encode()
    return _read(reader, request.output_topic, partition, low, min(cut, read_from), lambda k, _: k == key)


def _why_not_held(store: StoreAnswer, copies: list[int]) -> StoreAnswer:
    """Name why the store lacks the id, from its copies' output offsets and the store's cut."""
    if not copies:
        return dataclasses.replace(store, note="not held: never published in the range read")
    latest, cut = max(copies), store.cut_offset
    if cut is None:  # a store recorded without output offsets cannot place its cut: only a copy tells
        why = f"aged out of the window (published at output offset {latest})"
    elif latest < cut:
        why = f"aged out of the window (published at output offset {latest}, before the store's cut at {cut})"
    else:
        why = f"published at output offset {latest}, inside the window, yet missing (recovery or reconcile --apply)"
    return dataclasses.replace(store, note=f"not held: {why}", published_at=latest, aged_out=why.startswith("aged"))


def _default_start(window_s: float | None) -> tuple[Bound, str]:
    now = clock.now_ms()
    if window_s:
        text = f"the store's effective window ({format_duration(window_s)})"
        return Bound(text, timestamp_ms=now - int(window_s * 1000) - 1000), text
    return Bound("24h", timestamp_ms=now - DEFAULT_RANGE_S * 1000), "the last 24 h (no store read for the window)"


# -- putting it together ------------------------------------------------------------------------------------


def _partition(request: TraceRequest, counts: dict[str, int]) -> tuple[int, str]:
    partitions = counts[request.input_topic]
    if request.partition is not None:
        if not 0 <= request.partition < partitions:
            raise ConfigError(
                f"--partition {request.partition} is not a partition of {request.input_topic} (0-{partitions - 1})"
            )
        return request.partition, "given (--partition)"
    if request.partitioner not in PARTITIONERS:
        raise ConfigError(f"unknown partitioner {request.partitioner!r}", f"use one of {', '.join(PARTITIONERS)}")
    choose, described = PARTITIONERS[request.partitioner]
    return choose(request.message_id.encode(), partitions), described


def trace_message(request: TraceRequest) -> TraceReport:
    began = time.monotonic()
    check_order(request.start, request.stop)
    topics = [request.input_topic, request.output_topic, request.dead_letter_topic]
    counts = partition_counts(request.kafka, topics)
    partition, partition_from = _partition(request, counts)
    store, window = _store(request, partition)
    start, range_from = (request.start, request.start.text) if request.start else _default_start(window)
    committed = _committed(request, partition)
    key = request.message_id.encode()
    with OutputReader(request.kafka) as reader:
        found = _read_input(reader, request, partition, start)
        since = start.timestamp_ms
        if since is None:  # an offset: the output copies carry the input's timestamps, so start at the first's
            since = min((ts for _, ts, _ in found.records), default=clock.now_ms())
        copies = _read_by_key(reader, request.output_topic, partition, since, key)
        dead_partition = partition % counts[request.dead_letter_topic]
        letters = _read_by_key(reader, request.dead_letter_topic, dead_partition, since, key)
        older = _below_cut(reader, request, partition, store, copies) if store.checked and not store.held else None
    occurrences, unpaired = _classify(
        found.records, copies.records, _dead_letters(letters, request.input_topic, partition), committed
    )
    if store.checked and not store.held:
        store = _why_not_held(store, [o for o, _, _ in (older.records if older else []) + copies.records])
    return TraceReport(
        message_id=request.message_id,
        input_topic=request.input_topic,
        partition=partition,
        partition_from=partition_from,
        range_from=range_from,
        committed_offset=committed,
        occurrences=tuple(occurrences),
        other_publications=tuple(unpaired),
        store=store,
        scanned=(found.scanned, copies.scanned, letters.scanned, *([older.scanned] if older else [])),
        seconds=time.monotonic() - began,
    )

"""Reading one output partition with read_committed, in bounded batches.

This is the single place that reads the output topic back: the worker's recovery, ``dedupectl reconcile``
and ``verify`` all use it. The output record's key is its ``messageId`` (the worker writes it so).

The loop is the hot path of a reconcile over tens of millions of records, so it touches each message as
little as a plain consumer would: its key. Offsets and timestamps are read only for the few records a caller
asks about (``OutputBatch.offset(i)``), except in a ``compact`` scan, which copies them into flat arrays
with a few C-level calls per batch so the messages themselves can go (see ``OutputReader.scan``).
"""

from __future__ import annotations

import bisect
import logging
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from reconcile.errors import BrokerError, OutputGapError
from reconcile.kafka import (
    FETCH_QUEUE_BACKOFF_MS,
    KafkaConfig,
    is_authorization_error,
    make_consumer,
    permission_denied,
    unreachable,
)
from store import clock
from store.codec import GAP_RETENTION, OutputGap

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
_OFFSET = Message.offset
_KEY = Message.key

SCAN_GROUP = "dedupectl-scan"
# The consumer a scan uses; exposed so benchmarks measure their baseline with the very same settings.
SCAN_CONSUMER_SETTINGS: dict[str, object] = {
    # never joined or committed (assign() only), but librdkafka still finds its coordinator: Describe on it
    "group.id": SCAN_GROUP,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",  # the start fell behind retention: read what is left
    "fetch.max.bytes": 64 * 1024 * 1024,
    # the per-partition fetch cap: librdkafka's 1 MiB default starves a one-partition scan
    "fetch.message.max.bytes": 16 * 1024 * 1024,
    # at the end of a partition the broker holds a fetch this long before answering "no more": a scan
    # wants that answer at once, not after the default 500 ms per idle partition
    "fetch.wait.max.ms": 20,
    "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
}


@dataclass(frozen=True)
class OutputBatch:
    """Consecutive committed output records: their ids (keys; ``b""`` when a record has none) and where
    reading continues (``position``, past any transaction markers).

    A batch keeps the consumer's messages for ``offset(i)`` and ``timestamp_ms(i)``, or, from a ``compact``
    scan, only each record's offset and timestamp in flat arrays (see ``OutputReader.scan``)."""

    ids: list[bytes]
    messages: list[Message] | None = field(repr=False)
    position: int
    _offsets: Sequence[int] | None = field(default=None, repr=False)
    _timestamps: Sequence[int] | None = field(default=None, repr=False)

    @classmethod
    def compact(cls, ids: list[bytes], messages: list[Message], position: int) -> OutputBatch:
        """A batch that keeps its records' offsets and timestamps, not their messages."""
        if not messages:
            return cls(ids, None, position, range(0), array("q"))
        first, last = messages[0].offset(), messages[-1].offset()
        # offsets are consecutive unless a transaction marker falls inside the batch
        offsets = range(first, last + 1) if last - first == len(messages) - 1 else array("q", map(_OFFSET, messages))
        # a comprehension frees each (type, timestamp) pair at once; an array filled from an iterator is slower
        timestamps = array("q", [message.timestamp()[1] for message in messages])
        return cls(ids, None, position, offsets, timestamps)

    def offset(self, index: int) -> int:
        if self.messages is None:
            return self._offsets[index]
        return self.messages[index].offset()

    def timestamp_ms(self, index: int) -> int:
        if self.messages is None:
            return self._timestamps[index]
        return self.messages[index].timestamp()[1]

    @cached_property
    def offsets(self) -> list[int]:
        return [self.offset(index) for index in range(len(self.ids))]

    @cached_property
    def timestamps_ms(self) -> list[int]:
        return [self.timestamp_ms(index) for index in range(len(self.ids))]


@dataclass(frozen=True)
class OffsetBounds:
    low: int  # the first offset retention kept
    end: int  # the last stable offset: what read_committed can read up to


class OutputReader:
    """One read_committed consumer reused for many scans: creating a consumer costs connections and
    metadata round trips, which would dominate catching up an idle partition. One thread at a time."""

    def __init__(self, kafka: KafkaConfig) -> None:
        self._kafka = kafka
        self._consumer = make_consumer(kafka, **SCAN_CONSUMER_SETTINGS)
        self._uncommitted = None  # for the log end, made the rare time it is needed

    def bounds(self, topic: str, partition: int) -> OffsetBounds:
        """The partition's low watermark and last stable offset, asked of the broker now."""
        try:
            low, end = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._kafka.timeout_s
            )
        except KafkaException as error:
            raise unreachable(self._kafka, _describe(error)) from error
        return OffsetBounds(low, end)

    def log_end(self, topic: str, partition: int) -> int:
        """The partition's log end (high watermark), open transactions included: ``bounds`` gives the last
        stable offset instead, which an open transaction holds back."""
        if self._uncommitted is None:
            self._uncommitted = make_consumer(
                self._kafka, **{**SCAN_CONSUMER_SETTINGS, "isolation.level": "read_uncommitted"}
            )
        try:
            _, end = self._uncommitted.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._kafka.timeout_s
            )
        except KafkaException as error:
            raise unreachable(self._kafka, _describe(error)) from error
        return end

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is at or after ``timestamp_ms``; None if there is none."""
        try:
            (found,) = self._consumer.offsets_for_times(
                [TopicPartition(topic, partition, timestamp_ms)], timeout=self._kafka.timeout_s
            )
        except KafkaException as error:
            raise unreachable(self._kafka, _describe(error)) from error
        if found.error is not None:
            raise BrokerError(f"cannot look up offsets by time in {topic}[{partition}]: {found.error.str()}")
        return found.offset if found.offset >= 0 else None

    def scan(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        *,
        stop_offset: int | None = None,
        batch_size: int = 10_000,
        compact: bool = False,
        strict_start: bool = False,
    ) -> Iterator[OutputBatch]:
        """Yield the committed records of ``topic[partition]`` from ``start_offset`` (-1: the beginning) up
        to the end as it is when reading reaches it, or to ``stop_offset`` (exclusive).

        A start retention has deleted is read from the first retained offset, with a warning; ``strict_start``
        raises an OutputGapError instead, before the first batch (recovery: it must not skip what it needs).

        ``compact``: batches keep each record's offset and timestamp in flat arrays instead of the consumer's
        messages, for callers that hold many batches at once (reconcile holds two groups of 200,000
        records). Messages are larger, and are objects the cyclic garbage collector traverses on every full
        collection; the arrays are cheap to fill."""
        consumer, kafka = self._consumer, self._kafka
        tp = TopicPartition(topic, partition, start_offset if start_offset >= 0 else OFFSET_BEGINNING)
        try:
            consumer.assign([tp])
            make = OutputBatch.compact if compact else OutputBatch
            batches = _read_until_eof(consumer, kafka, topic, partition, stop_offset, batch_size, make)
            if strict_start and start_offset >= 0:
                first = next(batches, None)  # the watermarks are known once a fetch has answered
                _refuse_deleted_start(consumer, topic, partition, start_offset)
                if first is not None:
                    yield first
            yield from batches
            low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if 0 <= start_offset < low:
                log.warning(
                    "output %s[%d] now starts at %d, past offset %d: the records in between were deleted by "
                    "retention and could not be checked",
                    topic,
                    partition,
                    low,
                    start_offset,
                )
        except KafkaException as error:
            raise unreachable(kafka, _describe(error)) from error
        finally:
            consumer.unassign()

    def close(self) -> None:
        self._consumer.close()
        if self._uncommitted is not None:
            self._uncommitted.close()

    def __enter__(self) -> OutputReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scan_output(
    kafka: KafkaConfig,
    topic: str,
    partition: int,
    start_offset: int,
    *,
    stop_offset: int | None = None,
    batch_size: int = 10_000,
) -> Iterator[OutputBatch]:
    """One scan with a reader of its own (see ``OutputReader.scan``)."""
    with OutputReader(kafka) as reader:
        yield from reader.scan(topic, partition, start_offset, stop_offset=stop_offset, batch_size=batch_size)


def _refuse_deleted_start(consumer, topic: str, partition: int, start_offset: int) -> None:
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
    if start_offset < low:
        gap = OutputGap(GAP_RETENTION, start_offset, low, high, clock.now_ms())
        raise OutputGapError(
            f"output {topic}[{partition}] now starts at {low}, past offset {start_offset}", None, gap, partition
        )


def _describe(error: KafkaException) -> str:
    first = error.args[0] if error.args else error
    return first.str() if isinstance(first, KafkaError) else str(first)


def _read_until_eof(consumer, kafka: KafkaConfig, topic: str, partition: int, stop_offset, batch_size, make):
    """Consume until end-of-partition (or ``stop_offset``); fail if the broker goes silent for a timeout."""
    # consume() waits its whole timeout unless the batch fills, even after end-of-partition: poll briefly
    silent_polls, max_silent_polls = 0, max(1, int(kafka.timeout_s / POLL_SECONDS))
    while True:
        messages = consumer.consume(num_messages=batch_size, timeout=POLL_SECONDS)
        if not messages:
            silent_polls += 1
            if silent_polls >= max_silent_polls:
                raise unreachable(kafka, f"no data and no end-of-partition from {topic}[{partition}]")
            continue
        silent_polls = 0
        ids = list(map(_KEY, messages))
        at_eof = False
        if None in ids:  # events (end of partition, errors) have no key; so may a stray record
            messages, ids, at_eof = _drop_events(messages, ids, topic, partition)
        if stop_offset is not None and messages and messages[-1].offset() + 1 >= stop_offset:
            cut = bisect.bisect_left(messages, stop_offset, key=Message.offset)
            yield make(ids[:cut], messages[:cut], stop_offset)
            return
        if messages or at_eof:
            yield make(ids, messages, _position(consumer, kafka, topic, partition, messages))
        if at_eof:
            return


def _drop_events(messages: list[Message], ids: list, topic: str, partition: int):
    """Split records from events; a record without a key stays, with id ``b""``."""
    records, record_ids, at_eof = [], [], False
    for message, message_id in zip(messages, ids, strict=True):
        error = message.error() if message_id is None else None
        if error is not None:
            if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                raise permission_denied("Describe", "group", SCAN_GROUP, error.str())
            if is_authorization_error(error):
                raise permission_denied("Read", "topic", topic, error.str())
            if error.code() != KafkaError._PARTITION_EOF:
                raise BrokerError(f"reading {topic}[{partition}] failed: {error.str()}")
            at_eof = True
            continue
        records.append(message)
        record_ids.append(message_id or b"")
    return records, record_ids, at_eof


def _position(consumer, kafka: KafkaConfig, topic: str, partition: int, messages: list[Message]) -> int:
    """Where reading continues: position() is past transaction markers, unlike the last offset + 1."""
    (position,) = consumer.position([TopicPartition(topic, partition)])
    if position.offset >= 0:
        return position.offset
    if messages:
        return messages[-1].offset() + 1
    _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=kafka.timeout_s)
    return end

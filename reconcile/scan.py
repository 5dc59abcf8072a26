"""Reading one output partition with read_committed, in bounded batches.

This is the single place that reads the output topic back: the worker's recovery and ``dedupectl
reconcile`` both use it. The output record's key is its ``messageId`` (the worker writes it so).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from dedupectl.config import KafkaConfig
from dedupectl.errors import BrokerError
from dedupectl.kafka_clients import make_consumer, unreachable

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05


@dataclass(frozen=True)
class OutputBatch:
    """Ids, timestamps and offsets of consecutive committed output records; ``position`` is where reading
    would continue (past any transaction markers)."""

    ids: list[bytes]
    timestamps_ms: list[int]
    offsets: list[int]
    position: int


@dataclass(frozen=True)
class OffsetBounds:
    low: int
    end: int  # the last stable offset: what read_committed can read up to


def output_bounds(kafka: KafkaConfig, topic: str, partition: int) -> OffsetBounds:
    consumer = make_consumer(kafka, **{"group.id": "dedupectl-scan", "isolation.level": "read_committed"})
    try:
        low, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=kafka.timeout_s)
    except KafkaException as error:
        raise unreachable(kafka, str(error)) from error
    finally:
        consumer.close()
    return OffsetBounds(low, end)


class OutputReader:
    """One read_committed consumer reused for many scans: creating a consumer costs connections and
    metadata round trips, which would dominate catching up an idle partition."""

    def __init__(self, kafka: KafkaConfig) -> None:
        self._kafka = kafka
        self._consumer = make_consumer(
            kafka,
            **{
                "group.id": "dedupectl-scan",  # never joined or committed: assign() only
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",  # the start fell behind retention: read what is left
                "fetch.max.bytes": 64 * 1024 * 1024,
                # at the end of a partition the broker holds a fetch this long before answering "no more":
                # a scan wants that answer now (the default 500 ms made each idle partition cost seconds)
                "fetch.wait.max.ms": 20,
            },
        )

    def scan(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        *,
        stop_offset: int | None = None,
        batch_size: int = 10_000,
    ) -> Iterator[OutputBatch]:
        """Yield the committed records of ``topic[partition]`` from ``start_offset`` (-1: the beginning) up
        to the end as it is when reading reaches it, or to ``stop_offset`` (exclusive)."""
        consumer, kafka = self._consumer, self._kafka
        tp = TopicPartition(topic, partition, start_offset if start_offset >= 0 else OFFSET_BEGINNING)
        try:
            consumer.assign([tp])
            yield from _read_until_eof(consumer, kafka, topic, partition, stop_offset, batch_size)
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
            raise unreachable(kafka, str(error)) from error
        finally:
            consumer.unassign()

    def close(self) -> None:
        self._consumer.close()

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


def _read_until_eof(consumer, kafka: KafkaConfig, topic: str, partition: int, stop_offset, batch_size):
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
        ids: list[bytes] = []
        timestamps: list[int] = []
        offsets: list[int] = []
        at_eof = at_stop = False
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise BrokerError(f"reading {topic}[{partition}] failed: {error.str()}")
                at_eof = True
                continue
            if stop_offset is not None and message.offset() >= stop_offset:
                at_stop = True
                break
            ids.append(message.key() or b"")
            timestamps.append(message.timestamp()[1])
            offsets.append(message.offset())
        if at_stop or (stop_offset is not None and offsets and offsets[-1] + 1 >= stop_offset):
            yield OutputBatch(ids, timestamps, offsets, stop_offset)
            return
        if ids or at_eof:
            yield OutputBatch(ids, timestamps, offsets, _position(consumer, kafka, topic, partition, offsets))
        if at_eof:
            return


def _position(consumer, kafka: KafkaConfig, topic: str, partition: int, offsets: list[int]) -> int:
    """Where reading continues: position() is past transaction markers, unlike the last offset + 1."""
    (position,) = consumer.position([TopicPartition(topic, partition)])
    if position.offset >= 0:
        return position.offset
    if offsets:
        return offsets[-1] + 1
    _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=kafka.timeout_s)
    return end

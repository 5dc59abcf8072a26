"""Segment-like sample events for the demo, the tests and the benchmarks.

About 200-byte JSON ``track`` events keyed by ``messageId`` (``ajs-`` + 32 hex, or a UUIDv4). A share of them
are duplicates, as client retries make them: half re-sent right after the original, half long after it.
Optionally some invalid records (no id, empty id, not JSON) that must end in the dead-letter topic.
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from confluent_kafka import Producer

from dedupectl.config import KafkaConfig
from reconcile.kafka import librdkafka_log

_EVENTS = ("Order Completed", "Product Viewed", "Checkout Started", "Signed Up", "Page Viewed")
_TEMPLATE = (
    '{{"messageId":"{id}","type":"track","event":"{event}","userId":"user-{user}",'
    '"timestamp":"2026-11-22T{h:02d}:{m:02d}:{s:02d}.{ms:03d}Z",'
    '"properties":{{"revenue":{revenue}.{cents:02d}}},"context":{{"library":"analytics.js"}}}}'
)
INVALID_KINDS = ("missing-id", "empty-id", "not-json")


@dataclass(frozen=True)
class SampleSpec:
    count: int
    duplicate_ratio: float = 0.006
    invalid_ratio: float = 0.0
    id_style: str = "ajs"  # "ajs" or "uuid"
    seed: int = 7


@dataclass(frozen=True)
class SampleRecord:
    key: bytes | None
    value: bytes
    kind: str  # "new", "duplicate", or one of INVALID_KINDS


def _new_id(rng: random.Random, style: str) -> str:
    if style == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return f"ajs-{rng.getrandbits(128):032x}"


def _event(rng: random.Random, message_id: str) -> bytes:
    return _TEMPLATE.format(
        id=message_id,
        event=rng.choice(_EVENTS),
        user=rng.randrange(1_000_000),
        h=rng.randrange(24),
        m=rng.randrange(60),
        s=rng.randrange(60),
        ms=rng.randrange(1000),
        revenue=rng.randrange(500),
        cents=rng.randrange(100),
    ).encode()


def _invalid(rng: random.Random, kind: str) -> SampleRecord:
    if kind == "missing-id":
        return SampleRecord(None, _event(rng, "").replace(b'"messageId":"",', b""), kind)
    if kind == "empty-id":
        return SampleRecord(None, _event(rng, ""), kind)
    return SampleRecord(None, b"{not json " + bytes(rng.getrandbits(8) for _ in range(16)), kind)


def generate(spec: SampleSpec) -> Iterator[SampleRecord]:
    """``spec.count`` records; deterministic for a given seed."""
    rng = random.Random(spec.seed)
    history: list[tuple[bytes, bytes]] = []
    for _ in range(spec.count):
        roll = rng.random()
        if roll < spec.invalid_ratio:
            yield _invalid(rng, rng.choice(INVALID_KINDS))
        elif history and roll < spec.invalid_ratio + spec.duplicate_ratio:
            # a client retry: right away (the last event again) or long after (any earlier event)
            key, value = history[-1] if rng.random() < 0.5 else history[rng.randrange(len(history))]
            yield SampleRecord(key, value, "duplicate")
        else:
            message_id = _new_id(rng, spec.id_style)
            value = _event(rng, message_id)
            history.append((message_id.encode(), value))
            yield SampleRecord(message_id.encode(), value, "new")


@dataclass(frozen=True)
class SampleReport:
    produced: int
    distinct_ids: int
    duplicates: int
    invalid: int


def sample_destination(record: SampleRecord, keyless_partitions: int | None) -> dict:
    """Where ``record`` goes: keyed by its id; or, with ``keyless_partitions``, without a key, to the partition
    CRC32 (librdkafka's default partitioner) gives its id among that many, so that its id is in its value only
    and its copies still meet in one partition."""
    if keyless_partitions is None:
        return {"key": record.key}
    return {"partition": zlib.crc32(record.key or b"") % keyless_partitions}


def produce_sample(
    kafka: KafkaConfig,
    topic: str,
    spec: SampleSpec,
    *,
    progress: Callable[[int], None] | None = None,
    keyless_partitions: int | None = None,
) -> SampleReport:
    """Produce the sample to ``topic``: keyed by messageId, so one id always lands in one partition (or as
    ``sample_destination`` says with ``keyless_partitions``)."""
    producer = Producer(
        {
            **kafka.client_settings(),
            "logger": librdkafka_log,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "enable.idempotence": True,
        }
    )
    produced = duplicates = invalid = 0
    for record in generate(spec):
        while True:
            try:
                producer.produce(topic, value=record.value, **sample_destination(record, keyless_partitions))
                break
            except BufferError:
                producer.poll(0.05)
        produced += 1
        if record.kind == "duplicate":
            duplicates += 1
        elif record.kind != "new":
            invalid += 1
        if progress is not None and produced % 10_000 == 0:
            producer.poll(0)
            progress(produced)
    remaining = producer.flush(kafka.timeout_s * 4)
    if remaining:
        from dedupectl.errors import BrokerError

        raise BrokerError(f"{remaining} sample records were not delivered to {topic}", "check the broker")
    if progress is not None:
        progress(produced)
    return SampleReport(produced, produced - duplicates - invalid, duplicates, invalid)

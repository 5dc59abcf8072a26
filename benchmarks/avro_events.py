"""The sample events (``dedupectl.sample_events``) as Avro values in the Confluent wire format: the same keys,
so the same partitions, and the same fields, each event's JSON turned into a record of ``SCHEMA``."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import fastavro
from confluent_kafka import Producer

from dedupectl.config import KafkaConfig
from dedupectl.sample_events import SampleSpec, generate, sample_destination

SCHEMA_ID = 1
SCHEMA = {
    "type": "record",
    "name": "Track",
    "namespace": "segment",
    "fields": [
        {"name": "messageId", "type": ["null", "string"], "default": None},
        {"name": "type", "type": "string"},
        {"name": "event", "type": "string"},
        {"name": "userId", "type": "string"},
        {"name": "timestamp", "type": "string"},
        {"name": "properties", "type": {"type": "record", "name": "Properties", "fields": [
            {"name": "revenue", "type": "double"}]}},
        {"name": "context", "type": {"type": "record", "name": "Context", "fields": [
            {"name": "library", "type": "string"}]}},
    ],
}  # fmt: skip


def avro_value(parsed, header: bytes, json_value: bytes) -> bytes:
    """The JSON event as an Avro value in the wire format; a value that is not an event stays as it is (a dead
    letter either way)."""
    try:
        event = json.loads(json_value)
    except ValueError:
        return json_value
    out = io.BytesIO()
    out.write(header)
    fastavro.schemaless_writer(out, parsed, {"messageId": None, **event})
    return out.getvalue()


def produce_avro(
    kafka: KafkaConfig, topic: str, spec: SampleSpec, schema_path: Path, keyless_partitions: int | None = None
) -> int:
    """Produce ``spec``'s events as Avro to ``topic``, writing the writer schema to ``schema_path``; each where
    ``produce_sample`` puts its JSON (``sample_destination``)."""
    schema_path.write_text(json.dumps(SCHEMA))
    parsed, header = fastavro.parse_schema(SCHEMA), struct.pack(">bI", 0, SCHEMA_ID)
    producer = Producer(
        {
            **kafka.client_settings(),
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "enable.idempotence": True,
        }
    )
    produced = 0
    for record in generate(spec):
        value = avro_value(parsed, header, record.value)
        while True:
            try:
                producer.produce(topic, value=value, **sample_destination(record, keyless_partitions))
                break
            except BufferError:
                producer.poll(0.05)
        produced += 1
    if producer.flush(kafka.timeout_s * 4):
        raise SystemExit(f"not every Avro event reached {topic}")
    return produced

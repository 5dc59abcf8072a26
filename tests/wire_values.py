"""Avro and Protobuf values in the Confluent wire format for the tests, and their writer schemas as the
files ``--schema-file`` takes (an .avsc, a FileDescriptorSet built with protobuf's own descriptor classes)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

AVRO_SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "acme",
    "fields": [
        {"name": "messageId", "type": ["null", "string"], "default": None},
        {"name": "event", "type": "string"},
        {
            "name": "context",
            "type": {"type": "record", "name": "Context", "fields": [{"name": "messageId", "type": "string"}]},
        },
        {"name": "rawId", "type": ["null", "bytes"], "default": None},
        {"name": "count", "type": "long", "default": 0},
    ],
}
PARSED_AVRO = fastavro.parse_schema(AVRO_SCHEMA)


def avro_event(message_id: str | None, event: str = "Signed Up", context_id: str = "", **fields) -> dict:
    return {"messageId": message_id, "event": event, "context": {"messageId": context_id}, **fields}


def avro_value(schema_id: int, record: dict) -> bytes:
    out = io.BytesIO()
    out.write(SchemaId("AVRO", schema_id).id_to_bytes())
    fastavro.schemaless_writer(out, PARSED_AVRO, record)
    return out.getvalue()


def write_avsc(directory: Path) -> Path:
    path = directory / "event.avsc"
    path.write_text(json.dumps(AVRO_SCHEMA))
    return path


def proto_file() -> descriptor_pb2.FileDescriptorProto:
    """acme/event.proto: ``message Event { string message_id = 1; string event = 2; Context context = 3;
    bytes raw_id = 4; int64 count = 5; message Context { string message_id = 1; } }`` (proto3)."""
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="acme/event.proto", package="acme", syntax="proto3")
    event = proto.message_type.add(name="Event")
    context = event.nested_type.add(name="Context")
    context.field.add(name="message_id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, json_name="messageId")
    for name, number, kind, json_name in (
        ("message_id", 1, F.TYPE_STRING, "messageId"),
        ("event", 2, F.TYPE_STRING, "event"),
        ("raw_id", 4, F.TYPE_BYTES, "rawId"),
        ("count", 5, F.TYPE_INT64, "count"),
    ):
        event.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL, json_name=json_name)
    event.field.add(
        name="context",
        number=3,
        type=F.TYPE_MESSAGE,
        type_name=".acme.Event.Context",
        label=F.LABEL_OPTIONAL,
        json_name="context",
    )
    return proto


def write_descriptor_set(directory: Path) -> Path:
    path = directory / "event.desc"
    path.write_bytes(descriptor_pb2.FileDescriptorSet(file=[proto_file()]).SerializeToString())
    return path


_pool = descriptor_pool.DescriptorPool()
_pool.Add(proto_file())
ProtoEvent = GetMessageClass(_pool.FindMessageTypeByName("acme.Event"))


def proto_value(schema_id: int, **fields) -> bytes:
    """An ``acme.Event`` (message indexes [0]); ``context_id`` sets context.message_id."""
    context_id = fields.pop("context_id", None)
    message = ProtoEvent(**fields)
    if context_id is not None:
        message.context.message_id = context_id
    return SchemaId("PROTOBUF", schema_id, message_indexes=[0]).id_to_bytes() + message.SerializeToString()

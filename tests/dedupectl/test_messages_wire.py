"""Ids in Avro and Protobuf values (Confluent wire format), with writer schemas from files: the same order as
for JSON (header, else key, else the field), every value's header checked whatever holds the id, its payload
read as far as the id when the id is in it, and a reason for each kind of unusable record."""

from __future__ import annotations

import pytest
from wire_values import avro_event, avro_value, proto_value, write_avsc, write_descriptor_set

from dedupectl.errors import ConfigError
from dedupectl.messages import DeadLetter, DeadLetterReason, extract_id, extract_ids
from dedupectl.schemas import avro_prefix, decoder_for, schema_source


@pytest.fixture
def avro(tmp_path):
    return schema_source("avro", {7: str(write_avsc(tmp_path))}, None, None, 1.0)


@pytest.fixture
def protobuf(tmp_path):
    return schema_source("protobuf", {3: str(write_descriptor_set(tmp_path))}, None, None, 1.0)


def reason_of(value, source, id_field="messageId", key=None, **kwargs):
    with pytest.raises(DeadLetter) as caught:
        extract_id(key, value, source.value_format, id_field, schemas=source, **kwargs)
    return caught.value.reason


def test_avro_ids_from_the_field_a_pointer_or_bytes(avro):
    assert extract_id(None, avro_value(7, avro_event("m1")), "avro", "messageId", schemas=avro) == b"m1"
    nested = avro_value(7, avro_event(None, context_id="c1"))
    assert extract_id(None, nested, "avro", "/context/messageId", schemas=avro) == b"c1"
    raw = avro_value(7, avro_event(None, rawId=b"\x00\x01"))
    assert extract_id(None, raw, "avro", "rawId", schemas=avro) == b"\x00\x01"


def test_protobuf_ids_by_field_name_json_name_or_pointer(protobuf):
    value = proto_value(3, message_id="p1", context_id="c2")
    assert extract_id(None, value, "protobuf", "message_id", schemas=protobuf) == b"p1"
    assert extract_id(None, value, "protobuf", "messageId", schemas=protobuf) == b"p1"
    assert extract_id(None, value, "protobuf", "/context/messageId", schemas=protobuf) == b"c2"


def test_header_then_key_then_field(avro):
    value = avro_value(7, avro_event("field"))
    assert extract_id(b"key", value, "avro", "messageId", schemas=avro) == b"key"
    headers = [("ce_id", b"header")]
    assert extract_id(b"key", value, "avro", "messageId", headers, "ce_id", schemas=avro) == b"header"


@pytest.mark.parametrize(
    ("value", "id_field", "reason"),
    [
        (b"{not avro", "messageId", DeadLetterReason.UNDECODABLE),
        (None, "messageId", DeadLetterReason.UNDECODABLE),
        (b"\x00\x00\x00", "messageId", DeadLetterReason.UNDECODABLE),
        (avro_value(7, avro_event("m"))[:6], "messageId", DeadLetterReason.UNDECODABLE),  # cut short in the id
        (avro_value(7, avro_event("m", context_id="c"))[:-3], "/context/messageId", DeadLetterReason.UNDECODABLE),
        (avro_value(7, avro_event("m"))[:5] + b"\x04", "messageId", DeadLetterReason.UNDECODABLE),  # no such branch
        (avro_value(99, avro_event("m")), "messageId", DeadLetterReason.UNKNOWN_SCHEMA),
        (avro_value(7, avro_event(None)), "messageId", DeadLetterReason.MISSING_ID),
        (avro_value(7, avro_event("m")), "/nope/messageId", DeadLetterReason.MISSING_ID),
        (avro_value(7, avro_event("  ")), "messageId", DeadLetterReason.EMPTY_ID),
        (avro_value(7, avro_event("m", count=3)), "count", DeadLetterReason.INVALID_ID),
        (avro_value(7, avro_event("m")), "context", DeadLetterReason.INVALID_ID),
        (avro_value(7, avro_event("x" * 300)), "messageId", DeadLetterReason.ID_TOO_LONG),
    ],
)
def test_unusable_avro_records_name_their_reason(avro, value, id_field, reason):
    assert reason_of(value, avro, id_field) == reason


@pytest.mark.parametrize(
    ("value", "id_field", "reason"),
    [
        (proto_value(3, message_id="p") + b"\xff", "message_id", DeadLetterReason.UNDECODABLE),
        (proto_value(3, message_id="p")[:5] + b"\x06\x02", "message_id", DeadLetterReason.UNDECODABLE),
        (proto_value(4, message_id="p"), "message_id", DeadLetterReason.UNKNOWN_SCHEMA),
        (proto_value(3, message_id="p"), "/context/messageId", DeadLetterReason.MISSING_ID),
        (proto_value(3, message_id="p"), "nope", DeadLetterReason.MISSING_ID),
        (proto_value(3, event="e"), "message_id", DeadLetterReason.EMPTY_ID),  # proto3: unset is ""
        (proto_value(3, count=4), "count", DeadLetterReason.INVALID_ID),
    ],
)
def test_unusable_protobuf_records_name_their_reason(protobuf, value, id_field, reason):
    assert reason_of(value, protobuf, id_field) == reason


def test_a_value_not_in_the_wire_format_is_dead_even_with_a_key_or_header(avro):
    assert reason_of(b"junk", avro, key=b"k") == DeadLetterReason.UNDECODABLE
    header = reason_of(b"junk", avro, key=b"k", headers=[("ce_id", b"h")], id_header="ce_id")
    assert header == DeadLetterReason.UNDECODABLE
    assert reason_of(avro_value(99, avro_event("m")), avro, key=b"k") == DeadLetterReason.UNKNOWN_SCHEMA


def test_a_payload_is_read_only_as_far_as_the_id(avro):
    whole = avro_value(7, avro_event("m", context_id="c"))
    # with the id in the key or a header, the payload is not read: it is passed on as its bytes are
    assert extract_id(b"k", whole[:5] + b"\xff\xff", "avro", "messageId", schemas=avro) == b"k"
    headers = [("ce_id", b"h")]
    assert extract_id(None, whole[:5], "avro", "messageId", headers, "ce_id", schemas=avro) == b"h"
    # with the id in the value, the fields after it are not read
    assert extract_id(None, whole[:-3], "avro", "messageId", schemas=avro) == b"m"
    assert extract_id(None, whole + b"\x00", "avro", "/context/messageId", schemas=avro) == b"c"


def test_a_writer_schema_is_cut_after_the_ids_field_in_each_inline_record_on_the_path():
    inner = {
        "type": "record",
        "name": "Inner",
        "fields": [{"name": "a", "type": "int"}, {"name": "id", "type": "string"}, {"name": "z", "type": "int"}],
    }
    schema = {
        "type": "record",
        "name": "Outer",
        "fields": [{"name": "x", "type": "int"}, {"name": "in", "type": ["null", inner]}, {"name": "y", "type": "int"}],
    }
    cut = avro_prefix(schema, ("in", "id"))
    assert [field["name"] for field in cut["fields"]] == ["x", "in"]
    assert cut["fields"][1]["type"][0] == "null"
    assert [field["name"] for field in cut["fields"][1]["type"][1]["fields"]] == ["a", "id"]
    assert avro_prefix(schema, ("nope",))["fields"] == []
    assert avro_prefix({"type": "map", "values": "string"}, ("k",)) == {"type": "map", "values": "string"}


def test_a_batch_gives_the_same_answers_as_one_record_at_a_time(avro):
    values = [
        avro_value(7, avro_event("a")),
        b"junk",
        avro_value(7, avro_event(None)),
        avro_value(8, avro_event("b")),
        avro_value(7, avro_event("a")),
    ]
    keys = [None, b"k", None, None, b"key"]
    ids, dead = extract_ids(keys, values, "avro", "messageId", schemas=avro)
    assert ids == [b"a", None, None, None, b"key"]
    assert [(index, letter.reason) for index, letter in dead] == [
        (1, DeadLetterReason.UNDECODABLE),
        (2, DeadLetterReason.MISSING_ID),
        (3, DeadLetterReason.UNKNOWN_SCHEMA),
    ]


@pytest.mark.parametrize("id_field", ["messageId", "/context/messageId", "rawId", "count"])
def test_a_batch_of_ids_in_avro_values_gives_the_same_answers_as_one_record_at_a_time(avro, id_field):
    whole = avro_value(7, avro_event("m", context_id="c"))
    values = [
        avro_value(7, avro_event("a", context_id="ca", rawId=b"r")),
        b"{not avro",
        None,
        b"\x00\x00\x00",
        whole[:6],
        whole[:-3],
        whole[:5] + b"\x04",
        b"\x01" + whole[1:],
        avro_value(99, avro_event("m")),
        avro_value(7, avro_event(None)),
        avro_value(7, avro_event("  ", context_id=" ")),
        avro_value(7, avro_event("\u00a0", context_id="\u00a0")),
        avro_value(7, avro_event("x" * 300, context_id="y" * 300)),
        avro_value(7, avro_event("é" * 200, context_id="é" * 200)),
        avro_value(7, avro_event("b", context_id="cb", count=5)),
    ]
    one_at_a_time = []
    for value in values:
        try:
            one_at_a_time.append(extract_id(None, value, "avro", id_field, schemas=avro))
        except DeadLetter as letter:
            one_at_a_time.append(letter.reason)
    ids, dead = extract_ids([None] * len(values), values, "avro", id_field, schemas=avro)
    reasons = dict((index, letter.reason) for index, letter in dead)
    assert [reasons.get(index, found) for index, found in enumerate(ids)] == one_at_a_time
    first = {"messageId": b"a", "/context/messageId": b"ca", "rawId": b"r", "count": DeadLetterReason.INVALID_ID}
    assert one_at_a_time[0] == first[id_field]


def test_schema_files_are_parsed_once_per_process(avro):
    assert decoder_for(avro) is decoder_for(avro)


@pytest.mark.parametrize(
    ("value_format", "content", "message"),
    [
        ("avro", b"{not json", "is not an Avro schema"),
        ("avro", b'{"type": "no-such-type"}', "is not an Avro schema"),
        ("protobuf", b"\xff\xff not a set", "is not a Protobuf FileDescriptorSet"),
        ("protobuf", b"", "is not a Protobuf FileDescriptorSet"),
    ],
)
def test_a_schema_file_that_does_not_parse_is_refused(tmp_path, value_format, content, message):
    path = tmp_path / "schema"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        schema_source(value_format, {1: str(path)}, None, None, 1.0)


def test_a_descriptor_set_without_a_message_is_refused(tmp_path):
    from google.protobuf import descriptor_pb2

    path = tmp_path / "empty.desc"
    empty = descriptor_pb2.FileDescriptorProto(name="empty.proto", syntax="proto3")
    path.write_bytes(descriptor_pb2.FileDescriptorSet(file=[empty]).SerializeToString())
    with pytest.raises(ConfigError, match="declares no message"):
        schema_source("protobuf", {1: str(path)}, None, None, 1.0)


def test_schema_formats_need_a_schema_source_and_others_refuse_one(tmp_path):
    with pytest.raises(ConfigError, match="needs writer schemas"):
        schema_source("avro", {}, None, None, 1.0)
    with pytest.raises(ConfigError, match="value_format is 'json'"):
        schema_source("json", {1: str(write_avsc(tmp_path))}, None, None, 1.0)
    assert schema_source("json", None, None, None, 1.0) is None

"""Finding a record's ``messageId``, or the reason it has none: the one reading of ids that the worker,
``trace`` and the Spark jobs share.

Where the id is, in this order:
- ``id_header`` set: the value of that record header, and nothing else (a record without it is a dead
  letter: falling back to the key would mix two kinds of id, and a false duplicate is a silent loss);
- else the record key;
- else, for a record without a key, the field ``id_field`` (``messageId`` by default) of the value: a
  top-level name, or a JSON Pointer (RFC 6901, ``/context/messageId``) into nested objects and arrays (JSON),
  records, maps and arrays (Avro), or messages and repeated fields (Protobuf, by field name or JSON name).
With ``value_format = "json"`` every value must be a JSON object (RFC 8259, UTF-8), and with ``"avro"`` or
``"protobuf"`` every value must be in the Confluent wire format with a known schema id, whatever holds the id,
and decode with its writer schema as far as the id when the id is in it (``dedupectl.schemas``): anything else
is a dead letter, never dropped silently and never blocking the partition. In Avro and Protobuf a string or
bytes field is an id; a null, an unset field with presence, or an absent field is a missing id; any other type
an invalid one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum

import simdjson  # validates an event without building Python objects: the cheapest check per record

from dedupectl.schemas import (
    MISSING,
    SCHEMA_FORMATS,
    SchemaSource,
    UndecodableValue,
    UnknownSchema,
    decoder_for,
    field_at,
    pointer_tokens,
)
from store.codec import MAX_ID_BYTES

_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


class DeadLetterReason(StrEnum):
    UNPARSEABLE = "unparseable-value"
    UNDECODABLE = "undecodable-value"  # avro/protobuf: not the wire format, or not its writer schema's
    UNKNOWN_SCHEMA = "unknown-schema"  # avro/protobuf: no writer schema for the value's schema id
    NOT_AN_OBJECT = "value-not-a-json-object"
    MISSING_ID = "missing-id"
    EMPTY_ID = "empty-id"
    INVALID_ID = "invalid-id"
    ID_TOO_LONG = "id-too-long"
    MISROUTED = "misrouted"  # in another partition than the topic's partitioner gives its key (--misrouted)


Headers = Iterable[tuple[str, bytes | None]] | None  # a record's headers, as the Kafka clients give them


def id_field_problem(id_field: str) -> str | None:
    """Why ``id_field`` names no field (None when it does): empty, or a JSON Pointer with a bad escape."""
    if not id_field:
        return "is empty: give a field name (messageId) or a JSON Pointer (/context/messageId)"
    if id_field.startswith("/") and re.search(r"~(?![01])", id_field):
        return f"{id_field!r} is not a JSON Pointer: '~' must be followed by 0 ('~') or 1 ('/') (RFC 6901)"
    return None


class DeadLetter(Exception):
    """Raised by ``extract_id``: carries the reason and a short detail for the headers."""

    def __init__(self, reason: DeadLetterReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _check(message_id: bytes) -> bytes:
    if len(message_id) > MAX_ID_BYTES:
        raise DeadLetter(DeadLetterReason.ID_TOO_LONG, f"messageId is {len(message_id)} bytes, over {MAX_ID_BYTES}")
    return message_id


def extract_id(
    key: bytes | None,
    value: bytes | None,
    value_format: str,
    id_field: str,
    headers: Headers = None,
    id_header: str | None = None,
    schemas: SchemaSource | None = None,
) -> bytes:
    """The record's id, or ``DeadLetter`` with the reason. ``schemas``: where writer schemas come from, needed
    with ``value_format`` avro or protobuf."""
    if value_format in SCHEMA_FORMATS:
        return _schema_id(_decoder(schemas), key, value, id_field, pointer_tokens(id_field), headers, id_header)
    return _extract_id(simdjson.Parser(), key, value, value_format, id_field, _lookup(id_field), headers, id_header)


def _decoder(schemas: SchemaSource | None):
    if schemas is None:  # a caller's mistake: config refuses avro/protobuf without a schema source
        raise ValueError("value_format avro/protobuf needs a SchemaSource")
    return decoder_for(schemas)


def _schema_id(decoder, key, value, id_field: str, tokens, headers=None, id_header=None) -> bytes:
    """The id of a record whose value is in the Confluent wire format. Its header is checked whatever holds the
    id, as a JSON value must be an object; its payload is read only when the id is in it, and then only as far
    as the id (``dedupectl.schemas``)."""
    try:
        if id_header is not None or key:
            decoder.check(value)
            record = None
        else:
            record = decoder.decode(value, tokens)
    except UndecodableValue as error:
        raise DeadLetter(DeadLetterReason.UNDECODABLE, str(error)) from None
    except UnknownSchema as error:
        raise DeadLetter(DeadLetterReason.UNKNOWN_SCHEMA, str(error)) from None
    if id_header is not None:
        return _header_id(headers, id_header)
    if key:
        return _check(key)
    field = field_at(record, tokens)
    if field is MISSING:
        raise DeadLetter(DeadLetterReason.MISSING_ID, f"no record key and no {id_field!r} field")
    if isinstance(field, str):
        field = field.encode()
    elif not isinstance(field, bytes):
        kind = type(field).__name__
        raise DeadLetter(DeadLetterReason.INVALID_ID, f"{id_field!r} is of type {kind}, not a string or bytes")
    if not field.strip():
        raise DeadLetter(DeadLetterReason.EMPTY_ID, f"{id_field!r} is empty")
    return _check(field)


def _lookup(id_field: str):
    """How ``id_field`` is found in a JSON object: chosen once per batch, so a plain name costs one lookup."""
    return _at_pointer if id_field.startswith("/") else simdjson.Object.get


def _extract_id(
    parser: simdjson.Parser, key, value, value_format: str, id_field: str, lookup, headers=None, id_header=None
) -> bytes:
    if value_format == "json":
        if value is None:
            raise DeadLetter(DeadLetterReason.UNPARSEABLE, "value is null")
        try:
            document = parser.parse(value)
        except ValueError as error:  # UnicodeDecodeError included
            raise DeadLetter(DeadLetterReason.UNPARSEABLE, f"not JSON: {_parse_error(error)}") from None
        if not isinstance(document, simdjson.Object):
            kind = "array" if isinstance(document, simdjson.Array) else _JSON_TYPES.get(type(document), "null")
            del document  # (also below) a parser is reused only once nothing refers to its last document
            raise DeadLetter(DeadLetterReason.NOT_AN_OBJECT, f"JSON {kind}, not an object")
        if id_header is None and not key:
            field = lookup(document, id_field)
            del document
            if field is None:
                raise DeadLetter(DeadLetterReason.MISSING_ID, f"no record key and no {id_field!r} field")
            if not isinstance(field, str):
                kind = "array" if isinstance(field, simdjson.Array) else "object"
                kind = _JSON_TYPES.get(type(field), kind)
                del field
                raise DeadLetter(DeadLetterReason.INVALID_ID, f"{id_field!r} is a JSON {kind}, not a string")
            if not field.strip():
                raise DeadLetter(DeadLetterReason.EMPTY_ID, f"{id_field!r} is empty")
            return _check(field.encode())
        del document
    if id_header is not None:
        return _header_id(headers, id_header)
    if not key:
        raise DeadLetter(DeadLetterReason.MISSING_ID, "no record key (value_format=raw reads the id from the key)")
    return _check(key)


def _at_pointer(document, pointer: str):
    try:
        return document.at_pointer(pointer)
    except (KeyError, IndexError, ValueError, TypeError):  # no such field or index, or a scalar on the way
        return None


def _header_id(headers: Headers, name: str) -> bytes:
    values = {bytes(value) for header, value in headers or () if header == name and value is not None}
    if not values:
        raise DeadLetter(DeadLetterReason.MISSING_ID, f"no {name!r} header")
    if len(values) > 1:  # which copy is the id is anyone's guess: refuse rather than pick
        raise DeadLetter(DeadLetterReason.INVALID_ID, f"{len(values)} {name!r} headers with different values")
    (found,) = values
    if not found.strip():
        raise DeadLetter(DeadLetterReason.EMPTY_ID, f"the {name!r} header is empty")
    return _check(found)


def _parse_error(error: ValueError) -> str:
    """simdjson's message without its boilerplate: "TAPE_ERROR: The JSON document has an improper structure:
    missing..." becomes "The JSON document has an improper structure"."""
    code, _, rest = str(error).partition(": ")
    return rest.split(":", 1)[0] if code.endswith("_ERROR") and rest else code


def extract_ids(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    value_format: str,
    id_field: str,
    headers: Sequence[Headers] | None = None,
    id_header: str | None = None,
    schemas: SchemaSource | None = None,
) -> tuple[list[bytes | None], list[tuple[int, DeadLetter]]]:
    """``extract_id`` over a batch: each record's id (``None`` for a dead letter) and the dead letters by
    index. The usual record (keyed, or carrying its ``id_header``; its value a JSON object) costs one
    validation in a tight loop; only the others take ``extract_id``'s full path, so a few bad records do not
    slow their batch down. ``headers``: each record's, needed only with ``id_header``; ``schemas``: with
    ``value_format`` avro or protobuf, where writer schemas come from."""
    if value_format in SCHEMA_FORMATS:
        return _schema_ids(_decoder(schemas), keys, values, id_field, headers, id_header)
    parser, lookup = simdjson.Parser(), _lookup(id_field)
    if id_header is None:
        candidates = keys
    else:
        candidates = [_plain_header(record_headers, id_header) for record_headers in headers or [None] * len(keys)]
    unusual = []
    if not all(candidates) or max(map(len, candidates), default=0) > MAX_ID_BYTES:  # C-level: the usual batch passes
        unusual = [index for index, found in enumerate(candidates) if not found or len(found) > MAX_ID_BYTES]
    if value_format == "json":
        not_objects = _not_objects(parser, values)
        unusual = sorted({*unusual, *not_objects}) if unusual and not_objects else unusual or not_objects
    ids: list[bytes | None] = list(candidates)
    dead: list[tuple[int, DeadLetter]] = []
    for index in unusual:
        try:
            if id_header is None:
                ids[index] = _extract_id(parser, keys[index], values[index], value_format, id_field, lookup)
            else:
                record_headers = None if headers is None else headers[index]
                ids[index] = _extract_id(
                    parser, keys[index], values[index], value_format, id_field, lookup, record_headers, id_header
                )
        except DeadLetter as reason:
            ids[index] = None
            dead.append((index, reason.with_traceback(None)))  # its frames would pin the parser's document
    return ids, dead


def _schema_ids(decoder, keys, values, id_field: str, headers, id_header):
    """``extract_ids`` for values in the wire format: every value is checked. Where every id is in an Avro
    value, the fields are read in one loop (``WireDecoder.avro_fields``) and a plain string id is taken as it
    is; any other record takes ``extract_id``'s full path."""
    tokens, ids, dead = pointer_tokens(id_field), [], []
    every_headers = headers if headers is not None else [None] * len(keys)
    plain = [None] * len(keys)
    if id_header is None and not any(keys):
        plain = decoder.avro_fields(values, tokens)
    for index, (key, value, record_headers, field) in enumerate(zip(keys, values, every_headers, plain, strict=True)):
        if type(field) is str and field.strip():
            found = field.encode()
            if len(found) <= MAX_ID_BYTES:
                ids.append(found)
                continue
        try:
            ids.append(_schema_id(decoder, key, value, id_field, tokens, record_headers, id_header))
        except DeadLetter as reason:
            ids.append(None)
            dead.append((index, reason.with_traceback(None)))
    return ids, dead


def _plain_header(headers: Headers, name: str) -> bytes | None:
    """The header's value when it is the only one of its name and not blank; else None (the full path says why)."""
    found = None
    for header, value in headers or ():
        if header == name:
            if found is not None or not value or not value.strip():
                return None
            found = bytes(value)
    return found


def _not_objects(parser: simdjson.Parser, values: Sequence[bytes | None]) -> list[int]:
    """The indices of values that are not JSON objects (or not JSON at all)."""
    parse, json_object = parser.parse, simdjson.Object
    found = []
    for index, value in enumerate(values):
        try:
            # the document is dropped at once: a parser is reused only once nothing refers to its last one
            if type(parse(value)) is not json_object:
                found.append(index)
        except (ValueError, TypeError):
            found.append(index)
    return found

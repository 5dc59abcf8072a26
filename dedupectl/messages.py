"""Finding a record's ``messageId``, or the reason it has none.

The id is the record key; a record without a key falls back to the JSON field (``messageId`` by default).
With ``value_format = "json"`` every value must be a JSON object (RFC 8259, UTF-8): anything else is a dead
letter, never dropped silently and never blocking the partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import simdjson  # validates an event without building Python objects: the cheapest check per record

from store.codec import MAX_ID_BYTES

_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


class DeadLetterReason(StrEnum):
    UNPARSEABLE = "unparseable-value"
    NOT_AN_OBJECT = "value-not-a-json-object"
    MISSING_ID = "missing-id"
    EMPTY_ID = "empty-id"
    INVALID_ID = "invalid-id"
    ID_TOO_LONG = "id-too-long"


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


def extract_id(key: bytes | None, value: bytes | None, value_format: str, id_field: str) -> bytes:
    """The record's id, or ``DeadLetter`` with the reason."""
    return _extract_id(simdjson.Parser(), key, value, value_format, id_field)


def _extract_id(parser: simdjson.Parser, key, value, value_format: str, id_field: str) -> bytes:
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
        if key:
            return _check(key)
        field = document.get(id_field)
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
    if not key:
        raise DeadLetter(DeadLetterReason.MISSING_ID, "no record key (value_format=raw reads the id from the key)")
    return _check(key)


def _parse_error(error: ValueError) -> str:
    """simdjson's message without its boilerplate: "TAPE_ERROR: The JSON document has an improper structure:
    missing..." becomes "The JSON document has an improper structure"."""
    code, _, rest = str(error).partition(": ")
    return rest.split(":", 1)[0] if code.endswith("_ERROR") and rest else code


def extract_ids(
    keys: Sequence[bytes | None], values: Sequence[bytes | None], value_format: str, id_field: str
) -> tuple[list[bytes | None], list[tuple[int, DeadLetter]]]:
    """``extract_id`` over a batch: each record's id (``None`` for a dead letter) and the dead letters by
    index. The usual record (keyed, its value a JSON object) costs one validation in a tight loop; only the
    others take ``extract_id``'s full path, so a few bad records do not slow their batch down."""
    parser = simdjson.Parser()
    unusual = []
    if not all(keys) or max(map(len, keys), default=0) > MAX_ID_BYTES:  # C-level: the usual batch passes
        unusual = [index for index, key in enumerate(keys) if not key or len(key) > MAX_ID_BYTES]
    if value_format == "json":
        not_objects = _not_objects(parser, values)
        unusual = sorted({*unusual, *not_objects}) if unusual and not_objects else unusual or not_objects
    ids: list[bytes | None] = list(keys)
    dead: list[tuple[int, DeadLetter]] = []
    for index in unusual:
        try:
            ids[index] = _extract_id(parser, keys[index], values[index], value_format, id_field)
        except DeadLetter as reason:
            ids[index] = None
            dead.append((index, reason.with_traceback(None)))  # its frames would pin the parser's document
    return ids, dead


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

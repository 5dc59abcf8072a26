"""Finding a record's ``messageId``, or the reason it has none.

The id is the record key; a record without a key falls back to the JSON field (``messageId`` by default).
With ``value_format = "json"`` every value must be a JSON object: anything else is a dead letter, never
dropped silently and never blocking the partition.
"""

from __future__ import annotations

from enum import StrEnum

import orjson  # 4-5x faster than json.loads on ~200-byte events: the worker parses every value

from store.codec import MAX_ID_BYTES


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
    if value_format == "json":
        if value is None:
            raise DeadLetter(DeadLetterReason.UNPARSEABLE, "value is null")
        try:
            document = orjson.loads(value)
        except orjson.JSONDecodeError as error:
            raise DeadLetter(DeadLetterReason.UNPARSEABLE, f"not JSON: {error}") from None
        if not isinstance(document, dict):
            raise DeadLetter(DeadLetterReason.NOT_AN_OBJECT, f"JSON {type(document).__name__}, not an object")
        if key:
            return _check(key)
        if id_field not in document or document[id_field] is None:
            raise DeadLetter(DeadLetterReason.MISSING_ID, f"no record key and no {id_field!r} field")
        field = document[id_field]
        if not isinstance(field, str):
            raise DeadLetter(DeadLetterReason.INVALID_ID, f"{id_field!r} is a {type(field).__name__}, not a string")
        if not field.strip():
            raise DeadLetter(DeadLetterReason.EMPTY_ID, f"{id_field!r} is empty")
        return _check(field.encode())
    if not key:
        raise DeadLetter(DeadLetterReason.MISSING_ID, "no record key (value_format=raw reads the id from the key)")
    return _check(key)

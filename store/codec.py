"""Byte layout of the dedup store (schema version 1).

Three column families, written together in one ``WriteBatch`` so a record never exists in one without the
other:

``ids``   key   messageId, raw bytes (1..MAX_ID_BYTES)
          value ``>QQ``  sequence number (u64) | record timestamp, ms since the epoch (u64)
``seq``   key   ``>Q``   sequence number, fixed-width big-endian so byte order is numeric order
                         (the seed keeps decimal strings, which sort "10" before "9")
          value messageId
``meta``  key ``identity`` value JSON ``{"schema_version", "topic", "partition", "created_ms"}``, written once
          key ``state``    value ``>QQqq``  next sequence | first live sequence (the aging seek hint) |
                           next input offset covered | next output offset covered (-1: none yet)

Offsets follow Kafka's commit convention: the *next* offset to read, so a fresh store holds -1.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

SCHEMA_VERSION = 1
MAX_ID_BYTES = 256

CF_IDS = "ids"
CF_SEQ = "seq"
CF_META = "meta"
COLUMN_FAMILIES = (CF_IDS, CF_SEQ, CF_META)

META_IDENTITY = b"identity"
META_STATE = b"state"

_ID_VALUE = struct.Struct(">QQ")
_SEQ_KEY = struct.Struct(">Q")
_STATE = struct.Struct(">QQqq")


@dataclass(frozen=True)
class StoreIdentity:
    topic: str
    partition: int
    schema_version: int = SCHEMA_VERSION
    created_ms: int = 0


@dataclass(frozen=True)
class StoreState:
    next_seq: int = 0
    first_live_seq: int = 0
    input_offset: int = -1
    output_offset: int = -1


def encode_id_value(seq: int, timestamp_ms: int) -> bytes:
    return _ID_VALUE.pack(seq, max(timestamp_ms, 0))


def decode_id_value(value: bytes) -> tuple[int, int]:
    """Return ``(seq, timestamp_ms)``."""
    return _ID_VALUE.unpack(value)


def encode_seq(seq: int) -> bytes:
    return _SEQ_KEY.pack(seq)


def decode_seq(key: bytes) -> int:
    return _SEQ_KEY.unpack(key)[0]


def encode_state(state: StoreState) -> bytes:
    return _STATE.pack(state.next_seq, state.first_live_seq, state.input_offset, state.output_offset)


def decode_state(value: bytes) -> StoreState:
    return StoreState(*_STATE.unpack(value))


def encode_identity(identity: StoreIdentity) -> bytes:
    return json.dumps(
        {
            "schema_version": identity.schema_version,
            "topic": identity.topic,
            "partition": identity.partition,
            "created_ms": identity.created_ms,
        },
        sort_keys=True,
    ).encode()


def decode_identity(value: bytes) -> StoreIdentity:
    raw = json.loads(value)
    return StoreIdentity(
        topic=raw["topic"],
        partition=int(raw["partition"]),
        schema_version=int(raw["schema_version"]),
        created_ms=int(raw.get("created_ms", 0)),
    )

"""Byte layout of the dedup store (schema version 7).

Every id is stored exactly once (bytes per id: docs/benchmarks.md). The ids in generation families, plus
two more families, always written together in one ``WriteBatch``:

``ids.<first sequence number, 20 digits>``  one family per generation (``store.generations``): the ids
           recorded under the numbers from its first to the next generation's first; aging drops a family
           whole once the cut has passed its last number
           key    packed id: ``0xA0 0x10`` + 16 bytes  for ``ajs-`` + 32 lowercase hex digits (the prefix is
                                                    "ajs-" read as hex with j, s, - as 0, 1, 0: a whole batch
                                                    packs with one unhexlify)
                             ``0x02`` + 16 bytes       for a canonical lowercase UUID (8-4-4-4-12)
                             ``0x03`` + the raw bytes, for any other id
           value  the id's sequence number, big-endian, as few bytes as the batch's largest needs
                  (1 byte up to 255, 2 up to 65,535, ...; leading zeros are allowed); in a generation with
                  sealed arrays, an empty value marks an id of theirs forgotten (``forget_many``)
           (a worker's sealed generations keep their ``ajs-`` and UUID ids in sealed arrays, one file per
           prefix beside the database, ``store.generation_arrays``, and not in the family, but for ids put
           back or forgotten since)
``times``  key    ``>Q`` first sequence number of a batch (fixed-width big-endian: byte order is numeric
                  order; decimal strings would sort "10" before "9")
           value  ``>Bq`` delta width (2, 4 or 8; + 0x80 when digests end the value, + 0x40 when output
                  offsets follow the deltas) | first timestamp (ms), [``>I`` count, when either flag is set,]
                  then the other timestamps as big-endian deltas from their predecessor (publication order
                  keeps deltas small), then the output offset each id was published at: ``>qB``
                  first offset | delta width (0: consecutive offsets, nothing follows; else 1, 2, 4 or 8)
                  and the other offsets' unsigned deltas; then the batch's digests: for each 512
                  ids in sequence order, 16 bytes of BLAKE2b-128 of their ``ids`` keys and lengths
                  (``batch_digests``). Reconcile compares a stretch of the output with the store by these
                  digests instead of looking up every id (``reconcile.lookup``); a batch that lost ids
                  (``forget_many``) loses its digests. The offsets say exactly which output offset the aging
                  cut stands at (every record before it is older than the window) and where an id the store
                  lost belongs (``Ledger.output_offsets``).
``meta``   key ``identity`` value JSON ``{"schema_version", "topic", "partition", "created_ms"}``, written once
           key ``state``    value ``>QQqq``  next sequence | first live sequence | next input offset covered |
                            next output offset covered (-1: none yet)
           key ``refused-gap``    value JSON ``{"kind", "covered", "low", "end", "found_ms"}``: the output gap the
                            worker refused the partition for (see Output gaps); absent when there is none
           key ``accepted-gaps``  value JSON list, oldest first, of ``{"gap": {…as above}, "from_seq",
                            "accepted_ms", "reason", "by"}``: the gaps an operator accepted; absent when none
           key ``sealed-arrays``  value JSON ``{family: [file names]}``: each generation's sealed arrays;
                            written with the deletion of their ids from the family, in one synced write
           key ``filter-token``   value ASCII: the token of the saved id filter (``id-filter`` beside the
                            database, ``store.id_filter``) that holds every id below its stamped number;
                            absent when no saved filter may be used (none saved yet, or ids put back since)

Exactness. Ids are packed, not hashed: packing is a bijection, so two different ids never share a key and
the probability of a false duplicate is 0, at 100 billion keys as at one. (Hashing would have needed at least
96 bits to get that probability under 1e-7 at 1e11 keys: n^2 / 2^(b+1) = 6e-8 for b = 96, while 64 bits
would give about 270 false duplicates, i.e. 270 new messages silently dropped.)

Aging. ``first live sequence`` is the exact cut: an id whose sequence number is below it is absent for
every reader at once (``live_seqs_of`` applies it), whatever generations still hold it; generations whose
whole range is below it are then dropped.

Offsets follow Kafka's commit convention: the *next* offset to read, so a fresh store holds -1.

Output gaps. Recovery reads the output from the covered output offset; when the output no longer holds it
(``retention``: its first retained offset passed it; ``truncated``: its log end fell below it, the topic
recreated or records lost) the ids published there are unknown, and the worker refuses the partition and
notes the gap under ``refused-gap``. An operator's acceptance moves it to ``accepted-gaps`` and sets the
covered output offset to the gap's ``low``, in one write. After a ``truncated`` gap, the offsets recorded in
batches numbered below its ``from_seq`` belong to the topic's earlier life: the store reads those batches as
recorded without offsets (``Ledger.output_offsets``). A store without these keys has no gap (builds
before them ignore the keys, and would read such earlier offsets as the present topic's).

Versions. A store has schema 7, written in its identity when it is created; a store of any other (an earlier
build's: one ``ids`` family, sealed arrays checked whole rather than by block, batches without offsets or
digests) is refused in one line that
says to rebuild it from the output topic (``dedupectl rebuild``). A batch may still lack digests (it lost ids
to ``forget_many``) or offsets (recorded without them, or before an accepted ``truncated`` gap): both are read.
"""

from __future__ import annotations

import binascii
import json
import re
import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

SCHEMA_VERSION = 7  # the one a store may have (see Versions)
MAX_ID_BYTES = 256

CF_IDS = "ids"
CF_TIMES = "times"
CF_META = "meta"
COLUMN_FAMILIES = (CF_IDS, CF_TIMES, CF_META)  # as commands name them: ``ids`` is every generation
REQUIRED_FAMILIES = (CF_TIMES, CF_META)  # on disk in every store (generations come and go)
# Not a family on disk: the name of the read-only sequence view ``DedupStore.family(SEQ_VIEW)`` builds on
# demand. A family of that name, or one named ``ids``, on disk marks a store of an earlier layout.
SEQ_VIEW = "seq"

META_IDENTITY = b"identity"
META_STATE = b"state"
META_REFUSED_GAP = b"refused-gap"
META_ACCEPTED_GAPS = b"accepted-gaps"
META_FILTER_TOKEN = b"filter-token"
META_ARRAYS = b"sealed-arrays"  # each generation's files of sealed arrays (``store.generation_arrays``)

GAP_RETENTION = "retention"  # the output's first retained offset passed the store's covered offset
GAP_TRUNCATED = "truncated"  # the output's log end fell below it: the topic recreated, or records lost

AJS_PREFIX = b"\xa0\x10"
TAG_AJS = AJS_PREFIX[0]
TAG_UUID = 0x02
TAG_RAW = 0x03
# Iteration bounds of the id keys: every tag above falls between them.
IDS_LOWER = bytes([TAG_UUID])
IDS_UPPER = b"\xff"

_SEQ_KEY = struct.Struct(">Q")
_STATE = struct.Struct(">QQqq")
_AJS = re.compile(rb"ajs-[0-9a-f]{32}")
_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_AJS_LEN = 36
_AJS_KEY_LEN = 18
_ID_SEPARATOR = b"\n\n"  # two bytes: read as "00" once checked, they keep each key on whole bytes
_AJS_SPACED = _AJS_LEN + len(_ID_SEPARATOR)  # an ajs- id and the separator after it
# Ids packed per pass: a block's bytes stay in the CPU's cache, and one block packs a whole worker batch
ENCODE_BLOCK = 8192
_AJS_SPLITTERS: dict[tuple[int, bool], struct.Struct] = {}
_SPLITTERS_KEPT = 64


@dataclass(frozen=True)
class StoreIdentity:
    topic: str
    partition: int
    schema_version: int = SCHEMA_VERSION
    created_ms: int = 0


@dataclass(frozen=True)
class OutputGap:
    """Output offsets a store cannot be made exact over (see Output gaps): ``covered`` is the store's next
    covered output offset, ``low`` and ``end`` the output partition's first retained offset and log end
    when the gap was found."""

    kind: str
    covered: int
    low: int
    end: int
    found_ms: int = 0


@dataclass(frozen=True)
class AcceptedGap:
    """An output gap an operator accepted: recovery went on from ``gap.low``, and ids published in the gap
    may be published once more. ``from_seq``: the first sequence number recorded after the acceptance."""

    gap: OutputGap
    from_seq: int
    accepted_ms: int
    reason: str
    by: str


@dataclass(frozen=True)
class StoreState:
    next_seq: int = 0
    first_live_seq: int = 0
    input_offset: int = -1
    output_offset: int = -1

    @property
    def live_ids(self) -> int:
        """Ids in the window: every sequence number from the cut to the next one is a live id."""
        return self.next_seq - self.first_live_seq


# -- ids ---------------------------------------------------------------------------------------------


def encode_id(message_id: bytes) -> bytes:
    """The ``ids`` key of one id."""
    if len(message_id) == _AJS_LEN:
        if _AJS.fullmatch(message_id):
            return AJS_PREFIX + binascii.unhexlify(message_id[4:])
        if _UUID.fullmatch(message_id):
            return bytes([TAG_UUID]) + binascii.unhexlify(message_id.replace(b"-", b""))
    return bytes([TAG_RAW]) + message_id


def encode_ids(message_ids: Sequence[bytes]) -> list[bytes]:
    """The ``ids`` keys of many ids; a batch made only of ``ajs-`` ids is packed with a few C-level calls,
    a block at a time (the packing passes over a block several times: it stays in the CPU's cache)."""
    keys: list[bytes] = []
    for start in range(0, len(message_ids), ENCODE_BLOCK):
        block = message_ids[start : start + ENCODE_BLOCK]
        packed = _pack_ajs_batch(block) if len(block) > 1 else None
        if packed is None:
            keys += [encode_id(message_id) for message_id in block]
        else:
            keys += _ajs_splitter(len(block), spaced=True).unpack(packed)
    return keys


def encode_fixed_ids_end_to_end(joined: bytes, width: int) -> tuple[list[bytes], bytes | None]:
    """``encode_ids`` of ids all ``width`` bytes long, given end to end (the bulk load reads them so: no id
    object is made when they are all ``ajs-`` ids), and then the keys' bytes end to end too (else None)."""
    if width <= 0 or len(joined) % width:
        raise ValueError(f"{len(joined)} bytes are not ids of {width} bytes end to end")
    blocks = _packed_ajs_blocks(joined) if width == _AJS_LEN else None
    if blocks is None:  # not all ajs- ids: an object per id, the general path
        return encode_ids([joined[start : start + width] for start in range(0, len(joined), width)]), None
    keys: list[bytes] = []
    for block in blocks:
        keys += _ajs_splitter(len(block) // _AJS_KEY_LEN).unpack(block)
    return keys, b"".join(blocks)


def _packed_ajs_blocks(joined: bytes) -> list[bytes] | None:
    """The keys of ``ajs-`` ids given end to end, packed a block at a time; None unless all are ``ajs-`` ids."""
    blocks: list[bytes] = []
    step = ENCODE_BLOCK * _AJS_LEN
    for start in range(0, len(joined), step):
        block = joined[start : start + step]
        packed = _pack_ajs_joined(block, len(block) // _AJS_LEN)
        if packed is None:
            return None
        blocks.append(packed)
    return blocks


def _pack_ajs_batch(message_ids: Sequence[bytes]) -> bytes | None:
    """The keys of ``message_ids`` if every one is an ``ajs-`` id, each followed by a 0x00 byte but the last
    (``_ajs_splitter(n, spaced=True)`` skips them), else None.

    Checked in bulk so the whole batch costs a handful of C calls instead of several per id. The ids
    are joined with two newlines between them: the blob holds n valid ids exactly when it is 38 n - 2 bytes
    long with the newlines after every 36 bytes (so no id is longer or shorter: cheaper than asking each id its
    length) and what lies between is what ``_pack_ajs_joined`` checks. Any doubt falls back to the per-id path."""
    n = len(message_ids)
    blob = _ID_SEPARATOR.join(message_ids)
    if len(blob) != _AJS_SPACED * n - len(_ID_SEPARATOR):
        return None
    return _pack_ajs_joined(blob, n, _AJS_SPACED)


def _pack_ajs_joined(blob: bytes, n: int, stride: int = _AJS_LEN) -> bytes | None:
    """The keys of n ids of 36 bytes each, one every ``stride`` bytes of ``blob`` (36: end to end; 38: with
    ``_ID_SEPARATOR`` between them), if all are ``ajs-`` ids, else None.

    They are exactly when each starts with "ajs-", no byte is an uppercase hex digit, the separators are where
    they should be, and what follows each prefix is hex digits (unhexlify refuses anything else, a separator
    in an id included). A separator, once checked, is read as the hex digits "00": its id's key and one 0x00
    byte come out of unhexlify, and no pass is spent cutting the separators out."""
    if blob[0::stride] != b"a" * n or blob[1::stride] != b"j" * n or blob[2::stride] != b"s" * n:
        return None
    if blob[3::stride] != b"-" * n or any(digit in blob for digit in b"ABCDEF"):  # each a memchr
        return None
    digits = bytearray(blob)  # "ajs-" read as hex with j, s, - as 0, 1, 0: AJS_PREFIX
    digits[1::stride], digits[2::stride], digits[3::stride] = b"0" * n, b"1" * n, b"0" * n
    for place, byte in enumerate(_ID_SEPARATOR[: stride - _AJS_LEN], _AJS_LEN):  # none end to end
        if blob[place::stride] != bytes((byte,)) * (n - 1):
            return None
        digits[place::stride] = b"0" * (n - 1)
    try:
        return binascii.unhexlify(digits)
    except binascii.Error:
        return None


def _ajs_splitter(n: int, spaced: bool = False) -> struct.Struct:
    """Splits n packed ``ajs-`` keys given end to end, or (``spaced``) with a byte between each two."""
    splitter = _AJS_SPLITTERS.get((n, spaced))
    if splitter is None:
        if len(_AJS_SPLITTERS) >= _SPLITTERS_KEPT:
            _AJS_SPLITTERS.clear()
        key = f"{_AJS_KEY_LEN}s"
        layout = f"{key}x" * (n - 1) + key if spaced else key * n
        splitter = _AJS_SPLITTERS[(n, spaced)] = struct.Struct(layout)
    return splitter


def decode_id(key: bytes) -> bytes:
    """The id an ``ids`` key stands for (the exact bytes that were recorded)."""
    tag = key[0]
    if tag == TAG_AJS:
        return b"ajs-" + binascii.hexlify(key[2:])
    if tag == TAG_UUID:
        digits = binascii.hexlify(key[1:])
        return b"-".join((digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:]))
    if tag == TAG_RAW:
        return key[1:]
    raise ValueError(f"not an id key: {key[:9]!r}")


# -- sequence numbers ----------------------------------------------------------------------------------


def seq_width(seq: int) -> int:
    """Bytes needed for ``seq`` big-endian (at least 1)."""
    return max(1, (seq.bit_length() + 7) >> 3)


def encode_seq_values(first: int, count: int) -> list[bytes]:
    """``ids`` values for ``count`` consecutive sequence numbers, all as wide as the last needs.

    Packed as 8-byte big-endian numbers and cut back to ``width`` bytes a block at a time (two struct calls
    per block): every recorded id takes one, and ``int.to_bytes`` one by one costs twice as much."""
    width = seq_width(first + count - 1) if count else 1
    if width > 8:
        return [seq.to_bytes(width, "big") for seq in range(first, first + count)]
    numbers = array("Q", range(first, first + count))
    if _LITTLE_ENDIAN:
        numbers.byteswap()
    packed = numbers.tobytes()
    values: list[bytes] = []
    for start in range(0, count, _SEQ_BLOCK):
        values += _seq_cutter(width, min(_SEQ_BLOCK, count - start)).unpack_from(packed, 8 * start)
    return values


_SEQ_BLOCK = 1024
_LITTLE_ENDIAN = sys.byteorder == "little"


@lru_cache(maxsize=64)
def _seq_cutter(width: int, size: int) -> struct.Struct:
    return struct.Struct((f"{8 - width}x{width}s" if width < 8 else "8s") * size)


def decode_seq_value(value: bytes) -> int:
    return int.from_bytes(value, "big")


def live_seqs_of(values: Sequence[bytes | None], first_live_seq: int) -> list[int | None]:
    """The sequence number in each ``ids`` value, None where the value is absent or below the aging cut:
    the one place the cut is applied to what a read found."""
    if None not in values:  # the usual answer for present ids: decoded at C speed, then checked at once
        seqs = list(map(int.from_bytes, values))  # big-endian by default (3.11+): the codec's order
        if not seqs or min(seqs) >= first_live_seq:
            return seqs
    return [
        seq if value is not None and (seq := int.from_bytes(value, "big")) >= first_live_seq else None
        for value in values
    ]


def encode_seq(seq: int) -> bytes:
    """Fixed-width key of the ``times`` family."""
    return _SEQ_KEY.pack(seq)


def decode_seq(key: bytes) -> int:
    return _SEQ_KEY.unpack(key)[0]


# -- meta ----------------------------------------------------------------------------------------------


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


def encode_gap(gap: OutputGap) -> bytes:
    return json.dumps(_gap_fields(gap), sort_keys=True).encode()


def decode_gap(value: bytes) -> OutputGap:
    return _gap_of(json.loads(value))


def encode_accepted_gaps(accepted: Sequence[AcceptedGap]) -> bytes:
    return json.dumps(
        [
            {
                "gap": _gap_fields(entry.gap),
                "from_seq": entry.from_seq,
                "accepted_ms": entry.accepted_ms,
                "reason": entry.reason,
                "by": entry.by,
            }
            for entry in accepted
        ],
        sort_keys=True,
    ).encode()


def decode_accepted_gaps(value: bytes) -> tuple[AcceptedGap, ...]:
    return tuple(
        AcceptedGap(
            gap=_gap_of(raw["gap"]),
            from_seq=int(raw["from_seq"]),
            accepted_ms=int(raw["accepted_ms"]),
            reason=str(raw.get("reason", "")),
            by=str(raw.get("by", "")),
        )
        for raw in json.loads(value)
    )


def _gap_fields(gap: OutputGap) -> dict:
    return {"kind": gap.kind, "covered": gap.covered, "low": gap.low, "end": gap.end, "found_ms": gap.found_ms}


def _gap_of(raw: dict) -> OutputGap:
    return OutputGap(
        kind=str(raw["kind"]),
        covered=int(raw["covered"]),
        low=int(raw["low"]),
        end=int(raw["end"]),
        found_ms=int(raw.get("found_ms", 0)),
    )

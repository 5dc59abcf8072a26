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
                  lost belongs (``DedupStore.output_offsets``).
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
recorded without offsets (``DedupStore.output_offsets``). A store without these keys has no gap (builds
before them ignore the keys, and would read such earlier offsets as the present topic's).

Versions. A store has schema 7, written in its identity when it is created; a store of any other (an earlier
build's: one ``ids`` family, sealed arrays checked whole rather than by block, batches without offsets or
digests) is refused in one line that
says to rebuild it from the output topic (``dedupectl rebuild``). A batch may still lack digests (it lost ids
to ``forget_many``) or offsets (recorded without them, or before an accepted ``truncated`` gap): both are read.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import re
import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, islice
from operator import sub

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
_TIMES_HEAD = struct.Struct(">Bq")
_DELTA_CODES = {2: "h", 4: "i", 8: "q"}
DELTA_WIDTHS = tuple(_DELTA_CODES)  # bytes per timestamp delta, narrowest first
TIMES_DIGEST_FLAG = 0x80
TIMES_OFFSETS_FLAG = 0x40
_COUNTED = TIMES_DIGEST_FLAG | TIMES_OFFSETS_FLAG  # a value with either carries its count
_OFFSETS_HEAD = struct.Struct(">qB")
_OFFSET_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
DIGEST_BYTES = 16
# Ids per digest: reconcile checks a partly covered chunk (at the edges of what it reads) id by id, so chunks
# keep that small; a digest per 512 ids costs 0.03 bytes per id.
DIGEST_CHUNK = 512
_WIDTH_MASK = 0x3F
_TIMES_COUNT = struct.Struct(">I")
_DELTAS_WITH_COUNT = _TIMES_HEAD.size + _TIMES_COUNT.size  # a digested value's deltas start after its count
_FULL_DECODE_FROM = 8  # timestamps wanted from one batch before decoding all of it is cheaper
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


# -- timestamps ----------------------------------------------------------------------------------------


def encode_times(
    timestamps_ms: Sequence[int], digests: bytes | None = None, offsets: Sequence[int] | None = None
) -> bytes:
    """One batch's record timestamps (int ms, negative read as 0): the first, then deltas as narrow as the widest
    delta allows; with ``offsets`` (each id's output offset, ascending) those; with ``digests``
    (``batch_digests`` of the batch's keys) the count, and the digests last."""
    stamps = timestamps_ms if min(timestamps_ms) >= 0 else [max(stamp, 0) for stamp in timestamps_ms]
    deltas = list(map(sub, islice(stamps, 1, None), stamps))  # C-level: the worker encodes every batch
    packed_offsets = None if offsets is None else encode_offsets(offsets)
    for width in DELTA_WIDTHS:  # struct range-checks each delta as it packs: cheaper than finding the widest first
        try:
            body = struct.pack(f">{len(deltas)}{_DELTA_CODES[width]}", *deltas)
        except struct.error:
            continue
        return pack_times(stamps[0], width, body, len(stamps), digests, packed_offsets)
    raise ValueError("a timestamp delta does not fit in 8 bytes")


def encode_offsets(offsets: Sequence[int]) -> bytes:
    """The offsets section of a ``times`` value: the first offset, then nothing when the offsets are
    consecutive (a worker batch: one transaction, one writer), else each one's distance from the one before."""
    first, count = offsets[0], len(offsets)
    if offsets[-1] - first == count - 1 and (count < 3 or all(map(int.__lt__, offsets, islice(offsets, 1, None)))):
        return _OFFSETS_HEAD.pack(first, 0)
    deltas = list(map(sub, islice(offsets, 1, None), offsets))
    if min(deltas) <= 0:
        raise ValueError("output offsets must ascend")
    for width, code in _OFFSET_CODES.items():
        try:
            return _OFFSETS_HEAD.pack(first, width) + struct.pack(f">{len(deltas)}{code}", *deltas)
        except struct.error:
            continue
    raise ValueError("an output offset delta does not fit in 8 bytes")


def pack_times(
    first: int,
    width: int,
    deltas: bytes,
    count: int,
    digests: bytes | None = None,
    offsets: bytes | None = None,
) -> bytes:
    """A ``times`` value from its parts: the first of ``count`` timestamps (not negative), the deltas of the
    others packed big-endian ``width`` bytes each (one of ``DELTA_WIDTHS``), the offsets section
    (``encode_offsets``) and the digests, if any."""
    if digests is None and offsets is None:
        return _TIMES_HEAD.pack(width, first) + deltas
    head = width | (0 if offsets is None else TIMES_OFFSETS_FLAG)
    if digests is None:
        return _TIMES_HEAD.pack(head, first) + _TIMES_COUNT.pack(count) + deltas + offsets
    wanted = digest_count(count)
    if len(digests) != wanted * DIGEST_BYTES:
        raise ValueError(f"{count} timestamps need {wanted} digests of {DIGEST_BYTES} bytes")
    head |= TIMES_DIGEST_FLAG
    return _TIMES_HEAD.pack(head, first) + _TIMES_COUNT.pack(count) + deltas + (offsets or b"") + digests


def _times_layout(value: bytes) -> tuple[int, int, int, int]:
    """``(delta width, first timestamp, count, where the deltas start)`` of a ``times`` value."""
    head, first = _TIMES_HEAD.unpack_from(value)
    width = head & _WIDTH_MASK
    if head & _COUNTED:
        return width, first, _TIMES_COUNT.unpack_from(value, _TIMES_HEAD.size)[0], _DELTAS_WITH_COUNT
    return width, first, 1 + (len(value) - _TIMES_HEAD.size) // width, _TIMES_HEAD.size


def decode_times(value: bytes) -> list[int]:
    width, first, count, start = _times_layout(value)
    deltas = struct.unpack_from(f">{count - 1}{_DELTA_CODES[width]}", value, start)
    return list(accumulate(deltas, initial=first))


def times_at(value: bytes, indexes: Sequence[int]) -> list[int]:
    """The timestamps at ``indexes`` of one batch: a few are summed from the deltas in C, many decode it all."""
    if len(indexes) > _FULL_DECODE_FROM:
        stamps = decode_times(value)
        return [stamps[index] for index in indexes]
    width, first, _, start = _times_layout(value)
    code = _DELTA_CODES[width]
    return [first + sum(struct.unpack_from(f">{index}{code}", value, start)) for index in indexes]


def times_count(value: bytes) -> int:
    """How many timestamps a ``times`` value holds, without decoding them."""
    return _times_layout(value)[2]


def _offsets_section(value: bytes) -> tuple[int, int, int, int] | None:
    """``(first offset, delta width, count, where the deltas start)``; None for a batch without offsets."""
    if not value[0] & TIMES_OFFSETS_FLAG:
        return None
    width, _, count, start = _times_layout(value)
    at = start + (count - 1) * width
    first, offset_width = _OFFSETS_HEAD.unpack_from(value, at)
    return first, offset_width, count, at + _OFFSETS_HEAD.size


def times_offsets(value: bytes) -> list[int] | None:
    """The output offset of each id of the batch, in sequence order; None for a batch recorded without them
    (recorded without them)."""
    section = _offsets_section(value)
    if section is None:
        return None
    first, width, count, start = section
    if width == 0:
        return list(range(first, first + count))
    deltas = struct.unpack_from(f">{count - 1}{_OFFSET_CODES[width]}", value, start)
    return list(accumulate(deltas, initial=first))


def times_offset_at(value: bytes, index: int) -> int | None:
    """The output offset of the batch's ``index``-th id (None: the batch has no offsets)."""
    section = _offsets_section(value)
    if section is None:
        return None
    first, width, _, start = section
    if width == 0:
        return first + index
    return first + sum(struct.unpack_from(f">{index}{_OFFSET_CODES[width]}", value, start))


def times_digests(value: bytes) -> bytes | None:
    """The digests a ``times`` value ends with (one per ``DIGEST_CHUNK`` ids, ``DIGEST_BYTES`` each); None for a
    batch that lost ids)."""
    if not value[0] & TIMES_DIGEST_FLAG:
        return None
    return value[len(value) - digest_count(times_count(value)) * DIGEST_BYTES :]


def without_digests(value: bytes) -> bytes:
    """The same ``times`` value without its digests (its batch no longer holds every id it recorded)."""
    if not value[0] & TIMES_DIGEST_FLAG:
        return value
    width, first, count, start = _times_layout(value)
    deltas = value[start : start + (count - 1) * width]
    if not value[0] & TIMES_OFFSETS_FLAG:
        return _TIMES_HEAD.pack(width, first) + deltas
    offsets = value[start + (count - 1) * width : len(value) - digest_count(count) * DIGEST_BYTES]
    return _TIMES_HEAD.pack(width | TIMES_OFFSETS_FLAG, first) + _TIMES_COUNT.pack(count) + deltas + offsets


def digest_count(ids: int) -> int:
    return -(-ids // DIGEST_CHUNK)


def chunk_digest(keys: Sequence[bytes]) -> bytes:
    """``DIGEST_BYTES`` standing for a run of ``ids`` keys in sequence order: BLAKE2b-128 of the keys and of
    their lengths (so no two different lists of keys hash the same bytes). Two different runs share a digest
    with probability 2^-128: reconcile takes equal digests for equal runs."""
    return _digest(b"".join(keys), array("H", map(len, keys)))


def _digest(joined: bytes, lengths: array) -> bytes:
    digest = hashlib.blake2b(joined, digest_size=DIGEST_BYTES)
    digest.update(lengths.tobytes())
    return digest.digest()


def batch_digests(keys: Sequence[bytes]) -> bytes:
    """A batch's digests: ``chunk_digest`` of each ``DIGEST_CHUNK`` keys in sequence order, end to end."""
    return b"".join(chunk_digest(keys[start : start + DIGEST_CHUNK]) for start in range(0, len(keys), DIGEST_CHUNK))


def batch_digests_joined(joined: bytes, key_bytes: int) -> bytes:
    """``batch_digests`` of keys all ``key_bytes`` long, given end to end in sequence order (as the bulk load
    has them: no key object needed)."""
    if key_bytes <= 0 or len(joined) % key_bytes:
        raise ValueError(f"{len(joined)} bytes are not keys of {key_bytes} bytes end to end")
    lengths = array("H", [key_bytes]) * DIGEST_CHUNK
    chunks = (
        joined[start : start + DIGEST_CHUNK * key_bytes] for start in range(0, len(joined), DIGEST_CHUNK * key_bytes)
    )
    return b"".join(_digest(chunk, lengths[: len(chunk) // key_bytes]) for chunk in chunks)


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

"""A ``times`` value's bytes (the layout is in ``store.codec``'s docstring, "times"): one batch's record
timestamps, its output offsets and its digests, encoded, and read back without decoding more than asked."""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Sequence
from itertools import accumulate, islice
from operator import sub

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
    ascending = (isinstance(offsets, range) and offsets.step == 1) or count < 3  # a range: a worker batch's offsets
    if offsets[-1] - first == count - 1 and (ascending or all(map(int.__lt__, offsets, islice(offsets, 1, None)))):
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

"""An in-memory filter of the ids a store holds: it answers most absent ids without asking RocksDB.

RocksDB answers an absent id by probing the bloom filter of every ``ids`` file, and aging by sequence keeps
one file per stretch of sequence numbers, so that cost grows with the ids held (docs/store-cost-model.md).
This filter answers for the whole store by reading two buckets, whatever its size. Only the ids it may hold
(the duplicates, and ``FALSE_POSITIVE_RATE`` of the others) go on to RocksDB for the exact answer. It never
calls an id it was given absent: that would publish a duplicate.

Layout: a cuckoo filter with partial keys (Fan et al., 2014). ``buckets`` rows of ``SLOTS`` 16-bit entries,
each 0 (empty) or ``fingerprint << GROUP_BITS | group``. An id's 64-bit hash gives its fingerprint (never 0)
and its first bucket; its second is ``(spread(fingerprint) - first) mod buckets``, so either bucket and the
fingerprint give the other, and an entry can move to make room without its id. A lookup compares the
fingerprint with the entries of both buckets, for a whole batch at once.

Groups: each entry carries the group of the sequence numbers its id was recorded under: stretches of
``span`` numbers, taking the ``GROUPS`` tags in turn. A tag is taken over by a newer stretch only once every
number of its older one is below the aging cut; its old entries are cleared then, all at once. The filter so
holds at most ``GROUPS`` stretches of ids, and is sized for that; when the window is wider the store builds a
larger one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import struct
import sys
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from hashlib import blake2b
from pathlib import Path

import numpy as np

SLOTS = 8
GROUP_BITS = 4
GROUPS = 1 << GROUP_BITS
FINGERPRINT_BITS = 16 - GROUP_BITS
LOAD = 0.93  # the share of slots the filter is sized to fill; two choices of eight slots rarely need a kick
FALSE_POSITIVE_RATE = 2 * SLOTS / ((1 << FINGERPRINT_BITS) - 1)
MAX_KICKS = 500
_APART_MAX_CELLS = 1 << 20  # cells a batch's buckets fall into when placed apart (8 per id, up to this)
MOVE_ROUNDS = 4  # rounds of one-deep moves for a batch before the rest are kicked one by one
FILE_FORMAT = 4  # 4: the header's CRC-32 on a line of its own, the table followed by its CRC-32
HASH_VERSION = 1  # bump when key_hashes changes: a saved filter with another version is rebuilt

_CRC = struct.Struct("<I")
_CRC_CHUNK = 1 << 24
log = logging.getLogger(__name__)

_FP_MASK = np.uint16((1 << FINGERPRINT_BITS) - 1)
_GROUP_MASK = np.uint16(GROUPS - 1)
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_LANES = np.uint64(0x0001_0001_0001_0001)
_LANE_TOPS = np.uint64(0x8000_8000_8000_8000)
_FINGERPRINT_LANES = np.uint64(0xFFFF_FFFF_FFFF_FFFF ^ (0x0001_0001_0001_0001 * (GROUPS - 1)))
_FIXED_WIDTHS = (17, 18)  # a packed UUID and a packed ajs- id (store.codec): hashed as arrays


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit."""
    x = (x ^ (x >> np.uint64(30))) * _M2
    x = (x ^ (x >> np.uint64(27))) * _M3
    return x ^ (x >> np.uint64(31))


def _fixed_hashes(joined: bytes, count: int, width: int) -> np.ndarray:
    rows = np.frombuffer(joined, np.uint8).reshape(count, width)
    words = np.ascontiguousarray(rows[:, width - 16 :]).view("<u8")
    return _hash_words(words[:, 0], words[:, 1], rows[:, 0].astype(np.uint64))


def _hash_words(first: np.ndarray, second: np.ndarray, tags: np.ndarray | np.uint64) -> np.ndarray:
    """The hash of fixed-width keys from their last 16 bytes, read as two little-endian words, and their first
    byte: the tag, so that two kinds of id with the same last 16 bytes hash apart."""
    with np.errstate(over="ignore"):
        return _mix(first * _M1 ^ second ^ tags * _M3)


def body_hashes(prefix: bytes, high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """``key_hashes`` of ids of one fixed-width kind, given as ``prefix`` and the two halves of each id's 16
    bytes read big-endian (as sealed arrays hold them): no key is made."""
    if len(prefix) + 16 not in _FIXED_WIDTHS:
        raise ValueError(f"prefix {prefix!r} is not one of a fixed-width id")
    as_words = [np.asarray(half).astype(">u8").view("<u8") for half in (high, low)]
    return _hash_words(as_words[0], as_words[1], np.uint64(prefix[0]))


def key_hashes(keys: Sequence[bytes]) -> np.ndarray:
    """A 64-bit hash of each encoded id (``store.codec.encode_ids``), the same in every process."""
    count = len(keys)
    if count == 0:
        return np.empty(0, np.uint64)
    width = len(keys[0])
    if width in _FIXED_WIDTHS and set(map(len, keys)) == {width}:  # a batch of one kind: the usual
        return _fixed_hashes(b"".join(keys), count, width)
    hashes = np.empty(count, np.uint64)
    lengths = np.fromiter(map(len, keys), np.int64, count)
    for width in _FIXED_WIDTHS:
        chosen = np.flatnonzero(lengths == width)
        if chosen.size:
            hashes[chosen] = _fixed_hashes(b"".join([keys[i] for i in chosen]), chosen.size, width)
    for index in np.flatnonzero(~np.isin(lengths, _FIXED_WIDTHS)):
        hashes[index] = int.from_bytes(blake2b(keys[index], digest_size=8).digest(), "little")
    return hashes


class IdFilter:
    """The filter of one store; not thread-safe (the store's owner thread uses it)."""

    def __init__(self, span: int, *, table: np.ndarray | None = None, group_starts: Sequence[int] | None = None):
        if span <= 0:
            raise ValueError(f"span must be positive, got {span}")
        self.span = span
        self.buckets = self.buckets_for(span)
        if table is None:
            table = np.zeros((self.buckets, SLOTS), np.uint16)
        if table.shape != (self.buckets, SLOTS) or table.dtype != np.uint16:
            raise ValueError(f"a table of shape {table.shape} does not fit span {span}")
        self.table = table
        self.group_starts = list(group_starts) if group_starts is not None else [-1] * GROUPS
        self._rng = random.Random(span)
        self._words = self.table.view(np.uint64)  # a bucket as two words: its eight slots compared at once
        with np.errstate(over="ignore"):
            every = np.arange(1 << FINGERPRINT_BITS, dtype=np.uint64)
            self._spread = ((_mix(every + _M2) >> np.uint64(32)) * np.uint64(self.buckets) >> np.uint64(32)).astype(
                np.int64
            )

    @staticmethod
    def buckets_for(span: int) -> int:
        return max(1, math.ceil(GROUPS * span / (SLOTS * LOAD)))

    @property
    def memory_bytes(self) -> int:
        return self.table.nbytes

    @property
    def capacity(self) -> int:
        """Ids it holds at the load it is sized for: ``GROUPS`` stretches of ``span`` numbers."""
        return GROUPS * self.span

    # -- placing ------------------------------------------------------------------------------------------

    def _parts(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        fingerprints = (hashes >> np.uint64(64 - FINGERPRINT_BITS)).astype(np.uint16)
        fingerprints[fingerprints == 0] = 1
        with np.errstate(over="ignore"):  # the low 32 bits scaled to [0, buckets): no division
            first = (((hashes & np.uint64(0xFFFFFFFF)) * np.uint64(self.buckets)) >> np.uint64(32)).astype(np.int64)
        return fingerprints, first, self._other(first, fingerprints)

    def _other(self, bucket: np.ndarray, fingerprints: np.ndarray) -> np.ndarray:
        other = self._spread[fingerprints] - bucket
        other[other < 0] += self.buckets
        return other

    def group_of(self, seq: int) -> int:
        return (seq // self.span) % GROUPS

    def claim(self, first_seq: int, end_seq: int, cut: int) -> bool:
        """Make the groups of numbers ``first_seq .. end_seq - 1`` theirs, clearing tags whose older stretch
        is wholly below ``cut``. False when a tag still holds live ids of an older stretch: the window is
        wider than this filter was sized for, and the store must build a larger one."""
        if end_seq <= first_seq:
            return True
        for stretch in range(first_seq // self.span, (end_seq - 1) // self.span + 1):
            tag, start = stretch % GROUPS, stretch * self.span
            held = self.group_starts[tag]
            if held == start:
                continue
            if held != -1 and not (held < start and held + self.span <= cut):
                return False
            if held != -1:
                self.clear_group(tag)
            self.group_starts[tag] = start
        return True

    def clear_group(self, tag: int) -> int:
        """Empty every entry of one group (its ids are all below the cut); returns how many."""
        table = self.table
        chosen = (table != 0) & ((table & _GROUP_MASK) == tag)
        cleared = int(chosen.sum())
        table[chosen] = 0
        return cleared

    def add(self, hashes: np.ndarray, seqs: np.ndarray) -> bool:
        """Add ids (their ``key_hashes``) recorded under ``seqs``, whose groups were claimed. False when one
        found no room even by moving others: the filter may then have lost an entry and must be rebuilt."""
        if hashes.size == 0:
            return True
        fingerprints, first, second = self._parts(hashes)
        groups = ((seqs // self.span) % GROUPS).astype(np.uint16)
        entries = (fingerprints << np.uint16(GROUP_BITS)) | groups
        table = self.table
        free_first = table.take(first, axis=0) == 0
        free_second = table.take(second, axis=0) == 0
        second_emptier = free_second.sum(axis=1) > free_first.sum(axis=1)
        emptier = np.where(second_emptier, second, first)
        fuller = np.where(second_emptier, first, second)
        left = self._place_apart(emptier, np.where(second_emptier[:, None], free_second, free_first), entries)
        left = self._place(left, emptier[left], entries)
        left = self._place(left, fuller[left], entries)
        left = self._move_one_aside(left, first, second, entries)
        return all(self._kick_in(int(entries[i]), int(first[i])) for i in left)

    def _place_apart(self, buckets: np.ndarray, free: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """Put each entry into the first free slot of its bucket (``free``: the bucket's free slots, read
        before), where no other entry of the batch may go to the same bucket; returns the indexes of the
        others (one of several, or no free slot), for ``_place``, which reads the table again. Most of a batch
        goes here, without ``_place``'s sort."""
        count = buckets.size
        everyone = np.arange(count, dtype=np.int32)
        cells = buckets & (min(_APART_MAX_CELLS, 1 << (8 * count).bit_length()) - 1)  # a bucket falls in one cell
        marks = np.empty(int(cells.max()) + 1, np.int32)
        marks[cells] = everyone
        fits = (marks[cells] == everyone) & free.any(axis=1)  # the one id each cell kept: one per bucket
        placed = np.flatnonzero(fits)
        self.table[buckets[placed], free[placed].argmax(axis=1)] = entries[placed]
        return np.flatnonzero(~fits)

    def _place(self, chosen: np.ndarray, buckets: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """Put ``entries[chosen]`` into ``buckets`` where a slot is free; returns those that did not fit."""
        if chosen.size == 0:
            return chosen
        order = np.argsort(buckets, kind="stable")
        chosen, buckets = chosen[order], buckets[order]
        starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
        rank = np.arange(buckets.size) - np.repeat(starts, np.diff(np.r_[starts, buckets.size]))
        empty = self.table.take(buckets, axis=0) == 0
        fits = rank < empty.sum(axis=1)
        slot = np.argmax(np.cumsum(empty, axis=1) > rank[:, None], axis=1)
        self.table[buckets[fits], slot[fits]] = entries[chosen[fits]]
        return chosen[~fits]

    def _move_one_aside(
        self, left: np.ndarray, first: np.ndarray, second: np.ndarray, entries: np.ndarray
    ) -> np.ndarray:
        """For ids whose two buckets are full, move one entry of either bucket to its own other bucket where that
        has a free slot, and put the id in the slot it left: a cuckoo kick one level deep, for the whole batch
        at once (in a nearly full table most ids that find no slot need no more). Moves that would share a
        bucket wait for the next round; returns the ids still without a slot."""
        table = self.table
        for _ in range(MOVE_ROUNDS):
            if left.size == 0:
                return left
            both = np.stack((first[left], second[left]), axis=1)
            held = table.take(both.reshape(-1), axis=0).reshape(left.size, 2 * SLOTS)  # each id's two buckets
            sources = np.repeat(both, SLOTS, axis=1)  # the bucket of each entry in ``held``
            aside = self._other(sources.reshape(-1), (held >> np.uint16(GROUP_BITS)).reshape(-1)).reshape(held.shape)
            room = (table.take(aside.reshape(-1), axis=0) == 0).any(axis=1).reshape(held.shape)
            movable = np.flatnonzero(room.any(axis=1))
            column = np.argmax(room[movable], axis=1)
            source, target = sources[movable, column], aside[movable, column]
            # one move per bucket a round: two moves out of, or into, one bucket could take one slot twice
            _, first_of_source = np.unique(source, return_index=True)
            alone = np.zeros(movable.size, bool)
            alone[first_of_source] = True
            _, first_of_target = np.unique(target, return_index=True)
            single_target = np.zeros(movable.size, bool)
            single_target[first_of_target] = True
            alone &= single_target
            if not alone.any():
                return left
            chosen, column, source, target = movable[alone], column[alone], source[alone], target[alone]
            free_slot = np.argmax(table.take(target, axis=0) == 0, axis=1)
            table[target, free_slot] = held[chosen, column]
            table[source, column % SLOTS] = entries[left[chosen]]
            keep = np.ones(left.size, bool)
            keep[chosen] = False
            left = left[keep]
        return left

    def _kick_in(self, entry: int, bucket: int) -> bool:
        """Cuckoo insertion: move entries to their other bucket until one lands in a free slot."""
        table = self.table
        for _ in range(MAX_KICKS):
            row = table[bucket]
            free = np.flatnonzero(row == 0)
            if free.size:
                row[free[0]] = entry
                return True
            slot = self._rng.randrange(SLOTS)
            entry, row[slot] = int(row[slot]), entry
            fingerprint = np.array([entry >> GROUP_BITS], np.uint16)
            bucket = int(self._other(np.array([bucket]), fingerprint)[0])
        return False

    # -- asking -------------------------------------------------------------------------------------------

    def may_hold(self, hashes: np.ndarray) -> np.ndarray:
        """For each hash, whether the filter may hold it (False: the store certainly does not)."""
        if hashes.size == 0:
            return np.zeros(0, bool)
        fingerprints, first, second = self._parts(hashes)
        # each of the four 16-bit lanes of a word is a slot: XOR with the fingerprint in every lane leaves a
        # zero lane where it matches (an empty slot never does: fingerprints are not 0)
        wanted = (fingerprints.astype(np.uint64) << np.uint64(GROUP_BITS)) * _LANES
        words = self._both_buckets(self._words, first, second) & _FINGERPRINT_LANES
        words ^= wanted[:, None]
        zero_lane = (words - _LANES) & ~words & _LANE_TOPS
        return np.bitwise_or.reduce(zero_lane, axis=1) != 0

    @staticmethod
    def _both_buckets(rows: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """Each id's two buckets side by side, as one row: one ``take`` (several times faster than fancy
        indexing with ``rows[first]``, and no copy to join the two)."""
        return rows.take(np.stack((first, second), axis=1), axis=0).reshape(first.size, 2 * rows.shape[1])

    def group_masks(self, hashes: np.ndarray) -> np.ndarray:
        """For each hash, a bit per group whose entries match its fingerprint (0: the store certainly does not
        hold it): the groups, and so the stretches of sequence numbers, its id may have been recorded in."""
        masks = np.zeros(hashes.size, np.uint16)
        maybe = np.flatnonzero(self.may_hold(hashes))
        if maybe.size == 0:
            return masks
        fingerprints, first, second = self._parts(hashes[maybe])
        slots = self._both_buckets(self.table, first, second)
        matches = (slots >> np.uint16(GROUP_BITS)) == fingerprints[:, None]  # an empty slot (0) never matches
        bits = np.where(matches, np.left_shift(np.uint16(1), slots & _GROUP_MASK), np.uint16(0))
        masks[maybe] = np.bitwise_or.reduce(bits, axis=1)
        return masks

    def entries(self) -> int:
        return int(np.count_nonzero(self.table))


# -- keeping it between runs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterStamp:
    """What a saved filter holds: every id the store ``topic``/``partition`` (made at ``created_ms``) had
    recorded under numbers below ``next_seq`` when it was saved. The store names ``token`` in its metadata
    once the file is durable, and drops that name with any write that puts an id back under an older number
    (a reconcile repair): a file whose token the store does not name is never used."""

    topic: str
    partition: int
    created_ms: int
    token: str
    next_seq: int


def write_partial(id_filter: IdFilter, path: Path, stamp: FilterStamp) -> Path:
    """Write the filter to a temporary file beside ``path`` (the caller's thread owns the filter meanwhile);
    ``commit`` makes it durable and puts it in place."""
    header = {
        "format": FILE_FORMAT,
        "hash_version": HASH_VERSION,
        "byteorder": sys.byteorder,
        "span": id_filter.span,
        "group_starts": id_filter.group_starts,
        **asdict(stamp),
    }
    partial = path.with_name(f".{path.name}.{stamp.token}.partial")
    try:
        with open(partial, "wb") as handle:
            line = json.dumps(header).encode()
            handle.write(line + b"\n" + _header_check(line) + b"\n")
            crc = 0
            for chunk in _byte_chunks(id_filter.table):
                crc = zlib.crc32(chunk, crc)
                handle.write(chunk)
            handle.write(_CRC.pack(crc))
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    return partial


def commit(partial: Path, path: Path) -> None:
    """Sync a file ``write_partial`` wrote and rename it to ``path``: after a crash, whole or the one before."""
    try:
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def save(id_filter: IdFilter, path: Path, stamp: FilterStamp) -> None:
    commit(write_partial(id_filter, path, stamp), path)


def _byte_chunks(table: np.ndarray) -> Iterator[memoryview]:
    view = memoryview(table.reshape(-1).view(np.uint8))
    for start in range(0, len(view), _CRC_CHUNK):
        yield view[start : start + _CRC_CHUNK]


def load(path: Path) -> tuple[IdFilter, FilterStamp] | None:
    """The filter saved at ``path`` and what it holds; None if there is none this code can read, or its bytes do
    not match their checksum (the store then builds it anew: a damaged filter could call a held id absent)."""
    read = _read(path)
    if isinstance(read, str):
        log.warning("the saved id filter %s %s: it is built anew from the store", path, read)
        return None
    return read


def damage_of(path: Path) -> str | None:
    """What is wrong with the filter saved at ``path``, if it is damaged (a file that is absent, or of another
    format, is not damaged: it is only not used)."""
    read = _read(path)
    return read if isinstance(read, str) else None


def saved_stamp(path: Path) -> FilterStamp | None:
    """What the filter saved at ``path`` holds, from its header alone (checked against its own CRC); None where
    there is no such file, or it cannot vouch for its stamp."""
    try:
        with open(path, "rb") as handle:
            header = _read_header(handle)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return header[1] if isinstance(header, tuple) else None


def _header_check(line: bytes) -> bytes:
    return b"%08x" % zlib.crc32(line)


def _read_header(handle) -> tuple[dict, FilterStamp] | str | None:
    """The header and stamp of a file of this format; None for another format; else what is wrong with it."""
    line = handle.readline(4096).rstrip(b"\n")
    header = json.loads(line)
    if (
        header.get("format") != FILE_FORMAT
        or header.get("hash_version") != HASH_VERSION
        or header.get("byteorder") != sys.byteorder
    ):
        return None
    if handle.readline(16).rstrip(b"\n") != _header_check(line):
        return "is damaged (its header does not match its checksum)"
    return header, FilterStamp(**{name: header[name] for name in FilterStamp.__dataclass_fields__})


def _read(path: Path) -> tuple[IdFilter, FilterStamp] | str | None:
    """The filter and its stamp; None where there is none of this format; else what is wrong with the file."""
    try:
        with open(path, "rb") as handle:
            read = _read_header(handle)
            if not isinstance(read, tuple):
                return read
            header, stamp = read
            buckets = IdFilter.buckets_for(header["span"])
            table = np.fromfile(handle, np.uint16, count=buckets * SLOTS)
            trailer = handle.read(_CRC.size + 1)
            if table.size != buckets * SLOTS or len(trailer) != _CRC.size:
                return "is not whole"
            crc = 0
            for chunk in _byte_chunks(table):
                crc = zlib.crc32(chunk, crc)
            if crc != _CRC.unpack(trailer)[0]:
                return "is damaged (checksum mismatch)"
            table = table.reshape(buckets, SLOTS)
            return IdFilter(header["span"], table=table, group_starts=header["group_starts"]), stamp
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"cannot be read ({error})"


class BackgroundLoad:
    """``load(path)`` on a thread of its own: numpy reads the table without the GIL, so the store's thread goes
    on meanwhile."""

    def __init__(self, path: Path, name: str):
        self._loaded: tuple[IdFilter, FilterStamp] | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), name=name, daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        self._loaded = load(path)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> tuple[IdFilter, FilterStamp] | None:
        """What ``load`` returned, waiting for it."""
        self._thread.join()
        return self._loaded

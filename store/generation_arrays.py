"""The sealed arrays of a store's generations: which files, where, and how a generation's ids get into them.

A sealed generation's ``ajs-`` and UUID ids leave its family for one file per key prefix beside the database
(``store.sealed_arrays``), named after the family: ``<family>.<prefix in hex>.arrays``. The store's metadata
names each generation's files (``META_ARRAYS``); a file the metadata does not name is not part of the store
(a seal a crash cut short, or a generation aged out) and the next writer removes it. RocksDB keeps a flat
directory and ignores names it did not make, so a checkpoint of the store's files lists these beside its own.

This module knows the files; ``DedupStore`` decides when a generation is written to them and reads them.
"""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import numpy as np
from rocksdict import Rdict, ReadOptions

from store import sealed_arrays
from store.codec import AJS_PREFIX, TAG_UUID
from store.damage import damaged, scan
from store.errors import StoreCorruptError
from store.sealed_arrays import ID_BYTES, SealedArrays

PREFIXES = (AJS_PREFIX, bytes([TAG_UUID]))  # the fixed-width ids: 16 bytes after each
SUFFIX = ".arrays"
WRITTEN_FILE = "written.json"  # where store.arrays_writer, in its TMPDIR, lists the files it wrote
_READ_CHUNK = 100_000


def file_name(family: str, prefix: bytes) -> str:
    return f"{family}.{prefix.hex()}{SUFFIX}"


def prefix_range(prefix: bytes) -> tuple[bytes, bytes]:
    """The keys of ``prefix``: from it to the next prefix of its length (``ajs-``'s two bytes never end in 0xFF)."""
    return prefix, prefix[:-1] + bytes([prefix[-1] + 1])


def prefix_of(key: bytes) -> bytes | None:
    """The arrays prefix of an ``ids`` key, None for an id the arrays do not hold."""
    for prefix in PREFIXES:
        if len(key) == len(prefix) + ID_BYTES and key.startswith(prefix):
            return prefix
    return None


class KeyKinds:
    """The arrays prefix of each of a lookup's keys (``of``: its place in ``PREFIXES``, -1 for none), and the
    16-byte bodies of those that have one: found once for every generation the lookup asks, over the keys laid
    end to end, not by a test and a slice per key and generation; and only once a generation with arrays is
    asked (most of a worker's lookups go to its newest generation, which has none)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        self._keys = keys

    @property
    def of(self) -> np.ndarray:
        return self._found[0]

    def bodies(self, kind: int, indexes: list[int]) -> bytes:
        """The bodies of ``keys[indexes]``, all of ``PREFIXES[kind]``, end to end (as the arrays search them)."""
        _, rows, bodies = self._found
        return bodies[kind][rows[indexes]].tobytes()

    @cached_property
    def _found(self) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        keys = self._keys
        count = len(keys)
        kinds = np.full(count, -1, dtype=np.int8)
        rows = np.zeros(count, dtype=np.int64)  # each key's row in its kind's bodies
        bodies = []
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=count)
        for kind, prefix in enumerate(PREFIXES):
            width = len(prefix) + ID_BYTES
            at = np.flatnonzero(lengths == width)
            joined = b"".join(map(keys.__getitem__, at.tolist()))
            block = np.frombuffer(joined, dtype=np.uint8).reshape(-1, width)
            ours = (block[:, : len(prefix)] == np.frombuffer(prefix, dtype=np.uint8)).all(axis=1)
            at = at[ours]
            kinds[at] = kind
            rows[at] = np.arange(at.size)
            bodies.append(block[ours, len(prefix) :])
        return kinds, rows, bodies


def decode_names(raw: bytes | None) -> dict[str, list[str]]:
    """The metadata's ``{family: [file names]}``."""
    if raw is None:
        return {}
    try:
        names = json.loads(raw)
    except ValueError as error:
        raise StoreCorruptError(
            f"the store's metadata names its sealed arrays unreadably ({error})",
            "restore the store from a snapshot or rebuild it from the output topic",
        ) from error
    return {family: list(files) for family, files in names.items()}


def encode_names(names: dict[str, list[str]]) -> bytes:
    return json.dumps(names, sort_keys=True).encode()


def open_files(path: Path, names: Iterable[str], *, missing_ok: bool = False) -> dict[bytes, SealedArrays]:
    """The named files of one generation, by prefix; a named file that is damaged, or missing (unless
    ``missing_ok``), raises ``StoreCorruptError``."""
    opened = {}
    for name in names:
        try:
            arrays = SealedArrays.open(path / name)
        except FileNotFoundError as error:
            if missing_ok:
                continue
            raise damaged(f"sealed arrays {path / name}", "the store names the file, which is missing") from error
        opened[arrays.prefix] = arrays
    return opened


def write_generation(path: Path, family_name: str, family: Rdict, first_seq: int) -> list[str]:
    """Write the fixed-width ids of a generation no longer written to its files beside the database (one per
    prefix that has any), each synced and renamed into place; returns their names. The family is read, not
    changed: the caller commits the names and removes the ids from the family in one write."""
    written = []
    for prefix in PREFIXES:
        bodies, seqs = _prefix_ids(family, prefix)
        if not seqs.size:
            continue
        name = file_name(family_name, prefix)
        sealed_arrays.write(path / name, prefix, bodies, seqs, first_seq)
        written.append(name)
    return written


def _prefix_ids(family: Rdict, prefix: bytes) -> tuple[bytes, np.ndarray]:
    """The 16 bytes after ``prefix`` of each key of ``family`` that has it, end to end, and their numbers."""
    lower, upper = prefix_range(prefix)
    read = ReadOptions()
    read.set_iterate_upper_bound(upper)
    read.fill_cache(False)  # a seal reads each block once
    bodies: list[bytes] = []
    seqs: list[np.ndarray] = []
    keys: list[bytes] = []
    values: list[bytes] = []
    for key, value in scan(family, lower, read):
        if len(key) != len(prefix) + ID_BYTES or not value:
            continue  # the codec gives every key of the prefix this length; an empty value is an id forgotten
        keys.append(key)
        values.append(value)
        if len(keys) >= _READ_CHUNK:
            _take_chunk(keys, values, len(prefix), bodies, seqs)
    _take_chunk(keys, values, len(prefix), bodies, seqs)
    return b"".join(bodies), np.concatenate(seqs) if seqs else np.zeros(0, np.int64)


def _take_chunk(keys: list[bytes], values: list[bytes], skip: int, bodies: list[bytes], seqs: list[np.ndarray]) -> None:
    if not keys:
        return
    packed = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), skip + ID_BYTES)
    bodies.append(packed[:, skip:].tobytes())
    seqs.append(np.fromiter(map(int.from_bytes, values), dtype=np.int64, count=len(values)))
    keys.clear()
    values.clear()


def items_in_order(
    arrays: dict[bytes, SealedArrays], family_items: Iterator[tuple[bytes, bytes]], from_key: bytes
) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of a generation's ids in key order from ``from_key`` on: its files' and its family's,
    the family's entry winning where both hold a key (an id put back, or forgotten: an empty value, left out)."""
    streams = [_file_items(arrays[prefix], from_key) for prefix in sorted(arrays)]
    pending = _merge_sorted([*streams, family_items])
    previous: tuple[bytes, bytes] | None = None
    for item in pending:  # the family comes last in the merge: of equal keys, its entry is the later one
        if previous is not None and previous[0] != item[0] and previous[1]:
            yield previous
        previous = item
    if previous is not None and previous[1]:
        yield previous


def _merge_sorted(streams: list[Iterator[tuple[bytes, bytes]]]) -> Iterator[tuple[bytes, bytes]]:
    """Merge streams sorted by key; of equal keys, the later stream's entry comes later (heapq.merge is
    stable over its arguments' order)."""
    return heapq.merge(*streams, key=lambda item: item[0])


def _file_items(arrays: SealedArrays, from_key: bytes) -> Iterator[tuple[bytes, bytes]]:
    for keys, seqs in arrays.items(start=arrays.position(from_key)):
        for key, seq in zip(keys, seqs, strict=True):
            yield key, seq.to_bytes(8, "big")


def remove_unnamed(path: Path, named: set[str]) -> list[str]:
    """Remove the arrays files (and half-written ones) in ``path`` that ``named`` does not hold."""
    removed = []
    for child in path.iterdir():
        name = child.name
        partial = name.startswith(".") and name.endswith(f"{SUFFIX}.partial")
        if (name.endswith(SUFFIX) and name not in named) or partial:
            child.unlink(missing_ok=True)
            removed.append(name)
    return removed


def remove(path: Path, names: Iterable[str]) -> None:
    for name in names:
        (path / name).unlink(missing_ok=True)


def verify(arrays: Sequence[SealedArrays]) -> None:
    """Check every file against the checksum its header carries, a file a thread (zlib's CRC runs without the
    GIL); the first damaged one raises ``StoreCorruptError``."""
    if not arrays:
        return
    with ThreadPoolExecutor(max_workers=min(len(arrays), os.cpu_count() or 1)) as pool:
        for checked in pool.map(SealedArrays.verify, arrays):
            del checked


def bytes_of(arrays: dict[bytes, SealedArrays]) -> int:
    return sum(a.file_bytes for a in arrays.values())

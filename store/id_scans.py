"""Reading a store's ids by sequence range, whole: for the id filter's full build and the sequence view. Each
generation that may hold the range is scanned once, its sealed arrays and its family; every scan reads its
iterator's status at the end (``store.damage.scan``), so a damaged block is refused, never taken for the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import compress

import numpy as np
from rocksdict import ReadOptions

from store import generation_arrays as arrays_files
from store.codec import IDS_LOWER, IDS_UPPER
from store.damage import scan, scan_chunks
from store.generations import Generation, Generations, ScanPoint
from store.id_filter import body_hashes, key_hashes

SCAN_CHUNK = 100_000  # ids a chunk


def id_chunks(generations: Callable[[], Generations], low: int, high: int) -> Iterator[tuple[list[bytes], list[int]]]:
    """``(keys, seqs)`` of the ids numbered ``low`` to ``high - 1``, a chunk at a time, in parts of
    ``SCAN_CHUNK`` ids read; each part opens its own iterators, so that nothing stays open between parts (the
    consumer may write the store meanwhile), and a generation dropped meanwhile (aged out) is skipped."""
    after: ScanPoint | None = None
    while True:
        keys, seqs, after = _scan_part(generations(), low, high, after)
        if keys:
            yield keys, seqs
        if after is None:
            return


def id_hashes(generations: Generations, low: int, high: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(key_hashes, numbers)`` of the ids numbered ``low`` to ``high - 1``, a chunk at a time, for a filter
    built whole: a generation's sealed arrays read as arrays, with no key made, and its family scanned. An id its
    family puts back or forgets comes from both: a filter holding an id it need not only asks one more
    generation."""
    read = _id_scan_reads()
    for generation in generations.covering(low, high):
        for arrays in generation.arrays.values():
            for firsts, seconds, seqs in arrays.columns(SCAN_CHUNK):
                live = (seqs >= low) & (seqs < high)
                yield body_hashes(arrays.prefix, firsts[live], seconds[live]), seqs[live]
        for keys, values in scan_chunks(generation.family, IDS_LOWER, read, SCAN_CHUNK):
            seqs = _seqs_of(values)
            live = (seqs >= low) & (seqs < high)  # a forgotten id's empty value reads as -1
            if live.any():
                yield key_hashes(list(compress(keys, live.tolist()))), seqs[live]


def _seqs_of(values: list[bytes]) -> np.ndarray:
    """The numbers of an ids family's values (big-endian, as wide as each needed), -1 for an empty one (an id
    forgotten); a byte position at a time for the whole chunk, not an ``int.from_bytes`` per id."""
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    data = np.frombuffer(b"".join(values), np.uint8).astype(np.int64)
    starts = np.cumsum(lengths) - lengths
    seqs = np.zeros(len(values), np.int64)
    for at in range(int(lengths.max(initial=0))):
        wider = lengths > at
        seqs[wider] = (seqs[wider] << 8) | data[starts[wider] + at]
    seqs[lengths == 0] = -1
    return seqs


def _scan_part(
    generations: Generations, low: int, high: int, after: ScanPoint | None
) -> tuple[list[bytes], list[int], ScanPoint | None]:
    """At most ``SCAN_CHUNK`` ids read, from just past ``after`` (None: the start): the ids of the range found,
    and where the next part starts (None: the scan is done)."""
    read = _id_scan_reads()
    keys: list[bytes] = []
    seqs: list[int] = []
    scanned = 0
    for generation in generations.covering(low, high):
        if after is not None and generation.first_seq < after.first_seq:
            continue
        resumed = after is not None and generation.first_seq == after.first_seq
        for key, value in _items_of(generation, after.key if resumed else IDS_LOWER, read):
            if resumed and key == after.key:
                continue
            seq = int.from_bytes(value, "big")
            if low <= seq < high:
                keys.append(key)
                seqs.append(seq)
            scanned += 1
            if scanned >= SCAN_CHUNK:
                return keys, seqs, ScanPoint(generation.first_seq, key)
    return keys, seqs, None


def _items_of(generation: Generation, from_key: bytes, read: ReadOptions) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of a generation's ids in key order from ``from_key`` on: its family's, and its sealed
    arrays' where it has them."""
    family_items = scan(generation.family, from_key, read)
    if not generation.arrays:
        return family_items
    return arrays_files.items_in_order(generation.arrays, family_items, from_key)


def _id_scan_reads() -> ReadOptions:
    """A scan of a generation's ids: up to IDS_UPPER (past every id key), without filling the block cache (a scan
    reads each block once)."""
    read = ReadOptions()
    read.set_iterate_upper_bound(IDS_UPPER)
    read.fill_cache(False)
    return read

"""Which partition a producer put a key in: the Java client's default partitioner (murmur2) or librdkafka's
(``consistent_random``: CRC32), so ``dedupectl trace`` reads one partition instead of the topic and the
worker can check each record's partition (``partitions_of``, over a batch at once).

murmur2 is Kafka's own variant (``org.apache.kafka.common.utils.Utils.murmur2``: seed 0x9747b28c, 32-bit
arithmetic, little-endian blocks); the partition is ``(hash & 0x7fffffff) % partitions``. librdkafka's
``murmur2_random`` partitioner gives the same partition for a keyed record.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int, as Java returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for at in range(0, whole, 4):
        k = int.from_bytes(data[at : at + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def crc32_partition(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


PARTITIONERS: dict[str, tuple[Callable[[bytes, int], int], str]] = {
    "murmur2": (murmur2_partition, "murmur2 of the key, the Java client's default (librdkafka: murmur2_random)"),
    "crc32": (crc32_partition, "CRC32 of the key, librdkafka's default (consistent_random)"),
}


def murmur2_array(keys: list[bytes]) -> np.ndarray:
    """``murmur2`` of each key as uint32, vectorised over keys of one length at a time (a batch's ids mostly
    share theirs): a few array operations per 4 bytes of key instead of a Python loop per key."""
    hashes = np.empty(len(keys), dtype=np.uint32)
    by_length: dict[int, list[int]] = {}
    for index, length in enumerate(map(len, keys)):
        by_length.setdefault(length, []).append(index)
    for length, indices in by_length.items():
        group = keys if len(indices) == len(keys) else [keys[index] for index in indices]
        hashes[indices] = _murmur2_same_length(group, length)
    return hashes


def _murmur2_same_length(keys: list[bytes], length: int) -> np.ndarray:
    m = np.uint32(_M)
    data = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), length)
    h = np.full(len(keys), (_SEED ^ length) & _MASK, dtype=np.uint32)
    whole = length - length % 4
    blocks = data[:, :whole].copy().view("<u4")  # little-endian 4-byte blocks, one row per key
    with np.errstate(over="ignore"):  # uint32 arithmetic wraps, as Java's int does
        for column in range(whole // 4):
            k = blocks[:, column] * m
            k ^= k >> np.uint32(24)
            k *= m
            h = (h * m) ^ k
        tail = length - whole
        if tail == 3:
            h ^= data[:, whole + 2].astype(np.uint32) << np.uint32(16)
        if tail >= 2:
            h ^= data[:, whole + 1].astype(np.uint32) << np.uint32(8)
        if tail:
            h ^= data[:, whole].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    return h


def partitions_of(keys: list[bytes], partitions: int, partitioner: str) -> np.ndarray:
    """The partition ``partitioner`` (a name in ``PARTITIONERS``) gives each key, for a whole batch at once."""
    if partitioner == "murmur2":
        return (murmur2_array(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)
    hashes = np.fromiter(map(zlib.crc32, keys), dtype=np.uint32, count=len(keys))
    return hashes % np.uint32(partitions)

"""Which partition a producer put a key in: the Java client's default partitioner (murmur2) or librdkafka's
(``consistent_random``: CRC32), so ``dedupectl trace`` reads one partition instead of the topic.

murmur2 is Kafka's own variant (``org.apache.kafka.common.utils.Utils.murmur2``: seed 0x9747b28c, 32-bit
arithmetic, little-endian blocks); the partition is ``(hash & 0x7fffffff) % partitions``. librdkafka's
``murmur2_random`` partitioner gives the same partition for a keyed record.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

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

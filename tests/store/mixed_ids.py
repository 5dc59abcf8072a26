"""Ids of every kind the codec packs, for the store's tests."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable


def mixed_ids(count: int, random_bytes: Callable[[int], bytes] = os.urandom) -> list[bytes]:
    """``ajs-`` ids, canonical UUIDs, and other bytes of many lengths, in turn; ``random_bytes`` (e.g. a seeded
    ``random.Random().randbytes``) makes them the same in every run."""
    ids = []
    for n in range(count):
        kind = n % 4
        if kind == 0:
            ids.append(f"ajs-{random_bytes(16).hex()}".encode())
        elif kind == 1:
            ids.append(str(uuid.UUID(bytes=random_bytes(16))).encode())
        elif kind == 2:
            ids.append(f"order-{n}-{random_bytes(3).hex()}".encode())
        else:
            ids.append(random_bytes(1 + n % 40))
    return ids


def distinct_mixed_ids(count: int, seed: int) -> list[bytes]:
    """``count`` distinct ``mixed_ids``, the same for a seed in every process (short random bytes repeat)."""
    return list(dict.fromkeys(mixed_ids(count * 2, random.Random(seed).randbytes)))[:count]

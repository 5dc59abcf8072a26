"""The ``ids`` generations of a store: one column family per stretch of sequence numbers.

A generation holds the ids recorded under its stretch, keyed by id. While it is the newest it takes the
writes; once a newer one starts it is sealed: in a worker's store its ``ajs-`` and UUID ids move to sealed
arrays beside the database (``store.generation_arrays``), searched through a guide in a few reads of
memory; the rest of its family (ids of other kinds) is compacted into one sorted run on the last level, which
has no bloom filter (``store.options``), so its memory is its index alone. A lookup the id filter routes (by
the group it holds for the id, ``store.id_filter``) asks the one or two generations of that group's stretch,
whatever the store holds. Aging drops a generation whole, with its sealed arrays, once the cut has passed its
last number.

A family is named by its first sequence number (``ids.`` + 20 digits); it ends where the next begins. This
module keeps that list; ``store.generation_keeper`` owns the families.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rocksdict import Rdict

PREFIX = "ids."
_NAME = re.compile(r"^ids\.(\d{20})$")
# at least this many numbers a generation: fewer families for a small store, whose window is small anyway
MIN_GENERATION_IDS = 65_536


def family_name(first_seq: int) -> str:
    return f"{PREFIX}{first_seq:020d}"


def first_seq_of(name: str) -> int | None:
    """The first sequence number of a generation's family, None for another family."""
    match = _NAME.match(name)
    return int(match[1]) if match else None


def live_families(names: Sequence[str]) -> list[str]:
    """The generations among the families ``names``."""
    return [name for name in names if first_seq_of(name) is not None]


def foreign_families(names: Sequence[str]) -> list[str]:
    """Families named like generations but not as this layout names them (another build's)."""
    return [name for name in names if name.startswith(PREFIX) and first_seq_of(name) is None]


def generation_ids(window_ids: int, groups: int, slack: float) -> int:
    """Numbers per generation for a window: the id filter's stretch for that window, so that a group of the
    filter is one generation."""
    return max(MIN_GENERATION_IDS, math.ceil(window_ids * slack / (groups - 1)))


@dataclass
class Generation:
    first_seq: int
    name: str
    family: Rdict
    handle: Any  # rocksdict's ColumnFamily handle (the binding exports no type for it)
    # its sealed arrays by key prefix (``store.generation_arrays``): those ids are there, not in the family
    arrays: dict[bytes, Any] = field(default_factory=dict)
    # whether the family may hold keys of those prefixes too (ids put back or forgotten since): asked first
    overrides: bool = True


@dataclass(frozen=True)
class ScanPoint:
    """Where a scan of generations' ids stopped: after ``key`` in the generation that starts at ``first_seq``."""

    first_seq: int
    key: bytes


class Generations:
    """The live generations of one store, oldest first. Not thread-safe (the store's owner thread)."""

    def __init__(self, generations: list[Generation]):
        self._items = sorted(generations, key=lambda g: g.first_seq)
        self._firsts = [g.first_seq for g in self._items]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def newest(self) -> Generation | None:
        return self._items[-1] if self._items else None

    def newest_first(self) -> list[Generation]:
        return self._items[::-1]

    def end_of(self, generation: Generation, next_seq: int) -> int:
        """One past the last number ``generation`` may hold (``next_seq`` for the newest)."""
        index = bisect.bisect_left(self._firsts, generation.first_seq)
        return self._firsts[index + 1] if index + 1 < len(self._firsts) else max(next_seq, generation.first_seq)

    def holding(self, seq: int) -> Generation | None:
        """The generation numbers ``seq`` is written to (the last one starting at or before it)."""
        index = bisect.bisect_right(self._firsts, seq) - 1
        return self._items[index] if index >= 0 else None

    def covering(self, low: int, high: int) -> list[Generation]:
        """The generations that may hold numbers ``low`` to ``high - 1``."""
        if high <= low or not self._items:
            return []
        start = max(bisect.bisect_right(self._firsts, low) - 1, 0)
        end = bisect.bisect_left(self._firsts, high)
        return self._items[start:end]

    def add(self, generation: Generation) -> None:
        index = bisect.bisect_left(self._firsts, generation.first_seq)
        self._items.insert(index, generation)
        self._firsts.insert(index, generation.first_seq)

    def remove(self, generation: Generation) -> None:
        index = self._items.index(generation)
        del self._items[index]
        del self._firsts[index]

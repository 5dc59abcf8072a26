"""Whether each keyed record is in the partition the topic's partitioner gives its key. Dedup is per
partition: a key that two producers hash differently lands in two partitions, and its copies are never
compared, so every copy past the first is published again.

``RouteCheck`` answers for one partition's share of a batch, from its keys alone (no Kafka client), with
every key hashed at once (``partitioner.partitions_of``). The partitioner is named (``murmur2``, ``crc32``),
or found (``auto``): the one every keyed record observed so far matches, settled once at least
``AUTO_SETTLE_RECORDS`` keyed records agree with it alone. While both still match every record, nothing is
misrouted yet and the watch goes on. When neither matches every record (two producers with different
partitioners, or one that picks partitions itself), it settles at once on the one that matched more (murmur2
on a tie, Kafka's own default): the minority is what gets reported.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dedupectl.config import PARTITIONER_CHOICES
from dedupectl.partitioner import PARTITIONERS, partitions_of

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

# keyed records auto sees before it settles on the one partitioner they all match: with P partitions, a
# wrong one matches them all with odds P**-1000
AUTO_SETTLE_RECORDS = 1000


@dataclass(frozen=True)
class Routing:
    """The check's answer for one partition's share of a batch: which keyed records are elsewhere than their
    partitioner puts them, in input order, and where it puts each."""

    positions: list[int]
    expected: list[int]
    partitioner: str | None = None  # the one judged against (None: auto has not settled, nothing judged)

    def __len__(self) -> int:
        return len(self.positions)


NOTHING_MISROUTED = Routing([], [])


class RouteCheck:
    """One per worker (its input topic): the partitioner chosen or settled on, and auto's tally until then."""

    def __init__(self, choice: str, partitions: int) -> None:
        if choice not in PARTITIONER_CHOICES:  # resolve_worker_config refuses it first: a caller's bug
            raise ValueError(f"unknown partitioner {choice!r}")
        self.partitions = partitions
        self.choice = choice
        self.settled: str | None = choice if choice in PARTITIONERS else None
        self._matched = dict.fromkeys(PARTITIONERS, 0)  # auto: keyed records each partitioner matched
        self._observed = 0

    @property
    def active(self) -> bool:
        """False with ``any``, and with one input partition (no key can be anywhere else)."""
        return self.choice != "any" and self.partitions > 1

    def check(self, partition: int, keys: Sequence[bytes | None]) -> Routing:
        """The misrouted keyed records of ``partition``'s share of a batch; unkeyed records are not judged."""
        if not self.active:
            return NOTHING_MISROUTED
        if all(keys):  # C-level: the usual batch is all keyed
            positions, keyed = None, keys if isinstance(keys, list) else list(keys)
        else:
            positions = [position for position, key in enumerate(keys) if key]
            keyed = [keys[position] for position in positions]
        if not keyed:
            return NOTHING_MISROUTED
        if self.settled is None:
            expected = self._watch(partition, keyed)
            if self.settled is None:
                return NOTHING_MISROUTED  # every record so far matches every partitioner still in the running
        else:
            expected = partitions_of(keyed, self.partitions, self.settled)
        wrong = np.flatnonzero(expected != partition)
        if not len(wrong):
            return NOTHING_MISROUTED
        at = wrong.tolist() if positions is None else [positions[index] for index in wrong.tolist()]
        return Routing(at, expected[wrong].tolist(), self.settled)

    def _watch(self, partition: int, keyed: list[bytes]) -> np.ndarray | None:
        """Tally a batch for auto; settle when one partitioner alone matched every record (after enough of
        them) or none did. Returns the settled partitioner's partitions of ``keyed``, if it settled."""
        expected = {name: partitions_of(keyed, self.partitions, name) for name in PARTITIONERS}
        for name, found in expected.items():
            self._matched[name] += int(np.count_nonzero(found == partition))
        self._observed += len(keyed)
        matching_all = [name for name, matched in self._matched.items() if matched == self._observed]
        if len(matching_all) == 1 and self._observed >= AUTO_SETTLE_RECORDS:
            self._settle(matching_all[0], "every one of them matched it")
        elif not matching_all:
            best = max(self._matched, key=self._matched.__getitem__)  # the first (murmur2) on a tie
            self._settle(best, f"neither partitioner matched them all; {best} matched {self._matched[best]}")
        return None if self.settled is None else expected[self.settled]

    def _settle(self, name: str, why: str) -> None:
        self.settled = name
        log.info(
            "partitioner: the input is checked against %s (%s), after %d keyed records (%s)",
            name, PARTITIONERS[name][1], self._observed, why,
        )  # fmt: skip

"""Telling the operator about records in the wrong partition without a line per record: the first few of
each partition one by one, with both partitions, then a summary line at most every ``SUMMARY_EVERY_S``."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

from dedupectl.worker.routing import Routing

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

LOGGED_PER_PARTITION = 5
SUMMARY_EVERY_S = 60.0


class RoutingLog:
    def __init__(self, clock: Callable[[], float] = time.monotonic, forwarding: bool = False) -> None:
        self._clock = clock
        self._forwarding = forwarding  # --misrouted forward: each goes on to its partition, deduplicated there
        self._logged: Counter[int] = Counter()  # misrouted records logged one by one, per partition
        self._pending: Counter[int] = Counter()  # misrouted records not logged one by one since the last summary
        self._unkeyed_seen: set[int] = set()
        self._summarised_at = clock()

    def note(
        self, partition: int, routing: Routing, keys: Sequence[bytes | None], offsets: Sequence[int], unkeyed: int
    ) -> None:
        """One partition's share of a batch: its misrouted records (``routing``) and its unkeyed count."""
        for position, expected in zip(routing.positions, routing.expected, strict=True):
            if self._logged[partition] >= LOGGED_PER_PARTITION:
                self._pending[partition] += len(routing.positions) - routing.positions.index(position)
                break
            self._logged[partition] += 1
            if self._forwarding:
                log.warning(
                    "partition %d offset %d: key %r is in partition %d, but %s puts it in partition %d: forwarded "
                    "there (--misrouted forward)",
                    partition, offsets[position], _shown(keys[position]), partition, routing.partitioner, expected,
                )  # fmt: skip
                continue
            log.warning(
                "partition %d offset %d: key %r is in partition %d, but %s puts it in partition %d: its copies in "
                "the two partitions are not deduplicated; give the producers one partitioner (docs/guide.md)",
                partition, offsets[position], _shown(keys[position]), partition, routing.partitioner, expected,
            )  # fmt: skip
        if unkeyed and partition not in self._unkeyed_seen:
            self._unkeyed_seen.add(partition)
            log.warning(
                "partition %d: records without a key (their id from the value or a header): their copies are "
                "deduplicated only if the producer puts every copy in one partition (counted in "
                "dedupectl_unkeyed_records_total; logged once per partition)",
                partition,
            )

    def summarise_if_due(self) -> None:
        """Log how many misrouted records went unlogged, per partition, once ``SUMMARY_EVERY_S`` has passed."""
        now = self._clock()
        if not self._pending or now - self._summarised_at < SUMMARY_EVERY_S:
            return
        counts = ", ".join(f"partition {partition}: {count}" for partition, count in sorted(self._pending.items()))
        since = now - self._summarised_at
        log.warning("misrouted records in the last %.0f s, not logged one by one: %s", since, counts)
        self._pending.clear()
        self._summarised_at = now


def _shown(key: bytes | None) -> str:
    """A key as a log line can carry it: text when it is, at most 64 characters."""
    text = (key or b"").decode("utf-8", "backslashreplace")
    return text if len(text) <= 64 else text[:61] + "..."

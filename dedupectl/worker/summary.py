"""What a worker's run did, as ``dedupectl run --json`` reports it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunSummary:
    consumed: int = 0
    published: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    misrouted: int = 0  # keyed records in another partition than their partitioner's (published or dead)
    unkeyed: int = 0  # records without a key whose id came from the value or a header
    duplicates_produced: int = 0  # dropped copies produced to the duplicates topic
    recovered: int = 0
    batches: int = 0
    commits: int = 0
    aborts: int = 0
    first_consumed_at: float | None = None
    last_committed_at: float | None = None
    partitions: list[int] = field(default_factory=list)

    @property
    def busy_seconds(self) -> float:
        """From the first record consumed to the last transaction committed."""
        if self.first_consumed_at is None or self.last_committed_at is None:
            return 0.0
        return max(self.last_committed_at - self.first_consumed_at, 0.0)

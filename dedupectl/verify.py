"""Reading a whole topic back (read_committed) to check what a run published: exactly once, or not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from dedupectl.config import KafkaConfig
from reconcile.kafka import partition_counts
from reconcile.scan import scan_output


def count_ids(kafka: KafkaConfig, topic: str) -> Counter[bytes]:
    """How many times each key appears in the committed records of every partition of ``topic``."""
    counts: Counter[bytes] = Counter()
    for partition in range(partition_counts(kafka, [topic])[topic]):
        for batch in scan_output(kafka, topic, partition, -1):
            counts.update(batch.ids)
    return counts


@dataclass(frozen=True)
class OutputCheck:
    records: int
    distinct_ids: int
    duplicated_ids: int  # ids published more than once
    missing_ids: int  # expected ids never published
    unexpected_ids: int  # published ids that were not expected

    @property
    def exactly_once(self) -> bool:
        return self.duplicated_ids == 0 and self.missing_ids == 0 and self.unexpected_ids == 0


def check_output(kafka: KafkaConfig, topic: str, expected_ids: Iterable[bytes]) -> OutputCheck:
    counts = count_ids(kafka, topic)
    expected = set(expected_ids)
    seen = set(counts)
    return OutputCheck(
        records=sum(counts.values()),
        distinct_ids=len(seen),
        duplicated_ids=sum(1 for n in counts.values() if n > 1),
        missing_ids=len(expected - seen),
        unexpected_ids=len(seen - expected),
    )

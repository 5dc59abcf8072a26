"""Snapshot ids: ``<topic>-<partition>-<UTC time to the millisecond>``, e.g. ``events-3-20260101T120000.123Z``.

Stable (derived from what and when, nothing random), sortable within a partition (the time is fixed-width),
and safe as a directory name, an S3 key component and an EC2 tag value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from snapshots.errors import SnapshotNotFoundError

_TIME_FORMAT = "%Y%m%dT%H%M%S"
_ID = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)-(?P<stamp>\d{8}T\d{6})\.(?P<millis>\d{3})Z$")


@dataclass(frozen=True, order=True)
class SnapshotId:
    topic: str
    partition: int
    created_ms: int

    def __str__(self) -> str:
        moment = datetime.fromtimestamp(self.created_ms / 1000, tz=UTC)
        return f"{self.topic}-{self.partition}-{moment.strftime(_TIME_FORMAT)}.{self.created_ms % 1000:03d}Z"


def new_snapshot_id(topic: str, partition: int, now_ms: int) -> SnapshotId:
    return SnapshotId(topic, partition, now_ms)


def parse_snapshot_id(text: str) -> SnapshotId:
    match = _ID.match(text)
    if match is None:
        raise SnapshotNotFoundError(
            f"{text!r} is not a snapshot id (expected <topic>-<partition>-<YYYYmmddTHHMMSS.mmm>Z)",
            "copy the id from `dedupectl snapshot list`",
        )
    moment = datetime.strptime(match["stamp"], _TIME_FORMAT).replace(tzinfo=UTC)
    created_ms = int(moment.timestamp()) * 1000 + int(match["millis"])
    return SnapshotId(match["topic"], int(match["partition"]), created_ms)


def is_snapshot_id(text: str) -> bool:
    return _ID.match(text) is not None

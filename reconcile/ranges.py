"""``--from`` / ``--to``: an offset, or a point in time resolved to an offset per partition.

Accepted forms:

- ``12345``: an offset;
- ``2026-11-21T08:00:00Z``, ``2026-11-21 08:00``, ``2026-11-21``: ISO-8601 (no zone: UTC);
- ``90s``, ``30m``, ``2h``, ``1d``, ``1w``: that long before now.

A time resolves to the first offset whose record timestamp is at or after it (Kafka's offsets_for_times).
``--from`` is inclusive and ``--to`` exclusive; by default a range runs from the first retained offset to
the partition's last stable offset when the reconcile starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from reconcile.errors import RangeError
from store import clock

if TYPE_CHECKING:  # parsing a bound needs no Kafka client: the CLI's help quotes FORMS
    from reconcile.scan import OutputReader

_RELATIVE = re.compile(r"^(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>s|m|h|d|w)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
FORMS = "an offset (12345), an ISO-8601 time (2026-11-21T08:00:00Z) or an age (30m, 2h, 1d)"


@dataclass(frozen=True)
class Bound:
    """One end of a range as given: exactly one of ``offset`` and ``timestamp_ms`` is set."""

    text: str
    offset: int | None = None
    timestamp_ms: int | None = None


def parse_bound(text: str, option: str, *, now_ms: int | None = None) -> Bound:
    value = text.strip()
    if re.fullmatch(r"-?\d+", value):
        offset = int(value)
        if offset < 0:
            raise RangeError(f"{option} {text!r} is a negative offset", f"give {FORMS}")
        return Bound(text, offset=offset)
    relative = _RELATIVE.match(value.lower())
    if relative:
        now_ms = clock.now_ms() if now_ms is None else now_ms
        seconds = float(relative["amount"]) * _UNIT_SECONDS[relative["unit"]]
        return Bound(text, timestamp_ms=now_ms - int(seconds * 1000))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise RangeError(f"{option} {text!r} is not an offset or a time", f"give {FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Bound(text, timestamp_ms=int(moment.timestamp() * 1000))


def check_order(start: Bound | None, stop: Bound | None) -> None:
    """Refuse ranges that are empty or reversed whatever the partition (same kind on both ends)."""
    if start is None or stop is None:
        return
    if start.offset is not None and stop.offset is not None:
        first, last = start.offset, stop.offset
    elif start.timestamp_ms is not None and stop.timestamp_ms is not None:
        first, last = start.timestamp_ms, stop.timestamp_ms
    else:
        return  # an offset and a time: only the partition can tell
    if first > last:
        raise RangeError(f"--from {start.text} is after --to {stop.text}", "swap them: --from is the earlier end")
    if first == last:
        raise RangeError(
            f"--from {start.text} and --to {stop.text} make an empty range", "--to is exclusive: give a later --to"
        )


@dataclass(frozen=True)
class OffsetRange:
    """A partition's range resolved to offsets: ``start`` inclusive, ``stop`` exclusive; ``low``/``end``
    are the partition's first retained offset and last stable offset when it was resolved."""

    start: int
    stop: int
    low: int
    end: int

    @property
    def empty(self) -> bool:
        """No offsets (``start > stop`` when a time and an offset cross)."""
        return self.start >= self.stop


def resolve_range(
    reader: OutputReader, topic: str, partition: int, start: Bound | None, stop: Bound | None
) -> OffsetRange:
    bounds = reader.bounds(topic, partition)
    first = _resolve(reader, topic, partition, start, default=bounds.low)
    last = _resolve(reader, topic, partition, stop, default=bounds.end)
    # offsets before retention's cut cannot be read; offsets past the end are not written yet
    first = min(max(first, bounds.low), bounds.end)
    last = min(last, bounds.end)
    return OffsetRange(start=first, stop=last, low=bounds.low, end=bounds.end)


def _resolve(reader: OutputReader, topic: str, partition: int, bound: Bound | None, default: int) -> int:
    if bound is None:
        return default
    if bound.offset is not None:
        return bound.offset
    found = reader.offset_for_time(topic, partition, bound.timestamp_ms)
    return reader.bounds(topic, partition).end if found is None else found

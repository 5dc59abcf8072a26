"""The wall clock in the unit every timestamp of the product uses: milliseconds since the Unix epoch (Kafka's
record timestamps, the store's, snapshot ids)."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the Unix epoch, now."""
    return int(time.time() * 1000)

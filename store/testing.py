"""Damage a store the way real failures do, for tests and benchmarks of what must notice or handle it: only this
package knows where in the layout the change has to go."""

from __future__ import annotations

from collections.abc import Sequence

from store.codec import encode_ids
from store.dedup_store import DedupStore


def lose_ids(store: DedupStore, ids: Sequence[bytes]) -> None:
    """Delete ``ids`` and nothing else, as a lost SST file would: their batches keep the digests that still
    count them, and the state still says they are live."""
    store.erase_keys(encode_ids(ids))

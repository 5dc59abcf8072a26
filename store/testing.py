"""Damage a store the way real failures do, for tests of the layers above that must notice it: only this
package knows where in the layout the damage has to go."""

from __future__ import annotations

from collections.abc import Sequence

from store.codec import encode_ids
from store.dedup_store import DedupStore


def lose_ids(store: DedupStore, ids: Sequence[bytes]) -> None:
    """Delete ``ids`` and nothing else, as a lost SST file would: their batches keep the digests that still
    count them, and the state still says they are live."""
    keys = encode_ids(ids)
    for name, _, _ in store.id_families():
        family = store.family(name)
        for key in keys:
            del family[key]

"""Removing ids from a store: the only deletion reconcile makes, for ids the output never published.

An id in the store that the output does not hold makes the worker drop every later copy of it as a
duplicate: the message is lost. Removing it lets the next copy through. The counters (next sequence, the
cut, covered offsets) stay; the id's timestamp slot in ``times`` stays too (timestamps are kept per batch
of sequence numbers), unread.

This writes the store's layout (``store.codec``: the ``ids`` family keyed by the packed id) directly
because ``DedupStore`` has no removal of arbitrary ids (aging removes only the oldest, by its cut): it
belongs there, next to ``record``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rocksdict import WriteBatch

from store.codec import CF_IDS, encode_ids
from store.dedup_store import DedupStore


def forget_ids(store: DedupStore, entries: Sequence[tuple[int, bytes]]) -> int:
    """Delete ``(seq, id)`` pairs from the store (read-write), in one batch; return how many."""
    if not entries:
        return 0
    if not store.writable:
        raise ValueError("forget_ids needs the store open read-write")
    batch = WriteBatch(raw_mode=True)
    handle = store.family_handle(CF_IDS)
    for key in encode_ids([message_id for _, message_id in entries]):
        batch.delete(key, handle)
    store.db.write(batch)
    return len(entries)

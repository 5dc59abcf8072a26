"""Reconcile's two repairs, the only writes that change ids below the newest number: ids put back under their own
numbers (``place``) and ids the output never published removed (``forget``). Each voids, in one call, the
background work its change would make wrong: the sealed arrays being written, and (``place``) the saved filter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rocksdict import WriteBatch

from store import generation_arrays as arrays_files
from store.codec import META_FILTER_TOKEN, seq_width
from store.database import Database
from store.filter_keeper import FilterKeeper
from store.generation_keeper import GenerationKeeper
from store.generations import Generation
from store.ledger import Ledger
from store.lookups import Lookups


class Repairs:
    def __init__(
        self, database: Database, keeper: GenerationKeeper, lookups: Lookups, ledger: Ledger, filters: FilterKeeper
    ):
        self._database = database
        self._keeper = keeper
        self._lookups = lookups
        self._ledger = ledger
        self._filters = filters

    def place(self, keys: list[bytes], offsets: Sequence[int]) -> list[int | None]:
        """Put encoded ids the store lost back under the numbers they were recorded with, found by the output
        offset each was published at; one WriteBatch. An id is placed only when a live batch recorded exactly
        that offset and the id is absent; returns, for each, the number it was put back under (None: not)."""
        seq_of = self._ledger.seqs_published_at(offsets)
        self._void(saved_filter=True)
        batch = WriteBatch(raw_mode=True)
        batch.delete(META_FILTER_TOKEN, self._database.meta_handle)  # a saved filter lacks the ids put back below
        placed: list[int | None] = [None] * len(keys)
        taken: set[int] = set()
        keys_taken: set[bytes] = set()
        for index, (key, live, offset) in enumerate(zip(keys, self._lookups.live_seqs(keys), offsets, strict=True)):
            seq = seq_of.get(offset)
            if seq is None or seq in taken or key in keys_taken or live is not None:
                continue  # no batch recorded that offset, taken already, or not lost (live under its own number)
            generation = self._keeper.generations.holding(seq)
            batch.put(key, seq.to_bytes(seq_width(seq), "big"), generation.handle)
            generation.overrides = True  # asked before its sealed arrays, if it has any
            taken.add(seq)
            keys_taken.add(key)
            placed[index] = seq
        if taken:
            self._database.write(batch)
            chosen = [index for index, seq in enumerate(placed) if seq is not None]
            self._filters.add([keys[index] for index in chosen], np.array([placed[index] for index in chosen]))
        return placed

    def forget(self, keys: list[bytes]) -> list[int]:
        """Remove encoded ids from the window, in one WriteBatch; returns the numbers of those that were there.
        Sequence numbers and covered offsets do not change."""
        batch = WriteBatch(raw_mode=True)
        removed: list[int] = []
        for key, seq in zip(keys, self._lookups.live_seqs(keys), strict=True):
            if seq is not None:
                _erase(self._keeper.generations.holding(seq), key, batch)
                removed.append(seq)
        if removed:
            self._void(saved_filter=False)
            self._ledger.drop_digests(sorted(removed), batch)
            self._database.write(batch)
        return removed

    def erase(self, keys: list[bytes]) -> None:
        """Remove encoded ids from every generation and change nothing else (``store.testing``'s lost file)."""
        batch = WriteBatch(raw_mode=True)
        for generation in self._keeper.generations:
            for key in keys:
                _erase(generation, key, batch)
        self._database.write(batch)

    def _void(self, *, saved_filter: bool) -> None:
        """What a repair makes wrong: sealed arrays being written (written again), and, for ids put back, a filter
        save in progress (waited for: it could name a file saved without them after the repair's batch)."""
        if saved_filter:
            self._filters.wait_for_save()
        self._keeper.void_arrays()


def _erase(generation: Generation, key: bytes, batch: WriteBatch) -> None:
    """Remove ``key`` from ``generation`` in ``batch``: deleted from its family, or, where its sealed arrays may
    hold it, marked forgotten there (an empty value, which every read takes for absent)."""
    if arrays_files.prefix_of(key) in generation.arrays:
        batch.put(key, b"", generation.handle)
        generation.overrides = True
    else:
        batch.delete(key, generation.handle)

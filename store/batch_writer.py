"""The write of one batch of newly published ids: their numbers in the generations they reach, their timestamps,
output offsets and digests in ``times``, and the covered offsets in ``meta``, in one RocksDB WriteBatch."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Sequence
from itertools import repeat

import numpy as np
from rocksdict import WriteBatch

from store.codec import META_STATE, StoreState, encode_ids, encode_seq, encode_seq_values, encode_state
from store.database import Database
from store.filter_keeper import FilterKeeper
from store.generation_keeper import GenerationKeeper
from store.times_codec import batch_digests, encode_times


class BatchWriter:
    def __init__(self, database: Database, keeper: GenerationKeeper, filters: FilterKeeper, stretch: Callable[[], int]):
        self._database = database
        self._keeper = keeper
        self._filters = filters
        self._stretch = stretch  # numbers per generation

    def write(
        self,
        state: StoreState,
        ids: Sequence[bytes],
        timestamps_ms: Sequence[int],
        input_offset: int | None,
        output_offset: int | None,
        output_offsets: Sequence[int] | None,
        keys: list[bytes] | None,
    ) -> tuple[StoreState, list[bytes]]:
        """Write the batch; returns the new state and the ids' keys. The caller guarantees the ids are absent and
        distinct; ``output_offsets``, when known, are where each id was published (ascending, past every offset
        recorded in the output topic's present life)."""
        if len(ids) != len(timestamps_ms):
            raise ValueError(f"{len(ids)} ids but {len(timestamps_ms)} timestamps")
        if output_offsets is not None and len(output_offsets) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(output_offsets)} output offsets")
        batch = WriteBatch(raw_mode=True)
        first, count = state.next_seq, len(ids)
        keys = keys if keys is not None or not count else encode_ids(ids)
        if count:
            values = encode_seq_values(first, count)
            starts, left_any, filled = self._keeper.generations_for(first, count, self._stretch())
            if left_any:
                self._filters.sealed()
            put = batch.put
            # in key order: the memtable's skip list takes sorted keys faster, by more than the sort costs
            ordered = key_order(keys)
            if len(starts) == 1:  # the usual batch: all in the newest generation (a C-level loop: one put per id)
                deque(
                    map(
                        put,
                        map(keys.__getitem__, ordered),
                        map(values.__getitem__, ordered),
                        repeat(starts[0][1].handle),
                    ),
                    0,
                )
            else:
                firsts = [start for start, _ in starts]
                for index in ordered:
                    put(keys[index], values[index], starts[bisect.bisect_right(firsts, first + index) - 1][1].handle)
            # the batch's digests let reconcile check a stretch of output against it without a lookup per id
            times = encode_times(timestamps_ms, batch_digests(keys), output_offsets)
            put(encode_seq(first), times, self._database.times_handle)
        new_state = StoreState(
            next_seq=first + count,
            first_live_seq=state.first_live_seq,
            input_offset=state.input_offset if input_offset is None else max(input_offset, state.input_offset),
            output_offset=state.output_offset if output_offset is None else max(output_offset, state.output_offset),
        )
        batch.put(META_STATE, encode_state(new_state), self._database.meta_handle)
        self._database.write(batch)
        if count and filled:
            self._keeper.seal_filled(filled)
        return new_state, keys or []


def key_order(keys: list[bytes]) -> list[int]:
    """The indexes of ``keys`` in key order; keys all of one width of 8 bytes or more (the usual batch) in the
    order of their first 8 bytes: the order only speeds the memtable up, and ids differ within their first
    bytes."""
    count, width = len(keys), len(keys[0])
    if count > 1 and width >= 8 and set(map(len, keys)) == {width}:
        prefixes = np.ndarray((count,), ">u8", b"".join(keys), 0, (width,))
        return prefixes.argsort(kind="stable").tolist()
    return sorted(range(count), key=keys.__getitem__)

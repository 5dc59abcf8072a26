"""The ``times`` family read as a ledger of batches: each recorded sequence number's timestamp and output offset,
the number published at an output offset, and the batch digests that vouch for a stretch of ids at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from rocksdict import WriteBatch

from store.codec import StoreState, decode_seq, encode_seq
from store.damage import check_ended, damaged
from store.database import Database
from store.times_codec import (
    DIGEST_BYTES,
    DIGEST_CHUNK,
    chunk_digest,
    times_at,
    times_count,
    times_digests,
    times_offset_at,
    times_offsets,
    without_digests,
)


class Ledger:
    def __init__(self, database: Database, state: Callable[[], StoreState], offsets_from_seq: Callable[[], int]):
        self._database = database
        self._state = state
        self._offsets_from_seq = offsets_from_seq  # below it, recorded offsets belong to an earlier output topic

    def timestamps(self, seqs: Sequence[int]) -> list[int]:
        """The record timestamp (ms) of each recorded sequence number (one seek per batch of consecutive numbers
        asked for: pass them sorted)."""
        found: list[int] = []
        for _, first, value, held in self.batches(list(seqs)):
            found += times_at(value, [seq - first for seq in held])
        return found

    def output_offsets(self, seqs: Sequence[int]) -> list[int | None]:
        """The output offset each recorded sequence number was published at (None: its batch was recorded
        without offsets); pass them sorted."""
        found: list[int | None] = []
        since = self._offsets_from_seq()
        for _, first, value, held in self.batches(list(seqs)):
            offsets = times_offsets(value) if first >= since else None
            found += [None] * len(held) if offsets is None else [offsets[seq - first] for seq in held]
        return found

    def window_start_offset(self) -> int | None:
        """The output offset of the oldest live id: every output record before it is older than the window,
        exactly. -1 while nothing has aged; None when the batch the cut falls in was recorded without offsets."""
        state = self._state()
        if state.first_live_seq == 0:
            return -1
        if state.live_ids <= 0:  # everything recorded has aged: the window starts past the newest id
            (newest,) = self.output_offsets([state.next_seq - 1])
            return None if newest is None else newest + 1
        return self.output_offsets([state.first_live_seq])[0]

    def newest_output_offset(self) -> int | None:
        """The output offset of the newest recorded id (-1: none recorded; None: recorded without offsets)."""
        next_seq = self._state().next_seq
        return -1 if next_seq == 0 else self.output_offsets([next_seq - 1])[0]

    def seqs_published_at(self, offsets: Sequence[int]) -> dict[int, int]:
        """Live sequence number recorded at each of ``offsets``, where a batch with offsets holds it.

        Sequence order is publication order, so the first is found by bisecting the live numbers, and the
        rest by walking the batches forward from there."""
        state = self._state()
        found: dict[int, int] = {}
        offsets = sorted(set(offsets))
        low, high = max(state.first_live_seq, self._offsets_from_seq()), state.next_seq - 1
        if not offsets or low > high:
            return found
        while low < high:  # the first live number published at or after offsets[0]
            middle = (low + high) // 2
            at = self._offset_at(middle)
            if at is None:
                return found
            if at < offsets[0]:
                low = middle + 1
            else:
                high = middle
        it = self._database.times.iter()
        try:
            it.seek_for_prev(encode_seq(low))
            wanted = 0
            while it.valid() and wanted < len(offsets):
                first, value = decode_seq(it.key()), it.value()
                batch_offsets = times_offsets(value)
                if batch_offsets is None:
                    return found
                by_offset = {offset: first + index for index, offset in enumerate(batch_offsets)}
                while wanted < len(offsets) and offsets[wanted] <= batch_offsets[-1]:
                    seq = by_offset.get(offsets[wanted])
                    if seq is not None and seq >= state.first_live_seq:
                        found[offsets[wanted]] = seq
                    wanted += 1
                it.next()
            if wanted < len(offsets):
                check_ended(it)
        finally:
            del it
        return found

    def _offset_at(self, seq: int) -> int | None:
        it = self._database.times.iter()
        try:
            it.seek_for_prev(encode_seq(seq))
            if not it.valid():
                check_ended(it)
                return None
            first, value = decode_seq(it.key()), it.value()
            if seq - first >= times_count(value) or first < self._offsets_from_seq():
                return None
            return times_offset_at(value, seq - first)
        finally:
            del it

    def match_digests(self, keys: list[bytes], first: int) -> list[int] | None:
        """Check ``keys`` (encoded, in order) against the batch digests of sequence numbers
        ``first..first+len(keys)-1``, without a lookup per id: every digest chunk they cover whole must have
        the digest of the keys at its places. Returns the places (indexes into ``keys``) no digest vouches for,
        which only a lookup can check (chunks covered in part, at the edges; batches without digests); None
        when a digest disagrees or a number has no batch."""
        stop = first + len(keys)
        unchecked: list[int] = []
        reached = first  # every number below is accounted for
        it = self._database.times.iter()
        try:
            it.seek_for_prev(encode_seq(first))
            while it.valid() and reached < stop:
                batch_first, value = decode_seq(it.key()), it.value()
                batch_stop = batch_first + times_count(value)
                if batch_first > reached or batch_stop <= reached:
                    return None  # a gap: not what a batch's record writes
                high = min(batch_stop, stop)
                digests = times_digests(value)
                if digests is None:
                    unchecked.extend(range(reached - first, high - first))
                    reached = high
                chunk = (reached - batch_first) // DIGEST_CHUNK
                while reached < high:
                    chunk_first = batch_first + chunk * DIGEST_CHUNK
                    chunk_stop = min(chunk_first + DIGEST_CHUNK, batch_stop)
                    if chunk_first == reached and chunk_stop <= high:
                        wanted = digests[chunk * DIGEST_BYTES : (chunk + 1) * DIGEST_BYTES]
                        if chunk_digest(keys[reached - first : chunk_stop - first]) != wanted:
                            return None
                        reached = chunk_stop
                    else:  # the keys cover this chunk in part: those need lookups
                        end = min(chunk_stop, high)
                        unchecked.extend(range(reached - first, end - first))
                        reached = end
                    chunk += 1
                it.next()
            if reached < stop:
                check_ended(it)
        finally:
            del it
        return unchecked if reached == stop else None

    def drop_digests(self, seqs: list[int], batch: WriteBatch) -> None:
        """Rewrite, in ``batch``, the values of the batches holding ``seqs`` (sorted) without their digests: those
        batches no longer hold every id they recorded, so only a lookup per id can check them."""
        for key, _, value, _ in self.batches(seqs):
            stripped = without_digests(value)
            if stripped is not value:
                batch.put(key, stripped, self._database.times_handle)

    def batches(self, seqs: list[int]) -> Iterator[tuple[bytes, int, bytes, list[int]]]:
        """For ``seqs`` (sorted), each batch holding some of them, one seek per batch: its key, its first sequence
        number, its value and the numbers of ``seqs`` it holds."""
        it = self._database.times.iter()
        try:
            start = 0
            while start < len(seqs):
                it.seek_for_prev(encode_seq(seqs[start]))
                end = start
                if it.valid():
                    key, value = it.key(), it.value()
                    first = decode_seq(key)
                    stop = first + times_count(value)
                    while end < len(seqs) and first <= seqs[end] < stop:
                        end += 1
                if end == start:
                    check_ended(it)  # a damaged block names its file; else the batch is missing
                    raise damaged(
                        f"store {self._database.path}", f"no batch in its times family holds sequence {seqs[start]}"
                    )
                yield key, first, value, seqs[start:end]
                start = end
        finally:
            del it

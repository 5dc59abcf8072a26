"""A scratch index of a store's ids in sequence order, built on demand.

The store keeps each id once, keyed by id: nothing on disk lists ids by sequence number (a second copy would
more than double the bytes per id). Operator jobs that walk the store in publication order (reconcile,
``iter_by_seq``) get this view instead: one scan of the ``ids`` family writes ``>Q seq -> messageId`` into a
throwaway RocksDB in a temporary directory, which then answers seeks and range reads. It is built once per
open (its cost grows with the ids held) and lives until the store closes; the owning store keeps it current
with its own ``record`` and ``forget_many``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from store.codec import StoreState, decode_id, decode_seq, encode_seq


class SeqView:
    """``>Q seq -> messageId`` for the live ids of ``[low, high)`` at build time, plus what the owner adds."""

    def __init__(self, chunks: Iterable[tuple[list[bytes], list[int]]], low: int, high: int) -> None:
        """``chunks``: the store's ``(keys, seqs)`` of the ids numbered ``low`` to ``high - 1``."""
        self.low, self.high = low, high
        self._dir = tempfile.TemporaryDirectory(prefix="dedupectl-seqview-")
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(16 * 1024 * 1024)
        self.db = Rdict(self._dir.name, options=options)
        self._write = WriteOptions()
        self._write.disable_wal = True  # scratch: nothing to recover after a crash
        for keys, seqs in chunks:
            batch = WriteBatch(raw_mode=True)
            for key, seq in zip(keys, seqs, strict=True):
                batch.put(encode_seq(seq), decode_id(key))
            self.db.write(batch, self._write)

    def add(self, first: int, ids: list[bytes]) -> None:
        batch = WriteBatch(raw_mode=True)
        for offset, message_id in enumerate(ids):
            batch.put(encode_seq(first + offset), message_id)
        self.db.write(batch, self._write)
        self.high = max(self.high, first + len(ids))

    def remove(self, seqs: list[int]) -> None:
        batch = WriteBatch(raw_mode=True)
        for seq in seqs:
            batch.delete(encode_seq(seq))
        self.db.write(batch, self._write)

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            self._dir.cleanup()


class SeqOrder:
    """A store's ids in sequence order: the view built on first use (``chunks(low, high)`` reads them from the
    store), grown when asked for more, and kept current with the store's writes until it closes."""

    def __init__(self, chunks: Callable[[int, int], Iterable[tuple[list[bytes], list[int]]]]) -> None:
        self._chunks = chunks
        self._view: SeqView | None = None

    def items(self, state: StoreState, from_seq: int | None, to_seq: int | None) -> Iterator[tuple[int, bytes]]:
        """``(seq, messageId)`` of live ids, ``from_seq`` inclusive to ``to_seq`` exclusive."""
        low = max(state.first_live_seq, from_seq or 0)
        high = state.next_seq if to_seq is None else min(to_seq, state.next_seq)
        if low >= high:
            return
        end = encode_seq(high)
        for seq_key, message_id in self.view(state, low, high).db.items(from_key=encode_seq(low)):
            if seq_key >= end:
                return
            seq = decode_seq(seq_key)
            if seq >= state.first_live_seq:
                yield seq, message_id

    def view(self, state: StoreState, low: int, high: int) -> SeqView:
        view = self._view
        if view is None or low < view.low or high > view.high:
            if view is not None:
                low = min(low, view.low)
                view.close()
            self._view = view = SeqView(self._chunks(low, state.next_seq), low, state.next_seq)
        return view

    def added(self, first: int, ids: Sequence[bytes]) -> None:
        if self._view is not None and ids:
            self._view.add(first, list(ids))

    def placed(self, ids: Sequence[bytes], seqs: Sequence[int | None]) -> None:
        if self._view is not None:
            for message_id, seq in zip(ids, seqs, strict=True):
                if seq is not None:
                    self._view.add(seq, [message_id])

    def removed(self, seqs: list[int]) -> None:
        if self._view is not None and seqs:
            self._view.remove(seqs)

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None

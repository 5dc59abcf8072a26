"""A temporary on-disk map of message id -> sequence number, for a dry-run reconcile.

With ``--apply`` the ids the store lacks are recorded in the store as they are found, so their repeats
later in the range are found there. Without it the store is read-only, and those ids must be remembered
somewhere that does not grow memory with the range: a throwaway RocksDB (memtable-bounded, no WAL),
created only when the first missing id appears, deleted on close.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

_SEQ = struct.Struct(">Q")
WRITE_BUFFER_BYTES = 16 * 1024 * 1024


class ScratchIds:
    def __init__(self, parent: Path | None = None) -> None:
        self._parent = parent
        self._dir: Path | None = None
        self._db: Rdict | None = None
        self._write_options = WriteOptions()
        self._write_options.disable_wal = True  # a crash loses a throwaway map: nothing to recover
        self.size = 0

    def _open(self) -> Rdict:
        if self._db is None:
            self._dir = Path(tempfile.mkdtemp(prefix="dedupectl-reconcile-", suffix=".tmp", dir=self._parent))
            options = Options(raw_mode=True)
            options.create_if_missing(True)
            options.set_write_buffer_size(WRITE_BUFFER_BYTES)
            options.set_max_write_buffer_number(2)
            self._db = Rdict(str(self._dir), options=options)
        return self._db

    def lookup_many(self, ids: Sequence[bytes]) -> list[int | None]:
        if self._db is None or not ids:
            return [None] * len(ids)
        return [None if value is None else _SEQ.unpack(value)[0] for value in self._db[list(ids)]]

    def put_many(self, ids: Sequence[bytes], seqs: Sequence[int]) -> None:
        if not ids:
            return
        db = self._open()
        batch = WriteBatch(raw_mode=True)
        for message_id, seq in zip(ids, seqs, strict=True):
            batch.put(message_id, _SEQ.pack(seq))
        db.write(batch, self._write_options)
        self.size += len(ids)

    def iter_ids(self, chunk: int = 10_000) -> Iterator[list[bytes]]:
        """Every id held, in chunks."""
        if self._db is None:
            return
        pending: list[bytes] = []
        for key in self._db.keys():  # noqa: SIM118 - a raw-mode Rdict cannot be iterated directly
            pending.append(key)
            if len(pending) >= chunk:
                yield pending
                pending = []
        if pending:
            yield pending

    def forget_present(self, store) -> int:
        """Delete the ids ``store`` now holds (``store.contains_many``); return how many."""
        forgotten = 0
        for chunk in self.iter_ids():
            present = [message_id for message_id, known in zip(chunk, store.contains_many(chunk), strict=True) if known]
            for message_id in present:
                self._db.delete(message_id, self._write_options)
            forgotten += len(present)
        self.size -= forgotten
        return forgotten

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> ScratchIds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

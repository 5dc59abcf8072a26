"""A store's RocksDB instance and its two fixed families, ``times`` and ``meta``: the one place that writes a
batch and reads or writes the metadata. The generations' families are ``store.generation_keeper``'s.
"""

from __future__ import annotations

from pathlib import Path

from rocksdict import Rdict, WriteBatch, WriteOptions

from store.codec import CF_META, CF_TIMES
from store.damage import translated
from store.errors import StoreError
from store.generations import Generation


class Database:
    def __init__(self, db: Rdict, path: Path, *, writable: bool):
        self.db = db
        self.path = path
        self.writable = writable
        # RocksDB stays open (and locked) while any family Rdict or handle is alive: close drops them all
        self.times = db.get_column_family(CF_TIMES)
        self.meta = db.get_column_family(CF_META)
        self.times_handle = db.get_column_family_handle(CF_TIMES)
        self.meta_handle = db.get_column_family_handle(CF_META)

    def require_writable(self) -> None:
        if not self.writable:
            raise StoreError(f"store {self.path} is open read-only", "this operation needs the worker stopped")

    def meta_value(self, key: bytes) -> bytes | None:
        with translated():
            return self.meta.get(key)

    def write(self, batch: WriteBatch, *, sync: bool = False) -> None:
        if sync:
            durable = WriteOptions()
            durable.sync = True
            self.db.write(batch, durable)
        else:
            self.db.write(batch)

    def put_meta(self, values: dict[bytes, bytes | None], *, sync: bool = False) -> None:
        """Write (None: delete) metadata keys in one batch."""
        batch = WriteBatch(raw_mode=True)
        for key, value in values.items():
            if value is None:
                batch.delete(key, self.meta_handle)
            else:
                batch.put(key, value, self.meta_handle)
        self.write(batch, sync=sync)

    def generation(self, name: str, first_seq: int) -> Generation:
        return Generation(first_seq, name, self.db.get_column_family(name), self.db.get_column_family_handle(name))

    def sync_log(self) -> None:
        self.db.flush_wal(True)

    def flush(self) -> None:
        self.times.flush(True)
        self.meta.flush(True)

    def running_compactions(self) -> int:
        return self.db.property_int_value("rocksdb.num-running-compactions") or 0

    def close(self) -> None:
        """Close the fixed families, then the database (the generations' families must be closed first)."""
        for family in (self.times, self.meta):
            if family is not None:
                family.close()
        self.times = self.meta = self.times_handle = self.meta_handle = None
        self.db.close()

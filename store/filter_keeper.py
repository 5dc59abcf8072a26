"""The id filter of a worker's store over the store's life (the filter itself: ``store.id_filter``).

It is made on the first lookup: read back from the file saved beside the store and brought up to date with
the ids recorded since it was saved, or, where no saved file can be used, built from every live id. Each
recorded id is then added to it. It is saved at close and each time a generation is sealed, so that a worker
killed in between reads back the ids of a generation or two, not all of them.

A saved file is used only if the store's metadata names its token (``FilterStamp``). The token is written
once the file is durable, and a write that puts ids back under older numbers drops it in the same write
batch (``DedupStore.place``): the file would lack them.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from store import id_filter as filters
from store.codec import StoreIdentity, StoreState
from store.errors import StoreError
from store.id_filter import GROUPS, FilterStamp, IdFilter, key_hashes

log = logging.getLogger(__name__)

FILTER_FILE = "id-filter"  # beside the database
FILTER_SLACK = 1.05  # the window may pass its bound by a batch before the worker ages it
LOG_BUILDS_ABOVE = 100_000  # ids: smaller builds take well under a second and are not worth a log line


@dataclass(frozen=True)
class StoreAccess:
    """What the keeper reads and writes of its store."""

    path: Path
    writable: bool  # a reader's keeper never touches the store's files
    identity: StoreIdentity
    state: Callable[[], StoreState]
    window: Callable[[], int]  # ids a new filter is sized for
    bound: int | None  # the store's bound (its worker's max_keys), None for a store opened without one
    # (low, high) -> (key hashes, numbers) of the ids numbered low..high-1, a chunk at a time: a filter built whole
    id_hashes: Callable[[int, int], Iterator[tuple[np.ndarray, np.ndarray]]]
    saved_token: Callable[[], str | None]
    name_saved: Callable[[str], None]  # write the token of a durable saved file into the store's metadata
    # make every write so far durable: a saved filter's stamp never runs ahead of the state a crash keeps
    sync_log: Callable[[], None]


def _took(id_filter: IdFilter, keys: list[bytes], seqs: np.ndarray, cut: int) -> bool:
    """Add a batch just recorded to ``id_filter``; False where it had no room (it may then lack an entry)."""
    return id_filter.claim(int(seqs.min()), int(seqs.max()) + 1, cut) and id_filter.add(key_hashes(keys), seqs)


class FilterKeeper:
    """Owns one store's filter; used from the store's owner thread (a save's sync runs on a thread of its own)."""

    def __init__(self, store: StoreAccess):
        self._store = store
        self.current: IdFilter | None = None
        self._saving: threading.Thread | None = None
        self._save_due = False
        self._named: FilterStamp | None = None  # the stamp of the file this keeper last read back or saved
        self._reading: filters.BackgroundLoad | None = None

    def read_ahead(self) -> None:
        """Start reading the saved file on a thread of its own (numpy reads without the GIL), so that the first
        lookup finds it in memory: a worker opens its stores on assignment, before its first batch. The file
        is checked against the store when it is used, as if read then."""
        path = self._store.path / FILTER_FILE
        if self.current is None and self._reading is None and path.exists():
            self._reading = filters.BackgroundLoad(path, "read-id-filter")

    def _saved_file(self) -> tuple[IdFilter, FilterStamp] | None:
        """What ``read_ahead`` read (waiting for it), or the file read now."""
        reading, self._reading = self._reading, None
        return filters.load(self._store.path / FILTER_FILE) if reading is None else reading.result()

    def close(self) -> None:
        """At close: wait for a read still running, and let its memory go."""
        if self._reading is not None:
            self._reading.result()
            self._reading = None

    @property
    def memory_bytes(self) -> int:
        return 0 if self.current is None else self.current.memory_bytes

    def ready(self) -> IdFilter:
        if self.current is None:
            for leftover in self._store.path.glob(f".{FILTER_FILE}.*partial") if self._store.writable else ():
                leftover.unlink(missing_ok=True)  # a save cut short by a kill
            self.current = self._read_back()
            if self.current is None:
                self.current = self._build()
        return self.current

    def forget(self) -> None:
        """A reader's, when it catches up with its writer: the filter lacks what the writer recorded since; the
        next lookup that wants it makes it again."""
        self.close()
        self.current, self._named = None, None

    def add(self, keys: list[bytes], seqs: np.ndarray) -> None:
        """Tell the filter about ids just written. Should it have no room (the store holds more than its bound:
        the bound was lowered, or a store opened without one filled), a new one is built from the store, which
        holds them already, sized for what it holds."""
        id_filter = self.current
        if id_filter is None:  # not made yet: when it is, it reads them from the store
            return
        if not _took(id_filter, keys, seqs, self._store.state().first_live_seq):
            self.current = None  # never left half-updated: a filter that missed an id would let a duplicate by
            self.current = self._build()

    def sealed(self) -> None:
        """A generation was sealed: save the filter after the batch being recorded (``save_if_due``), unless the
        file saved holds every id recorded so far (a bulk-loaded store's first new generation): rewriting it
        would only stall the writer."""
        named, store = self._named, self._store
        if named is not None and named.next_seq == store.state().next_seq and named.token == store.saved_token():
            return
        self._save_due = True

    def save_if_due(self) -> None:
        """Save the filter as it is now, if a generation was sealed since the last save: it then holds every id
        below the next number. The file is written here, where the filter does not change meanwhile, then
        synced and named in the metadata on a thread of its own (a save still syncing is not overtaken)."""
        if not self._save_due:
            return
        self._save_due = False
        if self.current is None or (self._saving is not None and self._saving.is_alive()):
            return
        stamp = self._new_stamp()
        path = self._store.path / FILTER_FILE
        try:
            partial = filters.write_partial(self.current, path, stamp)
        except OSError as error:
            log.warning("could not save the id filter of %s: %s", self._store.path, error)
            return

        def run() -> None:
            try:
                self._store.sync_log()
                filters.commit(partial, path)
                self._store.name_saved(stamp.token)
                self._named = stamp
            except Exception as error:  # the last one named stays in use
                log.warning("could not save the id filter of %s: %s", self._store.path, error)

        self._saving = threading.Thread(target=run, name="save-id-filter", daemon=True)
        self._saving.start()

    def save_at_close(self) -> OSError | None:
        """Save the filter; the error if it could not be written. Without a filter (a store no lookup asked), a
        file saved earlier stays: its token still says whether it can be used, brought up to date."""
        self.wait_for_save()
        if self.current is None:
            return None
        stamp = self._new_stamp()
        try:
            self._store.sync_log()
            filters.save(self.current, self._store.path / FILTER_FILE, stamp)
        except OSError as error:  # the next open reads back more ids: slower, never wrong
            log.warning("could not save the id filter of %s: %s", self._store.path, error)
            return error
        self._store.name_saved(stamp.token)
        self._named = stamp
        return None

    def wait_for_save(self, timeout_s: float | None = None) -> bool:
        """Wait until a save being synced is named; False if ``timeout_s`` ran out first."""
        if self._saving is not None:
            self._saving.join(timeout_s)
            if self._saving.is_alive():
                return False
            self._saving = None
        return True

    def _read_back(self) -> IdFilter | None:
        """The saved filter, if the store names its token, with the ids recorded under numbers from its stamp
        on added (read from the newest generations); None where it cannot be used."""
        saved = self._saved_file()
        if saved is None:
            return None
        id_filter, stamp = saved
        if stamp.token != self._store.saved_token():
            return None
        bound = self._store.bound
        if bound is not None and self._store.state().live_ids <= bound and id_filter.span != self._span():
            log.info("%s: the store's bound changed since its id filter was saved: it is built anew", self._store.path)
            return None
        id_filter = self._up_to_date(id_filter, stamp)
        if id_filter is not None:
            self._named = stamp
        return id_filter

    def _up_to_date(self, id_filter: IdFilter, stamp: FilterStamp) -> IdFilter | None:
        """A filter read from a file with the live ids recorded from its stamp's number on added (read from the
        newest generations); None where it is not this store's, or cannot take them."""
        identity, state = self._store.identity, self._store.state()
        saved_by = (stamp.topic, stamp.partition, stamp.created_ms)
        if saved_by != (identity.topic, identity.partition, identity.created_ms) or stamp.next_seq > state.next_seq:
            return None
        started = time.monotonic()
        low = max(stamp.next_seq, state.first_live_seq)
        if not id_filter.claim(low, state.next_seq, state.first_live_seq):
            return None
        added = self._add_from_store(id_filter, low, state.next_seq)
        if added is None:
            return None
        log.info(
            "%s[%d]: loaded the saved id filter and added the %d ids recorded since it was saved in %.1f s",
            identity.topic, identity.partition, added, time.monotonic() - started,
        )  # fmt: skip
        return id_filter

    def _span(self) -> int:
        """The stretch of each group of a filter sized for the store's window (``GROUPS - 1`` groups hold it)."""
        return math.ceil(self._store.window() * FILTER_SLACK / (GROUPS - 1))

    def _build(self) -> IdFilter:
        """A filter of every live id, read from the store, sized for the store's window."""
        store = self._store
        started = time.monotonic()
        state = store.state()
        low, high = state.first_live_seq, state.next_seq
        id_filter = IdFilter(self._span())
        if not id_filter.claim(low, high, low):
            raise StoreError(f"store {store.path}: a new id filter cannot hold its window (a bug)")
        added = self._add_from_store(id_filter, low, high)
        if added is None:
            raise StoreError(f"store {store.path}: a new id filter found no room for its ids (a bug)")
        if added > LOG_BUILDS_ABOVE:
            log.info(
                "%s[%d]: built the id filter of %d ids in %.1f s (%.0f MiB)",
                store.identity.topic, store.identity.partition, added, time.monotonic() - started,
                id_filter.memory_bytes / 2**20,
            )  # fmt: skip
        return id_filter

    def _add_from_store(self, id_filter: IdFilter, low: int, high: int) -> int | None:
        """Add the ids the store holds under numbers ``low`` to ``high - 1``; how many, or None when one found
        no room (the filter may then have lost an entry)."""
        added = 0
        for hashes, seqs in self._store.id_hashes(low, high):
            if hashes.size and not id_filter.add(hashes, seqs):
                return None
            added += hashes.size
        return added

    def _new_stamp(self) -> FilterStamp:
        """A stamp for a filter that holds every live id."""
        identity = self._store.identity
        return FilterStamp(
            topic=identity.topic,
            partition=identity.partition,
            created_ms=identity.created_ms,
            token=secrets.token_hex(8),
            next_seq=self._store.state().next_seq,
        )

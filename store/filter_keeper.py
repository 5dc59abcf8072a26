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
from store.filter_growth import GROW_AHEAD_AT, GROWN_FILE, Growth, GrowthFailed
from store.generations import ScanPoint
from store.id_filter import GROUPS, FilterStamp, IdFilter, key_hashes

log = logging.getLogger(__name__)

FILTER_FILE = "id-filter"  # beside the database
FILTER_SLACK = 1.05  # the window may pass its bound by a batch before the worker ages it
LOG_BUILDS_ABOVE = 100_000  # ids: smaller builds take well under a second and are not worth a log line
# ids a grown filter's catch-up scans per batch recorded: a step costs the writer's thread about what a
# batch of 5,000 ids does, where reading all it lacks at once would stall it for seconds
CATCH_UP_SCAN = 25_000


@dataclass(frozen=True)
class StoreAccess:
    """What the keeper reads and writes of its store."""

    path: Path
    identity: StoreIdentity
    state: Callable[[], StoreState]
    window: Callable[[], int]  # ids a new filter is sized for
    # a part of the scan for the ids numbered low..high-1: (low, high, resume after, entries to scan) ->
    # (their keys, their numbers, where the next part resumes: None once the scan is done)
    id_scan_step: Callable[[int, int, ScanPoint | None, int], tuple[list[bytes], list[int], ScanPoint | None]]
    # (low, high) -> (key hashes, numbers) of the ids numbered low..high-1, a chunk at a time: a filter built whole
    id_hashes: Callable[[int, int], Iterator[tuple[np.ndarray, np.ndarray]]]
    saved_token: Callable[[], str | None]
    name_saved: Callable[[str], None]  # write the token of a durable saved file into the store's metadata
    grows: Callable[[], bool] = lambda: False  # no aging bound: the filter is built again, larger, as it fills


@dataclass
class _CatchUp:
    """A filter grown apart, taking in the ids numbered ``low`` to ``high - 1`` (recorded while its child read the
    store) a step at a time; each batch recorded since goes to it as to the current one."""

    id_filter: IdFilter
    low: int
    high: int
    started: float  # time.monotonic() when it began
    resume: ScanPoint | None = None  # where the next step scans from (None: the start)
    added: int = 0
    steps: int = 0


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
        self._growth: Growth | None = None
        self._catch_up: _CatchUp | None = None  # a grown filter taking in the ids recorded since its child read
        self._growth_failed = False  # not tried again until a filter is built inline

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
        """At close: wait for a read still running, stop a growth, and let their memory go."""
        if self._reading is not None:
            self._reading.result()
            self._reading = None
        self._end_growth()

    @property
    def growing(self) -> bool:
        """Whether a larger filter is being built apart, or brought up to date: its child, then its catch-up,
        read the generations meanwhile, which must stay as they are."""
        return self._growth is not None or self._catch_up is not None

    def step_growth(self) -> None:
        """What ``add`` does for a growth between batches: poll it, start one that is due, or take in the next
        step of what a grown filter lacks."""
        if self.current is not None:
            self._grow_ahead(self.current)

    @property
    def memory_bytes(self) -> int:
        return 0 if self.current is None else self.current.memory_bytes

    def ready(self) -> IdFilter:
        if self.current is None:
            for leftover in self._store.path.glob(f".{FILTER_FILE}.*partial"):  # a save cut short by a kill
                leftover.unlink(missing_ok=True)
            (self._store.path / GROWN_FILE).unlink(missing_ok=True)  # a growth a kill left
            self.current = self._read_back()
            if self.current is None:
                self.current = self._build()
        return self.current

    def add(self, keys: list[bytes], seqs: np.ndarray) -> None:
        """Tell the filter about ids just written. Should it have no room (the window outgrew it), a new one
        is built from the store, which holds them already."""
        id_filter = self.current
        if id_filter is None:  # not made yet: when it is, it reads them from the store
            return
        self._add_to_catch_up(keys, seqs)
        if not _took(id_filter, keys, seqs, self._store.state().first_live_seq):
            self.current = None  # never left half-updated: a filter that missed an id would let a duplicate by
            if self._catch_up is not None:  # a grown filter catching up: finish it rather than build one
                self._catch_up_step(to_the_end=True)
            if self.current is not None:
                return
            self._end_growth()
            self._growth_failed = False
            self.current = self._build(self._grown_span(id_filter) if self._store.grows() else None)
            return
        self._grow_ahead(id_filter)

    def _add_to_catch_up(self, keys: list[bytes], seqs: np.ndarray) -> None:
        catch_up = self._catch_up
        if catch_up is not None and not _took(catch_up.id_filter, keys, seqs, self._store.state().first_live_seq):
            self._growth_failed_with(GrowthFailed("the filter built cannot take the ids recorded since"))

    def _grown_span(self, id_filter: IdFilter) -> int:
        """The stretch of a growing store's next filter: twice this one's (doubled again while the live ids
        would not fit), so that each new stretch is whole old ones and the generations cut for the old filter
        merge into one per group of the new (``store.generation_merge``)."""
        span = 2 * id_filter.span
        while (GROUPS - 1) * span < self._store.state().live_ids * FILTER_SLACK:
            span *= 2
        return span

    def ids_put_back(self) -> None:
        """Ids were put back under older numbers (``DedupStore.place``): a filter being grown may lack them."""
        self._end_growth()

    def _grow_ahead(self, id_filter: IdFilter) -> None:
        """Past ``GROW_AHEAD_AT`` of a growing store's filter, build the next one in a child process; once it is
        read, bring it up to date a step per batch (``_catch_up_step``) and take it in place of this one."""
        if self._catch_up is not None:
            self._catch_up_step()
            return
        growth = self._growth
        if growth is None:
            store = self._store
            filling = store.state().live_ids >= GROW_AHEAD_AT * id_filter.capacity
            if filling and store.grows() and not self._growth_failed:
                try:
                    self._growth = Growth(store.path, self._grown_span(id_filter))
                except OSError as error:
                    self._growth_failed_with(error)
            return
        try:
            grown = growth.poll()
        except (GrowthFailed, OSError) as error:
            self._growth_failed_with(error)
            return
        if grown is not None:
            self._end_growth()
            self._catch_up = self._catch_up_from(*grown)
            if self._catch_up is None:  # not this store's, or outgrown meanwhile: not tried again until built inline
                self._growth_failed_with(GrowthFailed("the filter built cannot take the ids recorded since"))
                return
            self._catch_up_step()

    def _catch_up_step(self, *, to_the_end: bool = False) -> None:
        """Scan ``CATCH_UP_SCAN`` more ids of the generations holding the numbers a grown filter lacks (all that is
        left: ``to_the_end``), and add those it lacks; take it in place of the current one once the scan is
        done."""
        catch_up = self._catch_up
        assert catch_up is not None
        while True:
            live = max(catch_up.low, self._store.state().first_live_seq)
            keys, seqs, catch_up.resume = self._store.id_scan_step(live, catch_up.high, catch_up.resume, CATCH_UP_SCAN)
            if not _add(catch_up.id_filter, keys, seqs):
                self._growth_failed_with(GrowthFailed("the filter built has no room for the ids recorded since"))
                return
            catch_up.added += len(keys)
            catch_up.steps += 1
            if catch_up.resume is None or not to_the_end:
                break
        if catch_up.resume is not None:
            return
        self._catch_up = None
        self.current = catch_up.id_filter
        identity = self._store.identity
        log.info(
            "%s[%d]: loaded the id filter grown apart (%.0f MiB) and added the %d ids recorded since it was saved "
            "in %d steps over %.1f s",
            identity.topic, identity.partition, catch_up.id_filter.memory_bytes / 2**20, catch_up.added,
            catch_up.steps, time.monotonic() - catch_up.started,
        )  # fmt: skip

    def _catch_up_from(self, id_filter: IdFilter, stamp: FilterStamp) -> _CatchUp | None:
        """What a filter read from a file lacks: the live ids numbered from its stamp's number to the next one,
        their numbers claimed in it; None where it is not this store's or cannot take them (the window
        outgrew it)."""
        identity, state = self._store.identity, self._store.state()
        if (stamp.topic, stamp.partition, stamp.created_ms) != (
            identity.topic,
            identity.partition,
            identity.created_ms,
        ) or stamp.next_seq > state.next_seq:
            return None
        low = max(stamp.next_seq, state.first_live_seq)
        if not id_filter.claim(low, state.next_seq, state.first_live_seq):
            return None
        return _CatchUp(id_filter, low, state.next_seq, time.monotonic())

    def _up_to_date(self, id_filter: IdFilter, stamp: FilterStamp, source: str) -> IdFilter | None:
        """A filter read from a file with the ids recorded from its stamp's number on added (read from the
        newest generations) at once; None where it is not this store's or cannot take them."""
        catch_up = self._catch_up_from(id_filter, stamp)
        if catch_up is None:
            return None
        added = self._add_from_store(id_filter, catch_up.low, catch_up.high)
        if added is None:
            return None
        identity = self._store.identity
        log.info(
            "%s[%d]: loaded %s and added the %d ids recorded since it was saved in %.1f s",
            identity.topic, identity.partition, source, added, time.monotonic() - catch_up.started,
        )  # fmt: skip
        return id_filter

    def _growth_failed_with(self, error: Exception) -> None:
        log.warning("%s: could not grow the id filter apart (%s); built inline when full", self._store.path, error)
        self._end_growth()
        self._growth_failed = True

    def _end_growth(self) -> None:
        self._catch_up = None
        if self._growth is not None:
            self._growth.end()
            self._growth = None

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
                filters.commit(partial, path)
                self._store.name_saved(stamp.token)
                self._named = stamp
            except Exception as error:  # the last one named stays in use
                log.warning("could not save the id filter of %s: %s", self._store.path, error)

        self._saving = threading.Thread(target=run, name="save-id-filter", daemon=True)
        self._saving.start()

    def save_at_close(self) -> None:
        """Without a filter (a store no lookup asked), a file saved earlier stays: its token still says whether
        it can be used, brought up to date."""
        self.wait_for_save()
        if self.current is None:
            return
        stamp = self._new_stamp()
        try:
            filters.save(self.current, self._store.path / FILTER_FILE, stamp)
        except OSError as error:  # the next open reads back more ids: slower, never wrong
            log.warning("could not save the id filter of %s: %s", self._store.path, error)
            return
        self._store.name_saved(stamp.token)
        self._named = stamp

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
        id_filter = self._up_to_date(id_filter, stamp, source="the saved id filter")
        if id_filter is not None:
            self._named = stamp
        return id_filter

    def build_apart(self, span: int) -> tuple[IdFilter, FilterStamp]:
        """A filter of every live id whose groups cover ``span`` numbers each, and a stamp of what it holds (for
        ``store.filter_builder``, on a secondary instance: its token is named nowhere)."""
        high = self._store.state().next_seq
        return self._build(span, high), self._new_stamp(high)

    def _build(self, span: int | None = None, high: int | None = None) -> IdFilter:
        """A filter of every live id, read from the store, with groups of ``span`` numbers (default: sized for
        the store's window); only those numbered below ``high`` if given."""
        store = self._store
        started = time.monotonic()
        state = store.state()
        low, high = state.first_live_seq, max(state.first_live_seq, state.next_seq if high is None else high)
        id_filter = IdFilter(span or math.ceil(store.window() * FILTER_SLACK / (GROUPS - 1)))
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

    def _new_stamp(self, next_seq: int | None = None) -> FilterStamp:
        """A stamp for a filter that holds every live id numbered below ``next_seq`` (default: every one)."""
        identity = self._store.identity
        return FilterStamp(
            topic=identity.topic,
            partition=identity.partition,
            created_ms=identity.created_ms,
            token=secrets.token_hex(8),
            next_seq=self._store.state().next_seq if next_seq is None else next_seq,
        )


def _add(id_filter: IdFilter, keys: list[bytes], seqs: list[int]) -> bool:
    """Add encoded ids under their numbers; False when one found no room (the filter may then have lost an entry)."""
    return not keys or id_filter.add(key_hashes(keys), np.asarray(seqs, np.int64))

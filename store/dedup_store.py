"""One partition's dedup store: which message ids have been published, in what order, up to which offsets.

A facade over the owners of its concerns (``docs/store.md`` is the page that explains them): the RocksDB
instance and its metadata (``store.database``, opened by ``store.opening``), the generations and their sealing
(``store.generation_keeper``, ``store.arrays_job``), the id filter (``store.filter_keeper``), lookups
(``store.lookups``), the ledger of batches (``store.ledger``), output gaps (``store.output_gaps``) and
reconcile's repairs (``store.repairs``). Writers open it read-write (taking RocksDB's lock, so two processes
never share a store); readers take no lock (``store.opening.open_reader``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from rocksdict import Rdict, WriteBatch

from store import following, id_scans, opening
from store import generations as gens
from store.batch_writer import BatchWriter
from store.codec import (
    CF_META,
    CF_TIMES,
    META_FILTER_TOKEN,
    META_STATE,
    SCHEMA_VERSION,
    SEQ_VIEW,
    AcceptedGap,
    StoreIdentity,
    StoreState,
    decode_state,
    encode_ids,
    encode_state,
)
from store.database import Database
from store.errors import StoreError
from store.filter_keeper import FILTER_SLACK, FilterKeeper, StoreAccess
from store.generation_keeper import GenerationKeeper
from store.id_filter import GROUPS
from store.ledger import Ledger
from store.lookups import LOOKUP_CHUNK, Lookups
from store.options import SharedMemory
from store.output_gaps import OutputGaps
from store.repairs import Repairs
from store.seq_view import SeqOrder
from store.writer_lock import WRITING

MIN_FILTER_WINDOW = 1_000_000  # ids a filter is sized for at least


class DedupStore:
    """The ids one partition has published. Not thread-safe: one worker thread owns a store."""

    def __init__(
        self,
        db: Rdict,
        path: Path,
        identity: StoreIdentity,
        state: StoreState,
        writable: bool,
        *,
        filtered: bool = False,
        window_ids: int | None = None,
        families: tuple[str, ...] = (),
        new_generation_options=None,
        follows_writer: bool = False,
        secondary_dir: tempfile.TemporaryDirectory[str] | None = None,
    ):
        self.path = path
        self.identity = identity
        self._state = state
        self.writable = writable
        self._filtered = filtered  # a worker's store: lookups through the id filter, sealed arrays written
        self._window_ids = window_ids  # the store's bound
        self._new_generation_options = new_generation_options
        self._secondary_dir = secondary_dir
        self._order = SeqOrder(lambda low, high: id_scans.id_chunks(lambda: self._keeper.generations, low, high))
        self._closed = False
        self._filters = FilterKeeper(
            StoreAccess(
                path=path,
                writable=writable,
                identity=identity,
                state=lambda: self._state,
                window=self._filter_window,
                bound=window_ids,
                id_hashes=lambda low, high: id_scans.id_hashes(self._keeper.generations, low, high),
                saved_token=self._saved_filter_token,
                name_saved=lambda token: self._database.put_meta({META_FILTER_TOKEN: token.encode("ascii")}),
                sync_log=lambda: self._database.sync_log(),
            )
        )
        self._database = Database(db, path, writable=writable)
        try:
            self._attach(families, follows_writer)
            if not follows_writer:  # a follower's state may trail its writer's saves
                opening.refuse_if_behind(path, identity, state)
        except BaseException:
            self._abandon()
            raise
        if writable:
            WRITING.add(path.resolve())  # readers in this process then follow it (store.writer_lock)

    def _attach(self, families: tuple[str, ...], follows_writer: bool) -> None:
        """Make the owners of the open database (again, after a reader's reopen)."""
        database = self._database
        self._follows_writer = follows_writer  # a secondary instance, not a read-only one
        self._keeper = GenerationKeeper(
            database, families, writable=self.writable, follows_writer=follows_writer, converts=self._filtered,
            new_generation_options=self._new_generation_options,
            label=f"{self.identity.topic}[{self.identity.partition}]",
        )  # fmt: skip
        self.gaps = OutputGaps(database)
        self._lookups = Lookups(lambda: self._keeper.generations, self._filters if self._filtered else None,
                                lambda: self._state, None if self.writable else self._filters)  # fmt: skip
        self.ledger = Ledger(database, lambda: self._state, lambda: self.gaps.offsets_from_seq)
        self._repairs = Repairs(database, self._keeper, self._lookups, self.ledger, self._filters)
        self._writer = BatchWriter(database, self._keeper, self._filters, self.generation_ids)

    def _abandon(self) -> None:
        """Let a store whose construction failed go: every family it took, then the database (and its lock)."""
        keeper = getattr(self, "_keeper", None)
        if keeper is not None:
            keeper.close_families()
        self._database.close()

    # -- opening -------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        topic: str,
        partition: int,
        shared: SharedMemory | None = None,
        window_ids: int | None = None,
    ) -> DedupStore:
        """Open (creating if needed) the store of ``topic``/``partition`` for writing; ``shared`` is the memtable
        budget and block cache it shares with the other stores of its worker. Its lookups go through an id filter
        (``store.id_filter``) sized for ``window_ids``, the store's bound: the most ids aging lets it keep (a
        worker always gives one; None, for tools and tests: sized for twice the ids held, built again inline,
        larger, when it fills)."""
        path = Path(path)
        db, names, identity, state, new_generation = opening.open_writer(path, topic, partition, shared)
        store = cls(
            db, path, identity, state, writable=True, filtered=True, window_ids=window_ids, families=names,
            new_generation_options=new_generation,
        )  # fmt: skip
        store._filters.read_ahead()  # while the worker recovers and fetches: its first lookup then waits less
        store._settle()
        return store

    @classmethod
    def open_existing(cls, path: Path) -> DedupStore:
        """Open an existing store for writing (maintenance verbs); refuses to create one."""
        path = Path(path)
        db, names, identity, state, new_generation = opening.open_writer(path)
        store = cls(db, path, identity, state, writable=True, families=names, new_generation_options=new_generation)
        store._settle()
        return store

    @classmethod
    def open_secondary(cls, path: Path) -> DedupStore:
        """Open for reading without the writer's lock (``store.opening.open_reader``, ``store.following``)."""
        path = Path(path)
        names, db, follows, scratch = following.open_follower(path)
        identity, state = opening.read_meta(db, path)
        store = cls(
            db, path, identity, state, writable=False, families=names, follows_writer=follows, secondary_dir=scratch
        )
        store._state = following.visible_state(path, names, state)
        return store

    def _settle(self) -> None:
        """For a writer: finish what a stop or crash cut short; on any failure the store is closed."""
        try:
            self._keeper.settle()
        except BaseException:
            self.close()
            raise

    # -- reading -------------------------------------------------------------------------------------

    @property
    def state(self) -> StoreState:
        return self._state

    def refresh(self) -> None:
        """Readers: catch up with the writer and reload the state (a read-only instance opens again: a writer
        may have written the store since, or be writing it now)."""
        if self.writable:
            return
        self._filters.forget()  # it lacks what the writer recorded since it was made
        keeper = self._keeper
        if not self._follows_writer or not following.caught_up(
            self._database, self.path, keeper.family_names, keeper.arrays_raw
        ):
            self._reopen()
            return
        if (raw := self._database.meta_value(META_STATE)) is not None:
            self._state = decode_state(raw)
        keeper.recheck_overrides()  # the writer may have put ids back in, or forgotten ids of, a sealed generation
        self.gaps.load()

    def _reopen(self) -> None:
        """Open the database again for reading: the writer added or dropped generations."""
        self._keeper.close_families()
        self._database.close()
        names, db, follows = opening.open_reader(self.path, self._secondary_dir.name)
        self.identity, state = opening.read_meta(db, self.path)
        self._database = Database(db, self.path, writable=False)
        self._attach(names, follows)
        self._state = following.visible_state(self.path, names, state)

    def contains_many(self, ids: Sequence[bytes]) -> list[bool]:
        """Multi-gets: for each id, whether the store holds it within the window."""
        return self._lookups.contains_keys(encode_ids(ids))

    def contains_keys(self, keys: list[bytes]) -> list[bool]:
        """``contains_many`` for ids already encoded (``store.codec.encode_ids``): the worker encodes each batch
        once, for this lookup and for ``record``."""
        return self._lookups.contains_keys(keys)

    def contains_keys_in_db(self, keys: list[bytes]) -> list[bool]:
        """``contains_keys`` answered by RocksDB alone, without the id filter: what the filter must agree with."""
        return self._lookups.contains_keys_in_db(keys)

    def live_seqs(self, keys: list[bytes], per_call: int = LOOKUP_CHUNK) -> list[int | None]:
        """The sequence number of each encoded id within the window, None where absent or aged out."""
        return self._lookups.live_seqs(keys, per_call)

    def lookup_many(self, ids: Sequence[bytes]) -> list[tuple[int, int] | None]:
        """For each id, ``(seq, timestamp_ms)`` where present, else ``None``."""
        seqs = self.live_seqs(encode_ids(ids))
        found = sorted({seq for seq in seqs if seq is not None})
        stamps = dict(zip(found, self.ledger.timestamps(found), strict=True))
        return [None if seq is None else (seq, stamps[seq]) for seq in seqs]

    def iter_by_seq(self, from_seq: int | None = None, to_seq: int | None = None) -> Iterator[tuple[int, bytes]]:
        """``(seq, messageId)`` of live ids in sequence (publication) order, ``from_seq`` inclusive to ``to_seq``
        exclusive. Ids are stored by id: the first call builds a sequence view (one scan of the generations, on
        temporary disk; see ``store.seq_view``); later calls are seeks."""
        return self._order.items(self._state, from_seq, to_seq)

    def accept_gap(self, reason: str, by: str, accepted_ms: int) -> AcceptedGap:
        """Accept the output gap a worker refused the partition for (``store.output_gaps``); the state moves."""
        accepted, self._state = self.gaps.accept(self._state, reason, by, accepted_ms)
        return accepted

    # -- the id filter (store.filter_keeper) -------------------------------------------------------------

    @property
    def filter_bytes(self) -> int:
        """Memory the id filter takes (0 before the first lookup, and for stores without one)."""
        return self._filters.memory_bytes

    def prepare_filter(self) -> None:
        """Build the id filter now rather than on the first lookup (after a bulk load: the store's first worker
        then starts from the saved filter instead of reading every id)."""
        if self._filtered:
            self._filters.ready()

    def _filter_window(self) -> int:
        """Ids the filter is sized for: the store's bound, or, past it or without one, twice the ids held (a store
        opened without its bound, or whose bound was lowered: aging brings it back under)."""
        bound, live = self._window_ids, self._state.live_ids
        return max(bound if bound and live <= bound else 2 * live, MIN_FILTER_WINDOW)

    def _saved_filter_token(self) -> str | None:
        token = self._database.meta_value(META_FILTER_TOKEN)
        return None if token is None else token.decode("ascii", "replace")

    # -- generations (store.generation_keeper) -----------------------------------------------------------

    def id_families(self) -> list[tuple[str, int, int]]:
        """``(family, first, end)`` of each generation, oldest first: the numbers from ``first`` to ``end - 1``
        are recorded there."""
        next_seq, generations = self._state.next_seq, self._keeper.generations
        return [(g.name, g.first_seq, generations.end_of(g, next_seq)) for g in generations]

    def generation_ids(self) -> int:
        """Numbers per generation: the id filter's stretch, for the window it has or, before it is made, the one
        it will be made for."""
        if self._filters.current is not None:
            return max(gens.MIN_GENERATION_IDS, self._filters.current.span)
        return gens.generation_ids(self._filter_window(), GROUPS, FILTER_SLACK)

    def generation_bytes(self) -> list[tuple[int, int, int]]:
        """``(first, end, bytes)`` of each generation, oldest first (what ``max_bytes`` aging weighs)."""
        return self._keeper.generation_bytes(self._state.next_seq)

    def arrays_files(self) -> list[tuple[str, Path, int]]:
        """``(family, file, ids)`` of each generation's sealed arrays, oldest generation first."""
        return [(g.name, a.path, len(a)) for g in self._keeper.generations for _, a in sorted(g.arrays.items())]

    def arrays_bytes(self) -> int:
        return self._keeper.arrays_bytes()

    def ingest_generations(self, files: dict[int, list[str]]) -> None:
        self._require_writable()
        self._keeper.ingest(files)

    def drop_generations_below(self, cut: int) -> tuple[int, int]:
        self._require_writable()
        return self._keeper.drop_below(cut, self._state.next_seq)

    def wait_for_seals(self, timeout_s: float | None = None) -> bool:
        """Wait until no generation is being sealed and the id filter saved at the last seal is durable; False if
        ``timeout_s`` ran out first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not self._keeper.wait_for_seals(deadline):
            return False
        return self._filters.wait_for_save(None if deadline is None else max(0.0, deadline - time.monotonic()))

    @property
    def writing_arrays(self) -> bool:
        """Whether a sealed generation's arrays are being written (by a child process), or wait to be."""
        return self._keeper.writing_arrays

    def compaction_pending(self) -> bool:
        return self._keeper.compaction_pending()

    def compactions_running(self) -> int:
        """How many compactions RocksDB is running on this store now (any family)."""
        return self._database.running_compactions()

    @property
    def db(self) -> Rdict:
        """The underlying database, for the inspection and aging modules of this package."""
        return self._database.db

    def family(self, name: str) -> Rdict:
        """A column family by name (a generation's too), for this package's modules and their tests. ``SEQ_VIEW``
        (not on disk) is the read-only sequence view, built on first use (see ``iter_by_seq``)."""
        if name == SEQ_VIEW:
            return self._order.view(self._state, self._state.first_live_seq, self._state.next_seq).db
        if name in (CF_TIMES, CF_META):
            return {CF_TIMES: self._database.times, CF_META: self._database.meta}[name]
        return self._keeper.named(name).family

    def family_handle(self, name: str):
        if name == SEQ_VIEW:
            raise StoreError(
                f"store {self.path} has no {SEQ_VIEW!r} family on disk (schema {SCHEMA_VERSION})",
                "remove ids with DedupStore.forget_many; read them in order with iter_by_seq",
            )
        if name in (CF_TIMES, CF_META):
            return {CF_TIMES: self._database.times_handle, CF_META: self._database.meta_handle}[name]
        return self._keeper.named(name).handle

    # -- writing -------------------------------------------------------------------------------------

    def record(
        self,
        ids: Sequence[bytes],
        timestamps_ms: Sequence[int],
        *,
        input_offset: int | None = None,
        output_offset: int | None = None,
        output_offsets: Sequence[int] | None = None,
        keys: list[bytes] | None = None,
    ) -> StoreState:
        """Record newly published ids (in publish order) and the offsets now covered, in one WriteBatch
        (``store.batch_writer``); ``keys``, when given, are ``encode_ids(ids)`` computed already."""
        self._require_writable()
        first = self._state.next_seq
        self._state, keys = self._writer.write(
            self._state, ids, timestamps_ms, input_offset, output_offset, output_offsets, keys
        )
        if ids:
            self._filters.add(keys, np.arange(first, first + len(ids), dtype=np.int64))
            self._filters.save_if_due()
            self._keeper.step()
            self._order.added(first, ids)
        return self._state

    def write_state(self, state: StoreState, batch: WriteBatch | None = None) -> None:
        """Persist ``state`` (optionally inside a caller's batch, which this then writes)."""
        self._require_writable()
        batch = batch if batch is not None else WriteBatch(raw_mode=True)
        batch.put(META_STATE, encode_state(state), self._database.meta_handle)
        self._database.write(batch)
        self._state = state

    def place(self, ids: Sequence[bytes], offsets: Sequence[int]) -> list[int | None]:
        """Put ids the store lost back under the sequence numbers they were recorded with, found by the output
        offset each was published at (``offsets``: the output holds ``ids[i]`` at ``offsets[i]``); returns, for
        each id, the number it was put back under (None: not placed). This is how reconcile repairs a store
        inside its window without moving any id's place in the aging order: an id appended with a new number
        would outlive newer ids and push one of them out."""
        self._require_writable()
        placed = self._repairs.place(encode_ids(ids), offsets)
        self._order.placed(ids, placed)
        return placed

    def forget_many(self, ids: Sequence[bytes]) -> int:
        """Remove these ids from the window (reconcile's repair of ids the output never published), in one
        WriteBatch; returns how many were there. Sequence numbers and covered offsets do not change."""
        self._require_writable()
        removed = self._repairs.forget(encode_ids(ids))
        self._order.removed(removed)
        return len(removed)

    def erase_keys(self, keys: list[bytes]) -> None:
        """Remove encoded ids from every generation and change nothing else (``store.testing``'s lost file)."""
        self._repairs.erase(keys)

    def _require_writable(self) -> None:
        self._database.require_writable()

    def flush(self) -> None:
        """Write every family's memtable to SST files and wait (aging can only drop what is in files)."""
        for generation in self._keeper.generations:
            generation.family.flush(True)
        self._database.flush()

    def close(self) -> OSError | None:
        """Close the store; a writer's returns the error of a write it owed and could not make (its id filter's
        save: the next open reads more ids back, never answers wrong), None when everything was written."""
        if self._closed:
            return None
        unsaved = None
        try:
            if self.writable:
                self._keeper.stop_arrays()
                self.wait_for_seals()
                unsaved = self._filters.save_at_close()
            self._filters.close()
            self._order.close()
            self._keeper.close_families()  # RocksDB stays open (and locked) while any family is alive
            self._database.close()
            self._closed = True
            if self.writable:
                WRITING.discard(self.path.resolve())
        finally:
            if self._secondary_dir is not None and self._closed:
                self._secondary_dir.cleanup()
                self._secondary_dir = None
        return unsaved

    def __enter__(self) -> DedupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

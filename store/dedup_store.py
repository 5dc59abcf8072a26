"""One partition's dedup store: which message ids have been published, in what order, up to which offsets.

Writers open it read-write (taking RocksDB's lock, so two processes never share a store); inspection opens
it as a secondary instance, which takes no lock and follows the writer. The byte layout is in ``store.codec``:
each id is stored once, keyed by its packed bytes, with its sequence number as the value, in the generation
family of its sequence number (``store.generations``), or, once that generation is sealed in a worker's
store, for ``ajs-`` and UUID ids, in its sealed arrays (``store.generation_arrays``); ``first_live_seq`` is the
exact aging cut every reader applies. A worker's store (``open``) also keeps an id filter in memory
(``store.id_filter``), asked before RocksDB so that an absent id costs the same whatever the store holds, and
saved beside the database when the store closes and each time a generation is sealed
(``store.filter_keeper``).
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from rocksdict import (
    AccessType,
    Checkpoint,
    IngestExternalFileOptions,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from store import child_process
from store import generation_arrays as arrays_files
from store import generations as gens
from store.catch_up import Backoff, catch_up, manifest_mark
from store.clock import now_ms
from store.codec import (
    CF_IDS,
    CF_META,
    CF_TIMES,
    DIGEST_BYTES,
    DIGEST_CHUNK,
    GAP_TRUNCATED,
    IDS_LOWER,
    IDS_UPPER,
    META_ACCEPTED_GAPS,
    META_ARRAYS,
    META_FILTER_TOKEN,
    META_IDENTITY,
    META_REFUSED_GAP,
    META_STATE,
    REQUIRED_FAMILIES,
    SCHEMA_VERSION,
    SEQ_VIEW,
    AcceptedGap,
    OutputGap,
    StoreIdentity,
    StoreState,
    batch_digests,
    chunk_digest,
    decode_accepted_gaps,
    decode_gap,
    decode_identity,
    decode_seq,
    decode_state,
    encode_accepted_gaps,
    encode_gap,
    encode_identity,
    encode_ids,
    encode_seq,
    encode_seq_values,
    encode_state,
    encode_times,
    live_seqs_of,
    seq_width,
    times_at,
    times_count,
    times_digests,
    times_offset_at,
    times_offsets,
    without_digests,
)
from store.damage import check_ended, corruption_of, damaged, scan, translated
from store.errors import (
    DataDirError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    StoreVersionError,
)
from store.filter_keeper import FILTER_FILE, FILTER_SLACK, FilterKeeper, StoreAccess
from store.generations import Generation, Generations, ScanPoint
from store.id_filter import GROUPS, IdFilter, body_hashes, key_hashes, saved_stamp
from store.layout import holds_database_files
from store.options import (
    SEALED_GENERATION_OPTIONS,
    WRITTEN_GENERATION_OPTIONS,
    SharedMemory,
    older_generation_reads,
    seal_options,
    store_options,
)
from store.sealed_arrays import SealedArrays
from store.seq_view import SeqView
from store.writer_lock import WRITING, writer_holds

log = logging.getLogger(__name__)

# keys per multi-get: a long list costs more per absent key, likely RocksDB's sort of each list before it probes
# the filters (docs/benchmarks.md, "Figures behind design choices")
LOOKUP_CHUNK = 32
MIN_FILTER_WINDOW = 1_000_000  # ids a filter is sized for at least
_SCAN_CHUNK = 100_000
_SECONDARY_OPEN_SECONDS = 30.0  # how long opening a secondary instance races a writer's new generations
# what RocksDB says when a secondary instance opens while the writer drops or creates a family
_FAMILY_RACES = ("Column family not found", "MANIFEST record referencing unknown column family")
_FOREVER = 1e9  # seconds: a join without a timeout
_LAST_LEVEL = 6  # RocksDB's default number of levels, 7: a generation's sealed run is on L6


@dataclass
class _Conversion:
    """A sealed generation's fixed-width ids being written to sealed arrays: by a child process, which a thread of
    its own starts and waits for."""

    generation: Generation
    thread: threading.Thread | None = None
    names: list[str] | None = None
    opened: dict[bytes, SealedArrays] | None = None  # the files mapped, by prefix (store.generation_arrays.open_files)
    seconds: float = 0.0
    error: Exception | None = None
    void: bool = False  # ids were put back or forgotten meanwhile: the files may lack the change
    child: child_process.Child | None = None  # the process writing the files (store.arrays_writer)
    stopped: bool = False  # by the store's close: the next writer writes them again


def _leave_block_cache_alone(generation: Generation) -> None:
    """Read a generation no longer the newest with ``older_generation_reads``, set on its family: rocksdict's
    multi-get ignores a ``read_opt`` argument."""
    generation.family.set_read_options(older_generation_reads())


def _id_scan_reads() -> ReadOptions:
    """A scan of a generation's ids: up to IDS_UPPER (past every id key), without
    filling the block cache (a scan reads each block once)."""
    read = ReadOptions()
    read.set_iterate_upper_bound(IDS_UPPER)
    read.fill_cache(False)
    return read


def _read_meta_values(db: Rdict) -> tuple[bytes | None, bytes | None]:
    """The raw identity and state values; the family object is closed so it cannot pin the DB open."""
    meta = db.get_column_family(CF_META)
    try:
        with translated():
            return meta.get(META_IDENTITY), meta.get(META_STATE)
    finally:
        meta.close()


def _put_meta(db: Rdict, values: dict[bytes, bytes]) -> None:
    """Write ``values`` into the meta family in one write; the handle is dropped so it cannot pin the DB."""
    batch = WriteBatch(raw_mode=True)
    handle = db.get_column_family_handle(CF_META)
    for key, value in values.items():
        batch.put(key, value, handle)
    db.write(batch)
    del handle


def _write_fresh_meta(db: Rdict, identity: StoreIdentity) -> tuple[StoreIdentity, StoreState]:
    """Give a new database its identity and an empty state, in one write."""
    state = StoreState()
    _put_meta(db, {META_IDENTITY: encode_identity(identity), META_STATE: encode_state(state)})
    return identity, state


def _store_options(names: tuple[str, ...], create: bool, shared: SharedMemory | None = None):
    """``store_options`` for the families on disk."""
    generations = tuple(name for name in names if gens.first_seq_of(name) is not None)
    return store_options(create, shared, generations)


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link, as RocksDB's checkpoint makes of its files, or a copy on another filesystem."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _older_schema(path: Path, version: int | None) -> StoreVersionError:
    """The refusal of a store of another schema (``None``: an earlier layout, with one ``ids`` family)."""
    which = "an earlier layout (one ids family)" if version is None else f"schema version {version}"
    return StoreVersionError(
        f"store {path} has {which}; this build reads schema {SCHEMA_VERSION} only",
        f"rebuild it from the output topic: dedupectl rebuild -p {path.name.rsplit('-', 1)[-1]} --replace "
        "(with the worker stopped), or run the release that wrote it",
    )


def _translate_open_error(path: Path, error: Exception) -> StoreError:
    text = str(error)
    if "lock" in text.lower() and ("temporarily unavailable" in text or "lock hold" in text):
        return StoreLockedError(
            f"store {path} is locked by another process",
            "stop the worker that holds it first, or use a read-only command (stats, sst, window, lookup)",
        )
    corrupt = corruption_of(error, path)  # first: a file the MANIFEST names and lacks is "No such file" as well
    if corrupt is not None:
        return corrupt
    if "No such file or directory" in text or "does not exist" in text:
        if holds_database_files(path):  # CURRENT names a MANIFEST that is gone
            return damaged(f"store {path}", text.splitlines()[0].strip())
        return StoreNotFoundError(f"no dedup store at {path}", "check --data-dir and --partition")
    return StoreError(f"cannot open store {path}: {text.splitlines()[0] if text else error!r}")


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
    ):
        self._db = db
        self._follows_writer = follows_writer  # a secondary instance, not a read-only one
        self.path = path
        self.identity = identity
        self._state = state
        self.writable = writable
        self._new_generation_options = new_generation_options
        self._sealing: dict[str, threading.Thread] = {}
        # a worker's store writes its sealed generations' fixed-width ids to sealed arrays, one at a time
        self._converts = filtered
        self._to_convert: list[Generation] = []
        self._conversion: _Conversion | None = None
        self._closed = False
        try:
            self._attach(families)
        except BaseException:
            self._abandon()
            raise
        self._secondary_dir: tempfile.TemporaryDirectory[str] | None = None
        self._seq_view: SeqView | None = None
        # the id filter in front of lookups: for the stores of a worker (``open``), made on first lookup
        self._filtered = filtered
        self._window_ids = window_ids
        self._filters = FilterKeeper(
            StoreAccess(
                path=path,
                identity=identity,
                state=lambda: self._state,
                window=self._filter_window,
                bound=window_ids,
                id_hashes=self._id_hashes,
                saved_token=self._saved_filter_token,
                name_saved=self._name_saved_filter,
                sync_log=lambda: self._db.flush_wal(True),
            )
        )
        self._refused_gap: OutputGap | None = None
        self._accepted_gaps: tuple[AcceptedGap, ...] = ()
        try:
            self._load_gaps()
            if not follows_writer:  # a follower's state may trail its writer's saves
                self._refuse_if_behind()
        except BaseException:
            self._abandon()
            raise
        if writable:
            WRITING.add(path.resolve())  # readers in this process then follow it (store.writer_lock)

    def _attach(self, families: tuple[str, ...]) -> None:
        """Take up the families of ``self._db``: ``times``, ``meta`` and the generations."""
        db = self._db
        self._family_names_on_open = families
        live = gens.live_families(families)
        self._times = db.get_column_family(CF_TIMES)
        self._meta = db.get_column_family(CF_META)
        self._times_handle = db.get_column_family_handle(CF_TIMES)
        self._meta_handle = db.get_column_family_handle(CF_META)
        self._generations = Generations([self._generation(name, gens.first_seq_of(name)) for name in live])
        for generation in list(self._generations)[:-1]:
            _leave_block_cache_alone(generation)
        self._attach_arrays()

    def _attach_arrays(self) -> None:
        """Map the sealed arrays the metadata names for each live generation (their pages as lookups first touch
        them: an open does not wait for files the page cache may lack). A secondary instance skips a file the
        writer removed since it listed the families (its generation aged out meanwhile), and always
        asks a family before its arrays (it cannot know when the writer puts an id back there)."""
        self._arrays_raw = self._meta_value(META_ARRAYS)
        named = arrays_files.decode_names(self._arrays_raw)
        for generation in self._generations:
            files = named.get(generation.name)
            if not files:
                continue
            # only a writer at work removes a named file (its generation aged out meanwhile): else it is damage
            generation.arrays = arrays_files.open_files(self.path, files, missing_ok=self._follows_writer)
            generation.overrides = not self.writable or self._holds_array_keys(generation)

    def _reopen_secondary(self) -> None:
        """Open the database again (a secondary instance): the writer added or dropped generations."""
        self._close_families()
        self._db.close()
        names, self._db, self._follows_writer = self._open_secondary_db(self.path, self._secondary_dir.name)
        self.identity, state = self._read_meta(self._db, self.path)
        self._attach(names)
        self._state = self._visible(state)

    def _refuse_if_behind(self) -> None:
        """A saved id filter vouches for the ids recorded below its stamp's number (it is saved once they are
        durable): a store whose files hold fewer has gone back to an older state than it had, which only damage
        does (a MANIFEST cut short, a table lost with it), and RocksDB cannot tell from its files alone."""
        stamp, identity, held = saved_stamp(self.path / FILTER_FILE), self.identity, self._state.next_seq
        if stamp is None or (stamp.topic, stamp.partition, stamp.created_ms) != (
            identity.topic,
            identity.partition,
            identity.created_ms,
        ):
            return
        if stamp.next_seq > held:
            raise damaged(
                f"store {self.path}",
                f"its files hold {held:,} recorded ids, fewer than the {stamp.next_seq:,} its saved id filter "
                "holds: its MANIFEST or a table is damaged",
            )

    def _meta_value(self, key: bytes) -> bytes | None:
        with translated():
            return self._meta.get(key)

    def _generation(self, name: str, first_seq: int) -> Generation:
        return Generation(first_seq, name, self._db.get_column_family(name), self._db.get_column_family_handle(name))

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
        """Open (creating if needed) the store of ``topic``/``partition`` for writing; ``shared`` is the
        memtable budget and block cache it shares with the other stores of its worker. Its lookups go through
        an id filter (``store.id_filter``) sized for ``window_ids``, the store's bound: the most ids aging lets it
        keep (a worker always gives one; None, for tools and tests: sized for twice the ids held, built again
        inline, larger, when it fills)."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DataDirError(
                f"cannot create data directory {path.parent}: {error.strerror}",
                "point --data-dir at a writable directory",
            ) from error
        if not os.access(path.parent, os.W_OK):
            raise DataDirError(
                f"data directory {path.parent} is not writable", "fix its permissions or choose another --data-dir"
            )
        if not (path / "CURRENT").exists() and (not path.exists() or not any(path.iterdir())):
            cls._create(path, StoreIdentity(topic=topic, partition=partition, created_ms=now_ms()))
        names = cls._check_families(path)
        options, families, new_generation = _store_options(names, create=True, shared=shared)
        try:
            db = Rdict(str(path), options=options, column_families=families)
        except Exception as error:
            raise _translate_open_error(path, error) from error
        raw_identity, _ = _read_meta_values(db)
        if raw_identity is None:  # a directory that held something else first, or a store of an old build
            identity, state = _write_fresh_meta(
                db, StoreIdentity(topic=topic, partition=partition, created_ms=now_ms())
            )
        else:
            identity, state = cls._read_meta(db, path)
            if (identity.topic, identity.partition) != (topic, partition):
                db.close()
                raise StoreCorruptError(
                    f"store {path} belongs to {identity.topic}[{identity.partition}], not {topic}[{partition}]",
                    "check --data-dir; never copy a store between partitions",
                )
        store = cls(
            db, path, identity, state, writable=True, filtered=True, window_ids=window_ids, families=names,
            new_generation_options=new_generation,
        )  # fmt: skip
        store._filters.read_ahead()  # while the worker recovers and fetches: its first lookup then waits less
        store._settle_layout()
        return store

    @staticmethod
    def _create(path: Path, identity: StoreIdentity) -> None:
        """Build a new store beside ``path`` and rename it into place: RocksDB writes CURRENT before it adds
        the column families and the metadata, and a reader (``stats``, a snapshot, a test) looking meanwhile
        would take a half-made store for a foreign database. The rename makes it appear whole or not at all."""
        building = path.with_name(f".{path.name}.creating")
        shutil.rmtree(building, ignore_errors=True)  # left by a crash during an earlier creation
        options, families, _ = store_options(create=True)
        try:
            db = Rdict(str(building), options=options, column_families=families)
        except Exception as error:
            raise _translate_open_error(path, error) from error
        try:
            _write_fresh_meta(db, identity)
        finally:
            db.close()
        try:
            os.replace(building, path)  # path is absent or an empty directory here
        except OSError as error:
            shutil.rmtree(building, ignore_errors=True)
            raise DataDirError(
                f"cannot move the new store into {path}: {error.strerror}", "check the data directory"
            ) from error

    @classmethod
    def open_existing(cls, path: Path) -> DedupStore:
        """Open an existing store for writing (maintenance verbs); refuses to create one."""
        path = Path(path)
        cls._require_store_dir(path)
        names = cls._check_families(path)
        options, families, new_generation = _store_options(names, create=False)
        try:
            db = Rdict(str(path), options=options, column_families=families)
        except Exception as error:
            raise _translate_open_error(path, error) from error
        identity, state = cls._read_meta(db, path)
        store = cls(db, path, identity, state, writable=True, families=names, new_generation_options=new_generation)
        store._settle_layout()
        return store

    @classmethod
    def open_secondary(cls, path: Path) -> DedupStore:
        """Open for reading without the writer's lock. While a process writes the store: a secondary instance,
        which follows the writer. Otherwise a read-only instance, whose open checks that every file the MANIFEST
        names is there whole: a secondary instance passes over a file it cannot open (taking it for one its writer
        removed) and would answer from an older state than the files say."""
        path = Path(path)
        cls._require_store_dir(path)
        scratch = tempfile.TemporaryDirectory(prefix="dedupectl-secondary-")
        try:
            names, db, follows = cls._open_secondary_db(path, scratch.name)
        except BaseException:
            scratch.cleanup()
            raise
        identity, state = cls._read_meta(db, path)
        store = cls(db, path, identity, state, writable=False, families=names, follows_writer=follows)
        store._secondary_dir = scratch
        store._state = store._visible(state)
        return store

    @classmethod
    def _open_secondary_db(cls, path: Path, scratch: str) -> tuple[tuple[str, ...], Rdict, bool]:
        """The families and the database opened for reading, and whether it follows a writer (see
        ``open_secondary``)."""
        backoff = Backoff(_SECONDARY_OPEN_SECONDS)
        while True:
            names = cls._check_families(path)
            options, families, _ = _store_options(names, create=False)
            options.set_max_open_files(-1)  # required by secondary instances
            follows = writer_holds(path)
            access = AccessType.secondary(scratch) if follows else AccessType.read_only(False)
            db = None
            try:
                opened_at = manifest_mark(path) if follows else None
                db = Rdict(str(path), options=options, column_families=families, access_type=access)
                if follows:
                    catch_up(db, path, opened_at)
            except Exception as error:
                if db is not None:
                    db.close()
                # the writer dropped or added a generation between the listing and the open: list again
                if any(race in str(error) for race in _FAMILY_RACES) and backoff.wait():
                    continue
                if isinstance(error, StoreError):
                    raise
                raise _translate_open_error(path, error) from error
            return names, db, follows

    @staticmethod
    def _require_store_dir(path: Path) -> None:
        if not path.exists():
            raise StoreNotFoundError(f"no dedup store at {path}", "check --data-dir and --partition")
        if not (path / "CURRENT").exists() and holds_database_files(path):
            raise damaged(f"store {path}", "its CURRENT file is missing")
        if not (path / "CURRENT").exists():
            raise StoreNotFoundError(
                f"{path} is not a dedup store (no RocksDB database in it)", "check --data-dir and --partition"
            )

    @staticmethod
    def _check_families(path: Path) -> tuple[str, ...]:
        """The column families on disk, once they are known to make a dedup store."""
        try:
            names = tuple(Rdict.list_cf(str(path)))
        except Exception as error:
            raise _translate_open_error(path, error) from error
        families = set(names)
        if CF_META in families and families & {CF_IDS, SEQ_VIEW}:  # one ids family: schema 4 and older
            raise _older_schema(path, None)
        missing = set(REQUIRED_FAMILIES) - families
        if missing:
            raise StoreNotFoundError(
                f"{path} is a RocksDB database but not a dedup store (no {', '.join(sorted(missing))} family)",
                "check --data-dir and --partition",
            )
        foreign = gens.foreign_families(names)
        if foreign:  # merged generations of an earlier build: their ids would go unread
            raise StoreVersionError(
                f"store {path} has generations this dedupectl does not read ({', '.join(sorted(foreign))})",
                f"rebuild it from the output topic: dedupectl rebuild -p {path.name.rsplit('-', 1)[-1]} --replace",
            )
        return names

    @staticmethod
    def _read_meta(db: Rdict, path: Path) -> tuple[StoreIdentity, StoreState]:
        """Decode and check the meta family; on any problem close ``db`` and raise."""
        raw_identity, raw_state = _read_meta_values(db)
        problem: StoreError | None = None
        if raw_identity is None or raw_state is None:
            problem = StoreCorruptError(
                f"store {path} has no metadata", "restore it from a snapshot or rebuild it from the output topic"
            )
        else:
            try:
                identity = decode_identity(raw_identity)
                state = decode_state(raw_state)
            except (ValueError, KeyError, struct.error) as error:
                problem = StoreCorruptError(
                    f"store {path} has unreadable metadata ({error})",
                    "restore it from a snapshot or rebuild it from the output topic",
                )
            else:
                if identity.schema_version != SCHEMA_VERSION:
                    problem = _older_schema(path, identity.schema_version)
        if problem is not None:
            db.close()
            raise problem
        return identity, state

    # -- the layout on disk --------------------------------------------------------------------------

    def _settle_layout(self) -> None:
        """For a writer: finish what a stop or crash cut short (unnamed arrays, children's scratch, seals). On
        any failure the store is closed and the error raised."""
        try:
            self._settle_arrays()
            child_process.clear(self.path)  # what a killed worker's children left
            for generation in list(self._generations)[:-1]:
                self._seal_if_written(generation)  # a seal a stop or crash cut short is made again
            newest = self._generations.newest
            if newest is not None:
                newest.family.set_options(WRITTEN_GENERATION_OPTIONS)
        except BaseException:
            self.close()
            raise

    def _settle_arrays(self) -> None:
        """Forget the metadata's arrays of generations no longer live (dropped before a crash let it say so), and
        remove the files it does not name (a seal a crash cut short, or such a generation's)."""
        live = {g.name for g in self._generations}
        named = self._arrays_names()
        stale = [family for family in named if family not in live]
        if stale:
            self._write_arrays_names({family: files for family, files in named.items() if family in live})
        kept = {name for family, files in named.items() if family in live for name in files}
        removed = arrays_files.remove_unnamed(self.path, kept)
        if removed:
            log.info("store %s: removed sealed arrays no generation names: %s", self.path, removed)

    def _arrays_names(self) -> dict[str, list[str]]:
        return arrays_files.decode_names(self._meta_value(META_ARRAYS))

    def _write_arrays_names(self, names: dict[str, list[str]], batch: WriteBatch | None = None) -> None:
        """Write the metadata's arrays names (in ``batch`` when given, which this then writes, synced)."""
        batch = batch if batch is not None else WriteBatch(raw_mode=True)
        if names:
            batch.put(META_ARRAYS, arrays_files.encode_names(names), self._meta_handle)
        else:
            batch.delete(META_ARRAYS, self._meta_handle)
        durable = WriteOptions()
        durable.sync = True
        self._db.write(batch, durable)

    def _holds_array_keys(self, generation: Generation) -> bool:
        """Whether a generation's family holds any key of an arrays prefix (one seek each)."""
        for prefix in arrays_files.PREFIXES:
            lower, upper = arrays_files.prefix_range(prefix)
            read = ReadOptions()
            read.set_iterate_upper_bound(upper)
            it = generation.family.iter(read)
            try:
                it.seek(lower)
                if it.valid():
                    return True
                check_ended(it)
            finally:
                del it
        return False

    # -- reading -------------------------------------------------------------------------------------

    @property
    def state(self) -> StoreState:
        return self._state

    def refresh(self) -> None:
        """Readers: catch up with the writer and reload the state (a read-only instance opens again: a writer
        may have written the store since, or be writing it now)."""
        if not self.writable and not self._follows_writer:
            self._reopen_secondary()
        elif not self.writable:
            try:
                catch_up(self._db, self.path)
                families = set(Rdict.list_cf(str(self.path)))
            except Exception as error:
                if "unknown column family" not in str(error):
                    raise
                families = None
            # a secondary instance follows only the families it opened with: one the writer added or dropped
            # since (a generation), or sealed arrays it named since, make it open again; the same families and
            # arrays: none started since it caught up
            if families != set(self._family_names_on_open) or self._meta_value(META_ARRAYS) != self._arrays_raw:
                self._reopen_secondary()
            elif (raw := self._meta_value(META_STATE)) is not None:
                self._state = decode_state(raw)
            self._load_gaps()

    def _visible(self, state: StoreState) -> StoreState:
        """A secondary instance's state, as far as its families hold it. The writer may start a generation
        after the instance listed the families and before it caught up: the instance then reads the batches
        recorded into it (the state) but not that generation's ids, so its state stops below the first number
        of the oldest such generation."""
        unseen = set(Rdict.list_cf(str(self.path))) - set(self._family_names_on_open)
        written = list(unseen)
        below = min((first for name in written if (first := gens.first_seq_of(name)) is not None), default=None)
        if below is None or below >= state.next_seq:
            return state
        return replace(state, next_seq=max(below, state.first_live_seq))

    # -- output gaps (store.codec, "Output gaps") -------------------------------------------------------

    @property
    def refused_gap(self) -> OutputGap | None:
        """The output gap a worker refused this partition for, until an operator accepts it."""
        return self._refused_gap

    @property
    def accepted_gaps(self) -> tuple[AcceptedGap, ...]:
        """The output gaps operators accepted, oldest first."""
        return self._accepted_gaps

    @property
    def offsets_from_seq(self) -> int:
        """The first sequence number whose recorded output offset belongs to the output topic as it is now:
        below it, batches were published before the topic was recreated or truncated (an accepted gap)."""
        return max((entry.from_seq for entry in self._accepted_gaps if entry.gap.kind == GAP_TRUNCATED), default=0)

    def note_refused_gap(self, gap: OutputGap) -> None:
        """Keep the gap recovery refused the partition for, for the operator to see and accept."""
        self._require_writable()
        self._meta[META_REFUSED_GAP] = encode_gap(gap)
        self._refused_gap = gap

    def clear_refused_gap(self) -> None:
        """Forget a refused gap the output no longer shows (recovery found nothing missing since)."""
        self._require_writable()
        if self._refused_gap is not None:
            del self._meta[META_REFUSED_GAP]
            self._refused_gap = None

    def gap_to_accept(self) -> OutputGap:
        """The refused gap, if an operator can accept it now; else a StoreError that says why not."""
        gap, state = self._refused_gap, self._state
        if gap is None:
            raise StoreError(
                f"store {self.path} holds no refused output gap: nothing to accept",
                "a worker notes one when it refuses the partition; see `dedupectl window`",
            )
        if state.output_offset != gap.covered:
            raise StoreError(
                f"store {self.path} covers output offset {state.output_offset} now, not {gap.covered} as when the "
                f"gap was found",
                "start the worker again: its recovery checks the output afresh",
            )
        return gap

    def accept_gap(self, reason: str, by: str, accepted_ms: int) -> AcceptedGap:
        """The operator's override: accept the refused gap and move the covered output offset to the gap's
        ``low``, in one write, so recovery goes on from the first offset the output holds."""
        self._require_writable()
        gap, state = self.gap_to_accept(), self._state
        accepted = AcceptedGap(gap=gap, from_seq=state.next_seq, accepted_ms=accepted_ms, reason=reason, by=by)
        gaps = (*self._accepted_gaps, accepted)
        new_state = replace(state, output_offset=gap.low)
        batch = WriteBatch(raw_mode=True)
        batch.put(META_ACCEPTED_GAPS, encode_accepted_gaps(gaps), self._meta_handle)
        batch.delete(META_REFUSED_GAP, self._meta_handle)
        batch.put(META_STATE, encode_state(new_state), self._meta_handle)
        self._db.write(batch)
        self._state, self._refused_gap, self._accepted_gaps = new_state, None, gaps
        return accepted

    def _load_gaps(self) -> None:
        refused, accepted = self._meta_value(META_REFUSED_GAP), self._meta_value(META_ACCEPTED_GAPS)
        try:
            self._refused_gap = None if refused is None else decode_gap(refused)
            self._accepted_gaps = () if accepted is None else decode_accepted_gaps(accepted)
        except (ValueError, KeyError, TypeError) as error:
            raise StoreCorruptError(
                f"store {self.path} has unreadable output gaps in its metadata ({error})",
                "restore it from a snapshot or rebuild it from the output topic",
            ) from error

    def contains_many(self, ids: Sequence[bytes]) -> list[bool]:
        """Multi-gets: for each id, whether the store holds it within the window."""
        return self.contains_keys(encode_ids(ids))

    def contains_keys(self, keys: list[bytes]) -> list[bool]:
        """``contains_many`` for ids already encoded (``store.codec.encode_ids``): the worker encodes each
        batch once, for this lookup and for ``record``. A worker's store asks its id filter first, and RocksDB
        only about the ids the filter may hold, each in the generations of the group the filter holds for it."""
        if not self._filtered or not keys:
            return self.contains_keys_in_db(keys)
        id_filter = self._filters.ready()
        cut = self._state.first_live_seq
        maybe, values = self._routed_values(id_filter, keys, LOOKUP_CHUNK, live_from=cut)
        found = [False] * len(keys)
        for index, seq in zip(maybe, live_seqs_of(values, cut) if cut else values, strict=True):
            found[index] = seq is not None
        return found

    def contains_keys_in_db(self, keys: list[bytes]) -> list[bool]:
        """``contains_keys`` answered by RocksDB alone, without the id filter: what the filter must agree with.
        Every generation is asked (the newest first), each about the ids not found yet."""
        values = self._values(keys, LOOKUP_CHUNK)
        cut = self._state.first_live_seq
        return [seq is not None for seq in (live_seqs_of(values, cut) if cut else values)]

    def _routes(self, id_filter: IdFilter, masks: np.ndarray) -> list[list[Generation]]:
        """For each mask of the filter's groups an id may be in, the generations those groups' stretches
        cover: one, or two where a generation does not start where a stretch does."""
        by_mask: dict[int, list[Generation]] = {}
        routes = []
        generations = self._generations
        for mask in masks.tolist():
            route = by_mask.get(mask)
            if route is None:
                route = []
                for tag in range(GROUPS):
                    start = id_filter.group_starts[tag]
                    if mask >> tag & 1 and start >= 0:
                        route += [g for g in generations.covering(start, start + id_filter.span) if g not in route]
                by_mask[mask] = route
            routes.append(route)
        return routes

    # -- the id filter -------------------------------------------------------------------------------

    @property
    def filter_bytes(self) -> int:
        """Memory the id filter takes (0 before the first lookup, and for stores without one)."""
        return self._filters.memory_bytes

    def prepare_filter(self) -> None:
        """Build the id filter now rather than on the first lookup (after a bulk load: the store's first
        worker then starts from the saved filter instead of reading every id)."""
        if self._filtered:
            self._filters.ready()

    def _filter_window(self) -> int:
        """Ids the filter is sized for: the store's bound (``window_ids``), or, past it or without one, twice the
        ids held (a store opened without its bound, or whose bound was lowered: aging brings it back under)."""
        bound, live = self._window_ids, self._state.live_ids
        return max(bound if bound and live <= bound else 2 * live, MIN_FILTER_WINDOW)

    def _id_chunks(self, low: int, high: int) -> Iterator[tuple[list[bytes], list[int]]]:
        """``(keys, seqs)`` of the ids numbered ``low`` to ``high - 1``, a chunk at a time: one scan of each
        generation that may hold them (the id filter and the sequence view are built so), in parts of
        ``_SCAN_CHUNK`` ids (``_id_scan_step``)."""
        after: ScanPoint | None = None
        while True:
            keys, seqs, after = self._id_scan_step(low, high, after, _SCAN_CHUNK)
            if keys:
                yield keys, seqs
            if after is None:
                return

    def _id_scan_step(
        self, low: int, high: int, after: ScanPoint | None, scan: int
    ) -> tuple[list[bytes], list[int], ScanPoint | None]:
        """A part of the scan of the generations that may hold the ids numbered ``low`` to ``high - 1``: at most
        ``scan`` ids read, from just past ``after`` (None: the start). Returns the ids of that range it found,
        and where the next part starts (None: the scan is done). Each part opens its own iterators, so that
        nothing stays open between parts; a generation dropped meanwhile (aged out) is skipped."""
        read = _id_scan_reads()
        keys: list[bytes] = []
        seqs: list[int] = []
        scanned = 0
        for generation in self._generations.covering(low, high):
            if after is not None and generation.first_seq < after.first_seq:
                continue
            resumed = after is not None and generation.first_seq == after.first_seq
            for key, value in self._items_of(generation, after.key if resumed else IDS_LOWER, read):
                if resumed and key == after.key:
                    continue
                seq = int.from_bytes(value, "big")
                if low <= seq < high:
                    keys.append(key)
                    seqs.append(seq)
                scanned += 1
                if scanned >= scan:
                    return keys, seqs, ScanPoint(generation.first_seq, key)
        return keys, seqs, None

    def _id_hashes(self, low: int, high: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(key_hashes, numbers)`` of the ids numbered ``low`` to ``high - 1``, a chunk at a time, for a filter
        built whole: a generation's sealed arrays read as arrays, with no key made, and its family scanned. An
        id its family puts back or forgets comes from both: a filter holding an id it need not only asks one
        more generation."""
        read = _id_scan_reads()
        for generation in self._generations.covering(low, high):
            for arrays in generation.arrays.values():
                for firsts, seconds, seqs in arrays.columns(_SCAN_CHUNK):
                    live = (seqs >= low) & (seqs < high)
                    yield body_hashes(arrays.prefix, firsts[live], seconds[live]), seqs[live]
            keys: list[bytes] = []
            seqs: list[int] = []
            for key, value in scan(generation.family, IDS_LOWER, read):
                seq = int.from_bytes(value, "big")
                if value and low <= seq < high:  # an empty value: an id forgotten
                    keys.append(key)
                    seqs.append(seq)
                if len(keys) >= _SCAN_CHUNK:
                    yield key_hashes(keys), np.asarray(seqs, np.int64)
                    keys, seqs = [], []
            if keys:
                yield key_hashes(keys), np.asarray(seqs, np.int64)

    def _saved_filter_token(self) -> str | None:
        token = self._meta_value(META_FILTER_TOKEN)
        return None if token is None else token.decode("ascii", "replace")

    def _name_saved_filter(self, token: str) -> None:
        batch = WriteBatch(raw_mode=True)
        batch.put(META_FILTER_TOKEN, token.encode("ascii"), self._meta_handle)
        self._db.write(batch)

    def live_seqs(self, keys: list[bytes], per_call: int = LOOKUP_CHUNK) -> list[int | None]:
        """The sequence number of each encoded id (``store.codec.encode_ids``) within the window, None where
        absent or aged out; ``per_call`` keys a multi-get (reconcile sends a thousand at a time, in key order)."""
        return live_seqs_of(self._raw_values(keys, per_call), self._state.first_live_seq)

    def lookup_many(self, ids: Sequence[bytes]) -> list[tuple[int, int] | None]:
        """For each id, ``(seq, timestamp_ms)`` where present, else ``None``."""
        seqs = self.live_seqs(encode_ids(ids))
        found = sorted({seq for seq in seqs if seq is not None})
        stamps = dict(zip(found, self.timestamps(found), strict=True))
        return [None if seq is None else (seq, stamps[seq]) for seq in seqs]

    def _raw_values(self, keys: list[bytes], per_call: int) -> list[bytes | None]:
        """The ``ids`` values of ``keys`` (encoded ids), aged-out ids included, ``per_call`` keys a multi-get;
        through the id filter's routes when the store has one, else from every generation."""
        id_filter = self._filters.current if self._filtered else None
        if id_filter is None or not keys:
            return self._values(keys, per_call)
        values: list[bytes | None] = [None] * len(keys)
        maybe, found = self._routed_values(id_filter, keys, per_call)
        for index, value in zip(maybe, found, strict=True):
            values[index] = value
        return values

    def _routed_values(
        self, id_filter: IdFilter, keys: list[bytes], per_call: int, live_from: int | None = None
    ) -> tuple[list[int], list[bytes | None]]:
        """The indexes of ``keys`` the id filter may hold, and their values, each asked of the generations of
        the groups the filter holds for it (the others are certainly absent). ``live_from``: see ``_ask``."""
        masks = id_filter.group_masks(key_hashes(keys))
        maybe = np.flatnonzero(masks).tolist()
        if not maybe:
            return [], []
        routes = self._routes(id_filter, masks[maybe])
        return maybe, self._values([keys[index] for index in maybe], per_call, routes, live_from)

    def _values(
        self,
        keys: list[bytes],
        per_call: int,
        routes: list[list[Generation]] | None = None,
        live_from: int | None = None,
    ) -> list[bytes | None]:
        """The values of ``keys`` in the generations: ``routes[i]`` those that may hold ``keys[i]``, or without
        routes every generation, the newest first, each asked about the keys not found yet."""
        values: list[bytes | None] = [None] * len(keys)
        if routes is None:
            pending = list(range(len(keys)))
            for generation in self._generations.newest_first():
                if not pending:
                    break
                pending = self._ask(generation, keys, pending, values, per_call)
            return values
        asked: dict[str, tuple[Generation, list[int]]] = {}
        for index, route in enumerate(routes):
            for generation in route:
                asked.setdefault(generation.name, (generation, []))[1].append(index)
        for generation, indexes in asked.values():
            self._ask(generation, keys, indexes, values, per_call, live_from)
        return values

    def _ask(
        self,
        generation: Generation,
        keys: list[bytes],
        indexes: list[int],
        values: list[bytes | None],
        per_call: int,
        live_from: int | None = None,
    ) -> list[int]:
        """Look ``keys[indexes]`` up in one generation into ``values``: in its sealed arrays those they may hold,
        the others in its family; returns the indexes not found. With ``live_from`` at or below the
        generation's first number, the caller asks only whether each id is held within the window: an id its
        arrays hold gets that first number as its value, and its own number is not read."""
        if not generation.arrays:
            return self._ask_family(generation, keys, indexes, values, per_call)
        in_arrays: dict[bytes, list[int]] = {}
        in_family: list[int] = []
        arrays = generation.arrays
        for index in indexes:
            prefix = arrays_files.prefix_of(keys[index])
            if prefix in arrays:
                in_arrays.setdefault(prefix, []).append(index)
            else:
                in_family.append(index)
        missing = self._ask_family(generation, keys, in_family, values, per_call) if in_family else []
        for prefix, asked in in_arrays.items():
            if generation.overrides:  # an id put back (its number) or forgotten (an empty value) is in the family
                asked = self._ask_overrides(generation, keys, asked, values, missing, per_call)
            skip = len(prefix)
            bodies = b"".join([keys[index][skip:] for index in asked])
            held_only = live_from is not None and live_from <= generation.first_seq  # one read of memory fewer
            search = arrays[prefix].rows_of if held_only else arrays[prefix].seqs_of
            live = generation.first_seq.to_bytes(8, "big")
            for index, found in zip(asked, search(bodies).tolist(), strict=True):
                if found < 0:
                    missing.append(index)
                else:
                    values[index] = live if held_only else found.to_bytes(8, "big")
        return missing

    def _ask_overrides(
        self,
        generation: Generation,
        keys: list[bytes],
        asked: list[int],
        values: list[bytes | None],
        missing: list[int],
        per_call: int,
    ) -> list[int]:
        """Ask the family about ids its sealed arrays may hold: one it holds is answered there (found, or missing
        when forgotten); returns the others, for the arrays."""
        found: list[bytes | None] = [None] * len(keys)
        unanswered = self._ask_family(generation, keys, asked, found, per_call)
        for index in asked:
            value = found[index]
            if value is None:
                continue
            if value:
                values[index] = value
            else:
                missing.append(index)
        return unanswered

    @staticmethod
    def _ask_family(
        generation: Generation, keys: list[bytes], indexes: list[int], values: list[bytes | None], per_call: int
    ) -> list[int]:
        """Multi-get ``keys[indexes]`` from one generation's family into ``values``; returns the indexes not found."""
        family = generation.family
        missing = []
        with translated():  # a damaged block is refused, never read as "absent"
            for start in range(0, len(indexes), per_call):
                chunk = indexes[start : start + per_call]
                for index, value in zip(chunk, family[[keys[i] for i in chunk]], strict=True):
                    if value is None:
                        missing.append(index)
                    else:
                        values[index] = value
        return missing

    def timestamps(self, seqs: Sequence[int]) -> list[int]:
        """The record timestamp (ms) of each recorded sequence number, from ``times`` (one seek per batch of
        consecutive numbers asked for: pass them sorted)."""
        found: list[int] = []
        for _, first, value, held in self._times_batches(list(seqs)):
            found += times_at(value, [seq - first for seq in held])
        return found

    def output_offsets(self, seqs: Sequence[int]) -> list[int | None]:
        """The output offset each recorded sequence number was published at (None: its batch was recorded
        without offsets); pass them sorted."""
        found: list[int | None] = []
        since = self.offsets_from_seq
        for _, first, value, held in self._times_batches(list(seqs)):
            offsets = times_offsets(value) if first >= since else None
            found += [None] * len(held) if offsets is None else [offsets[seq - first] for seq in held]
        return found

    def window_start_offset(self) -> int | None:
        """The output offset of the oldest live id: every output record before it is older than the window,
        exactly. -1 while nothing has aged; None when the batch the cut falls in was recorded without
        offsets (schema 3), so the cut cannot be placed in the output."""
        state = self._state
        if state.first_live_seq == 0:
            return -1
        if state.live_ids <= 0:  # everything recorded has aged: the window starts past the newest id
            (newest,) = self.output_offsets([state.next_seq - 1])
            return None if newest is None else newest + 1
        return self.output_offsets([state.first_live_seq])[0]

    def newest_output_offset(self) -> int | None:
        """The output offset of the newest recorded id (-1: none recorded; None: recorded without offsets)."""
        if self._state.next_seq == 0:
            return -1
        return self.output_offsets([self._state.next_seq - 1])[0]

    def place(self, ids: Sequence[bytes], offsets: Sequence[int]) -> list[int | None]:
        """Put ids the store lost back under the sequence numbers they were recorded with, found by the output
        offset each was published at (``offsets``: the output holds ``ids[i]`` at ``offsets[i]``, so the number
        recorded at that offset is that id's own); one WriteBatch. An id is placed only when a live batch
        recorded exactly that offset and the id is absent; returns, for each id, the number it was put back
        under (None: not placed).

        This is how reconcile repairs a store inside its window without moving any id's place in the aging
        order: an id appended with a new number would outlive newer ids and push one of them out."""
        self._require_writable()
        seq_of = self.seqs_published_at(offsets)
        keys = encode_ids(ids)
        self._filters.wait_for_save()  # else it could name a file saved without these ids after the batch below
        self._void_conversion()  # so could sealed arrays being written
        batch = WriteBatch(raw_mode=True)
        batch.delete(META_FILTER_TOKEN, self._meta_handle)  # a saved filter lacks the ids put back below
        placed: list[int | None] = [None] * len(ids)
        taken: set[int] = set()
        keys_taken: set[bytes] = set()
        for index, (key, live, offset) in enumerate(zip(keys, self.live_seqs(keys), offsets, strict=True)):
            seq = seq_of.get(offset)
            if seq is None or seq in taken or key in keys_taken:
                continue
            if live is not None:
                continue  # not lost: live under its own number
            generation = self._generations.holding(seq)
            batch.put(key, seq.to_bytes(seq_width(seq), "big"), generation.handle)
            generation.overrides = True  # asked before its sealed arrays, if it has any
            taken.add(seq)
            keys_taken.add(key)
            placed[index] = seq
        if taken:
            self._db.write(batch)
            chosen = [index for index, seq in enumerate(placed) if seq is not None]
            self._filters.add([keys[index] for index in chosen], np.array([placed[index] for index in chosen]))
            if self._seq_view is not None:
                for message_id, seq in zip(ids, placed, strict=True):
                    if seq is not None:
                        self._seq_view.add(seq, [message_id])
        return placed

    def seqs_published_at(self, offsets: Sequence[int]) -> dict[int, int]:
        """Live sequence number recorded at each of ``offsets``, where a batch with offsets holds it.

        Sequence order is publication order, so the first is found by bisecting the live numbers, and the
        rest by walking the batches forward from there."""
        state = self._state
        found: dict[int, int] = {}
        offsets = sorted(set(offsets))
        low, high = max(state.first_live_seq, self.offsets_from_seq), state.next_seq - 1
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
        it = self._times.iter()
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
        it = self._times.iter()
        try:
            it.seek_for_prev(encode_seq(seq))
            if not it.valid():
                check_ended(it)
                return None
            first, value = decode_seq(it.key()), it.value()
            if seq - first >= times_count(value) or first < self.offsets_from_seq:
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
        it = self._times.iter()
        try:
            it.seek_for_prev(encode_seq(first))
            while it.valid() and reached < stop:
                batch_first, value = decode_seq(it.key()), it.value()
                batch_stop = batch_first + times_count(value)
                if batch_first > reached or batch_stop <= reached:
                    return None  # a gap: not what record() writes
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

    def _times_batches(self, seqs: list[int]) -> Iterator[tuple[bytes, int, bytes, list[int]]]:
        """For ``seqs`` (sorted), each ``times`` batch holding some of them, one seek per batch: its key, its
        first sequence number, its value and the numbers of ``seqs`` it holds."""
        it = self._times.iter()
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
                    raise damaged(f"store {self.path}", f"no batch in its times family holds sequence {seqs[start]}")
                yield key, first, value, seqs[start:end]
                start = end
        finally:
            del it

    def iter_by_seq(self, from_seq: int | None = None, to_seq: int | None = None) -> Iterator[tuple[int, bytes]]:
        """``(seq, messageId)`` of live ids in sequence (publication) order, ``from_seq`` inclusive to
        ``to_seq`` exclusive.

        Ids are stored by id, not by sequence: the first call builds a sequence view (one scan of the ``ids``
        family, about 1-2 s per million ids, on temporary disk; see ``store.seq_view``); later calls are seeks.
        """
        low = max(self._state.first_live_seq, from_seq or 0)
        high = self._state.next_seq if to_seq is None else min(to_seq, self._state.next_seq)
        if low >= high:
            return
        view = self._view(low, high)
        end = encode_seq(high)
        for seq_key, message_id in view.db.items(from_key=encode_seq(low)):
            if seq_key >= end:
                return
            seq = decode_seq(seq_key)
            if seq >= self._state.first_live_seq:  # aging may have moved the cut meanwhile
                yield seq, message_id

    def _view(self, low: int, high: int) -> SeqView:
        view = self._seq_view
        if view is None or low < view.low or high > view.high:
            if view is not None:
                low = min(low, view.low)
                view.close()
            high = self._state.next_seq
            self._seq_view = view = SeqView(self._id_chunks(low, high), low, high)
        return view

    def compactions_running(self) -> int:
        """How many compactions RocksDB is running on this store now (any family)."""
        return self._db.property_int_value("rocksdb.num-running-compactions") or 0

    @property
    def writing_arrays(self) -> bool:
        """Whether a sealed generation's arrays are being written (by a child process), or wait to be."""
        return self._conversion is not None or bool(self._to_convert)

    def compaction_pending(self) -> bool:
        """Whether RocksDB counts a compaction of the ids as pending, or a generation is being sealed."""
        if any(thread.is_alive() for thread in self._sealing.values()) or self._conversion or self._to_convert:
            return True
        return any(g.family.property_int_value("rocksdb.compaction-pending") for g in self._generations)

    @property
    def db(self) -> Rdict:
        """The underlying database, for the inspection and aging modules of this package."""
        return self._db

    def family(self, name: str) -> Rdict:
        """A column family by name (a generation's too), for this package's modules and their tests: the layers
        above use the methods of this class. ``SEQ_VIEW`` (no longer on disk) is the read-only sequence view:
        ``>Q seq -> messageId`` of the live ids, built on first use (see ``iter_by_seq``)."""
        if name == SEQ_VIEW:
            return self._view(self._state.first_live_seq, self._state.next_seq).db
        if name in (CF_TIMES, CF_META):
            return {CF_TIMES: self._times, CF_META: self._meta}[name]
        return self._generation_named(name).family

    def family_handle(self, name: str):
        if name == SEQ_VIEW:
            raise StoreError(
                f"store {self.path} has no {SEQ_VIEW!r} family on disk (schema {SCHEMA_VERSION})",
                "remove ids with DedupStore.forget_many; read them in order with iter_by_seq",
            )
        if name in (CF_TIMES, CF_META):
            return {CF_TIMES: self._times_handle, CF_META: self._meta_handle}[name]
        return self._generation_named(name).handle

    def _generation_named(self, name: str) -> Generation:
        for generation in self._generations:
            if generation.name == name:
                return generation
        raise StoreError(f"store {self.path} has no family {name!r}")

    # -- generations ---------------------------------------------------------------------------------

    def id_families(self) -> list[tuple[str, int, int]]:
        """``(family, first, end)`` of each generation, oldest first: the numbers from ``first`` to ``end - 1``
        are recorded there."""
        next_seq = self._state.next_seq
        return [(g.name, g.first_seq, self._generations.end_of(g, next_seq)) for g in self._generations]

    def generation_ids(self) -> int:
        """Numbers per generation: the id filter's stretch (``store.generations``), for the window it has or,
        before it is made, the one it will be made for."""
        if self._filters.current is not None:
            return max(gens.MIN_GENERATION_IDS, self._filters.current.span)
        return gens.generation_ids(self._filter_window(), GROUPS, FILTER_SLACK)

    def _generations_for(self, first: int, count: int) -> list[tuple[int, Generation]]:
        """``(first number, generation)`` for the numbers ``first`` to ``first + count - 1``, starting the new
        generations they reach (and sealing the one they leave)."""
        stretch = self.generation_ids()
        while True:
            newest = self._generations.newest
            if newest is None:
                self._start_generation(first)
                continue
            boundary = (newest.first_seq // stretch + 1) * stretch
            if boundary >= first + count:
                break
            self._start_generation(max(boundary, first))
        return [(max(g.first_seq, first), g) for g in self._generations.covering(first, first + count)]

    def _start_generation(self, first_seq: int) -> None:
        """Create the generation starting at ``first_seq`` and seal the one before it. A crash right after
        leaves it empty: the next write of a number from ``first_seq`` on goes there all the same."""
        previous = self._generations.newest
        name = gens.family_name(first_seq)
        try:
            self._db.create_column_family(name, self._new_generation_options)
        except Exception as error:
            raise StoreError(f"store {self.path}: cannot create the family of a new generation: {error}") from error
        generation = self._generation(name, first_seq)
        generation.family.set_options(WRITTEN_GENERATION_OPTIONS)
        self._generations.add(generation)
        if previous is not None:
            _leave_block_cache_alone(previous)
            self._seal_if_written(previous)
            self._filters.sealed()

    def ingest_generations(self, files: dict[int, list[str]]) -> None:
        """Bulk load into a store that holds no ids yet: each entry's SST files (written apart, filterless:
        ``store.bulk_load``) become the generation starting at that number. A worker's store writes each but the
        newest to sealed arrays first, read through its files merged (a compaction before would rewrite ids the
        arrays then take); then what is left of a generation, if its files were several or its ids converted, is
        compacted into its one run, so the store is ready for lookups when this returns."""
        self._require_writable()
        if len(self._generations):
            raise StoreError(f"store {self.path} holds ids already: a bulk load fills a fresh store")
        ingest = IngestExternalFileOptions()
        ingest.set_move_files(True)  # a rename (hard link), not a copy
        newest = max(files, default=None)
        for first in sorted(files):
            name = gens.family_name(first)
            self._db.create_column_family(name, self._new_generation_options).close()
            generation = self._generation(name, first)
            self._generations.add(generation)
            generation.family.ingest_external_file(files[first], ingest)
            names = []
            if self._converts and first != newest:  # to sealed arrays: the newest takes the next writes
                names = arrays_files.write_generation(self.path, name, generation.family, first)
                self._commit_arrays(generation, names)
            if names or len(files[first]) > 1:  # one run of what is left: converted ids are compacted away
                generation.family.compact_range(None, None, seal_options())

    def _seal(self, generation: Generation) -> None:
        """Seal a generation no longer written: a worker's store writes its fixed-width ids to sealed arrays
        first (``_next_conversion``); then, or else, its family is compacted into its filterless run."""
        generation.family.set_options(SEALED_GENERATION_OPTIONS)  # from its next memtable on
        if self._converts and not generation.arrays and self._holds_array_keys(generation):
            self._to_convert.append(generation)  # started once the batch that sealed it is written: _conversion_step
        else:
            self._compact_sealed(generation)

    def _compact_sealed(self, generation: Generation) -> None:
        """Flush a sealed generation and compact it into one filterless run, on a thread of its own (RocksDB
        works without the GIL: the writer goes on meanwhile)."""

        def run() -> None:
            try:
                generation.family.flush(True)
                generation.family.compact_range(None, None, seal_options())
            except Exception as error:  # left as it is: still correct, only its filter stays in memory
                log.warning("store %s: could not seal generation %s: %s", self.path, generation.name, error)

        thread = threading.Thread(target=run, name=f"seal-{generation.name}", daemon=True)
        self._sealing[generation.name] = thread
        thread.start()

    def _seal_if_written(self, generation: Generation) -> None:
        """Seal a generation no longer written, unless it is one run already (sealed before, bulk loaded, or
        merged down by RocksDB) and, for a worker's store, holds no fixed-width ids outside sealed arrays
        (written by an earlier schema, or a seal a stop cut short): rewriting it would only cost CPU."""
        if self._written_since_sealed(generation) or (
            self._converts and not generation.arrays and self._holds_array_keys(generation)
        ):
            self._seal(generation)
        else:
            generation.family.set_options(SEALED_GENERATION_OPTIONS)

    @classmethod
    def _written_since_sealed(cls, generation: Generation) -> bool:
        """Whether a generation holds ids in memtables or above its last level. The memtables are asked first:
        a flush moves ids from them to level 0 only once its file is in place, so none is missed between."""
        family = generation.family
        in_memory = family.property_int_value("rocksdb.num-entries-active-mem-table") or family.property_int_value(
            "rocksdb.num-entries-imm-mem-tables"
        )
        return bool(in_memory) or cls._unsealed(generation)

    @staticmethod
    def _unsealed(generation: Generation) -> bool:
        """Whether a generation has files above its last level (a sealed one has one run there)."""
        family = generation.family
        return any(family.property_int_value(f"rocksdb.num-files-at-level{level}") for level in range(_LAST_LEVEL))

    # -- sealed arrays (store.generation_arrays) -------------------------------------------------------

    def _next_conversion(self) -> None:
        """Start writing the next sealed generation waiting for its arrays, unless one is being written. Only
        between batches: the batch that seals a generation may write some of its numbers after sealing it, and
        the conversion reads the family as it is then (the ids it misses would be deleted with the others).

        A thread of the conversion's flushes the family, then waits for a child process
        (``store.arrays_writer``) that reads it through a secondary instance and writes the files: reading
        every id of a generation takes the interpreter, whose GIL the worker's batches need. The thread then
        maps the files whole, while the page cache holds what was just written, and reads their guides."""
        while self._conversion is None and self._to_convert:
            generation = self._to_convert.pop(0)
            if generation.family is None or generation.arrays:
                continue  # aged out meanwhile, or converted already
            conversion = _Conversion(generation)

            def run(conversion: _Conversion = conversion, generation: Generation = generation) -> None:
                started = time.monotonic()
                try:
                    generation.family.flush(True)  # what the sealing batch wrote last, for the child to read
                    conversion.names = self._written_by_child(conversion)
                    conversion.opened = arrays_files.open_files(self.path, conversion.names, populate=True)
                    for arrays in conversion.opened.values():
                        arrays.prepare()
                except Exception as error:  # left as a run: still correct, its lookups only cost more
                    conversion.error = error
                conversion.seconds = time.monotonic() - started

            conversion.thread = threading.Thread(target=run, name=f"arrays-{generation.name}", daemon=True)
            self._conversion = conversion
            conversion.thread.start()

    def _written_by_child(self, conversion: _Conversion) -> list[str]:
        """Run ``store.arrays_writer`` on the conversion's generation and wait for it; the names of the files it
        wrote."""
        generation = conversion.generation
        child = child_process.Child(
            self.path, "store.arrays_writer", str(self.path), generation.name, str(generation.first_seq)
        )
        conversion.child = child
        try:
            if conversion.stopped:  # the store closed while the child started: _stop_conversion missed it
                child.process.kill()
            child.process.wait()
            child.finished()  # raises ChildFailed with its last line of stderr
            return list(json.loads((child.scratch / arrays_files.WRITTEN_FILE).read_text())["names"])
        finally:
            child.end()

    def _take_conversion(self, wait_s: float = 0.0) -> bool:
        """Take in the sealed arrays written for a generation, if done (waiting up to ``wait_s``): their names
        and the removal of those ids from the family in one synced write, then the family compacted. Returns
        whether no conversion is left running."""
        conversion = self._conversion
        if conversion is None:
            return True
        conversion.thread.join(wait_s)
        if conversion.thread.is_alive():
            return False
        self._conversion = None
        generation = conversion.generation
        if conversion.stopped and conversion.error is not None:
            arrays_files.remove(self.path, conversion.names or [])
            log.info(
                "%s[%d]: stopped writing the sealed arrays of %s: the next open writes them",
                self.identity.topic, self.identity.partition, generation.name,
            )  # fmt: skip
        elif conversion.error is not None:
            log.warning(
                "store %s: could not write the sealed arrays of %s (%s); it stays a run until the next open",
                self.path, generation.name, conversion.error,
            )  # fmt: skip
            if generation.family is not None:
                self._compact_sealed(generation)
        elif conversion.void or generation.family is None:
            arrays_files.remove(self.path, conversion.names or [])
            if generation.family is not None:
                self._to_convert.append(generation)  # written again from the family as it is now
        else:
            self._commit_arrays(generation, conversion.names or [], conversion.opened)
            self._compact_sealed(generation)
            log.info(
                "%s[%d]: wrote the sealed arrays of %s: %d ids in %.1f s",
                self.identity.topic, self.identity.partition, generation.name,
                sum(len(arrays) for arrays in generation.arrays.values()), conversion.seconds,
            )  # fmt: skip
        self._next_conversion()
        return self._conversion is None

    def _commit_arrays(
        self, generation: Generation, names: list[str], opened: dict[bytes, SealedArrays] | None = None
    ) -> None:
        """Make ``names`` (written from ``generation``'s family) its sealed arrays: named in the metadata and
        their ids deleted from the family in one synced write, so that every reader finds each id in one place
        or the other. Killed before the write, the files are unnamed (removed at the next open) and the family
        whole; after it, the arrays hold those ids."""
        if not names:
            return
        if opened is None:
            opened = arrays_files.open_files(self.path, names)
        batch = WriteBatch(raw_mode=True)
        for prefix in opened:
            lower, upper = arrays_files.prefix_range(prefix)
            batch.delete_range(lower, upper, generation.handle)
        named = self._arrays_names()
        named[generation.name] = names
        self._write_arrays_names(named, batch)
        generation.arrays = opened
        generation.overrides = False

    def _forget_arrays(self, generations: Sequence[Generation], batch: WriteBatch | None = None) -> None:
        """Unname the sealed arrays of generations whose families are dropped (in ``batch`` if given, which this
        writes), then remove their files."""
        named = self._arrays_names()
        files = [name for g in generations for name in named.pop(g.name, [])]
        if not files and batch is None:
            return
        for generation in generations:
            generation.arrays = {}
        self._write_arrays_names(named, batch)
        arrays_files.remove(self.path, files)

    def _stop_conversion(self) -> None:
        """At a stop: no conversion starts, and the one under way is ended (its child killed), unless it is done,
        in which case it is taken in. The next writer writes the arrays of the generations left as runs."""
        self._to_convert.clear()
        conversion = self._conversion
        if conversion is None:
            return
        conversion.stopped = True
        child = conversion.child
        if child is not None:
            child.process.kill()
        self._take_conversion(wait_s=_FOREVER)

    def _void_conversion(self) -> None:
        """Ids change in sealed generations: arrays being written may lack the change, and are written again."""
        if self._conversion is not None:
            self._conversion.void = True

    def wait_for_seals(self, timeout_s: float | None = None) -> bool:
        """Wait until no generation is being sealed (its sealed arrays written and taken in, its family
        compacted) and the id filter saved at the last seal is durable; False if ``timeout_s`` ran out first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def left() -> float:
            return _FOREVER if deadline is None else max(0.0, deadline - time.monotonic())

        self._next_conversion()
        while self._conversion is not None:
            if not self._take_conversion(wait_s=left()) and self._conversion is not None and left() == 0.0:
                return False
        for name, thread in list(self._sealing.items()):
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
            del self._sealing[name]
        return self._filters.wait_for_save(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def generation_bytes(self) -> list[tuple[int, int, int]]:
        """``(first, end, bytes)`` of each generation, oldest first: its SST files' and its sealed arrays' (what
        ``max_bytes`` aging weighs)."""
        next_seq = self._state.next_seq
        return [
            (
                g.first_seq,
                self._generations.end_of(g, next_seq),
                (g.family.property_int_value("rocksdb.total-sst-files-size") or 0) + arrays_files.bytes_of(g.arrays),
            )
            for g in self._generations
        ]

    def arrays_files(self) -> list[tuple[str, Path, int]]:
        """``(family, file, ids)`` of each generation's sealed arrays, oldest generation first."""
        return [(g.name, a.path, len(a)) for g in self._generations for _, a in sorted(g.arrays.items())]

    def arrays_bytes(self) -> int:
        """Bytes of every generation's sealed arrays (their files' sizes)."""
        return sum(arrays_files.bytes_of(g.arrays) for g in self._generations)

    def drop_generations_below(self, cut: int) -> tuple[int, int]:
        """Drop the generations whose every number is below ``cut`` (never one being sealed: the next step
        takes it); returns ``(generations, SST bytes)`` dropped."""
        self._require_writable()
        next_seq = self._state.next_seq
        dropped = freed = 0
        for generation in list(self._generations):
            if self._generations.end_of(generation, next_seq) > cut:
                break
            thread = self._sealing.get(generation.name)
            if (thread is not None and thread.is_alive()) or (
                self._conversion is not None and self._conversion.generation is generation
            ):
                break
            self._sealing.pop(generation.name, None)
            freed += generation.family.property_int_value("rocksdb.total-sst-files-size") or 0
            freed += arrays_files.bytes_of(generation.arrays)
            self._generations.remove(generation)
            self._drop_family(generation)
            self._forget_arrays([generation])
            dropped += 1
        return dropped, freed

    @staticmethod
    def _items_of(generation: Generation, from_key: bytes, read: ReadOptions) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of a generation's ids in key order from ``from_key`` on: its family's, and its sealed
        arrays' where it has them."""
        family_items = scan(generation.family, from_key, read)
        if not generation.arrays:
            return family_items
        return arrays_files.items_in_order(generation.arrays, family_items, from_key)

    def _conversion_step(self) -> None:
        """Between batches: take in the sealed arrays written for a generation, or start the next one due."""
        if self._conversion is not None:
            self._take_conversion()
        elif self._to_convert:
            self._next_conversion()

    def _drop_family(self, generation: Generation) -> None:
        generation.family.close()
        generation.family = generation.handle = None
        self._db.drop_column_family(generation.name)

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
        """Record newly published ids (in publish order) and the offsets now covered, in one WriteBatch.

        The caller guarantees the ids are absent from the store and distinct; ``output_offsets``, when known,
        are where each id was published (ascending, past every offset recorded in the output topic's present
        life: see ``offsets_from_seq``); ``keys``, when given, are ``encode_ids(ids)`` computed already.
        """
        self._require_writable()
        if len(ids) != len(timestamps_ms):
            raise ValueError(f"{len(ids)} ids but {len(timestamps_ms)} timestamps")
        if output_offsets is not None and len(output_offsets) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(output_offsets)} output offsets")
        state = self._state
        batch = WriteBatch(raw_mode=True)
        first = state.next_seq
        count = len(ids)
        if count:
            if keys is None:
                keys = encode_ids(ids)
            values = encode_seq_values(first, count)
            starts = self._generations_for(first, count)
            put = batch.put
            # in key order: the memtable's skip list takes sorted keys about 20% faster, more than the sort costs
            ordered = sorted(range(count), key=keys.__getitem__)
            if len(starts) == 1:  # the usual batch: all in the newest generation
                handle = starts[0][1].handle
                for index in ordered:
                    put(keys[index], values[index], handle)
            else:
                firsts = [start for start, _ in starts]
                for index in ordered:
                    put(keys[index], values[index], starts[bisect.bisect_right(firsts, first + index) - 1][1].handle)
            # the batch's digests let reconcile check a stretch of output against it without a lookup per id
            times = encode_times(timestamps_ms, batch_digests(keys), output_offsets)
            put(encode_seq(first), times, self._times_handle)
        new_state = StoreState(
            next_seq=first + count,
            first_live_seq=state.first_live_seq,
            input_offset=state.input_offset if input_offset is None else max(input_offset, state.input_offset),
            output_offset=state.output_offset if output_offset is None else max(output_offset, state.output_offset),
        )
        batch.put(META_STATE, encode_state(new_state), self._meta_handle)
        self._db.write(batch)
        self._state = new_state
        if count:
            self._filters.add(keys, np.arange(first, first + count, dtype=np.int64))
            self._filters.save_if_due()
            self._conversion_step()
        if self._seq_view is not None and count:
            self._seq_view.add(first, list(ids))
        return new_state

    def forget_many(self, ids: Sequence[bytes]) -> int:
        """Remove these ids from the window (reconcile's repair of ids the output never published), in one
        WriteBatch; returns how many were there. Sequence numbers and covered offsets do not change."""
        self._require_writable()
        keys = encode_ids(ids)
        batch = WriteBatch(raw_mode=True)
        removed: list[int] = []
        for key, seq in zip(keys, self.live_seqs(keys), strict=True):
            if seq is not None:
                self._erase(self._generations.holding(seq), key, batch)
                removed.append(seq)
        if removed:
            self._void_conversion()  # so could sealed arrays being written
            self._drop_digests(sorted(removed), batch)
            self._db.write(batch)
            if self._seq_view is not None:
                self._seq_view.remove(removed)
        return len(removed)

    @staticmethod
    def _erase(generation: Generation, key: bytes, batch: WriteBatch) -> None:
        """Remove ``key`` from ``generation`` in ``batch``: deleted from its family, or, where its sealed arrays
        may hold it, marked forgotten there (an empty value, which every read takes for absent)."""
        if arrays_files.prefix_of(key) in generation.arrays:
            batch.put(key, b"", generation.handle)
            generation.overrides = True
        else:
            batch.delete(key, generation.handle)

    def erase_keys(self, keys: list[bytes]) -> None:
        """Remove encoded ids from every generation and change nothing else (``store.testing``'s lost file)."""
        batch = WriteBatch(raw_mode=True)
        for generation in self._generations:
            for key in keys:
                self._erase(generation, key, batch)
        self._db.write(batch)

    def _drop_digests(self, seqs: list[int], batch: WriteBatch) -> None:
        """Rewrite the ``times`` values of the batches holding ``seqs`` (sorted) without their digests: those
        batches no longer hold every id they recorded, so only a lookup per id can check them."""
        for key, _, value, _ in self._times_batches(seqs):
            stripped = without_digests(value)
            if stripped is not value:
                batch.put(key, stripped, self._times_handle)

    def write_state(self, state: StoreState, batch: WriteBatch | None = None) -> None:
        """Persist ``state`` (optionally inside a caller's batch, which this then writes)."""
        self._require_writable()
        batch = batch if batch is not None else WriteBatch(raw_mode=True)
        batch.put(META_STATE, encode_state(state), self._meta_handle)
        self._db.write(batch)
        self._state = state

    def _require_writable(self) -> None:
        if not self.writable:
            raise StoreError(f"store {self.path} is open read-only", "this operation needs the worker stopped")

    def checkpoint(self, target: Path) -> None:
        """Write a RocksDB checkpoint of the whole store into ``target`` (which must not exist): consistent
        across the families, SST files hard-linked when ``target`` is on the same filesystem. RocksDB flushes
        the memtables first, so only the process that has the store open read-write gets a complete one."""
        checkpoint = Checkpoint(self._db)
        try:
            checkpoint.create_checkpoint(str(target))
        finally:
            del checkpoint  # it references the DB: the store could not close while it lives
        for generation in self._generations:  # the files its metadata names: nothing changes them meanwhile
            for arrays in generation.arrays.values():
                _link_or_copy(arrays.path, Path(target) / arrays.path.name)

    def flush(self) -> None:
        """Write every family's memtable to SST files and wait (aging can only drop what is in files)."""
        for family in (*(g.family for g in self._generations), self._times, self._meta):
            family.flush(True)

    def close(self) -> None:
        if self._closed:
            return
        # RocksDB stays open (and locked) while any family Rdict or handle is alive: drop them all first.
        try:
            if self.writable:
                self._stop_conversion()
                self.wait_for_seals()
                self._filters.save_at_close()
            self._filters.close()
            if self._seq_view is not None:
                self._seq_view.close()
                self._seq_view = None
            self._close_families()
            self._db.close()
            self._closed = True
            if self.writable:
                WRITING.discard(self.path.resolve())
        finally:
            if self._secondary_dir is not None and self._closed:
                self._secondary_dir.cleanup()
                self._secondary_dir = None

    def _abandon(self) -> None:
        """Let a store whose construction failed go: every family it took, then the database (and its lock)."""
        for generation in getattr(self, "_generations", ()):
            if generation.family is not None:
                generation.family.close()
        for name in ("_times", "_meta"):
            family = getattr(self, name, None)
            if family is not None:
                family.close()
        self._db.close()

    def _close_families(self) -> None:
        for generation in self._generations:
            if generation.family is not None:
                generation.family.close()
            generation.family = generation.handle = None
        self._generations = Generations([])
        self._times.close()
        self._meta.close()
        self._times = self._meta = self._times_handle = self._meta_handle = None

    def __enter__(self) -> DedupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Opening a store's database: creating it whole, checking its families and metadata, and the three ways in (a
writer, a reader while a writer holds it, a reader of a stopped store). Every refusal is one ``StoreError``.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

from rocksdict import AccessType, Rdict, WriteBatch

from store import generations as gens
from store.catch_up import Backoff, catch_up, manifest_mark
from store.clock import now_ms
from store.codec import (
    CF_IDS,
    CF_META,
    META_IDENTITY,
    META_STATE,
    REQUIRED_FAMILIES,
    SCHEMA_VERSION,
    SEQ_VIEW,
    StoreIdentity,
    StoreState,
    decode_identity,
    decode_state,
    encode_identity,
    encode_state,
)
from store.damage import corruption_of, damaged, translated
from store.errors import (
    DataDirError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    StoreVersionError,
)
from store.filter_keeper import FILTER_FILE
from store.id_filter import saved_stamp
from store.layout import holds_database_files
from store.options import SharedMemory, store_options
from store.writer_lock import writer_holds

_SECONDARY_OPEN_SECONDS = 30.0  # how long opening a secondary instance races a writer's new generations
# what RocksDB says when a secondary instance opens while the writer drops or creates a family
_FAMILY_RACES = ("Column family not found", "MANIFEST record referencing unknown column family")


def open_writer(
    path: Path, topic: str | None = None, partition: int | None = None, shared: SharedMemory | None = None
) -> tuple[Rdict, tuple[str, ...], StoreIdentity, StoreState, object]:
    """Open a store read-write: ``(db, families, identity, state, new generation options)``. With ``topic`` and
    ``partition`` (a worker's store) it is created when absent and must belong to them; without, it must exist."""
    if topic is None:
        require_store_dir(path)
    else:
        require_writable_dir(path.parent)
        if not (path / "CURRENT").exists() and (not path.exists() or not any(path.iterdir())):
            _create(path, StoreIdentity(topic=topic, partition=partition, created_ms=now_ms()))
    names = check_families(path)
    options, families, new_generation = _options_for(names, create=topic is not None, shared=shared)
    try:
        db = Rdict(str(path), options=options, column_families=families)
    except Exception as error:
        raise translate_open_error(path, error) from error
    if topic is not None and _read_meta_values(db)[0] is None:  # held something else first
        identity, state = _write_fresh_meta(db, StoreIdentity(topic=topic, partition=partition, created_ms=now_ms()))
        return db, names, identity, state, new_generation
    identity, state = read_meta(db, path)
    if topic is not None and (identity.topic, identity.partition) != (topic, partition):
        db.close()
        raise StoreCorruptError(
            f"store {path} belongs to {identity.topic}[{identity.partition}], not {topic}[{partition}]",
            "check --data-dir; never copy a store between partitions",
        )
    return db, names, identity, state, new_generation


def open_reader(path: Path, scratch: str) -> tuple[tuple[str, ...], Rdict, bool]:
    """The families and the database opened for reading without the writer's lock, and whether it follows a
    writer. While a process writes the store: a secondary instance (its files in ``scratch``), which follows the
    writer. Otherwise a read-only instance, whose open checks that every file the MANIFEST names is there whole:
    a secondary instance passes over a file it cannot open (taking it for one its writer removed) and would
    answer from an older state than the files say."""
    backoff = Backoff(_SECONDARY_OPEN_SECONDS)
    while True:
        names = check_families(path)
        options, families, _ = _options_for(names, create=False)
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
            raced = any(race in str(error) for race in _FAMILY_RACES)
            if raced and backoff.wait():
                continue
            if raced:  # RocksDB calls it corruption; it is the writer's churn, and the store is whole
                raise StoreError(
                    f"store {path}: its worker added or dropped generations during every open for "
                    f"{_SECONDARY_OPEN_SECONDS:.0f} s",
                    "run the command again; if it fails again, run it while the worker is stopped",
                ) from error
            if isinstance(error, StoreError):
                raise
            raise translate_open_error(path, error) from error
        return names, db, follows


def require_store_dir(path: Path) -> None:
    if not path.exists():
        raise StoreNotFoundError(f"no dedup store at {path}", "check --data-dir and --partition")
    if not (path / "CURRENT").exists() and holds_database_files(path):
        raise damaged(f"store {path}", "its CURRENT file is missing")
    if not (path / "CURRENT").exists():
        raise StoreNotFoundError(
            f"{path} is not a dedup store (no RocksDB database in it)", "check --data-dir and --partition"
        )


def check_families(path: Path) -> tuple[str, ...]:
    """The column families on disk, once they are known to make a dedup store."""
    try:
        names = tuple(Rdict.list_cf(str(path)))
    except Exception as error:
        raise translate_open_error(path, error) from error
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


def read_meta(db: Rdict, path: Path) -> tuple[StoreIdentity, StoreState]:
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


def refuse_if_behind(path: Path, identity: StoreIdentity, state: StoreState) -> None:
    """A saved id filter vouches for the ids recorded below its stamp's number (it is saved once they are
    durable): a store whose files hold fewer has gone back to an older state than it had, which only damage
    does (a MANIFEST cut short, a table lost with it), and RocksDB cannot tell from its files alone."""
    stamp, held = saved_stamp(path / FILTER_FILE), state.next_seq
    if stamp is None or (stamp.topic, stamp.partition, stamp.created_ms) != (
        identity.topic,
        identity.partition,
        identity.created_ms,
    ):
        return
    if stamp.next_seq > held:
        raise damaged(
            f"store {path}",
            f"its files hold {held:,} recorded ids, fewer than the {stamp.next_seq:,} its saved id filter "
            "holds: its MANIFEST or a table is damaged",
        )


def translate_open_error(path: Path, error: Exception) -> StoreError:
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


def require_writable_dir(directory: Path) -> None:
    """Make the data directory ``directory`` if it is missing; refuse one that cannot be made or written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataDirError(
            f"cannot create data directory {directory}: {error.strerror}",
            "point --data-dir at a writable directory",
        ) from error
    if not os.access(directory, os.W_OK):
        raise DataDirError(
            f"data directory {directory} is not writable", "fix its permissions or choose another --data-dir"
        )


def _create(path: Path, identity: StoreIdentity) -> None:
    """Build a new store beside ``path`` and rename it into place: RocksDB writes CURRENT before it adds the
    column families and the metadata, and a reader (``stats``, a snapshot, a test) looking meanwhile would take
    a half-made store for a foreign database. The rename makes it appear whole or not at all."""
    building = path.with_name(f".{path.name}.creating")
    shutil.rmtree(building, ignore_errors=True)  # left by a crash during an earlier creation
    options, families, _ = store_options(create=True)
    try:
        db = Rdict(str(building), options=options, column_families=families)
    except Exception as error:
        raise translate_open_error(path, error) from error
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


def _options_for(names: tuple[str, ...], *, create: bool, shared: SharedMemory | None = None):
    """``store_options`` for the families on disk."""
    generations = tuple(name for name in names if gens.first_seq_of(name) is not None)
    return store_options(create, shared, generations)


def _read_meta_values(db: Rdict) -> tuple[bytes | None, bytes | None]:
    """The raw identity and state values; the family object is closed so it cannot pin the DB open."""
    meta = db.get_column_family(CF_META)
    try:
        with translated():
            return meta.get(META_IDENTITY), meta.get(META_STATE)
    finally:
        meta.close()


def _write_fresh_meta(db: Rdict, identity: StoreIdentity) -> tuple[StoreIdentity, StoreState]:
    """Give a new database its identity and an empty state, in one write; the handle is dropped so it cannot pin
    the DB."""
    state = StoreState()
    batch = WriteBatch(raw_mode=True)
    handle = db.get_column_family_handle(CF_META)
    batch.put(META_IDENTITY, encode_identity(identity), handle)
    batch.put(META_STATE, encode_state(state), handle)
    db.write(batch)
    del handle
    return identity, state


def _older_schema(path: Path, version: int | None) -> StoreVersionError:
    """The refusal of a store of another schema (``None``: an earlier layout, with one ``ids`` family)."""
    which = "an earlier layout (one ids family)" if version is None else f"schema version {version}"
    return StoreVersionError(
        f"store {path} has {which}; this build reads schema {SCHEMA_VERSION} only",
        f"rebuild it from the output topic: dedupectl rebuild -p {path.name.rsplit('-', 1)[-1]} --replace "
        "(with the worker stopped), or run the release that wrote it",
    )

"""A reader following a live writer: the secondary instance's scratch files, catching up, and the state it can
vouch for. ``store.opening.open_reader`` opens it; ``DedupStore.refresh`` calls these to follow."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from rocksdict import Rdict

from store import generations as gens
from store import opening
from store.catch_up import catch_up
from store.codec import META_ARRAYS, StoreState
from store.database import Database


def open_follower(path: Path) -> tuple[tuple[str, ...], Rdict, bool, tempfile.TemporaryDirectory[str]]:
    """``open_reader``'s families, database and whether it follows a writer, with the scratch directory a
    secondary instance keeps its files in (the caller cleans it up once the database is closed)."""
    opening.require_store_dir(path)
    scratch = tempfile.TemporaryDirectory(prefix="dedupectl-secondary-")
    try:
        names, db, follows = opening.open_reader(path, scratch.name)
    except BaseException:
        scratch.cleanup()
        raise
    return names, db, follows, scratch


def caught_up(database: Database, path: Path, families: tuple[str, ...], arrays_raw: bytes | None) -> bool:
    """Catch a secondary instance up with its writer; False when it must open again. It follows only the
    families it opened with: one the writer added or dropped since (a generation), or sealed arrays it named
    since, need a new open; the same families and arrays mean none started since it caught up."""
    try:
        catch_up(database.db, path)
        now = set(Rdict.list_cf(str(path)))
    except Exception as error:
        if "unknown column family" not in str(error):
            raise
        return False
    return now == set(families) and database.meta_value(META_ARRAYS) == arrays_raw


def visible_state(path: Path, families: tuple[str, ...], state: StoreState) -> StoreState:
    """A secondary instance's state, as far as its families hold it. The writer may start a generation after
    the instance listed the families and before it caught up: the instance then reads the batches recorded
    into it (the state) but not that generation's ids, so its state stops below the first number of the
    oldest such generation."""
    unseen = set(Rdict.list_cf(str(path))) - set(families)
    below = min((first for name in unseen if (first := gens.first_seq_of(name)) is not None), default=None)
    if below is None or below >= state.next_seq:
        return state
    return replace(state, next_seq=max(below, state.first_live_seq))

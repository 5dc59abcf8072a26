"""Generations merged into fewer, by a process of its own while the worker goes on.

A store's generations are cut by the stretch of the id filter it has when they start. A store without an
aging bound grows its filter as it fills (``store.filter_growth``), and a grown filter's groups each cover a
stretch about twice as long: left alone, every group of it would span the several shorter generations cut
before, and a duplicate (or a false positive of the filter) would ask each of them, more of them the larger
the store. Once the stretch has grown, the sealed generations whose first numbers fall in one stretch are
merged into one (``generations.merge_runs``), and a group asks at most two generations again.

A run is merged by a child process (``store.merge_writer``) that reads the store through a secondary
instance and writes one SST file of the run's live ids, in key order, in a directory beside the store. The
store's writer then takes the file in (``DedupStore``): a new family with the file ingested, the merge
committed in the metadata, the sources dropped; then the next run, so that the disk holds one stretch twice
at most. Ids the writer puts back or removes meanwhile void the
merge: it is started again from the store as it is then.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from store.child_process import Child, ChildFailed

MERGE_DIR = ".merging"  # beside the store's files; what a kill leaves there is removed at the next open
PLAN_FILE = "plan.json"
DONE_FILE = "done.json"


class MergeFailed(Exception):
    """The child process failed, or what it wrote cannot be read: the generations stay as they are."""


@dataclass(frozen=True)
class MergedRun:
    """One run merged: its sources (family names, oldest first), the SST file of their live ids, how many."""

    sources: tuple[str, ...]
    file: Path
    ids: int


class Merge:
    """One merge in a child process; owned by the store's thread."""

    def __init__(self, store_path: Path, runs: list[list[str]], cut: int):
        self.directory = store_path / MERGE_DIR
        clear(store_path)
        self.directory.mkdir()
        (self.directory / PLAN_FILE).write_text(json.dumps({"runs": runs, "cut": cut}))
        self.child = Child(store_path, "store.merge_writer", str(store_path), str(self.directory))

    def poll(self) -> list[MergedRun] | None:
        """The runs merged, once the child is done; None meanwhile."""
        try:
            if not self.child.finished():
                return None
        except ChildFailed as error:
            raise MergeFailed(f"the merge {error}") from error
        try:
            done = json.loads((self.directory / DONE_FILE).read_text())
            return [
                MergedRun(tuple(run["sources"]), self.directory / run["file"], int(run["ids"])) for run in done["runs"]
            ]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise MergeFailed(f"what it wrote to {self.directory} cannot be read ({error})") from error

    def end(self, store_path: Path) -> None:
        """Stop the child if it runs, and remove what it wrote (files taken in are gone already)."""
        self.child.end()
        clear(store_path)


def clear(store_path: Path) -> None:
    """Remove a merge's directory: its files are never read but through the ``Merge`` that started it."""
    directory = store_path / MERGE_DIR
    if directory.exists():
        for leftover in directory.iterdir():
            leftover.unlink(missing_ok=True)
        directory.rmdir()

"""A larger id filter for a growing store, built by a process of its own while the worker goes on.

A store without an aging bound sizes its id filter for twice the ids it holds, and a full filter must be
built again, larger, from every id the store holds: about a microsecond per id on the worker's thread, which
holds the GIL throughout. Started early instead (``GROW_AHEAD_AT`` of the filter's capacity), the build runs
in a child process (``store.filter_builder``) that reads the store through a secondary instance, on another
core, and saves the new filter to a file beside the store, stamped with the next number it had seen. The
worker's keeper reads that file on a thread (numpy reads without the GIL), adds the ids recorded since its
stamp, and takes it in place of the old filter before that one fills.
"""

from __future__ import annotations

from pathlib import Path

from store import id_filter as filters
from store.child_process import Child, ChildFailed
from store.id_filter import FilterStamp, IdFilter

GROW_AHEAD_AT = 0.5  # of its capacity: the build has the other half of the ids to finish in
GROWN_FILE = ".id-filter-grown"  # beside the store; never read as the saved filter


class GrowthFailed(Exception):
    """The child process failed, or what it wrote cannot be read: the old filter is kept."""


class Growth:
    """One build in a child process, then the read of its file on a thread; owned by the store's thread."""

    def __init__(self, store_path: Path, span: int):
        self.file = store_path / GROWN_FILE
        self.file.unlink(missing_ok=True)
        self.child = Child(store_path, "store.filter_builder", str(store_path), str(self.file), str(span))
        self._reading: filters.BackgroundLoad | None = None

    def poll(self) -> tuple[IdFilter, FilterStamp] | None:
        """The filter built and its stamp, once the child is done and its file read; None meanwhile."""
        if self._reading is None:
            try:
                if not self.child.finished():
                    return None
            except ChildFailed as error:
                raise GrowthFailed(f"the build {error}") from error
            self._reading = filters.BackgroundLoad(self.file, "read-grown-id-filter")
            return None
        if not self._reading.done():
            return None
        grown = self._reading.result()
        if grown is None:
            raise GrowthFailed(f"the filter it wrote to {self.file} cannot be read")
        return grown

    def end(self) -> None:
        """Stop the child if it runs, and let its file and memory go."""
        self.child.end()
        if self._reading is not None:
            self._reading.result()
            self._reading = None
        self.file.unlink(missing_ok=True)

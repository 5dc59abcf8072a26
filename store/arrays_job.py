"""The store's one background job in a child process: writing a sealed generation's fixed-width ids to sealed
arrays (``store.arrays_writer``), one generation at a time. Its protocol is the one every background job of the
store keeps: ``start_next`` (between batches), ``finished`` (poll, or wait), ``void`` (ids changed meanwhile:
written again), ``abandon`` (aging drops the generation), ``stop`` (the store closes: the next writer writes
them again). What is done with a finished
job, the store's generation keeper decides (``store.generation_keeper``)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from store import child_process
from store import generation_arrays as arrays_files
from store.generations import Generation
from store.sealed_arrays import SealedArrays


@dataclass
class Conversion:
    """A sealed generation's fixed-width ids being written to sealed arrays: by a child process, which a thread
    of its own starts and waits for."""

    generation: Generation
    thread: threading.Thread | None = None
    names: list[str] | None = None
    opened: dict[bytes, SealedArrays] | None = None  # the files mapped, by prefix
    seconds: float = 0.0
    error: Exception | None = None
    void: bool = False  # ids were put back or forgotten meanwhile: the files may lack the change
    child: child_process.Child | None = None  # the process writing the files
    stopped: bool = False  # by the store's close: the next writer writes them again


class ArraysJob:
    def __init__(self, path: Path):
        self._path = path
        self._queue: list[Generation] = []
        self.running: Conversion | None = None

    @property
    def busy(self) -> bool:
        """Whether a generation's arrays are being written, or wait to be."""
        return self.running is not None or bool(self._queue)

    @property
    def queued(self) -> bool:
        return bool(self._queue)

    def queue(self, generation: Generation) -> None:
        self._queue.append(generation)

    def start_next(self) -> None:
        """Start writing the next sealed generation waiting for its arrays, unless one is being written. Only
        between batches: the batch that seals a generation may write some of its numbers after sealing it, and
        the child reads the family as it is then (the ids it misses would be deleted with the others).

        A thread flushes the family, then waits for a child process that reads it through a secondary instance
        and writes the files: reading every id of a generation takes the interpreter, whose GIL the worker's
        batches need. The thread then maps the files whole, while the page cache holds what was just written,
        and reads their guides."""
        while self.running is None and self._queue:
            generation = self._queue.pop(0)
            if generation.family is None or generation.arrays:
                continue  # aged out meanwhile, or converted already
            conversion = Conversion(generation)
            conversion.thread = threading.Thread(
                target=self._run, args=(conversion,), name=f"arrays-{generation.name}", daemon=True
            )
            self.running = conversion
            conversion.thread.start()

    def finished(self, wait_s: float = 0.0) -> Conversion | None:
        """The job running, once it is done (waiting up to ``wait_s``); None while it runs, or when none does."""
        conversion = self.running
        if conversion is None:
            return None
        conversion.thread.join(wait_s)
        if conversion.thread.is_alive():
            return None
        self.running = None
        return conversion

    def void(self) -> None:
        """Ids changed in sealed generations: arrays being written may lack the change, and are written again."""
        if self.running is not None:
            self.running.void = True

    def abandon(self, generation: Generation) -> Conversion | None:
        """Aging reached the generation being written: its child is killed and the job taken back at once
        (the thread only waits for the child), so that aging never waits for arrays it would delete."""
        conversion = self.running
        if conversion is None or conversion.generation is not generation:
            return None
        conversion.void = conversion.stopped = True
        if conversion.child is not None:
            conversion.child.process.kill()
        conversion.thread.join()
        self.running = None
        return conversion

    def stop(self) -> None:
        """At a stop: no job starts, and the one under way is ended (its child killed); ``finished`` then takes
        it (done or cut short)."""
        self._queue.clear()
        conversion = self.running
        if conversion is None:
            return
        conversion.stopped = True
        if conversion.child is not None:
            conversion.child.process.kill()

    def _run(self, conversion: Conversion) -> None:
        generation = conversion.generation
        started = time.monotonic()
        try:
            generation.family.flush(True)  # what the sealing batch wrote last, for the child to read
            conversion.names = self._written_by_child(conversion)
            conversion.opened = arrays_files.open_files(self._path, conversion.names)
            for arrays in conversion.opened.values():
                arrays.prepare()
        except Exception as error:  # left as a run: still correct, its lookups only cost more
            conversion.error = error
        conversion.seconds = time.monotonic() - started

    def _written_by_child(self, conversion: Conversion) -> list[str]:
        """Run ``store.arrays_writer`` on the conversion's generation and wait for it; the names of the files it
        wrote."""
        generation = conversion.generation
        child = child_process.Child(
            self._path, "store.arrays_writer", str(self._path), generation.name, str(generation.first_seq)
        )
        conversion.child = child
        try:
            if conversion.stopped:  # the store closed while the child started: stop missed it
                child.process.kill()
            child.process.wait()
            child.finished()  # raises ChildFailed with its last line of stderr
            return list(json.loads((child.scratch / arrays_files.WRITTEN_FILE).read_text())["names"])
        finally:
            child.end()

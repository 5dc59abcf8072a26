"""A store's generations and their life: started as the numbers reach them, sealed when a newer one starts (the
family compacted into one run on a thread; in a worker's store the fixed-width ids first written to sealed arrays
by ``store.arrays_job``), dropped whole by aging, and settled at a writer's open after a stop or a crash."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from rocksdict import IngestExternalFileOptions, ReadOptions, WriteBatch

from store import child_process
from store import generation_arrays as arrays_files
from store import generations as gens
from store.arrays_job import ArraysJob, Conversion
from store.codec import META_ARRAYS
from store.damage import check_ended
from store.database import Database
from store.errors import StoreError
from store.generations import Generation, Generations
from store.options import (
    SEALED_GENERATION_OPTIONS,
    WRITTEN_GENERATION_OPTIONS,
    older_generation_reads,
    seal_options,
)
from store.sealed_arrays import SealedArrays

log = logging.getLogger(__name__)

_FOREVER = 1e9  # seconds: a join without a timeout
_LAST_LEVEL = 6  # RocksDB's default number of levels, 7: a generation's sealed run is on L6


class GenerationKeeper:
    def __init__(
        self,
        database: Database,
        families: tuple[str, ...],
        *,
        writable: bool,
        follows_writer: bool,
        converts: bool,
        new_generation_options=None,
        label: str = "",
    ):
        self._database = database
        self._path = database.path
        self._writable = writable
        self._converts = converts  # a worker's store writes its sealed generations' fixed-width ids to arrays
        self._new_generation_options = new_generation_options
        self._label = label  # "topic[partition]", for the log
        self._sealing: dict[str, threading.Thread] = {}
        self._arrays = ArraysJob(database.path)
        self.family_names = families  # as listed at open: a reader follows only these
        self.generations = Generations(
            [database.generation(name, gens.first_seq_of(name)) for name in gens.live_families(families)]
        )
        for generation in list(self.generations)[:-1]:
            _leave_block_cache_alone(generation)
        try:
            self._attach_arrays(follows_writer)
        except BaseException:
            self.close_families()  # else they would hold the database open, and its lock
            raise

    def _attach_arrays(self, follows_writer: bool) -> None:
        """Map the sealed arrays the metadata names (their pages as lookups first touch them: an open does not
        wait for files the page cache may lack)."""
        self.arrays_raw = self._database.meta_value(META_ARRAYS)
        named = arrays_files.decode_names(self.arrays_raw)
        for generation in self.generations:
            files = named.get(generation.name)
            if not files:
                continue
            # only a writer at work removes a named file (its generation aged out meanwhile): else it is damage
            generation.arrays = arrays_files.open_files(self._path, files, missing_ok=follows_writer)
        self.recheck_overrides()

    def recheck_overrides(self) -> None:
        """Whether each generation's family holds ids of its sealed arrays' kinds (put back or forgotten since its
        seal): then it is asked before the arrays. A reader's view of the families changes only when it opens or
        catches up with its writer, so a reader asks again then; a writer's repairs set it as they write."""
        for generation in self.generations:
            if generation.arrays:
                generation.overrides = self._holds_array_keys(generation)

    # -- a writer's open -------------------------------------------------------------------------------

    def settle(self) -> None:
        """Finish what a stop or crash cut short: unnamed arrays, children's scratch, seals."""
        live = {g.name for g in self.generations}
        named = self._arrays_names()
        if any(family not in live for family in named):  # dropped before a crash let the metadata say so
            self._write_arrays_names({family: files for family, files in named.items() if family in live})
        kept = {name for family, files in named.items() if family in live for name in files}
        removed = arrays_files.remove_unnamed(self._path, kept)
        if removed:
            log.info("store %s: removed %d unfinished sealed-arrays files a stop left", self._path, len(removed))
        child_process.clear(self._path)  # what a killed worker's children left
        for generation in list(self.generations)[:-1]:
            self._seal_if_written(generation)  # a seal a stop or crash cut short is made again
        newest = self.generations.newest
        if newest is not None:
            newest.family.set_options(WRITTEN_GENERATION_OPTIONS)

    # -- writing -----------------------------------------------------------------------------------------

    def generations_for(
        self, first: int, count: int, stretch: int
    ) -> tuple[list[tuple[int, Generation]], bool, list[Generation]]:
        """``(first number, generation)`` for the numbers ``first`` to ``first + count - 1``, starting the new
        generations (of ``stretch`` numbers) they reach; whether they leave one behind; and those left behind
        that the batch itself started, for ``seal_filled`` once it is written.

        The newest generation before the batch is sealed here, as it was before the batch: one run already, it
        is not rewritten for the few ids the batch adds. Those the batch starts and leaves (a batch longer than a
        stretch) are empty until it is written."""
        before = self.generations.newest
        left_any = False
        filled: list[Generation] = []
        while True:
            newest = self.generations.newest
            if newest is None:
                self._start_generation(first)
                continue
            boundary = (newest.first_seq // stretch + 1) * stretch
            if boundary >= first + count:
                break
            self._start_generation(max(boundary, first))
            left_any = True
            if newest is before:
                self._seal_if_written(newest)
            else:
                filled.append(newest)
        return [(max(g.first_seq, first), g) for g in self.generations.covering(first, first + count)], left_any, filled

    def seal_filled(self, filled: list[Generation]) -> None:
        """Once a batch is written: seal the generations it started and left (a crash before: ``settle``)."""
        for generation in filled:
            self._seal_if_written(generation)

    def step(self) -> None:
        """Between batches: take in the sealed arrays written for a generation, or start the next one due."""
        if self._arrays.running is not None:
            self._take_arrays()
        elif self._arrays.queued:
            self._arrays.start_next()

    def void_arrays(self) -> None:
        """Ids changed in sealed generations (a repair): arrays being written are written again."""
        self._arrays.void()

    def ingest(self, files: dict[int, list[str]]) -> None:
        """Bulk load into a store that holds no ids yet: each entry's SST files (written apart, filterless) become
        the generation starting at that number. A worker's store writes each but the newest to sealed arrays
        first, read through its files merged (a compaction before would rewrite ids the arrays then take); then
        what is left of a generation, if its files were several or its ids converted, is compacted into its one
        run, so the store is ready for lookups when this returns."""
        if len(self.generations):
            raise StoreError(f"store {self._path} holds ids already: a bulk load fills a fresh store")
        ingest = IngestExternalFileOptions()
        ingest.set_move_files(True)  # a rename (hard link), not a copy
        newest = max(files, default=None)
        for first in sorted(files):
            name = gens.family_name(first)
            self._database.db.create_column_family(name, self._new_generation_options).close()
            generation = self._database.generation(name, first)
            self.generations.add(generation)
            generation.family.ingest_external_file(files[first], ingest)
            names = []
            if self._converts and first != newest:  # to sealed arrays: the newest takes the next writes
                names = arrays_files.write_generation(self._path, name, generation.family, first)
                self._commit_arrays(generation, names)
            if names or len(files[first]) > 1:  # one run of what is left: converted ids are compacted away
                generation.family.compact_range(None, None, seal_options())

    def drop_below(self, cut: int, next_seq: int) -> tuple[int, int]:
        """Drop the generations whose every number is below ``cut`` (never one RocksDB is compacting: a later step
        takes it; one whose sealed arrays are being written, its writing is abandoned); returns ``(generations,
        bytes)`` dropped."""
        dropped = freed = 0
        for generation in list(self.generations):
            if self.generations.end_of(generation, next_seq) > cut:
                break
            thread = self._sealing.get(generation.name)
            if thread is not None and thread.is_alive():
                break
            if self._arrays.abandon(generation) is not None:  # no child runs now: what none names is its leftovers
                named = {name for files in self._arrays_names().values() for name in files}
                arrays_files.remove_unnamed(self._path, named)
            self._sealing.pop(generation.name, None)
            freed += generation.family.property_int_value("rocksdb.total-sst-files-size") or 0
            freed += arrays_files.bytes_of(generation.arrays)
            self.generations.remove(generation)
            generation.family.close()
            generation.family = generation.handle = None
            self._database.db.drop_column_family(generation.name)
            self._forget_arrays([generation])
            dropped += 1
        return dropped, freed

    # -- what it holds -------------------------------------------------------------------------------------

    def named(self, name: str) -> Generation:
        for generation in self.generations:
            if generation.name == name:
                return generation
        raise StoreError(f"store {self._path} has no family {name!r}")

    @property
    def writing_arrays(self) -> bool:
        return self._arrays.busy

    def compaction_pending(self) -> bool:
        """Whether RocksDB counts a compaction of the ids as pending, or a generation is being sealed."""
        if any(thread.is_alive() for thread in self._sealing.values()) or self._arrays.busy:
            return True
        return any(g.family.property_int_value("rocksdb.compaction-pending") for g in self.generations)

    def generation_bytes(self, next_seq: int) -> list[tuple[int, int, int]]:
        """``(first, end, bytes)`` of each generation, oldest first: its SST files' and its sealed arrays'."""
        return [
            (
                g.first_seq,
                self.generations.end_of(g, next_seq),
                (g.family.property_int_value("rocksdb.total-sst-files-size") or 0) + arrays_files.bytes_of(g.arrays),
            )
            for g in self.generations
        ]

    def arrays_bytes(self) -> int:
        return sum(arrays_files.bytes_of(g.arrays) for g in self.generations)

    # -- stopping ----------------------------------------------------------------------------------------

    def wait_for_seals(self, deadline: float | None) -> bool:
        """Wait until no generation is being sealed (its sealed arrays written and taken in, its family
        compacted); False if the ``deadline`` (monotonic) passed first."""

        def left() -> float:
            return _FOREVER if deadline is None else max(0.0, deadline - time.monotonic())

        self._arrays.start_next()
        while self._arrays.running is not None:
            if not self._take_arrays(wait_s=left()) and self._arrays.running is not None and left() == 0.0:
                return False
        for name, thread in list(self._sealing.items()):
            thread.join(left())
            if thread.is_alive():
                return False
            del self._sealing[name]
        return True

    def stop_arrays(self) -> None:
        """At a stop: no conversion starts, and the one under way is ended, or taken in if done. The next writer
        writes the arrays of the generations left as runs."""
        self._arrays.stop()
        if self._arrays.running is not None:
            self._take_arrays(wait_s=_FOREVER)

    def close_families(self) -> None:
        for generation in self.generations:
            if generation.family is not None:
                generation.family.close()
            generation.family = generation.handle = None
        self.generations = Generations([])

    # -- sealing -----------------------------------------------------------------------------------------

    def _start_generation(self, first_seq: int) -> None:
        """Create the generation starting at ``first_seq`` (the one before is sealed by ``generations_for``, or by
        ``seal_filled`` once the batch is written). A crash right after leaves it empty: the next write of a number
        from ``first_seq`` on goes there all the same."""
        previous = self.generations.newest
        name = gens.family_name(first_seq)
        try:
            self._database.db.create_column_family(name, self._new_generation_options)
        except Exception as error:
            raise StoreError(f"store {self._path}: cannot create the family of a new generation: {error}") from error
        generation = self._database.generation(name, first_seq)
        generation.family.set_options(WRITTEN_GENERATION_OPTIONS)
        self.generations.add(generation)
        if previous is not None:
            _leave_block_cache_alone(previous)

    def _seal_if_written(self, generation: Generation) -> None:
        """Seal a generation no longer written, unless it is one run already (sealed before, bulk loaded, or
        merged down by RocksDB) and, for a worker's store, holds no fixed-width ids outside sealed arrays (a
        seal a stop cut short): rewriting it would only cost CPU."""
        to_convert = self._converts and not generation.arrays and self._holds_array_keys(generation)
        if not (to_convert or _written_since_sealed(generation)):
            generation.family.set_options(SEALED_GENERATION_OPTIONS)
            return
        generation.family.set_options(SEALED_GENERATION_OPTIONS)  # from its next memtable on
        if to_convert:
            self._arrays.queue(generation)  # started once the batch that sealed it is written: step
        else:
            self._compact_sealed(generation)

    def _compact_sealed(self, generation: Generation) -> None:
        """Flush a sealed generation and compact it into one filterless run, on a thread of its own (RocksDB works
        without the GIL: the writer goes on meanwhile)."""

        def run() -> None:
            try:
                generation.family.flush(True)
                generation.family.compact_range(None, None, seal_options())
            except Exception as error:  # left as it is: still correct, only its filter stays in memory
                log.warning("store %s: could not seal generation %s: %s", self._path, generation.name, error)

        thread = threading.Thread(target=run, name=f"seal-{generation.name}", daemon=True)
        self._sealing[generation.name] = thread
        thread.start()

    def _take_arrays(self, wait_s: float = 0.0) -> bool:
        """Take in the sealed arrays written for a generation, if done (waiting up to ``wait_s``), and start the
        next; returns whether no conversion is left running."""
        if self._arrays.running is None:
            return True
        done = self._arrays.finished(wait_s)
        if done is None:
            return False
        self._take_in(done)
        self._arrays.start_next()
        return self._arrays.running is None

    def _take_in(self, conversion: Conversion) -> None:
        generation = conversion.generation
        if conversion.stopped and conversion.error is not None:
            arrays_files.remove(self._path, conversion.names or [])
            log.info("%s: stopped writing the sealed arrays of %s: the next open writes them", self._label,
                     generation.name)  # fmt: skip
        elif conversion.error is not None:
            log.warning(
                "store %s: could not write the sealed arrays of %s (%s); it stays a run until the next open",
                self._path, generation.name, conversion.error,
            )  # fmt: skip
            if generation.family is not None:
                self._compact_sealed(generation)
        elif conversion.void or generation.family is None:
            arrays_files.remove(self._path, conversion.names or [])
            if generation.family is not None:
                self._arrays.queue(generation)  # written again from the family as it is now
        else:
            self._commit_arrays(generation, conversion.names or [], conversion.opened)
            self._compact_sealed(generation)
            log.info(
                "%s: wrote the sealed arrays of %s: %d ids in %.1f s", self._label, generation.name,
                sum(len(arrays) for arrays in generation.arrays.values()), conversion.seconds,
            )  # fmt: skip

    def _commit_arrays(
        self, generation: Generation, names: list[str], opened: dict[bytes, SealedArrays] | None = None
    ) -> None:
        """Make ``names`` (written from ``generation``'s family) its sealed arrays: named in the metadata and their
        ids deleted from the family in one synced write, so that every reader finds each id in one place or the
        other. Killed before the write, the files are unnamed (removed at the next open) and the family whole;
        after it, the arrays hold those ids."""
        if not names:
            return
        if opened is None:
            opened = arrays_files.open_files(self._path, names)
        batch = WriteBatch(raw_mode=True)
        for prefix in opened:
            lower, upper = arrays_files.prefix_range(prefix)
            batch.delete_range(lower, upper, generation.handle)
        named = self._arrays_names()
        named[generation.name] = names
        self._write_arrays_names(named, batch)
        generation.arrays = opened
        generation.overrides = False

    def _forget_arrays(self, generations: Sequence[Generation]) -> None:
        """Unname the sealed arrays of generations whose families are dropped, then remove their files."""
        named = self._arrays_names()
        files = [name for g in generations for name in named.pop(g.name, [])]
        if not files:
            return
        for generation in generations:
            generation.arrays = {}
        self._write_arrays_names(named)
        arrays_files.remove(self._path, files)

    def _arrays_names(self) -> dict[str, list[str]]:
        return arrays_files.decode_names(self._database.meta_value(META_ARRAYS))

    def _write_arrays_names(self, names: dict[str, list[str]], batch: WriteBatch | None = None) -> None:
        """Write the metadata's arrays names (in ``batch`` when given), synced."""
        batch = batch if batch is not None else WriteBatch(raw_mode=True)
        if names:
            batch.put(META_ARRAYS, arrays_files.encode_names(names), self._database.meta_handle)
        else:
            batch.delete(META_ARRAYS, self._database.meta_handle)
        self._database.write(batch, sync=True)

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


def _leave_block_cache_alone(generation: Generation) -> None:
    """Read a generation no longer the newest with ``older_generation_reads``, set on its family: rocksdict's
    multi-get ignores a ``read_opt`` argument."""
    generation.family.set_read_options(older_generation_reads())


def _written_since_sealed(generation: Generation) -> bool:
    """Whether a generation holds ids in memtables or above its last level. The memtables are asked first: a
    flush moves ids from them to level 0 only once its file is in place, so none is missed between."""
    family = generation.family
    in_memory = family.property_int_value("rocksdb.num-entries-active-mem-table") or family.property_int_value(
        "rocksdb.num-entries-imm-mem-tables"
    )
    return bool(in_memory) or unsealed(generation)


def unsealed(generation: Generation) -> bool:
    """Whether a generation has files above its last level (a sealed one has one run there)."""
    family = generation.family
    return any(family.property_int_value(f"rocksdb.num-files-at-level{level}") for level in range(_LAST_LEVEL))

"""Is this id held? Ids asked of the generations that may hold them: through the id filter's routes in a worker's
store (the filter answers most absent ids alone), and in a reader's for a lookup of many ids at once; else of
every generation, the newest first; in each, its sealed arrays for the ids they may hold, its family for the
rest."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from store import generation_arrays as arrays_files
from store.codec import StoreState, live_seqs_of
from store.damage import translated
from store.filter_keeper import FilterKeeper
from store.generations import Generation, Generations
from store.id_filter import GROUPS, IdFilter, key_hashes

# keys per multi-get: a long list costs more per absent key, likely RocksDB's sort of each list before it probes
# the filters (docs/benchmarks.md, "Figures behind design choices")
LOOKUP_CHUNK = 32
# a reader makes the id filter (read back, else built from the store) for a lookup of at least this many ids: one
# by one, each would be asked of every generation until one holds it (reconcile's groups the digests do not vouch for)
READER_FILTER_KEYS = 50_000


class Lookups:
    def __init__(
        self,
        generations: Callable[[], Generations],
        filters: FilterKeeper | None,
        state: Callable[[], StoreState],
        reader_filters: FilterKeeper | None = None,
    ):
        self._generations = generations  # the keeper's list: a reader's reopen replaces it
        self._filters = filters  # a worker's store only
        self._state = state
        self._reader_filters = reader_filters  # a reader's: made for lookups of many ids, dropped at its refresh

    def contains_keys(self, keys: list[bytes]) -> list[bool]:
        """Whether each encoded id is held within the window. A worker's store asks its id filter first, and
        RocksDB only about the ids the filter may hold, each in the generations of the group the filter holds
        for it."""
        if self._filters is None or not keys:
            return self.contains_keys_in_db(keys)
        id_filter = self._filters.ready()
        cut = self._state().first_live_seq
        maybe, values = self._routed_values(id_filter, keys, LOOKUP_CHUNK, live_from=cut)
        found = [False] * len(keys)
        for index, seq in zip(maybe, live_seqs_of(values, cut) if cut else values, strict=True):
            found[index] = seq is not None
        return found

    def contains_keys_in_db(self, keys: list[bytes]) -> list[bool]:
        """``contains_keys`` answered by RocksDB alone, without the id filter: what the filter must agree with."""
        values = self._values(keys, LOOKUP_CHUNK)
        cut = self._state().first_live_seq
        return [seq is not None for seq in (live_seqs_of(values, cut) if cut else values)]

    def live_seqs(self, keys: list[bytes], per_call: int = LOOKUP_CHUNK) -> list[int | None]:
        """The sequence number of each encoded id within the window, None where absent or aged out; ``per_call``
        keys a multi-get (reconcile sends a thousand at a time, in key order)."""
        return live_seqs_of(self._raw_values(keys, per_call), self._state().first_live_seq)

    def _raw_values(self, keys: list[bytes], per_call: int) -> list[bytes | None]:
        """The values of ``keys``, aged-out ids included; through the id filter's routes when the store has one
        made, else from every generation."""
        id_filter = self._filters.current if self._filters is not None else None
        if id_filter is None and self._reader_filters is not None and len(keys) >= READER_FILTER_KEYS:
            id_filter = self._reader_filters.ready()
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

    def _routes(self, id_filter: IdFilter, masks: np.ndarray) -> list[list[Generation]]:
        """For each mask of the filter's groups an id may be in, the generations those groups' stretches
        cover: one, or two where a generation does not start where a stretch does."""
        by_mask: dict[int, list[Generation]] = {}
        routes = []
        generations = self._generations()
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
        kinds = arrays_files.KeyKinds(keys)
        if routes is None:
            pending = list(range(len(keys)))
            for generation in self._generations().newest_first():
                if not pending:
                    break
                pending = _ask(generation, keys, pending, values, per_call, kinds)
            return values
        asked: dict[str, tuple[Generation, list[int]]] = {}
        for index, route in enumerate(routes):
            for generation in route:
                asked.setdefault(generation.name, (generation, []))[1].append(index)
        for generation, indexes in asked.values():
            _ask(generation, keys, indexes, values, per_call, kinds, live_from)
        return values


def _ask(
    generation: Generation,
    keys: list[bytes],
    indexes: list[int],
    values: list[bytes | None],
    per_call: int,
    kinds: arrays_files.KeyKinds,
    live_from: int | None = None,
) -> list[int]:
    """Look ``keys[indexes]`` up in one generation into ``values``: in its sealed arrays those they may hold, the
    others in its family; returns the indexes not found. ``kinds``: the keys' arrays prefixes. With
    ``live_from`` at or below the generation's first number, the caller asks only whether each id is held
    within the window: an id its arrays hold gets that first number as its value, and its own number is not
    read."""
    if not generation.arrays:
        return _ask_family(generation, keys, indexes, values, per_call)
    asking = np.asarray(indexes, dtype=np.int64)
    kind_of = kinds.of[asking]
    held = [kind for kind, prefix in enumerate(arrays_files.PREFIXES) if prefix in generation.arrays]
    in_family = asking[~np.isin(kind_of, held)].tolist()
    missing = _ask_family(generation, keys, in_family, values, per_call) if in_family else []
    for kind in held:
        asked = asking[kind_of == kind].tolist()
        if not asked:
            continue
        if generation.overrides:  # an id put back (its number) or forgotten (an empty value) is in the family
            asked = _ask_overrides(generation, keys, asked, values, missing, per_call)
        held_only = live_from is not None and live_from <= generation.first_seq  # one read of memory fewer
        arrays = generation.arrays[arrays_files.PREFIXES[kind]]
        search = arrays.rows_of if held_only else arrays.seqs_of
        live = generation.first_seq.to_bytes(8, "big")
        for index, found in zip(asked, search(kinds.bodies(kind, asked)).tolist(), strict=True):
            if found < 0:
                missing.append(index)
            else:
                values[index] = live if held_only else found.to_bytes(8, "big")
    return missing


def _ask_overrides(
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
    unanswered = _ask_family(generation, keys, asked, found, per_call)
    for index in asked:
        value = found[index]
        if value is None:
            continue
        if value:
            values[index] = value
        else:
            missing.append(index)
    return unanswered


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

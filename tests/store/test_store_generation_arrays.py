"""Sealed generations in sealed arrays: a worker's store writes each sealed generation's ``ajs-`` and UUID ids to
files of sorted arrays, names them in its metadata and removes those ids from the family in one write. Every
read answers as before, across restarts, secondary instances, aging, ids forgotten or put back, checkpoints,
stores of an earlier schema, and a kill at any step of a seal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from killed_writer import run_writer
from mixed_ids import distinct_mixed_ids

from store import generation_arrays
from store.aging import AgingPolicy, age_step
from store.checkpoint import write_checkpoint
from store.codec import CF_META, META_ARRAYS, META_IDENTITY, SCHEMA_VERSION, encode_ids
from store.dedup_store import DedupStore
from store.errors import StoreCorruptError
from store.filter_keeper import FILTER_FILE

SEED = 11


def _fill(store: DedupStore, ids: list[bytes], start: int = 0, batch: int = 500) -> None:
    for at in range(start, len(ids), batch):
        chunk = ids[at : at + batch]
        assert not any(store.contains_many(chunk))
        store.record(chunk, [1_000 + n for n in range(at, at + len(chunk))], output_offsets=range(at, at + len(chunk)))


def _fixed_width(message_id: bytes) -> bool:
    return generation_arrays.prefix_of(encode_ids([message_id])[0]) is not None


def _check_exact(store: DedupStore, ids: list[bytes], live: range, unseen: list[bytes]) -> None:
    """Every read of ``store`` finds exactly the ids numbered in ``live``, with their numbers."""
    expected = [n in live for n in range(len(ids))]
    assert store.contains_many(ids) == expected
    assert store.contains_keys_in_db(encode_ids(ids)) == expected
    assert not any(store.contains_many(unseen))
    assert store.live_seqs(encode_ids(ids)) == [n if n in live else None for n in range(len(ids))]
    assert list(store.iter_by_seq()) == [(n, ids[n]) for n in live]


def _check_sealed(store: DedupStore) -> None:
    """Each generation older than the newest keeps only ids of other kinds in its family."""
    for name, _, _ in store.id_families()[:-1]:
        assert all(generation_arrays.prefix_of(key) is None for key, _ in store.family(name).items())


@contextmanager
def _sealed_store(
    path: Path, window: int, count: int, batch: int = 500
) -> Iterator[tuple[DedupStore, list[bytes], list[bytes]]]:
    """A worker's store of ``count`` ids recorded ``batch`` at a time, its sealed generations written to arrays;
    the ids, and 500 it does not hold."""
    ids, unseen = distinct_mixed_ids(count, SEED), distinct_mixed_ids(500, SEED + 1)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _fill(store, ids, batch=batch)
        assert store.wait_for_seals(60)
        yield store, ids, unseen


@pytest.fixture
def window(short_generations):
    return short_generations(2_000)


def test_a_lookups_key_kinds_agree_with_each_keys_prefix():
    """Keys of every kind, and keys that only look like one: of the right length with another first byte, and
    with the right first bytes at another length."""
    keys = encode_ids(distinct_mixed_ids(2_000, SEED))
    prefixes = generation_arrays.PREFIXES
    keys += [prefixes[0] + b"x" * 15, prefixes[0] + b"x" * 17, bytes([prefixes[1][0]]) * 17, b"\xff" * 18, b""]
    kinds = generation_arrays.KeyKinds(keys)
    expected = [prefixes.index(p) if (p := generation_arrays.prefix_of(key)) is not None else -1 for key in keys]
    assert kinds.of.tolist() == expected
    assert 0 < expected.count(0) < len(keys) and expected.count(1) > 0
    for kind, prefix in enumerate(prefixes):
        chosen = [index for index, key_kind in enumerate(expected) if key_kind == kind][::-3]  # any subset, any order
        assert kinds.bodies(kind, chosen) == b"".join(keys[index][len(prefix) :] for index in chosen)


def test_sealed_generations_hold_their_fixed_width_ids_in_arrays_and_answer_exactly(tmp_path, window):
    path = tmp_path / "events-0"
    with _sealed_store(path, window, 9_000) as (store, ids, unseen):
        families = store.id_families()
        sealed_below = families[-1][1]
        assert {family for family, _, _ in store.arrays_files()} == {name for name, _, _ in families[:-1]}
        assert sum(count for *_, count in store.arrays_files()) == sum(map(_fixed_width, ids[:sealed_below]))
        _check_sealed(store)
        assert store.identity.schema_version == SCHEMA_VERSION
        _check_exact(store, ids, range(len(ids)), unseen)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _check_exact(store, ids, range(len(ids)), unseen)
    with DedupStore.open_secondary(path) as reader:
        _check_exact(reader, ids, range(len(ids)), unseen)


def test_a_batch_longer_than_a_generation_leaves_each_generation_it_fills_in_arrays(tmp_path, window):
    path = tmp_path / "events-0"
    with _sealed_store(path, window, 9_000, batch=4_500) as (store, ids, unseen):  # 2 batches, 5 generations
        families = store.id_families()
        assert len(families) == 5
        assert {family for family, _, _ in store.arrays_files()} == {name for name, _, _ in families[:-1]}
        _check_sealed(store)
        _check_exact(store, ids, range(len(ids)), unseen)


def test_a_secondary_instance_follows_a_seal_into_arrays(tmp_path, window):
    path = tmp_path / "events-0"
    ids, unseen = distinct_mixed_ids(6_000, SEED), distinct_mixed_ids(500, SEED + 1)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _fill(store, ids[:1_000])
        with DedupStore.open_secondary(path) as reader:
            _fill(store, ids, start=1_000)
            assert store.wait_for_seals(60)
            store.flush()
            reader.refresh()
            _check_exact(reader, ids, range(len(ids)), unseen)


def test_aging_drops_a_generation_with_its_arrays(tmp_path, window):
    path = tmp_path / "events-0"
    with _sealed_store(path, window, 9_000) as (store, ids, unseen):
        before = {file for _, file, _ in store.arrays_files()}
        cut = age_step(store, AgingPolicy(max_keys=4_500)).first_live_seq
        assert cut == 4_500
        after = {file for _, file, _ in store.arrays_files()}
        assert after < before and all(file.exists() for file in after)
        assert not any(file.exists() for file in before - after)
        _check_exact(store, ids, range(cut, len(ids)), unseen)
    with DedupStore.open_secondary(path) as reader:
        _check_exact(reader, ids, range(cut, len(ids)), unseen)


def test_aging_does_not_wait_for_the_arrays_of_a_generation_it_drops(tmp_path, window):
    path = tmp_path / "events-0"
    ids, unseen = distinct_mixed_ids(9_000, SEED), distinct_mixed_ids(500, SEED + 1)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _fill(store, ids)  # the last batches sealed generations whose arrays are being written now
        writing = store._keeper._arrays.running
        assert writing is not None
        result = age_step(store, AgingPolicy(max_keys=1_000))
        assert store._keeper._arrays.running is not writing
        assert writing.generation.name not in {name for name, _, _ in store.id_families()}
        (_, oldest_first, oldest_end), *_ = store.id_families()
        assert result.generations_dropped >= 2 and oldest_first <= result.first_live_seq < oldest_end
        assert not any(path.glob(f"*{writing.generation.name}*"))  # what its killed child wrote went with it
        _check_exact(store, ids, range(result.first_live_seq, len(ids)), unseen)
        assert store.wait_for_seals(60)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _check_exact(store, ids, range(result.first_live_seq, len(ids)), unseen)


def test_ids_forgotten_and_put_back_in_sealed_arrays(tmp_path, window):
    path = tmp_path / "events-0"
    ids, unseen = distinct_mixed_ids(8_000, SEED), distinct_mixed_ids(500, SEED + 1)
    chosen = [n for n in range(0, 4_000, 7) if _fixed_width(ids[n])]
    kept = [n for n in range(len(ids)) if n not in set(chosen)]
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _fill(store, ids)
        assert store.wait_for_seals(60)
        assert store.forget_many([ids[n] for n in chosen]) == len(chosen)
        assert store.contains_many([ids[n] for n in chosen]) == [False] * len(chosen)
        assert list(store.iter_by_seq()) == [(n, ids[n]) for n in kept]
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        assert not any(store.contains_many([ids[n] for n in chosen]))
        assert store.contains_many([ids[n] for n in kept]) == [True] * len(kept)
        assert store.place([ids[n] for n in chosen], chosen) == chosen  # offset n holds id n
        _check_exact(store, ids, range(len(ids)), unseen)
    with DedupStore.open_secondary(path) as reader:
        _check_exact(reader, ids, range(len(ids)), unseen)


def test_a_secondary_instance_follows_ids_forgotten_and_put_back_in_sealed_arrays(tmp_path, window):
    """A reader asks a sealed generation's family before its arrays only while the family holds ids of their
    kinds; it looks again each time it catches up, so what the writer forgets or puts back meanwhile is seen."""
    path = tmp_path / "events-0"
    with _sealed_store(path, window, 8_000) as (store, ids, unseen):
        chosen = [n for n in range(0, 4_000, 7) if _fixed_width(ids[n])]
        with DedupStore.open_secondary(path) as reader:
            sealed = [g for g in reader._keeper.generations if g.arrays]
            assert sealed and not any(g.overrides for g in sealed)  # no family asked first: none holds such ids
            _check_exact(reader, ids, range(len(ids)), unseen)
            assert store.forget_many([ids[n] for n in chosen]) == len(chosen)
            store.flush()
            reader.refresh()
            forgotten = set(chosen)
            kept = [n for n in range(len(ids)) if n not in forgotten]
            assert reader.live_seqs(encode_ids(ids)) == [None if n in forgotten else n for n in range(len(ids))]
            assert reader.contains_many([ids[n] for n in kept]) == [True] * len(kept)
            assert not any(reader.contains_many([ids[n] for n in chosen]))
            assert store.place([ids[n] for n in chosen], chosen) == chosen
            store.flush()
            reader.refresh()
            _check_exact(reader, ids, range(len(ids)), unseen)


def test_a_filter_built_whole_takes_the_sealed_arrays_ids_and_those_put_back(tmp_path, window):
    """With no saved filter, the next open builds one from every generation: its sealed arrays read as arrays,
    its family scanned. Ids forgotten, some put back: the filter holds every live id, whatever the path."""
    path = tmp_path / "events-0"
    ids, unseen = distinct_mixed_ids(8_000, SEED), distinct_mixed_ids(500, SEED + 1)
    chosen = [n for n in range(0, 4_000, 7) if _fixed_width(ids[n])]
    put_back = chosen[::2]
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _fill(store, ids)
        assert store.wait_for_seals(60)
        assert store.forget_many([ids[n] for n in chosen]) == len(chosen)
        assert store.place([ids[n] for n in put_back], put_back) == put_back
    (path / FILTER_FILE).unlink()
    forgotten = set(chosen) - set(put_back)
    live = [n not in forgotten for n in range(len(ids))]
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        assert store.arrays_files()
        assert store.contains_many(ids) == live  # the first lookup builds the filter
        assert store.contains_keys_in_db(encode_ids(ids)) == live
        assert not any(store.contains_many(unseen))
        assert store.live_seqs(encode_ids(ids)) == [n if held else None for n, held in enumerate(live)]
        assert store.filter_bytes


def test_a_checkpoint_holds_the_arrays_and_a_missing_one_is_refused(tmp_path, window):
    path, target = tmp_path / "events-0", tmp_path / "checkpoint"
    with _sealed_store(path, window, 6_000) as (store, ids, unseen):
        write_checkpoint(store, target)
        names = sorted(file.name for _, file, _ in store.arrays_files())
    assert names and sorted(child.name for child in target.glob("*.arrays")) == names
    with DedupStore.open_existing(target) as copy:
        _check_exact(copy, ids, range(len(ids)), unseen)
    (target / names[0]).unlink()
    with pytest.raises(StoreCorruptError, match=f"sealed arrays .*{names[0]} is damaged .*missing") as refused:
        DedupStore.open_existing(target)
    assert "restore the store from a snapshot" in refused.value.hint


def test_files_the_metadata_does_not_name_are_removed_at_open(tmp_path, window):
    path = tmp_path / "events-0"
    ids = distinct_mixed_ids(6_000, SEED)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _fill(store, ids)
        assert store.wait_for_seals(60)
        named = {file.name for _, file, _ in store.arrays_files()}
    strays = [path / "ids.00000000000000999999.a010.arrays", path / ".ids.00000000000000999999.02.arrays.partial"]
    for stray in strays:
        stray.write_bytes(b"left by a crash")
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        assert not any(stray.exists() for stray in strays)
        assert {child.name for child in path.glob("*.arrays")} == named
        assert all(store.contains_many(ids))


def test_a_store_of_runs_is_moved_to_arrays_by_its_worker(tmp_path, window):
    path = tmp_path / "events-0"
    ids, unseen = distinct_mixed_ids(9_000, SEED), distinct_mixed_ids(500, SEED + 1)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        store._keeper._converts = False  # its generations sealed into runs only
        _fill(store, ids)
        assert store.wait_for_seals(60)
        assert not store.arrays_files() and len(store.id_families()) > 2
        _check_exact(store, ids, range(len(ids)), unseen)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _check_exact(store, ids, range(len(ids)), unseen)  # while they are written
        assert store.wait_for_seals(60)
        assert store.arrays_files()
        _check_sealed(store)
        _check_exact(store, ids, range(len(ids)), unseen)


# argv[6]: the window the store is opened for
_KILLED_WRITER = """
dedup_store.MIN_FILTER_WINDOW = 1
gens.MIN_GENERATION_IDS = 1

if point == "written":  # a generation's files written and synced (by the child), not named in the metadata
    commit = generation_keeper.GenerationKeeper._commit_arrays
    def _commit_arrays(self, generation, names, opened=None):
        if names:
            die()
        commit(self, generation, names, opened)
    generation_keeper.GenerationKeeper._commit_arrays = _commit_arrays
elif point == "committed":  # named, and the ids removed from the family, which is not compacted yet
    compact = generation_keeper.GenerationKeeper._compact_sealed
    def _compact_sealed(self, generation):
        if generation.arrays:
            die()
        compact(self, generation)
    generation_keeper.GenerationKeeper._compact_sealed = _compact_sealed

store = dedup_store.DedupStore.open(path, topic="t", partition=0, window_ids=int(sys.argv[6]))
for at in range(store.state.next_seq, count, 500):
    chunk = ids[at : at + 500]
    store.record(chunk, [1_000 + n for n in range(at, at + len(chunk))])
    if point:  # each seal seen through: the kill lands at the first
        store.wait_for_seals(60)
store.wait_for_seals(60)
store.close()
"""


def _write(path: Path, count: int, point: str, window: int, kill_after_s: float | None = None) -> int:
    return run_writer(_KILLED_WRITER, path, count, point, SEED, str(window), kill_after_s=kill_after_s)


def _check_whole(path: Path, count: int, window: int) -> int:
    """What a reader and the next writer find: every id recorded, with its number, and no other; no file the
    metadata does not name once the writer opened. Returns the ids recorded."""
    ids, unseen = distinct_mixed_ids(count, SEED), distinct_mixed_ids(200, SEED + 1)
    with DedupStore.open_secondary(path) as reader:
        recorded = reader.state.next_seq
        _check_exact(reader, ids[:recorded], range(recorded), unseen)
    with DedupStore.open(path, topic="t", partition=0, window_ids=window) as store:
        _check_exact(store, ids[:recorded], range(recorded), unseen)
        named = {file.name for _, file, _ in store.arrays_files()}
    assert {child.name for child in path.iterdir() if "arrays" in child.name} == named
    return recorded


@pytest.mark.parametrize("point", ["written", "committed"])
def test_a_writer_killed_at_a_step_of_a_seal_leaves_a_whole_store(tmp_path, window, point):
    path = tmp_path / "t-0"
    count = 12_000
    assert _write(path, count, point, window) == -9
    assert _check_whole(path, count, window) < count
    assert _write(path, count, "", window) == 0
    assert _check_whole(path, count, window) == count


def test_a_writer_killed_at_any_time_while_it_seals_leaves_a_whole_store(tmp_path, window):
    path = tmp_path / "t-0"
    count = 40_000
    for kill_after_s in (1.2, 1.9, 2.6, 3.3):
        _write(path, count, "", window, kill_after_s)
        _check_whole(path, count, window)
    _write(path, count, "", window)
    assert _check_whole(path, count, window) == count


def test_metadata_naming_arrays_unreadably_is_refused(tmp_path, window):
    path = tmp_path / "events-0"
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        _fill(store, distinct_mixed_ids(3_000, SEED))
        assert store.wait_for_seals(60)
        store.family(CF_META)[META_ARRAYS] = b"{not json"
        assert store.family(CF_META)[META_IDENTITY]
    with pytest.raises(StoreCorruptError, match="names its sealed arrays unreadably"):
        DedupStore.open_existing(path)

"""The ids in generations: lookups routed by the id filter answer exactly as a scan of every generation and as
the ids recorded, for ids of every kind the codec packs, across generations, aging cuts and restarts; a
schema 4 store is moved into generations by its first writer, and a kill at any point of that leaves the old
store or the new one, never half."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from mixed_ids import mixed_ids
from rocksdict import Rdict

from store import generations
from store.aging import AgingPolicy, age_step
from store.codec import CF_IDS, SCHEMA_VERSION, encode_ids
from store.dedup_store import DedupStore
from store.footprint import family_file_levels
from store.options import seal_options, shared_memory
from store.testing import as_schema_4

ROOT = Path(__file__).resolve().parents[2]


def _answers(store: DedupStore, ids: list[bytes]) -> tuple[list[bool], list[bool]]:
    return store.contains_many(ids), store.contains_keys_in_db(encode_ids(ids))


def test_routed_lookups_answer_as_every_generation_and_as_recorded(tmp_path, short_generations):
    rng = random.Random(7)
    path = tmp_path / "events-0"
    window = short_generations(2_000)
    recorded: list[bytes] = []
    unseen = mixed_ids(3_000, rng.randbytes)
    cut = 0
    for restart in range(3):
        with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
            assert store.generation_ids() == 2_000
            for _ in range(6):
                batch = mixed_ids(997, rng.randbytes)
                assert not any(store.contains_many(batch))
                store.record(batch, [1] * len(batch))
                recorded += batch
            cut = store.state.first_live_seq
            if restart:  # an aging cut inside a generation, then one past whole generations
                cut = age_step(store, AgingPolicy(max_keys=len(recorded) - cut - 1_500)).first_live_seq
            expected = [n >= cut for n in range(len(recorded))] + [False] * len(unseen)
            routed, scanned = _answers(store, recorded + unseen)
            assert routed == expected and scanned == expected
            assert len(store.id_families()) >= 3
    with DedupStore.open_secondary(path) as reader:  # no id filter: every generation asked
        assert reader.contains_many(recorded + unseen) == expected
        firsts = [first for _, first, _ in reader.id_families()]
        assert firsts == sorted(firsts) and all(first % 2_000 == 0 for first in firsts[1:])


def test_a_generation_already_in_one_run_is_not_rewritten_when_the_next_starts(tmp_path, short_generations):
    # a bulk-loaded store's newest generation, or one RocksDB merged down, is a run already: sealing it again
    # would rewrite every id it holds while the worker writes (its ids are of the kind sealed arrays do not
    # take, which a seal would move there: store.generation_arrays)
    rng = random.Random(3)
    with DedupStore.open(
        tmp_path / "events-0", topic="events", partition=0, window_ids=short_generations(2_000)
    ) as store:
        first = [f"order-{n}".encode() for n in range(1_500)]
        store.record(first, [1] * len(first))
        ((name, _, _),) = store.id_families()
        store.flush()
        store.family(name).compact_range(None, None, seal_options())
        one_run = family_file_levels(store, name)
        more = mixed_ids(1_000, rng.randbytes)
        store.record(more, [1] * len(more))  # into the next generation
        assert store.wait_for_seals(timeout_s=60)
        assert len(store.id_families()) == 2
        assert family_file_levels(store, name) == one_run
        assert store.contains_many(first + more) == [True] * (len(first) + len(more))
        # the generation written since is sealed as ever when the one after it starts
        written = store.id_families()[1][0]
        last = mixed_ids(2_000, rng.randbytes)
        store.record(last, [1] * len(last))
        assert store.wait_for_seals(timeout_s=60)
        assert not DedupStore._unsealed(store._generation_named(written))


def test_lookups_in_an_older_generation_leave_the_block_cache_to_the_newest(tmp_path, short_generations):
    # the shared cache is small: filled by blocks of old ids asked once, it would drop the newest generation's
    rng = random.Random(5)
    shared = shared_memory(64 * 1024 * 1024)
    with DedupStore.open(
        tmp_path / "events-0", topic="events", partition=0, shared=shared, window_ids=short_generations(20_000)
    ) as store:
        old = mixed_ids(20_000, rng.randbytes)
        store.record(old, [1] * len(old))
        new = mixed_ids(5_000, rng.randbytes)
        store.record(new, [1] * len(new))  # into the next generation: the first is sealed
        assert store.wait_for_seals(timeout_s=60)
        store.flush()
        assert len(store.id_families()) == 2
        cache = shared.block_cache
        before = cache.get_usage()
        assert store.contains_many(old) == [True] * len(old)
        # a few of them are the id filter's false positives for the newest generation, read into the cache
        assert cache.get_usage() - before < 32 * 1024
        assert store.contains_many(new) == [True] * len(new)
        assert cache.get_usage() - before > 64 * 1024


def test_a_secondary_sees_the_generations_a_writer_adds_after_it_opened(tmp_path, short_generations):
    path = tmp_path / "events-0"
    window = short_generations(1_000)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        first = [b"first:%d" % n for n in range(500)]
        store.record(first, [1] * len(first))
        store.flush()
        with DedupStore.open_secondary(path) as reader:
            later = [b"later:%d" % n for n in range(3_000)]
            store.record(later, [2] * len(later))  # into three more generations
            store.flush()
            reader.refresh()
            assert reader.contains_many(first + later) == [True] * (len(first) + len(later))
            assert len(reader.id_families()) == len(store.id_families()) >= 4


def test_a_secondary_opened_while_the_writer_starts_a_generation_reports_only_what_it_can_read(
    tmp_path, short_generations, monkeypatch
):
    path = tmp_path / "events-0"
    window = short_generations(1_000)
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        first = [b"first:%d" % n for n in range(500)]
        store.record(first, [1] * len(first))
        listed = DedupStore._check_families(path)  # the reader lists the families here,
        later = [b"later:%d" % n for n in range(1_500)]
        store.record(later, [2] * len(later))  # the writer starts a generation at 1,000,
        with monkeypatch.context() as patched:
            patched.setattr(DedupStore, "_check_families", staticmethod(lambda _: listed))
            reader = DedupStore.open_secondary(path)  # and the reader catches up past it
        with reader:
            assert reader.state.next_seq == 1_000  # what its families hold, not what the writer's state says
            held = first + later[:500]
            assert [hit is not None for hit in reader.lookup_many(held)] == [True] * len(held)
            assert reader.lookup_many([later[499]])[0][0] == reader.state.next_seq - 1  # its newest, found
            reader.refresh()  # lists the families again
            assert reader.state.next_seq == 2_000
            assert all(hit is not None for hit in reader.lookup_many(first + later))


def _store_of_schema_4(path: Path, ids: list[bytes], max_keys: int) -> None:
    with DedupStore.open(path, topic="events", partition=0) as store:
        for start in range(0, len(ids), 5_000):
            batch = ids[start : start + 5_000]
            store.record(batch, list(range(start, start + len(batch))))
        age_step(store, AgingPolicy(max_keys=max_keys))
    as_schema_4(path)


def test_a_schema_4_store_is_moved_into_generations_by_its_first_writer(tmp_path):
    rng = random.Random(11)
    path = tmp_path / "events-0"
    ids = mixed_ids(30_000, rng.randbytes)
    _store_of_schema_4(path, ids, max_keys=25_000)
    assert CF_IDS in Rdict.list_cf(str(path))
    expected = [n >= 5_000 for n in range(len(ids))]

    with DedupStore.open_secondary(path) as reader:  # read as it is, the old family as one generation
        assert reader.identity.schema_version == 4
        assert reader.contains_many(ids) == expected
    with DedupStore.open(path, topic="events", partition=0) as store:
        assert store.identity.schema_version == SCHEMA_VERSION
        assert CF_IDS not in Rdict.list_cf(str(path))
        assert store.contains_many(ids) == expected
        assert store.lookup_many([ids[4_999], ids[5_000], ids[29_999]]) == [None, (5_000, 5_000), (29_999, 29_999)]
        more = mixed_ids(100, rng.randbytes)
        store.record(more, [7] * len(more))
        assert all(store.contains_many(more))
    with DedupStore.open_secondary(path) as reader:
        assert reader.identity.schema_version == SCHEMA_VERSION
        assert reader.contains_many(ids + more) == expected + [True] * len(more)


MIGRATE = """
import sys
from store.dedup_store import DedupStore
from store.testing import as_schema_4
DedupStore.open(sys.argv[1], topic="events", partition=0).close()
"""


def test_a_migration_killed_at_any_point_leaves_the_old_store_or_the_new(tmp_path):
    rng = random.Random(13)
    path = tmp_path / "events-0"
    ids = [f"ajs-{rng.getrandbits(128):032x}".encode() for _ in range(300_000)]
    _store_of_schema_4(path, ids, max_keys=280_000)
    expected = [n >= 20_000 for n in range(len(ids))]
    sample = random.Random(3).sample(range(len(ids)), 20_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import store.dedup_store"], env=env, check=True)
    interpreter_s = time.monotonic() - started
    seen = set()
    for delay in (0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 2.0):
        process = subprocess.Popen([sys.executable, "-c", MIGRATE, str(path)], env=env, stderr=subprocess.PIPE)
        time.sleep(interpreter_s + delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        with DedupStore.open_secondary(path) as reader:
            version = reader.identity.schema_version
            seen.add(version)
            assert reader.contains_many([ids[n] for n in sample]) == [expected[n] for n in sample], version
        if version >= 5:  # migrated: marked with the schema of its generations
            break
        as_legacy = CF_IDS in Rdict.list_cf(str(path))
        assert as_legacy  # until the mark is written, the old family is whole
    assert 4 in seen  # at least one kill landed before the migration was done
    with DedupStore.open(path, topic="events", partition=0) as store:
        assert store.identity.schema_version == SCHEMA_VERSION
        assert store.contains_many(ids) == expected
    names = Rdict.list_cf(str(path))
    assert CF_IDS not in names and any(generations.first_seq_of(name) is not None for name in names)
    assert not (path / ".migrating").exists()

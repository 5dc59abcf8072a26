"""The ids in generations: lookups routed by the id filter answer exactly as a scan of every generation and as
the ids recorded, for ids of every kind the codec packs, across generations, aging cuts and restarts; a store
of an earlier layout is refused with the rebuild that replaces it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from mixed_ids import mixed_ids

from store import lookups, opening
from store.aging import AgingPolicy, age_step
from store.codec import CF_META, META_IDENTITY, encode_ids
from store.dedup_store import DedupStore
from store.errors import StoreVersionError
from store.footprint import family_file_levels
from store.generation_keeper import unsealed
from store.options import seal_options, shared_memory

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


def test_a_reader_routes_a_lookup_of_many_ids_through_an_id_filter_made_again_after_it_catches_up(
    tmp_path, short_generations, monkeypatch
):
    monkeypatch.setattr(lookups, "READER_FILTER_KEYS", 1_000)
    rng = random.Random(11)
    path = tmp_path / "events-0"
    with DedupStore.open(path, topic="events", partition=0, window_ids=short_generations(2_000)) as store:
        recorded = mixed_ids(7_000, rng.randbytes)
        store.record(recorded, [1] * len(recorded))
        store.flush()
        unseen = mixed_ids(3_000, rng.randbytes)
        (path / ".id-filter.0.partial").write_bytes(b"a save the writer is making")
        with DedupStore.open_secondary(path) as reader:
            assert len(reader.id_families()) >= 4
            keys = encode_ids(recorded + unseen)
            one_by_one = [
                seq for start in range(0, len(keys), 500) for seq in reader.live_seqs(keys[start : start + 500])
            ]
            assert reader.filter_bytes == 0
            assert one_by_one == list(range(len(recorded))) + [None] * len(unseen)
            assert reader.live_seqs(keys) == one_by_one  # routed by a filter the reader made for itself
            assert reader.filter_bytes > 0 and (path / ".id-filter.0.partial").exists()
            later = mixed_ids(2_500, rng.randbytes)
            store.record(later, [2] * len(later))  # into a generation the reader's filter never saw
            store.flush()
            reader.refresh()
            assert reader.filter_bytes == 0
            keys = encode_ids(recorded + later + unseen)
            assert reader.live_seqs(keys) == list(range(len(recorded) + len(later))) + [None] * len(unseen)


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
        assert not unsealed(store._keeper.named(written))


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
        listed = opening.check_families(path)  # the reader lists the families here,
        later = [b"later:%d" % n for n in range(1_500)]
        store.record(later, [2] * len(later))  # the writer starts a generation at 1,000,
        with monkeypatch.context() as patched:
            patched.setattr(opening, "check_families", lambda _: listed)
            reader = DedupStore.open_secondary(path)  # and the reader catches up past it
        with reader:
            assert reader.state.next_seq == 1_000  # what its families hold, not what the writer's state says
            held = first + later[:500]
            assert [hit is not None for hit in reader.lookup_many(held)] == [True] * len(held)
            assert reader.lookup_many([later[499]])[0][0] == reader.state.next_seq - 1  # its newest, found
            reader.refresh()  # lists the families again
            assert reader.state.next_seq == 2_000
            assert all(hit is not None for hit in reader.lookup_many(first + later))


def test_a_store_of_an_earlier_layout_is_refused_with_the_rebuild_that_replaces_it(tmp_path):
    path = tmp_path / "events-3"
    with DedupStore.open(path, topic="events", partition=3) as store:
        store.record([b"a", b"b"], [1, 2])
    with DedupStore.open_existing(path) as store:  # an earlier build's: the schema mark says so
        identity = json.loads(store.family(CF_META)[META_IDENTITY])
        store.family(CF_META)[META_IDENTITY] = json.dumps({**identity, "schema_version": 5}).encode()
    for open_store in (DedupStore.open_secondary, DedupStore.open_existing):
        with pytest.raises(StoreVersionError) as refused:
            open_store(path)
        assert "schema version 5; this build reads schema 7 only" in str(refused.value)
        assert "dedupectl rebuild -p 3 --replace" in str(refused.value)

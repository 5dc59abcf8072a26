"""The id filter in front of a worker's store: it never calls an id it holds absent, clears whole groups as
aging passes them, is saved and used again only for the store state it was saved with, and a store that
asks it answers exactly like the store read directly."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import numpy as np
import pytest
from mixed_ids import mixed_ids

from store.aging import AgingPolicy, advance_cut, age_fully
from store.codec import encode_ids
from store.dedup_store import DedupStore
from store.filter_keeper import FILTER_FILE
from store.id_filter import FALSE_POSITIVE_RATE, GROUPS, FilterStamp, IdFilter, key_hashes, load, save


def _ajs(count: int) -> list[bytes]:
    return [f"ajs-{os.urandom(16).hex()}".encode() for _ in range(count)]


def _filled(ids: list[bytes], span: int) -> tuple[IdFilter, np.ndarray]:
    id_filter = IdFilter(span)
    hashes = key_hashes(encode_ids(ids))
    assert id_filter.claim(0, len(ids), 0)
    for start in range(0, len(ids), 5_000):
        chunk = hashes[start : start + 5_000]
        assert id_filter.add(chunk, np.arange(start, start + chunk.size))
    return id_filter, hashes


# -- the filter --------------------------------------------------------------------------------------------


def test_a_filter_filled_to_capacity_holds_every_id_of_every_kind():
    span = 20_000
    ids = mixed_ids(GROUPS * span)
    id_filter, hashes = _filled(ids, span)
    assert id_filter.may_hold(hashes).all()
    assert id_filter.entries() == len(ids)


def test_a_nearly_full_filter_places_whole_batches_by_moving_entries_aside(monkeypatch):
    kicked = []
    one_by_one = IdFilter._kick_in
    monkeypatch.setattr(IdFilter, "_kick_in", lambda self, e, b: kicked.append(e) or one_by_one(self, e, b))
    id_filter = IdFilter(20_000)
    count = int(id_filter.capacity * 0.97)  # past the load it is sized for, as a store a batch over its bound
    hashes = np.random.default_rng(3).integers(1, 2**63, count, dtype=np.uint64)
    assert id_filter.claim(0, count, 0)
    assert all(
        id_filter.add(hashes[at : at + 5_000], np.arange(at, min(at + 5_000, count))) for at in range(0, count, 5_000)
    )
    assert id_filter.may_hold(hashes).all()
    assert len(kicked) < count // 1_000  # the batch's moves did the work, not a Python loop per id


def test_absent_ids_pass_at_about_the_stated_rate():
    id_filter, _ = _filled(_ajs(150_000), 10_000)
    passed = id_filter.may_hold(key_hashes(encode_ids(_ajs(200_000)))).mean()
    assert passed <= 1.5 * FALSE_POSITIVE_RATE


def test_a_batch_is_answered_as_each_id_alone_reading_its_two_buckets():
    span = 5_000
    id_filter, held = _filled(_ajs(GROUPS * span), span)
    hashes = np.concatenate((held[::37], key_hashes(encode_ids(_ajs(20_000)))))
    fingerprints, first, second = id_filter._parts(hashes)
    expected = []
    for fingerprint, one, other in zip(fingerprints.tolist(), first.tolist(), second.tolist(), strict=True):
        entries = [int(entry) for bucket in (one, other) for entry in id_filter.table[bucket]]
        expected.append(sum({1 << (entry % GROUPS) for entry in entries if entry and entry // GROUPS == fingerprint}))
    assert id_filter.group_masks(hashes).tolist() == expected
    assert id_filter.may_hold(hashes).tolist() == [mask != 0 for mask in expected]
    assert all(expected[: held[::37].size])


def test_hashes_are_the_same_in_every_process_and_for_a_key_alone_or_in_a_mixed_batch():
    keys = encode_ids(mixed_ids(400))
    together = key_hashes(keys)
    alone = np.concatenate([key_hashes([key]) for key in keys])
    assert (together == alone).all()
    assert len(set(together.tolist())) == len(keys)
    # another interpreter (another hash seed) gets the same hashes: a saved filter stays valid
    code = (
        "import sys; from store.codec import encode_ids; from store.id_filter import key_hashes; "
        "print(key_hashes(encode_ids([t.encode() for t in sys.stdin.read().split()])).tolist())"
    )
    text = [message_id.hex() for message_id in _ajs(3)] + ["ajs-" + "ab" * 16, str(uuid.uuid4()), "other-id"]
    done = subprocess.run(
        [sys.executable, "-c", code], input=" ".join(text), capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(key_hashes(encode_ids([t.encode() for t in text])).tolist())


def test_a_group_is_cleared_only_once_its_whole_stretch_is_below_the_cut():
    span = 1_000
    id_filter, hashes = _filled(_ajs(5 * span), span)
    # the tags of the first stretch come back for numbers GROUPS * span on: refused while it is live
    reused = GROUPS * span
    assert not id_filter.claim(reused, reused + 10, cut=span - 1)
    assert id_filter.may_hold(hashes).all()  # a refused claim clears nothing
    assert id_filter.claim(reused, reused + 10, cut=span)
    held = id_filter.may_hold(hashes)
    assert held[span:].all()
    assert held[:span].mean() <= 2 * FALSE_POSITIVE_RATE  # the first stretch's entries are gone


def test_a_saved_filter_is_read_back_whole_with_its_stamp_or_not_at_all(tmp_path):
    id_filter, hashes = _filled(_ajs(3_000), 1_000)
    stamp = FilterStamp("t", 0, 1, token="abc", next_seq=3_000)
    path = tmp_path / "f"
    save(id_filter, path, stamp)
    assert not list(tmp_path.glob(".*partial"))
    loaded = load(path)
    assert loaded is not None
    again, read_stamp = loaded
    assert read_stamp == stamp and again.may_hold(hashes).all()
    assert (again.table == id_filter.table).all() and again.group_starts == id_filter.group_starts
    path.write_bytes(path.read_bytes()[:-100])  # cut short
    assert load(path) is None
    assert load(tmp_path / "absent") is None


# -- the store with its filter --------------------------------------------------------------------------------


def _record(store: DedupStore, ids: list[bytes], start_ms: int = 1_000) -> None:
    for at in range(0, len(ids), 2_000):
        chunk = ids[at : at + 2_000]
        store.record(chunk, [start_ms + at + n for n in range(len(chunk))])


def _answers_match(store: DedupStore, asked: list[bytes]) -> list[bool]:
    keys = encode_ids(asked)
    filtered = store.contains_keys(keys)
    assert filtered == store.contains_keys_in_db(keys)  # the filter changes the cost, never the answer
    return filtered


def test_a_worker_store_answers_like_the_store_read_directly_across_aging_and_reopening(tmp_path):
    path = tmp_path / "t-0"
    recorded, unseen = mixed_ids(12_000), mixed_ids(3_000)
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert not any(_answers_match(store, recorded[:100]))  # the filter is made on the first lookup
        _record(store, recorded)
        assert all(_answers_match(store, recorded))
        assert not any(_answers_match(store, unseen))
        advance_cut(store, 4_000)
        assert _answers_match(store, recorded) == [n >= 4_000 for n in range(len(recorded))]
        store.forget_many(recorded[5_000:5_010])
        expected = [n >= 4_000 and not 5_000 <= n < 5_010 for n in range(len(recorded))]
        assert _answers_match(store, recorded) == expected
    assert (path / FILTER_FILE).exists()  # saved at close
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert _answers_match(store, recorded) == expected
        age_fully(store, AgingPolicy(max_keys=2_000))
        assert _answers_match(store, recorded) == [n >= 10_000 for n in range(len(recorded))]


def test_a_store_written_without_its_filter_reads_back_what_was_written_since_it_was_saved(tmp_path):
    path = tmp_path / "t-0"
    first, later = _ajs(3_000), _ajs(3_000)
    with DedupStore.open(path, topic="t", partition=0) as store:
        _record(store, first)
        assert all(store.contains_many(first))
    saved = (path / FILTER_FILE).read_bytes()
    with DedupStore.open_existing(path) as store:  # a maintenance open: no filter, but it writes
        _record(store, later, start_ms=10_000)
    assert (path / FILTER_FILE).read_bytes() == saved  # kept: it holds every id below its stamp
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert all(_answers_match(store, first + later))


def test_a_window_wider_than_the_filter_makes_the_store_build_a_larger_one(tmp_path):
    with DedupStore.open(tmp_path / "t-0", topic="t", partition=0, window_ids=1_000) as store:
        store.contains_many([b"x"])
        small = store._filters.current.capacity
        ids = _ajs(small + 30_000)
        _record(store, ids)
        assert store._filters.current.capacity > small
        assert all(_answers_match(store, ids))


def test_ids_put_back_by_reconcile_are_found_through_the_filter(tmp_path):
    ids = _ajs(1_000)
    with DedupStore.open(tmp_path / "t-0", topic="t", partition=0) as store:
        store.contains_many(ids[:1])
        store.record(ids, list(range(1_000)), output_offsets=range(100, 1_100))
        lost = ids[200:210]
        store.forget_many(lost)
        assert not any(_answers_match(store, lost))
        assert store.place(lost, list(range(300, 310))) == list(range(200, 210))
        assert all(_answers_match(store, lost))


def test_ids_put_back_under_old_numbers_make_the_saved_filter_unusable(tmp_path):
    path = tmp_path / "t-0"
    ids = _ajs(1_000)
    lost = ids[200:210]
    with DedupStore.open(path, topic="t", partition=0) as store:  # no lookup: no filter made
        store.record(ids, list(range(1_000)), output_offsets=range(100, 1_100))
        store.forget_many(lost)
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert not any(_answers_match(store, lost))  # the filter, built now, lacks them; it is saved at close
    with DedupStore.open_existing(path) as store:  # reconcile's repair
        assert store.place(lost, list(range(300, 310))) == list(range(200, 210))
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert all(_answers_match(store, lost))


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
import store.dedup_store, store.generations
store.dedup_store.MIN_FILTER_WINDOW = 1
store.generations.MIN_GENERATION_IDS = 1
from store.dedup_store import DedupStore
path, window, count, durable_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = DedupStore.open(path, topic="t", partition=0, window_ids=window)
ids = [f"ajs-{n:032x}".encode() for n in range(count)]
for at in range(0, count, 500):
    chunk = ids[at : at + 500]
    assert not any(store.contains_many(chunk))
    store.record(chunk, [1_000 + at + n for n in range(len(chunk))])
    if at + 500 == durable_at:
        assert store.wait_for_seals(60)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_worker_store_reads_back_only_the_ids_recorded_since_the_last_seal(
    tmp_path, short_generations, caplog
):
    path, window = tmp_path / "t-0", short_generations(5_000)
    # seals at 5,000 ... 20,000 each save the filter after their batch (the last: all ids below 20,500); the
    # writer waits for that save to be durable at 22,000, records 1,000 more and is killed
    writer = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(path), str(window), "23000", "22000"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert writer.returncode == -9, writer.stderr
    (path / f".{FILTER_FILE}.0123.partial").write_bytes(b"cut short")  # as a kill amid a save leaves it
    recorded = [f"ajs-{n:032x}".encode() for n in range(23_000)]
    with (
        caplog.at_level("INFO", logger="store.filter_keeper"),
        DedupStore.open(path, topic="t", partition=0, window_ids=window) as store,
    ):
        assert all(_answers_match(store, recorded))
        assert not any(_answers_match(store, _ajs(2_000)))
    assert "added the 2500 ids recorded since it was saved" in caplog.text
    assert not list(path.glob(".*partial"))


@pytest.mark.parametrize("window_ids", [None, 50_000])
def test_the_filter_is_sized_for_the_window(tmp_path, window_ids):
    with DedupStore.open(tmp_path / "t-0", topic="t", partition=0, window_ids=window_ids) as store:
        store.contains_many([b"x"])
        assert store._filters.current.capacity >= (window_ids or 1_000_000)


def test_a_generation_started_right_after_the_filter_was_saved_does_not_save_it_again(tmp_path, short_generations):
    path, window = tmp_path / "t-0", short_generations(5_000)
    with DedupStore.open(path, topic="t", partition=0, window_ids=window) as store:
        store.contains_many([b"x"])
        stretch = store._filters.current.span
        _record(store, _ajs(stretch))  # up to the next generation's first number, and saved at close
    saved = (path / FILTER_FILE).read_bytes()
    with DedupStore.open(path, topic="t", partition=0, window_ids=window) as store:
        assert not any(store.contains_many(_ajs(10)))  # read back: it holds every id recorded
        later = _ajs(1_000)
        store.record(later, list(range(1_000)))  # starts a generation: the one before is sealed
        assert len(store._keeper.generations) == 2
        assert store.wait_for_seals(60)
        assert (path / FILTER_FILE).read_bytes() == saved
        store.record(_ajs(stretch), list(range(stretch)))  # past the next start: ids the file lacks, so saved
        assert store.wait_for_seals(60)
        assert (path / FILTER_FILE).read_bytes() != saved
        assert all(_answers_match(store, later))


def test_a_filter_read_ahead_at_open_is_not_used_once_ids_were_put_back_before_the_first_lookup(tmp_path):
    path = tmp_path / "t-0"
    ids = _ajs(1_000)
    lost = ids[200:210]
    with DedupStore.open(path, topic="t", partition=0) as store:
        store.record(ids, list(range(1_000)), output_offsets=range(100, 1_100))
        store.forget_many(lost)
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert not any(_answers_match(store, lost))  # saved at close without them
    with DedupStore.open(path, topic="t", partition=0) as store:  # reads that file ahead
        assert store.place(lost, list(range(300, 310))) == list(range(200, 210))
        assert all(_answers_match(store, lost))
        assert not any(_answers_match(store, _ajs(1_000)))


def test_a_saved_filter_of_another_bound_is_built_anew_once(tmp_path, short_generations, caplog):
    path, ids = tmp_path / "t-0", _ajs(3_000)
    with DedupStore.open(path, topic="t", partition=0, window_ids=short_generations(1_000)) as store:
        _record(store, ids)
        assert all(_answers_match(store, ids))
    for opened in range(2):
        caplog.clear()
        with (
            caplog.at_level("INFO", logger="store.filter_keeper"),
            DedupStore.open(path, topic="t", partition=0, window_ids=short_generations(4_000)) as store,
        ):
            assert all(_answers_match(store, ids)) and not any(_answers_match(store, _ajs(5_000)[3_000:]))
        rebuilt = "bound changed since its id filter was saved" in caplog.text
        assert rebuilt == (opened == 0), caplog.text  # the new bound's filter is saved, and read back after


def test_a_store_over_its_bound_reads_its_saved_filter_back(tmp_path, short_generations, caplog):
    path, window = tmp_path / "t-0", short_generations(1_000)
    ids = _ajs(window + 2_000)  # more than the bound, with no aging: the filter is built again, larger
    with DedupStore.open(path, topic="t", partition=0, window_ids=window) as store:
        store.contains_many([b"x"])  # the filter made, as a worker's first batch makes it
        _record(store, ids)
        assert store._filters.current.capacity > window
    with (
        caplog.at_level("INFO", logger="store.filter_keeper"),
        DedupStore.open(path, topic="t", partition=0, window_ids=window) as store,
    ):
        assert all(_answers_match(store, ids))
    assert "loaded the saved id filter" in caplog.text and "built anew" not in caplog.text

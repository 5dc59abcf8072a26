"""The id filter in front of a worker's store: it never calls an id it holds absent, clears whole groups as
aging passes them, is saved and used again only for the store state it was saved with, and a store that
asks it answers exactly like the store read directly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
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
        assert len(store._generations) == 2
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


def _record_until(store: DedupStore, ids: list[bytes], done, timeout_s: float = 60.0, step: int = 100) -> int:
    """Record ``ids`` ``step`` at a time, pausing between, until ``done()``; returns how many were recorded."""
    deadline = time.monotonic() + timeout_s
    at = 0
    while not done():
        assert time.monotonic() < deadline and at < len(ids), "not done in time"
        store.record(ids[at : at + step], list(range(at, at + step)))
        at += step
        time.sleep(0.02)
    return at


@pytest.fixture
def growing(monkeypatch):
    """A store without an aging bound whose first id filter holds about 22,000 ids."""
    from store import dedup_store

    monkeypatch.setattr(dedup_store, "MIN_FILTER_WINDOW", 20_000)


def test_a_growing_store_takes_a_larger_filter_built_apart_before_its_own_fills(tmp_path, growing, caplog):
    path = tmp_path / "t-0"
    ids = _ajs(60_000)
    with caplog.at_level("INFO", logger="store.filter_keeper"), DedupStore.open(path, topic="t", partition=0) as store:
        store.contains_many([b"x"])
        first = store._filters.current
        recorded = _record_until(store, ids, lambda: store._filters.current is not first)
        assert recorded < first.capacity  # taken before the first one filled: never built on this thread
        assert store._filters.current.capacity >= 2 * first.capacity
        assert not (path / ".id-filter-grown").exists()
        _record(store, ids[recorded:], start_ms=100_000)
        assert all(_answers_match(store, ids))
        assert not any(_answers_match(store, _ajs(5_000)))
    assert "loaded the id filter grown apart" in caplog.text
    with DedupStore.open(path, topic="t", partition=0) as store:
        assert all(_answers_match(store, ids))


def test_ids_put_back_while_a_filter_grows_apart_void_that_filter(tmp_path, growing):
    path = tmp_path / "t-0"
    ids = _ajs(20_000)
    lost = ids[500:510]
    with DedupStore.open(path, topic="t", partition=0) as store:
        store.contains_many([b"x"])
        first = store._filters.current
        store.record(ids[:12_000], list(range(12_000)), output_offsets=range(100, 12_100))
        store.forget_many(lost)
        store.record(ids[12_000:], list(range(12_000, 20_000)), output_offsets=range(12_100, 20_100))
        growth = store._filters._growth  # past half: a filter built apart, from a store that lacks the lost ids
        assert growth is not None
        assert growth.child.process.wait(60) == 0
        assert store.place(lost, list(range(600, 610))) == list(range(500, 510))
        assert store._filters._growth is not growth
        more = _ajs(2_000)
        # a few ids at a time: the child building the next filter gets seconds, not a fraction, on a busy machine
        recorded = _record_until(store, more, lambda: store._filters.current is not first, step=10)
        _record(store, more[recorded:], start_ms=100_000)
        assert all(_answers_match(store, ids + more))


def _grown_apart_then_recorded(store: DedupStore, ids: list[bytes], meanwhile: int) -> int:
    """Record ``ids`` until a growth starts, let its child finish, then record ``meanwhile`` more in one batch,
    which the filter it built lacks; returns how many were recorded."""
    at = _record_until(store, ids, lambda: store._filters._growth is not None)
    assert store._filters._growth.child.process.wait(60) == 0
    store.record(ids[at : at + meanwhile], list(range(at, at + meanwhile)))
    return at + meanwhile


def test_a_grown_filter_takes_in_the_ids_recorded_meanwhile_a_step_per_batch(tmp_path, growing, monkeypatch, caplog):
    from store import filter_keeper

    monkeypatch.setattr(filter_keeper, "CATCH_UP_SCAN", 500)
    ids, unseen = mixed_ids(40_000), mixed_ids(3_000)
    with (
        caplog.at_level("INFO", logger="store.filter_keeper"),
        DedupStore.open(tmp_path / "t-0", topic="t", partition=0) as store,
    ):
        store.contains_many([b"x"])
        first = store._filters.current
        at = _grown_apart_then_recorded(store, ids, 4_000)
        batches = 0
        while store._filters.current is first:  # the old filter answers while the grown one catches up
            assert all(_answers_match(store, ids[:at:7]))
            store.record(ids[at : at + 10], list(range(at, at + 10)))
            at, batches = at + 10, batches + 1
            assert batches < 500, "the grown filter did not catch up"
        assert batches > 3  # a part at a time, not all at once
        assert store._filters.current.capacity >= 2 * first.capacity
        assert all(_answers_match(store, ids[:at]))
        assert not any(_answers_match(store, unseen))
    steps = re.search(r"added the (\d+) ids recorded since it was saved in (\d+) steps", caplog.text)
    assert steps is not None and int(steps[1]) >= 4_000 and 3 < int(steps[2]) <= batches + 1


def test_an_old_filter_that_fills_while_the_grown_one_catches_up_hands_over_without_a_build(
    tmp_path, growing, monkeypatch
):
    from store import filter_keeper

    monkeypatch.setattr(filter_keeper, "CATCH_UP_SCAN", 100)
    builds = []
    build = filter_keeper.FilterKeeper._build
    monkeypatch.setattr(filter_keeper.FilterKeeper, "_build", lambda keeper, *a: builds.append(a) or build(keeper, *a))
    ids = mixed_ids(40_000)
    with DedupStore.open(tmp_path / "t-0", topic="t", partition=0) as store:
        store.contains_many([b"x"])
        first = store._filters.current
        at = _grown_apart_then_recorded(store, ids, 2_000)
        while store._filters._catch_up is None:
            store.record(ids[at : at + 10], list(range(at, at + 10)))
            at += 10
        assert store._filters.current is first
        builds.clear()
        overflow = first.capacity - at + 1_000  # past what the old filter can hold, in one batch
        store.record(ids[at : at + overflow], list(range(at, at + overflow)))
        at += overflow
        assert builds == []  # the grown filter was finished and taken, not a new one built
        assert store._filters._catch_up is None
        assert store._filters.current.capacity >= 2 * first.capacity
        assert all(_answers_match(store, ids[:at]))


def test_ids_put_back_while_a_grown_filter_catches_up_void_it(tmp_path, growing, monkeypatch):
    from store import filter_keeper

    monkeypatch.setattr(filter_keeper, "CATCH_UP_SCAN", 100)
    ids = _ajs(30_000)
    recorded = 0

    def record(count: int) -> None:  # each id published at the output offset of its own number
        nonlocal recorded
        numbers = range(recorded, recorded + count)
        store.record(ids[recorded : recorded + count], list(numbers), output_offsets=numbers)
        recorded += count

    with DedupStore.open(tmp_path / "t-0", topic="t", partition=0) as store:
        store.contains_many([b"x"])
        first = store._filters.current
        while store._filters._growth is None:
            record(100)
        assert store._filters._growth.child.process.wait(60) == 0
        record(2_000)  # which the grown filter lacks: its catch-up reads them, a part per batch
        lost_numbers = list(range(recorded - 100, recorded - 90))
        lost = [ids[number] for number in lost_numbers]
        store.forget_many(lost)
        while store._filters._catch_up is None:
            record(10)
        assert store.place(lost, lost_numbers) == lost_numbers
        assert store._filters._catch_up is None and store._filters.current is first
        assert all(_answers_match(store, ids[:recorded]))


def _cannot_start(*args, **kwargs):
    raise OSError(11, "Resource temporarily unavailable")


@pytest.mark.parametrize(
    ("failure", "logged"),
    [("exits", "(the build exited with 1"), ("cannot start", "([Errno 11] Resource temporarily unavailable)")],
)
def test_a_growth_that_fails_leaves_the_store_to_build_its_filter_inline(
    tmp_path, growing, monkeypatch, caplog, failure, logged
):
    from store import child_process

    if failure == "exits":
        monkeypatch.setattr(sys, "executable", "/bin/false")  # the child exits 1 at once
    else:
        monkeypatch.setattr(child_process.subprocess, "Popen", _cannot_start)
    ids = _ajs(30_000)
    with (
        caplog.at_level("INFO", logger="store.filter_keeper"),
        DedupStore.open(tmp_path / "t-0", topic="t", partition=0) as store,
    ):
        store.contains_many([b"x"])
        first = store._filters.current
        _record_until(store, ids, lambda: store._filters.current is not first)
        assert store._filters.current.capacity > first.capacity
        assert all(_answers_match(store, ids[: first.capacity]))
    assert f"could not grow the id filter apart {logged}" in caplog.text


def test_a_filter_built_apart_stops_below_a_generation_the_reader_did_not_open(
    tmp_path, short_generations, monkeypatch
):
    path, window = tmp_path / "t-0", short_generations(1_000)
    with DedupStore.open(path, topic="t", partition=0, window_ids=window) as writer:
        writer.contains_many([b"x"])
        span = writer._filters.current.span
        before, after = _ajs(span - 10), _ajs(100)
        _record(writer, before)
        listed = DedupStore._check_families(path)  # the reader lists the families here,
        _record(writer, after)  # the writer starts a generation at ``span``,
        with monkeypatch.context() as patched:
            patched.setattr(DedupStore, "_check_families", staticmethod(lambda _: listed))
            reader = DedupStore.open_secondary(path)  # and the reader catches up past it
        try:
            built, stamp = reader.build_id_filter(2 * span)
        finally:
            reader.close()
        assert stamp.next_seq == span  # the first number of the generation it could not read
        assert built.may_hold(key_hashes(encode_ids(before))).all()
        # the worker adds the rest from the stamp's number on, as it adds what was recorded since
        taken = writer._filters._up_to_date(built, stamp, source="a filter built apart")
        assert taken is not None and taken.may_hold(key_hashes(encode_ids(before + after))).all()

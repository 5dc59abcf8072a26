"""A secondary instance catches up with the writer until one catch-up saw the writer's MANIFEST still, so that it
never holds the writer's later batches without earlier ones; a writer that never lets it gets a one-line
error."""

from __future__ import annotations

import pytest

import store.catch_up as catch_up_module
from store.dedup_store import DedupStore
from store.errors import StoreError


def _ids(start: int, count: int) -> list[bytes]:
    return [f"ajs-{n:032x}".encode() for n in range(start, start + count)]


def _record(store: DedupStore, start: int, count: int) -> None:
    store.record(_ids(start, count), list(range(start, start + count)))


def test_a_flush_recorded_during_a_catch_up_makes_the_reader_catch_up_again(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    with DedupStore.open(path, topic="t", partition=0) as writer:
        _record(writer, 0, 5_000)
        writer.flush()
        with DedupStore.open_secondary(path) as reader:
            marks = []
            real_mark = catch_up_module.manifest_mark

            def mark(at):
                marks.append(at)
                if len(marks) == 2:  # the first catch-up is done: the writer records and flushes meanwhile
                    _record(writer, 10_000, 5_000)
                    writer.flush()
                return real_mark(at)

            monkeypatch.setattr(catch_up_module, "manifest_mark", mark)
            _record(writer, 5_000, 5_000)  # in the log only, for the first catch-up to read
            reader.refresh()
            assert len(marks) == 4  # two catch-ups: the writer's flush changed the MANIFEST during the first
            assert reader.lookup_many(_ids(14_999, 1))[0][0] == 14_999  # the flush, read by the second
            assert reader.state.next_seq >= 10_000
            assert all(reader.contains_many(_ids(0, reader.state.next_seq)))

            monkeypatch.setattr(catch_up_module, "manifest_mark", real_mark)
            _record(writer, 15_000, 5_000)
            reader.refresh()
            assert reader.state.next_seq == 20_000 and all(reader.contains_many(_ids(0, 20_000)))


def test_a_writer_that_changes_its_manifest_during_every_catch_up_gets_a_one_line_error(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    with DedupStore.open(path, topic="t", partition=0) as writer:
        _record(writer, 0, 1_000)
        with DedupStore.open_secondary(path) as reader:
            changes = iter(range(1_000_000))
            monkeypatch.setattr(catch_up_module, "manifest_mark", lambda _: ("MANIFEST-000001", next(changes)))
            monkeypatch.setattr(catch_up_module, "CATCH_UP_SECONDS", 0.2)
            with pytest.raises(StoreError) as raised:
                reader.refresh()
    message = str(raised.value)
    assert "\n" not in message and "run the command again" in message and str(path) in message


def test_a_store_no_writer_holds_is_read_without_catching_up(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    with DedupStore.open(path, topic="t", partition=0) as writer:
        _record(writer, 0, 1_000)
    marks = []
    real_mark = catch_up_module.manifest_mark
    monkeypatch.setattr(catch_up_module, "manifest_mark", lambda at: marks.append(at) or real_mark(at))
    with DedupStore.open_secondary(path) as reader:  # the writer is gone: a read-only instance, nothing to follow
        assert marks == []
        assert reader.state.next_seq == 1_000 and all(reader.contains_many(_ids(0, 1_000)))


def test_a_reader_that_meets_a_new_generation_at_every_open_is_told_to_retry_not_that_the_store_is_damaged(
    tmp_path, monkeypatch
):
    import store.dedup_store
    import store.generations
    import store.opening as opening

    monkeypatch.setattr(store.dedup_store, "MIN_FILTER_WINDOW", 1)
    monkeypatch.setattr(store.generations, "MIN_GENERATION_IDS", 1)
    monkeypatch.setattr(opening, "_SECONDARY_OPEN_SECONDS", 0.2)
    path = tmp_path / "t-0"
    with DedupStore.open(path, topic="t", partition=0, window_ids=1_000) as writer:
        _record(writer, 0, 500)
        recorded = iter(range(500, 10_000_000, 500))
        real_catch_up = opening.catch_up

        def catch_up_after_a_new_generation(db, at, opened_at=None):
            _record(writer, next(recorded), 500)  # the writer starts a generation the reader did not open
            writer.flush()  # and records its file in the MANIFEST
            return real_catch_up(db, at, opened_at)

        monkeypatch.setattr(opening, "catch_up", catch_up_after_a_new_generation)
        with pytest.raises(StoreError) as raised:
            DedupStore.open_secondary(path)
    assert type(raised.value) is StoreError  # not StoreCorruptError: the store is whole
    message = str(raised.value)
    assert "\n" not in message and "run the command again" in message and str(path) in message

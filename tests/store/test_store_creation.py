"""A new store appears whole or not at all: readers (stats, snapshots) polling a data directory while a
worker creates its store never meet a RocksDB database without the dedup families or metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.dedup_store import DedupStore
from store.errors import StoreCorruptError
from store.layout import list_store_dirs, store_path


def test_a_new_store_has_its_families_and_identity_when_it_appears(tmp_path: Path):
    path = store_path(tmp_path, "orders", 3)
    with DedupStore.open(path, topic="orders", partition=3) as store:
        assert (store.identity.topic, store.identity.partition) == ("orders", 3)
        with DedupStore.open_secondary(path) as reader:  # what `dedupectl stats` does meanwhile
            assert reader.identity == store.identity
    assert sorted(child.name for child in tmp_path.iterdir()) == ["orders-3"]


def test_a_creation_cut_short_by_a_crash_is_cleared_and_never_listed(tmp_path: Path):
    path = store_path(tmp_path, "orders", 0)
    leftover = tmp_path / ".orders-0.creating"
    leftover.mkdir()
    (leftover / "CURRENT").write_text("MANIFEST-000001\n")
    assert list_store_dirs(tmp_path) == []
    with DedupStore.open(path, topic="orders", partition=0) as store:
        store.record([b"ajs-" + b"0" * 32], [1])
    assert not leftover.exists()
    assert [entry[2] for entry in list_store_dirs(tmp_path)] == [path]


def test_an_empty_directory_made_beforehand_becomes_the_store(tmp_path: Path):
    path = store_path(tmp_path, "orders", 1)
    path.mkdir()
    with DedupStore.open(path, topic="orders", partition=1) as store:
        store.record([b"ajs-" + b"1" * 32], [1])
    with DedupStore.open_existing(path) as store:
        assert store.contains_many([b"ajs-" + b"1" * 32]) == [True]


def test_a_store_that_lacks_a_file_of_its_manifest_is_called_corrupt_not_missing(tmp_path: Path):
    path = store_path(tmp_path, "events", 0)
    with DedupStore.open(path, topic="events", partition=0) as store:
        store.record([f"ajs-{n:032x}".encode() for n in range(1_000)], list(range(1_000)))
        store.flush()
    lost = sorted(path.glob("*.sst"))[0]
    lost.unlink()
    with pytest.raises(StoreCorruptError, match=f"store file {lost} is damaged") as raised:
        DedupStore.open(path, topic="events", partition=0)
    assert "restore the store from a snapshot" in raised.value.hint and "rebuild it" in raised.value.hint

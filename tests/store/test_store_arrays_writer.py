"""The child process that writes a sealed generation's arrays: what it is given wrong it refuses with a line,
and a conversion whose child fails leaves the generation a run that answers exactly."""

from __future__ import annotations

import logging
import subprocess
import sys

from mixed_ids import distinct_mixed_ids

from store.arrays_job import ArraysJob
from store.child_process import ChildFailed
from store.codec import encode_ids
from store.dedup_store import DedupStore

SEED = 13


def _fill(store: DedupStore, ids: list[bytes], batch: int = 500) -> None:
    for at in range(0, len(ids), batch):
        chunk = ids[at : at + batch]
        store.record(chunk, [1_000 + n for n in range(at, at + len(chunk))])


def test_the_writer_refuses_wrong_arguments_and_a_generation_the_store_lacks(tmp_path):
    path = tmp_path / "events-0"
    with DedupStore.open(path, topic="events", partition=0) as store:
        _fill(store, distinct_mixed_ids(1_000, SEED))
    usage = subprocess.run([sys.executable, "-m", "store.arrays_writer"], capture_output=True, text=True)
    assert usage.returncode == 64 and "usage: python -m store.arrays_writer" in usage.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "store.arrays_writer", str(path), "ids.99999999999999999999", "0"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1] == f"generation ids.99999999999999999999 is not in store {path}"
    assert not [child for child in path.iterdir() if "arrays" in child.name]


def test_a_generation_whose_child_fails_stays_a_run_and_answers_exactly(
    tmp_path, short_generations, monkeypatch, caplog
):
    def failing(self, generation):
        raise ChildFailed("exited with 1: no space left on device")

    monkeypatch.setattr(ArraysJob, "_written_by_child", failing)
    path = tmp_path / "events-0"
    ids, unseen = distinct_mixed_ids(6_000, SEED), distinct_mixed_ids(300, SEED + 1)
    window = short_generations(2_000)
    with (
        caplog.at_level(logging.WARNING, logger="store.generation_keeper"),
        DedupStore.open(path, topic="events", partition=0, window_ids=window) as store,
    ):
        _fill(store, ids)
        assert store.wait_for_seals(60)
        assert store.arrays_files() == []
        assert len(store.id_families()) > 1
        assert all(store.contains_many(ids)) and not any(store.contains_many(unseen))
        assert store.contains_keys_in_db(encode_ids(ids)) == [True] * len(ids)
    assert "could not write the sealed arrays" in caplog.text and "no space left on device" in caplog.text


def test_a_stop_ends_the_conversion_under_way_and_the_next_writer_writes_it(tmp_path, short_generations, caplog):
    path = tmp_path / "events-0"
    ids, unseen = distinct_mixed_ids(5_000, SEED), distinct_mixed_ids(300, SEED + 1)
    window = short_generations(2_000)
    with caplog.at_level(logging.INFO, logger="store.generation_keeper"):
        with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
            _fill(store, ids)
            assert store.writing_arrays
        assert "stopped writing the sealed arrays of" in caplog.text  # its child takes longer than the close
    with DedupStore.open(path, topic="events", partition=0, window_ids=window) as store:
        assert store.wait_for_seals(60)
        sealed = {name for name, _, _ in store.id_families()[:-1]}
        assert {family for family, _, _ in store.arrays_files()} == sealed
        assert all(store.contains_many(ids)) and not any(store.contains_many(unseen))
        named = {file.name for _, file, _ in store.arrays_files()}
    assert {child.name for child in path.iterdir() if "arrays" in child.name} == named

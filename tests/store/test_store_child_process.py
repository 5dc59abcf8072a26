"""A store's child process (a filter's growth, a merge) leaves no temporary files behind, whether it ran to the
end or was killed on the way."""

from __future__ import annotations

import time

import pytest

from store.child_process import Child
from store.dedup_store import DedupStore


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("child") / "t-0"
    with DedupStore.open(path, topic="t", partition=0) as store:
        for start in range(0, 300_000, 5_000):
            store.record([f"ajs-{n:032x}".encode() for n in range(start, start + 5_000)], [start] * 5_000)
        store.flush()
    return path


def _builder(store_path, out) -> Child:
    return Child("store.filter_builder", str(store_path), str(out), "1000000")


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.001)


def test_a_child_killed_while_it_reads_the_store_leaves_no_temporary_directory(store_path, tmp_path):
    child = _builder(store_path, tmp_path / "grown")
    _wait_for(lambda: any(child.scratch.glob("dedupectl-secondary-*")))  # its secondary instance is open
    assert child.process.poll() is None
    child.end()
    assert child.process.returncode is not None
    assert not child.scratch.exists()
    assert not (tmp_path / "grown").exists()


def test_a_child_that_ran_to_the_end_leaves_only_what_it_was_asked_to_write(store_path, tmp_path):
    child = _builder(store_path, tmp_path / "grown")
    _wait_for(child.finished)
    child.end()
    assert not child.scratch.exists()
    assert (tmp_path / "grown").exists()

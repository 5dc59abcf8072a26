"""A store's child process (the writer of a sealed generation's arrays) leaves no temporary files behind,
whether it ran to the end or was killed on the way, and never outlives the process that started it; what a
killed worker's child left, the store's next writer removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from store import generation_arrays
from store.child_process import SCRATCH_DIR, Child
from store.codec import AJS_PREFIX
from store.dedup_store import DedupStore


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("child") / "t-0"
    with DedupStore.open(path, topic="t", partition=0) as store:
        for start in range(0, 300_000, 5_000):
            store.record([f"ajs-{n:032x}".encode() for n in range(start, start + 5_000)], [start] * 5_000)
        store.flush()
        assert store.id_families()[-1][1] == NEWEST_FIRST  # the newest generation keeps its ids in its family
    return path


NEWEST_FIRST = 280_000
NEWEST = f"ids.{NEWEST_FIRST:020d}"


def _writer(store_path) -> Child:
    """The child that writes the newest generation's arrays: no store names them, so the next writer removes them."""
    return Child(store_path, "store.arrays_writer", str(store_path), NEWEST, str(NEWEST_FIRST))


def _written(store_path) -> Path:
    return store_path / generation_arrays.file_name(NEWEST, AJS_PREFIX)


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.001)


def test_a_child_killed_while_it_reads_the_store_leaves_no_temporary_directory(store_path, tmp_path):
    child = _writer(store_path)
    assert child.scratch.parent == store_path / SCRATCH_DIR  # beside the store, not in the system's /tmp
    _wait_for(lambda: any(child.scratch.glob("dedupectl-secondary-*")))  # its secondary instance is open
    assert child.process.poll() is None
    child.end()
    assert child.process.returncode is not None
    assert not child.scratch.exists()
    assert not _written(store_path).exists()


def test_a_child_that_ran_to_the_end_leaves_only_what_it_was_asked_to_write(store_path, tmp_path):
    child = _writer(store_path)
    _wait_for(child.finished)
    child.end()
    assert not child.scratch.exists()
    assert _written(store_path).exists()
    _written(store_path).unlink()  # named by no store: its next writer would remove it too


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has ended; its new parent may not reap it at once


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_child_ends_with_the_process_that_started_it(store_path, tmp_path):
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys, time
                from store.child_process import SCRATCH_DIR, Child
                store = {str(store_path)!r}
                child = Child(store, "store.arrays_writer", store, {NEWEST!r}, "{NEWEST_FIRST}")
                print(child.process.pid, flush=True)
                time.sleep(600)
            """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    child_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)  # as a worker is killed: nothing of it runs to stop the child
    parent.wait()
    parent.stdout.close()
    _wait_for(lambda: not _running(child_pid), timeout_s=30)
    time.sleep(0.5)
    assert not _written(store_path).exists()  # killed before it wrote what only its dead parent would have read
    assert any((store_path / SCRATCH_DIR).iterdir())  # its scratch directory: nothing of the worker ran to remove it
    DedupStore.open(store_path, topic="t", partition=0).close()  # the store's next writer
    assert not (store_path / SCRATCH_DIR).exists()

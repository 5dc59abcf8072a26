"""A child process of a store's: a Python module run by this interpreter, apart from the worker's thread (the
writer of a sealed generation's arrays, ``store.arrays_writer``).

A child never outlives the worker that started it: what it writes (a generation's sealed arrays) is named
only by the store that started it, and a child of a killed worker could otherwise write files where the
worker started in its place reads its own child's."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PARENT_ENV = "DEDUPECTL_CHILD_OF"  # the pid of the process that started the child
SCRATCH_DIR = ".children"  # beside the store's files: what a killed worker's children left, removed at the next open
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ChildFailed(Exception):
    """The child exited with an error: its code and the last line it wrote to stderr."""


class Child:
    """One child process, polled from the store's thread; ``end`` stops it if it still runs.

    The child's temporary files (its secondary instance's directory) go to a directory of its own under the
    store's ``SCRATCH_DIR``, which this object removes at ``end``: a child stopped early is killed, and a killed
    process removes nothing. What a killed worker's children left there, the store's next writer removes
    (``clear``): it holds the store's lock, so no other process's child uses the directory."""

    def __init__(self, store_path: Path, module: str, *args: str):
        scratch_root = Path(store_path) / SCRATCH_DIR
        scratch_root.mkdir(exist_ok=True)
        self._scratch = tempfile.TemporaryDirectory(prefix="child-", dir=scratch_root, ignore_cleanup_errors=True)
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - the child writes to it until end() closes it
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._errors,
            env={**os.environ, "TMPDIR": self._scratch.name, PARENT_ENV: str(os.getpid())},
        )

    @property
    def scratch(self) -> Path:
        """The child's temporary directory (its TMPDIR), gone once ``end`` returns."""
        return Path(self._scratch.name)

    def finished(self) -> bool:
        """Whether it exited with 0 (False while it runs); raises ChildFailed if it exited otherwise."""
        code = self.process.poll()
        if code is None:
            return False
        if code != 0:
            self._errors.seek(0)
            lines = self._errors.read().decode(errors="replace").strip().splitlines()
            raise ChildFailed(f"exited with {code}: {lines[-1] if lines else 'no message'}")
        return True

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._errors.close()
        self._scratch.cleanup()


def clear(store_path: Path) -> None:
    """Remove what the children of a worker killed on this store left (by its next writer, before it starts one)."""
    shutil.rmtree(Path(store_path) / SCRATCH_DIR, ignore_errors=True)


def end_with_parent() -> None:
    """The first call of a child's main: from here on the kernel kills the child when the thread that started
    it ends (the worker's, whose store owns the child; on Linux, where workers run); a child whose parent is
    already gone exits at once."""
    parent = os.environ.get(PARENT_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(parent):  # it died before the line above: no signal will come
        raise SystemExit(f"the process that started this child ({parent}) has ended")

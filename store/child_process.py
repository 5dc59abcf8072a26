"""A child process of a store's: a Python module run by this interpreter, apart from the worker's thread (a
filter's growth, ``store.filter_growth``; a merge of generations, ``store.generation_merge``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


class ChildFailed(Exception):
    """The child exited with an error: its code and the last line it wrote to stderr."""


class Child:
    """One child process, polled from the store's thread; ``end`` stops it if it still runs.

    The child's temporary files (its secondary instance's directory) go to a directory this object owns and
    removes at ``end``: a child stopped early is killed, and a killed process removes nothing."""

    def __init__(self, module: str, *args: str):
        self._scratch = tempfile.TemporaryDirectory(prefix="dedupectl-child-", ignore_cleanup_errors=True)
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - the child writes to it until end() closes it
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._errors,
            env={**os.environ, "TMPDIR": self._scratch.name},
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

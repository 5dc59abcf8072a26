"""Whether a process holds a store open for writing: RocksDB's lock on the store's ``LOCK`` file.

Readers open a store held by a writer as a secondary instance, which follows the writer; one that no process
writes they open read-only, whose open checks every file the MANIFEST names. RocksDB takes the lock with
``fcntl(F_SETLK)``; ``F_GETLK`` asks about it without taking it. A process does not see its own locks that
way, so stores this process opened for writing are also kept in ``WRITING``.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

# struct flock on Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (pid_t)
_FLOCK = struct.Struct("hhqqi")
WRITING: set[Path] = set()


def writer_holds(store: Path) -> bool:
    """True while a process (this one included) holds the store at ``store`` open for writing."""
    if Path(store).resolve() in WRITING:
        return True
    try:
        fd = os.open(Path(store) / "LOCK", os.O_RDONLY)
    except OSError:
        return False  # no lock file: no writer has ever opened it
    try:
        asked = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        lock_type = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, asked))[0]
    finally:
        os.close(fd)
    return lock_type != fcntl.F_UNLCK

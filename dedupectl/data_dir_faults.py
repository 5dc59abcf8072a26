"""The worker's data directory failing under it: a full, read-only or vanished volume, told to the operator.

RocksDB (through rocksdict) reports such a failure as a plain ``Exception`` whose text is its status, e.g.
``IO error: No space left on device: While appending to file: /data/events-0/000016.sst: No space left on
device``; Python's own file writes raise ``OSError``. Raised while the worker writes its data directory,
either is the volume's fault, not a bug: ``data_dir_faults`` turns it into a ``DataDirIOError`` (exit 74)
whose one line names the directory, the space left and what to do. Any other error passes unchanged.

Nothing is lost by stopping there: the store is written only after the transaction that published its ids
committed, so the next start's recovery records from the output topic whatever the failed write missed.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dedupectl.errors import DataDirIOError, DiskFullError
from store.sizes import format_size

FULL = (errno.ENOSPC, errno.EDQUOT)
KNOWN = (*FULL, errno.EROFS, errno.ENOENT)
ROCKSDB_IO_ERROR = "IO error"  # how RocksDB's Status::IOError reads
PATH_IN_TEXT = re.compile(r": (/[^:]+)")
RESTART = "then restart the worker: it resumes where it stopped, with nothing lost or duplicated"


@contextmanager
def data_dir_faults(data_dir: Path) -> Iterator[None]:
    """Raise a failure of the data directory's volume as a ``DataDirIOError``; anything else unchanged."""
    try:
        yield
    except Exception as error:
        fault = data_dir_fault(error, data_dir)
        if fault is None or fault is error:
            raise
        raise fault from error


def data_dir_fault(error: BaseException, data_dir: Path) -> DataDirIOError | None:
    """The operator's error for ``error`` (or for what caused it) if the data directory's volume failed."""
    for link in _causes(error):
        if isinstance(link, DataDirIOError):
            return link
        code = _errno(link)
        if code is None:
            continue
        path = _path_named(link)
        if path is not None and not _within(path, data_dir):
            continue  # another filesystem's failure: not the data directory's to report
        if code == errno.ENOENT and (path is None or path.parent.is_dir()):
            continue  # a file missing from a directory that exists is no vanished volume
        return _explain(code, Path(data_dir), path)
    return None


def read_only_volume(data_dir: Path) -> DataDirIOError | None:
    """The operator's error if ``data_dir`` lies on a filesystem mounted read-only (found before any write)."""
    try:
        read_only = bool(os.statvfs(data_dir).f_flag & os.ST_RDONLY)
    except OSError:
        return None
    return _explain(errno.EROFS, Path(data_dir), None) if read_only else None


def is_storage_io_error(error: BaseException) -> bool:
    """True for any I/O failure RocksDB or the OS reports (including RocksDB's "Writer has previous error"
    after a failed write), known errno or not."""
    return isinstance(error, OSError) or str(error).startswith(ROCKSDB_IO_ERROR)


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _errno(error: BaseException) -> int | None:
    if isinstance(error, OSError):
        return error.errno if error.errno in KNOWN else None
    text = str(error)
    if not text.startswith(ROCKSDB_IO_ERROR):
        return None
    return next((code for code in KNOWN if os.strerror(code) in text), None)


def _path_named(error: BaseException) -> Path | None:
    if isinstance(error, OSError):
        return Path(os.fsdecode(error.filename)) if error.filename else None
    match = PATH_IN_TEXT.search(str(error))
    return Path(match.group(1).strip()) if match else None


def _within(path: Path, data_dir: Path) -> bool:
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(data_dir))


def _explain(code: int, data_dir: Path, path: Path | None) -> DataDirIOError:
    writing = f" (writing {path})" if path is not None else ""
    if code in FULL:
        what = "is over its disk quota" if code == errno.EDQUOT else "is out of space"
        return DiskFullError(
            f"the data directory {data_dir} {what}{writing}, {_space_left(data_dir)}",
            f"free space on its volume or move the data directory to a bigger one, {RESTART}",
        )
    if code == errno.EROFS:
        return DataDirIOError(
            f"the data directory {data_dir} is on a read-only filesystem{writing}",
            "remount it read-write (a volume turns read-only after disk errors: see the kernel log) or move "
            f"the data directory to a sound volume, {RESTART}",
        )
    return DataDirIOError(
        f"the data directory {data_dir} or a store in it vanished while the worker wrote it{writing}",
        "mount its volume again (a store deleted: restore it from a snapshot), then restart the worker: "
        "recovery brings its stores up to date from the output topic",
    )


def _space_left(data_dir: Path) -> str:
    try:
        usage = shutil.disk_usage(data_dir)
    except OSError:
        return "space left unknown"
    return f"{format_size(usage.free)} left of {format_size(usage.total)}"

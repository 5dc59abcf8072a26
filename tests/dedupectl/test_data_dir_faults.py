"""Which failures are the data directory's volume (full, read-only, vanished) and what the operator reads;
everything else must pass through untouched, so a bug still surfaces as one."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from dedupectl.data_dir_faults import data_dir_fault, data_dir_faults, is_storage_io_error, read_only_volume
from dedupectl.errors import DataDirIOError, DiskFullError, StoreError


def rocksdb_error(status: str, path: Path, reason: str) -> Exception:
    """What rocksdict raises: a plain Exception whose text is RocksDB's status."""
    return Exception(f"IO error: {reason}: {status}: {path}: {reason}")


def test_a_full_disk_names_the_directory_the_space_left_and_what_to_do(tmp_path: Path) -> None:
    sst = tmp_path / "events-0" / "000016.sst"
    fault = data_dir_fault(rocksdb_error("While appending to file", sst, "No space left on device"), tmp_path)

    assert isinstance(fault, DiskFullError) and fault.exit_code == 74
    text = str(fault)
    assert text.startswith(f"the data directory {tmp_path} is out of space (writing {sst}), ")
    assert " left of " in text
    assert "free space on its volume or move the data directory to a bigger one" in text
    assert "then restart the worker: it resumes where it stopped, with nothing lost or duplicated" in text
    assert "\n" not in text


def test_a_full_disk_is_found_behind_the_store_error_that_wraps_it(tmp_path: Path) -> None:
    cause = rocksdb_error("While appending to file", tmp_path / "e-0" / "000017.sst", "No space left on device")
    try:
        raise StoreError(f"cannot open store {tmp_path / 'e-0'}: {cause}") from cause
    except StoreError as wrapped:
        assert isinstance(data_dir_fault(wrapped, tmp_path), DiskFullError)


@pytest.mark.parametrize(
    ("error", "kind", "words"),
    [
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), DiskFullError, "is out of space, "),
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), DiskFullError, "is over its disk quota, "),
        (OSError(errno.EROFS, os.strerror(errno.EROFS)), DataDirIOError, "is on a read-only filesystem"),
    ],
)
def test_os_errors_of_the_volume(tmp_path: Path, error: OSError, kind: type, words: str) -> None:
    fault = data_dir_fault(error, tmp_path)
    assert type(fault) is kind and words in str(fault)


def test_a_read_only_filesystem_from_rocksdb(tmp_path: Path) -> None:
    log = tmp_path / "events-0" / "000012.log"
    fault = data_dir_fault(rocksdb_error("While open a file for appending", log, "Read-only file system"), tmp_path)
    assert type(fault) is DataDirIOError and fault.exit_code == 74
    assert "remount it read-write" in str(fault)


def test_a_store_deleted_under_the_worker_is_a_vanished_directory(tmp_path: Path) -> None:
    gone = tmp_path / "events-0" / "000012.log"  # events-0 does not exist
    error = rocksdb_error("While open a file for appending", gone, "No such file or directory")
    fault = data_dir_fault(error, tmp_path)
    assert type(fault) is DataDirIOError and "vanished" in str(fault)


def test_a_missing_file_in_a_directory_that_exists_is_left_alone(tmp_path: Path) -> None:
    missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(tmp_path / "no-such-file"))
    assert data_dir_fault(missing, tmp_path) is None


def test_a_full_disk_elsewhere_is_not_the_data_directory(tmp_path: Path) -> None:
    elsewhere = rocksdb_error("While appending to file", Path("/elsewhere/x.sst"), "No space left on device")
    assert data_dir_fault(elsewhere, tmp_path / "data") is None


@pytest.mark.parametrize(
    "error",
    [
        ValueError("3 ids but 2 timestamps"),
        Exception("Corruption: block checksum mismatch"),
        Exception("IO error: Input/output error: While reading block"),
        KeyError("state"),
    ],
)
def test_anything_else_passes_through_untouched(tmp_path: Path, error: Exception) -> None:
    assert data_dir_fault(error, tmp_path) is None
    with pytest.raises(type(error)) as caught, data_dir_faults(tmp_path):
        raise error
    assert caught.value is error


def test_the_context_raises_the_operator_error_from_the_original(tmp_path: Path) -> None:
    original = rocksdb_error("While appending to file", tmp_path / "000009.log", "No space left on device")
    with pytest.raises(DiskFullError) as caught, data_dir_faults(tmp_path):
        raise original
    assert caught.value.__cause__ is original, "--debug still shows where it happened"


def test_storage_io_errors_include_rocksdb_after_a_failed_write() -> None:
    assert is_storage_io_error(Exception("IO error: Writer has previous error.; IO error: Writer has previous error."))
    assert is_storage_io_error(OSError(errno.EIO, "Input/output error"))
    assert not is_storage_io_error(Exception("Invalid argument: Column family not found"))


def test_a_writable_directory_is_not_a_read_only_volume(tmp_path: Path) -> None:
    assert read_only_volume(tmp_path) is None
    assert read_only_volume(tmp_path / "absent") is None

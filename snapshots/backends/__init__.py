"""Snapshot destinations: a local directory (the default), ``s3://bucket/prefix``, or ``ebs:vol-…``."""

from __future__ import annotations

from pathlib import Path

from snapshots.backends.aws import AwsOptions
from snapshots.backends.base import Backend, SnapshotInfo, VerifyReport
from snapshots.backends.ebs import EbsBackend
from snapshots.backends.local import LocalBackend
from snapshots.backends.s3 import S3Backend, TransferSettings

DEFAULT_DIR = "snapshots"  # under the data directory: quick rollbacks; not a backup against losing the disk


def default_destination(data_dir: Path) -> str:
    return str(Path(data_dir) / DEFAULT_DIR)


def open_backend(
    spec: str | None,
    *,
    data_dir: Path | None = None,
    aws: AwsOptions | None = None,
    transfer: TransferSettings | None = None,
) -> Backend:
    """The destination ``spec`` names; None means ``<data_dir>/snapshots``."""
    aws = aws or AwsOptions()
    if spec is None or spec == "":
        if data_dir is None:
            raise ValueError("a destination or a data directory is needed")
        return LocalBackend(Path(default_destination(data_dir)))
    if spec.startswith("s3://"):
        return S3Backend(spec, aws, transfer)
    if spec == "ebs" or spec.startswith("ebs:"):
        return EbsBackend(spec.partition(":")[2] or None, aws, data_dir)
    return LocalBackend(Path(spec.removeprefix("file://")).expanduser())


__all__ = [
    "AwsOptions",
    "Backend",
    "EbsBackend",
    "LocalBackend",
    "S3Backend",
    "SnapshotInfo",
    "TransferSettings",
    "VerifyReport",
    "default_destination",
    "open_backend",
]

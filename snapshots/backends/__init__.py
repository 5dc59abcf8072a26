"""Snapshot destinations: a local directory (the default), ``s3://bucket/prefix``, or ``ebs:vol-…``.

Anything else that starts like a URL scheme (``s3:/x``, ``S3://x``, ``gs://x``, ``backup:1``) is refused
rather than taken as a relative directory of that odd name: a mistyped bucket must not become a local folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from snapshots.backends.aws import AwsOptions
from snapshots.backends.base import Backend, SnapshotInfo, VerifyReport
from snapshots.backends.ebs import EbsBackend
from snapshots.backends.local import LocalBackend
from snapshots.backends.s3 import S3Backend, TransferSettings
from store.errors import ConfigError

DEFAULT_DIR = "snapshots"  # under the data directory: quick rollbacks; not a backup against losing the disk


def default_destination(data_dir: Path) -> str:
    return str(Path(data_dir) / DEFAULT_DIR)


ACCEPTED_FORMS = "a directory (/backups/dedupectl, ./snapshots), file:///path, s3://bucket/prefix, ebs:vol-…"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_VOLUME_ID = re.compile(r"^vol-[0-9a-zA-Z]+$")


def _refuse(spec: str, why: str) -> ConfigError:
    return ConfigError(f"snapshot destination {spec!r} {why}", f"write one of: {ACCEPTED_FORMS}")


def open_backend(
    spec: str | None,
    *,
    data_dir: Path | None = None,
    aws: AwsOptions | None = None,
    transfer: TransferSettings | None = None,
    create: bool = False,
) -> Backend:
    """The destination ``spec`` names; None means ``<data_dir>/snapshots`` (created when needed). A local
    directory named by ``spec`` must exist unless ``create``."""
    aws = aws or AwsOptions()
    if spec is None or spec == "":
        if data_dir is None:
            raise ValueError("a destination or a data directory is needed")
        return LocalBackend(Path(default_destination(data_dir)), create=True)
    if spec.startswith("s3://"):
        return S3Backend(spec, aws, transfer)
    if spec in ("ebs", "ebs:") or spec.startswith("ebs:vol-"):
        volume = spec.partition(":")[2] or None
        if volume is not None and not _VOLUME_ID.match(volume):
            raise _refuse(spec, f"names no volume id ({volume!r} is not vol-…)")
        return EbsBackend(volume, aws, data_dir)
    if spec.startswith("file://"):
        path = spec.removeprefix("file://")
        if not path.startswith("/"):
            raise _refuse(spec, "is not an absolute file:// URL (file:///path)")
        return LocalBackend(Path(path), create=create)
    scheme = _SCHEME.match(spec)
    if scheme is not None:
        name = scheme.group(0).rstrip(":")
        form = {"s3": "s3://bucket/prefix", "ebs": "ebs:vol-…", "file": "file:///path"}.get(name.lower())
        if form is not None:
            raise _refuse(spec, f"is not a valid {form} destination (misspelt?)")
        raise _refuse(
            spec, f"has a scheme dedupectl does not know ({name}:); a local directory of that name is ./{spec}"
        )
    return LocalBackend(Path(spec).expanduser(), create=create)


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

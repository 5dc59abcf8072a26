"""Errors of snapshots, the clouds they are kept in, and moving a store's volume."""

from __future__ import annotations

from store.errors import DedupeError


class SnapshotError(DedupeError):
    """A snapshot could not be taken, published, listed, restored or pruned."""


class SnapshotNotFoundError(SnapshotError):
    """No snapshot with that id at that destination."""


class SnapshotCorruptError(SnapshotError):
    """A snapshot's file is missing, truncated or fails its checksum."""


class CloudError(DedupeError):
    """An AWS call (S3, EC2) failed: credentials, permissions, missing resources, wrong state."""


class ReattachError(DedupeError):
    """A volume cannot be moved safely (wrong partition, wrong zone, a live worker)."""

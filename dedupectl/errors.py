"""dedupectl's one exception hierarchy, gathered for the commands that catch it.

Each layer defines the errors it raises (``store.errors`` holds the base, ``DedupeError``;
``reconcile.errors`` and ``snapshots.errors`` derive from it), so that no layer imports one above it. Every
error an operator can meet is a ``DedupeError``: one line that says what went wrong and what to do, and the
``exit_code`` the CLI exits with.
"""

from __future__ import annotations

from reconcile.errors import (
    AuthenticationError,
    BrokerError,
    FencedError,
    OutputGapError,
    PermissionDeniedError,
    RangeError,
    TopicError,
)
from snapshots.errors import CloudError, ReattachError, SnapshotCorruptError, SnapshotError, SnapshotNotFoundError
from store.errors import (
    ConfigError,
    DataDirError,
    DataDirIOError,
    DedupeError,
    DiskFullError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    StoreVersionError,
)

__all__ = [
    "AuthenticationError",
    "BrokerError",
    "CloudError",
    "ConfigError",
    "DataDirError",
    "DataDirIOError",
    "DedupeError",
    "DiskFullError",
    "FencedError",
    "LocalBrokerError",
    "OutputGapError",
    "PermissionDeniedError",
    "RangeError",
    "ReattachError",
    "RepartitionError",
    "SchemaRegistryUnavailableError",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotNotFoundError",
    "SparkError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreVersionError",
    "TopicError",
]


class LocalBrokerError(DedupeError):
    """The project's local development broker could not be fetched, started or stopped."""


class SparkError(DedupeError):
    """A Spark job could not start (Java, the Kafka connector jars, the master) or failed."""


class SchemaRegistryUnavailableError(DedupeError):
    """The schema registry did not answer (refused, timed out, a server error) for as long as faults are ridden
    out: the dependency, not the records, needs the operator; no record was dead-lettered for it."""


class RepartitionError(DedupeError):
    """A repartition step cannot go on as asked (counts, partitioner, disk, stores, running workers): nothing
    was changed."""

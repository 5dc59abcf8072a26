"""One exception hierarchy for the whole product.

Every error an operator can meet is a ``DedupeError``: its message says what went wrong and what to do, in
one line, so the CLI can print it without a traceback. ``exit_code`` is what the CLI exits with.
"""

from __future__ import annotations


class DedupeError(Exception):
    """Base of every error dedupectl raises on purpose."""

    exit_code: int = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}: {self.hint}" if self.hint else self.message


class ConfigError(DedupeError):
    """The configuration (file, environment or flags) is invalid."""


class BrokerError(DedupeError):
    """Kafka is unreachable or refused an operation."""


class TopicError(BrokerError):
    """A topic is missing or does not match what the worker needs."""


class FencedError(BrokerError):
    """Another worker took over this worker's partitions or transactional id."""


class StoreError(DedupeError):
    """The dedup store cannot be opened or used."""


class StoreNotFoundError(StoreError):
    """The path holds no dedup store."""


class StoreLockedError(StoreError):
    """Another process holds the store open for writing."""


class StoreCorruptError(StoreError):
    """The store's data or metadata is inconsistent."""


class StoreVersionError(StoreError):
    """The store was written by an incompatible layout."""


class DataDirError(DedupeError):
    """The data directory is missing or not writable."""


class LocalBrokerError(DedupeError):
    """The project's local development broker could not be fetched, started or stopped."""


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


class RangeError(DedupeError):
    """An offset or time range is malformed, reversed, or holds no records."""


class SparkError(DedupeError):
    """A Spark job could not start (Java, the Kafka connector jars, the master) or failed."""


class DataDirIOError(DataDirError):
    """The data directory's volume failed under the worker: read-only, gone, or (``DiskFullError``) full."""

    exit_code = 74  # EX_IOERR: the volume, not the configuration, needs the operator


class DiskFullError(DataDirIOError):
    """The data directory's filesystem has no space left, or its quota is used up."""

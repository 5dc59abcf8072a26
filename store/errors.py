"""The base of dedupectl's one exception hierarchy, and the errors of the store and its data directory.

Every error an operator can meet is a ``DedupeError``: its message says what went wrong and what to do, in
one line, so the CLI can print it without a traceback. ``exit_code`` is what the CLI exits with. The base
lives here, in the lowest layer, so that every layer above raises from the same hierarchy without importing
upwards; ``dedupectl.errors`` gathers the whole hierarchy for the CLI.
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


class DataDirError(DedupeError):
    """The data directory is missing or not writable."""


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


class DataDirIOError(DataDirError):
    """The data directory's volume failed under the worker: read-only, gone, or (``DiskFullError``) full."""

    exit_code = 74  # EX_IOERR: the volume, not the configuration, needs the operator


class DiskFullError(DataDirIOError):
    """The data directory's filesystem has no space left, or its quota is used up."""

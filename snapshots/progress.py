"""How the core reports bytes moved (hashing, copying, uploading, downloading) without knowing who shows it.

The CLI passes a rich progress bar (bytes, rate, ETA on stderr); the worker's schedule passes nothing.
``advance`` may be called from several threads at once (S3 transfers are concurrent).
"""

from __future__ import annotations

from typing import Protocol


class TransferProgress(Protocol):
    def start(self, label: str, total_bytes: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def finish(self) -> None: ...


class NoProgress:
    def start(self, label: str, total_bytes: int) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def finish(self) -> None:
        pass


NO_PROGRESS = NoProgress()

"""Fault injection for the crash tests: ``DEDUPECTL_CRASHPOINT=after-commit:3`` SIGKILLs the process the 3rd
time it reaches ``after-commit``. The worker's points are ``after-produce``, ``after-commit`` and ``after-record``;
``dedupectl.repartition.cutover``'s are ``cutover-fold``, ``cutover-step`` and ``cutover-swap``."""

from __future__ import annotations

import os
import signal

ENVIRONMENT = "DEDUPECTL_CRASHPOINT"


class CrashPoint:
    """Unset, it costs one attribute test per batch."""

    def __init__(self, spec: str | None) -> None:
        self.name, self.remaining = None, 0
        if spec:
            name, _, count = spec.partition(":")
            self.name, self.remaining = name, int(count or 1)

    @classmethod
    def from_environment(cls) -> CrashPoint:
        return cls(os.environ.get(ENVIRONMENT))

    def __call__(self, name: str) -> None:
        if self.name == name:
            self.remaining -= 1
            if self.remaining <= 0:
                os.kill(os.getpid(), signal.SIGKILL)

"""A writer of a store in a process of its own, for the store's kill tests: a script run with ``python -c`` that
records ids and is killed (SIGKILL) by itself at a point it arranges, or by the test after a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent  # mixed_ids, for the writer

# What every writer script starts with: argv[1] the store's path, argv[2] how many ids, argv[3] the point at
# which it kills itself ("" for none), argv[5] the seed of its ids; then any arguments of its own.
PREAMBLE = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
import store.dedup_store as dedup_store, store.generation_keeper as generation_keeper, store.generations as gens
from mixed_ids import distinct_mixed_ids
path, count, point = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ids = distinct_mixed_ids(count, int(sys.argv[5]))

def die():
    os.kill(os.getpid(), signal.SIGKILL)
"""


def run_writer(
    script: str, path: Path, count: int, point: str, seed: int, *extra: str, kill_after_s: float | None = None
) -> int:
    """Run ``PREAMBLE`` + ``script`` until it ends or ``kill_after_s`` passes (then SIGKILL it); its exit code,
    which must be 0 or -9 (killed)."""
    process = subprocess.Popen(
        [sys.executable, "-c", PREAMBLE + script, str(path), str(count), point, str(HERE), str(seed), *extra],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, errors = process.communicate(timeout=kill_after_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        _, errors = process.communicate()
    assert process.returncode in (0, -9), errors
    return process.returncode

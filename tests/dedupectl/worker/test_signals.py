"""Once the worker has returned or raised, its summary or error decides the exit code: a supervisor's SIGTERM
that lands while the process exits (Python restores the default action before it destroys the Kafka and RocksDB
handles still alive) does not turn a documented exit code into a death by signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

# a handle destroyed at exit, as the clients and stores left alive are, with a SIGTERM arriving meanwhile
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from dedupectl.worker.signals import stop_on_signals

    class DestroyedAtExit:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)

    handle = DestroyedAtExit()
    stop = stop_on_signals(None)
    stop.end() if sys.argv[1] == "end" else stop.over.set()
    sys.exit(74)
    """
)


@pytest.mark.parametrize(("ending", "code"), [("end", 74), ("over-only", -signal.SIGTERM)])
def test_a_signal_after_the_worker_ended_keeps_its_exit_code(ending, code):
    child = subprocess.run([sys.executable, "-c", CHILD, ending], capture_output=True, text=True, timeout=30)
    assert child.returncode == code, child.stderr
    assert "Traceback" not in child.stderr

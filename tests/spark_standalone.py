"""A Spark standalone cluster for tests: one master and one worker from pyspark's own distribution, on
127.0.0.1, each in its own process group (its executors too), stopped by ``stop()``.

The worker runs with the environment of a plain cluster node: no virtualenv on PATH, and a ``python3`` (and
``python``) first on PATH that fails, so a job only works if its executors start the interpreter the job
names (``spark.pyspark.python``) rather than whatever Python the node has.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

BARE_PATH = "/usr/local/bin:/usr/bin:/bin"  # a node's PATH: not the virtualenv the tests run in
WORKER_CORES = 2
WORKER_MEMORY = "1g"  # one executor of Spark's default 1g
DAEMON_MEMORY = "256m"  # the master's and the worker's own heap
START_TIMEOUT_S = 120
NOT_THIS_PYTHON = "#!/bin/sh\necho 'executors must not start the python on the node PATH' >&2\nexit 1\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def node_env(root: Path) -> dict[str, str]:
    """A cluster node's environment: PATH without the virtualenv, a failing python first on it."""
    stubs = root / "node-bin"
    stubs.mkdir(exist_ok=True)
    for name in ("python3", "python"):
        (stubs / name).write_text(NOT_THIS_PYTHON)
        (stubs / name).chmod(0o755)
    drop = ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "SPARK_HOME")
    env = {key: value for key, value in os.environ.items() if key not in drop}
    env.update(
        PATH=f"{stubs}:{BARE_PATH}",
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",  # every daemon and executor binds loopback only
        SPARK_LOCAL_DIRS=str(root / "local"),  # the executors' scratch space, with the rest of the cluster's files
        SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    return env


@dataclass
class StandaloneCluster:
    root: Path
    master_port: int = 0
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def work_dir(self) -> Path:
        """The worker's work dir: one folder per application, one per executor in it."""
        return self.root / "work"

    def start(self) -> StandaloneCluster:
        env = node_env(self.root)
        spark_class = str(spark_home() / "bin" / "spark-class")
        self.master_port = free_port()
        try:
            self._daemon(
                "master",
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(self.master_port), "--webui-port", str(free_port())],
                env, ready=b"I have been elected leader",
            )  # fmt: skip
            self._daemon(
                "worker",
                [spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                 "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(WORKER_CORES),
                 "--memory", WORKER_MEMORY, "--work-dir", str(self.work_dir)],
                env, ready=b"Successfully registered with master",
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def _daemon(self, name: str, command: list[str], env: dict[str, str], ready: bytes) -> None:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.root, start_new_session=True
            )
        self.processes.append(process)
        deadline = time.monotonic() + START_TIMEOUT_S
        while ready not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark {name} did not start; its log ends:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def applications(self) -> list[Path]:
        return sorted(self.work_dir.glob("app-*"))

    def stop(self) -> None:
        """The worker first (its process group holds its executors), then the master."""
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)
            # an executor left behind in the group
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()

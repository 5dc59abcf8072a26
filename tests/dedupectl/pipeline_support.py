"""A fresh set of topics on the shared broker and ways to run the worker against them: in a thread (for
inspection) or as a real process (for SIGKILL). Its own module, so that tests import it by a name no other
directory's conftest shares."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from dedupectl.config import KafkaConfig, WorkerConfig, resolve_worker_config
from dedupectl.worker import RunSummary, Worker


@dataclass(frozen=True)
class Pipeline:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str
    dead_letter_topic: str
    partitions: int
    root: Path

    def config(self, worker_id: str = "w1", data_dir: Path | None = None, **fields) -> WorkerConfig:
        flags = {
            "bootstrap_servers": self.kafka.bootstrap_servers,
            "input_topic": self.input_topic,
            "output_topic": self.output_topic,
            "dead_letter_topic": self.dead_letter_topic,
            "group_id": f"group-{self.input_topic}",
            "data_dir": data_dir or self.root / f"data-{worker_id}",
            "worker_id": worker_id,
            "session_timeout_ms": 6000,
            "transaction_timeout_ms": 10_000,
            **fields,
        }
        return resolve_worker_config(env={}, flags=flags)

    def produce(self, records: Iterable[tuple], partition: int | None = None) -> int:
        """Produce (key, value) or (key, value, headers) records in order (keyed records hash to their
        partition unless given)."""
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap_servers, "enable.idempotence": True})
        count = 0
        for key, value, *headers in records:
            kwargs = {} if partition is None else {"partition": partition}
            if headers:
                kwargs["headers"] = headers[0]
            producer.produce(self.input_topic, value=value, key=key, **kwargs)
            count += 1
        assert producer.flush(30) == 0
        return count

    def run_worker(self, config: WorkerConfig | None = None, idle_s: float = 2.0) -> RunSummary:
        """Run a worker in this process until the input has been idle for ``idle_s``."""
        return Worker(config or self.config()).run(threading.Event(), exit_on_idle_s=idle_s)

    def cli_args(self, worker_id: str, data_dir: Path, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "dedupectl.cli.app", "run",
            "-b", self.kafka.bootstrap_servers,
            "-i", self.input_topic, "-o", self.output_topic, "--dead-letter-topic", self.dead_letter_topic,
            "--group-id", f"group-{self.input_topic}", "--data-dir", str(data_dir), "--worker-id", worker_id,
            "--log-level", "warning", *extra,
        ]  # fmt: skip

    def spawn_worker(
        self,
        worker_id: str,
        data_dir: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        wrap: Callable[[list[str]], list[str]] = list,
    ) -> subprocess.Popen:
        """``dedupectl run`` as a real process (so it can be SIGKILLed or SIGSTOPped); ``wrap`` may prefix its
        command, e.g. to run it in another mount namespace."""
        full_env = {
            **os.environ,
            "DEDUPECTL_SESSION_TIMEOUT_MS": "6000",
            "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000",
            **(env or {}),
        }
        return subprocess.Popen(
            wrap(self.cli_args(worker_id, data_dir, *extra)),
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

"""Helpers for reconcile tests: a pipeline of fresh topics on the shared broker and a data dir, with ways to
put records in the output topic and ids in a store directly (to build exactly the disagreement a test
needs), to run the worker, and to run ``dedupectl reconcile`` in-process (JSON) or as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.config import KafkaConfig, WorkerConfig, resolve_worker_config
from dedupectl.worker import RunSummary, Worker
from store.dedup_store import DedupStore
from store.layout import store_path


@dataclass(frozen=True)
class Pipeline:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str
    partitions: int
    root: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    # -- the worker ----------------------------------------------------------------------------------

    def worker_config(self, worker_id: str = "w1") -> WorkerConfig:
        return resolve_worker_config(
            env={},
            flags={
                "bootstrap_servers": self.kafka.bootstrap_servers,
                "input_topic": self.input_topic,
                "output_topic": self.output_topic,
                "group_id": f"group-{self.input_topic}",
                "data_dir": self.data_dir,
                "worker_id": worker_id,
                "session_timeout_ms": 6000,
                "transaction_timeout_ms": 10_000,
            },
        )

    def run_worker(self, idle_s: float = 2.0) -> RunSummary:
        """Run a worker in this process until the input has been idle for ``idle_s``, and until what it
        committed is readable (read_committed)."""
        summary = Worker(self.worker_config()).run(threading.Event(), exit_on_idle_s=idle_s)
        for partition in range(self.partitions):
            self.wait_stable(partition)
        return summary

    def produce_input(self, ids: Sequence[bytes], partition: int = 0) -> None:
        # idempotent: a retried batch keeps its place, and the tests read the output in the order sent
        producer = Producer(
            {"bootstrap.servers": self.kafka.bootstrap_servers, "linger.ms": 5, "enable.idempotence": True}
        )
        for message_id in ids:
            value = json.dumps({"messageId": message_id.decode(), "type": "track"}).encode()
            producer.produce(self.input_topic, value=value, key=message_id, partition=partition)
        assert producer.flush(30) == 0

    # -- the output topic and the store, by hand -------------------------------------------------------

    def publish(
        self,
        ids: Sequence[bytes],
        partition: int = 0,
        *,
        abort: bool = False,
        name: str = "hand",
        timestamp_ms: int = 0,
    ) -> None:
        """Write ``ids`` to the output partition in one transaction (committed, or aborted), as the worker
        writes: key = messageId; record timestamps ``timestamp_ms`` (0: now)."""
        producer = Producer(
            {"bootstrap.servers": self.kafka.bootstrap_servers, "transactional.id": f"{self.output_topic}-{name}"}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for message_id in ids:
            producer.produce(
                self.output_topic, value=b"{}", key=message_id, partition=partition, timestamp=timestamp_ms
            )
        producer.flush(30)
        if abort:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
        self.wait_stable(partition)

    def wait_stable(self, partition: int = 0, timeout_s: float = 15.0) -> None:
        """Wait until the partition's last stable offset reaches its high watermark: a transaction's
        marker is written by the partition leader a moment after the commit (or abort) returns."""
        settings = {"bootstrap.servers": self.kafka.bootstrap_servers, "group.id": "t"}
        committed = Consumer({**settings, "isolation.level": "read_committed"})
        everything = Consumer({**settings, "isolation.level": "read_uncommitted"})
        tp = TopicPartition(self.output_topic, partition)
        try:
            deadline = time.monotonic() + timeout_s
            while (
                committed.get_watermark_offsets(tp, timeout=10)[1] < everything.get_watermark_offsets(tp, timeout=10)[1]
            ):
                assert time.monotonic() < deadline, f"{self.output_topic}[{partition}] did not become stable"
                time.sleep(0.05)
        finally:
            committed.close()
            everything.close()

    def end_offset(self, partition: int = 0) -> int:
        """The output partition's last stable offset."""
        consumer = Consumer(
            {"bootstrap.servers": self.kafka.bootstrap_servers, "group.id": "t", "isolation.level": "read_committed"}
        )
        try:
            return consumer.get_watermark_offsets(TopicPartition(self.output_topic, partition), timeout=10)[1]
        finally:
            consumer.close()

    def store_path(self, partition: int = 0) -> Path:
        return store_path(self.data_dir, self.input_topic, partition)

    def open_store(self, partition: int = 0) -> DedupStore:
        return DedupStore.open(self.store_path(partition), topic=self.input_topic, partition=partition)

    def record(self, ids: Sequence[bytes], partition: int = 0, *, output_offset: int | None = None) -> None:
        now = int(time.time() * 1000)
        with self.open_store(partition) as store:
            store.record(list(ids), [now] * len(ids), output_offset=output_offset)

    def store_ids(self, partition: int = 0) -> list[bytes]:
        """The store's ids in sequence order."""
        with DedupStore.open_secondary(self.store_path(partition)) as store:
            return [message_id for _, message_id in store.iter_by_seq()]

    # -- dedupectl reconcile ---------------------------------------------------------------------------

    def args(self, *extra: str) -> list[str]:
        return [
            "reconcile", "-b", self.kafka.bootstrap_servers, "-i", self.input_topic, "-o", self.output_topic,
            "-d", str(self.data_dir), *extra,
        ]  # fmt: skip

    def reconcile(self, *extra: str) -> tuple[int, dict]:
        """``dedupectl reconcile … --json`` in-process: (exit code, report)."""
        result = CliRunner().invoke(app, self.args(*extra, "--json"), catch_exceptions=False)
        return result.exit_code, json.loads(result.stdout)

    def reconcile_process(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """``dedupectl reconcile`` as a real process (its one-line errors and exit codes)."""
        return run_cli(*self.args(*extra), timeout=timeout)


def run_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def only_partition(report: dict, partition: int = 0) -> dict:
    (found,) = [p for p in report["partitions"] if p["partition"] == partition]
    return found


def ids(prefix: str, count: int, start: int = 0) -> list[bytes]:
    return [f"{prefix}-{i:06d}".encode() for i in range(start, start + count)]

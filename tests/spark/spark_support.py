"""Helpers for the Spark job tests: a pipeline of fresh topics on the shared broker, ways to put records in
either topic by hand (to inject exactly the duplicates, losses and extras a test needs), to run the real
worker, and to run the jobs in the shared SparkSession or the CLI as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from dedupectl.config import KafkaConfig, WorkerConfig, resolve_worker_config
from dedupectl.spark.audit import AuditReport, AuditRequest, run_audit
from dedupectl.spark.replay import ReplayReport, ReplayRequest, run_replay
from dedupectl.spark.sources import TopicSource
from dedupectl.verify import count_ids
from dedupectl.worker import RunSummary, Worker
from store.layout import store_path

# Fixed record timestamps make time ranges exact. Recent ones: the broker's retention (7 days) would delete
# records with older timestamps while a test reads them.
BASE_MS = (int(time.time()) // 3600 - 3) * 3_600_000


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    partition: int = 0
    timestamp_ms: int | None = None


def event(message_id: str, partition: int = 0, timestamp_ms: int | None = None, keyed: bool = True) -> Record:
    value = json.dumps({"messageId": message_id, "type": "track", "event": "Order Completed"}).encode()
    return Record(message_id.encode() if keyed else None, value, partition, timestamp_ms)


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

    @property
    def group_id(self) -> str:
        return f"group-{self.input_topic}"

    # -- the worker ----------------------------------------------------------------------------------

    def worker_config(self, worker_id: str = "w1", data_dir: Path | None = None) -> WorkerConfig:
        return resolve_worker_config(
            env={},
            flags={
                "bootstrap_servers": self.kafka.bootstrap_servers,
                "input_topic": self.input_topic,
                "output_topic": self.output_topic,
                "group_id": self.group_id,
                "data_dir": data_dir or self.data_dir,
                "worker_id": worker_id,
                "session_timeout_ms": 6000,
                "transaction_timeout_ms": 10_000,
            },
        )

    def run_worker(self, idle_s: float = 2.0, data_dir: Path | None = None) -> RunSummary:
        """Run the real worker in this process until the input has been idle for ``idle_s``."""
        return Worker(self.worker_config(data_dir=data_dir)).run(threading.Event(), exit_on_idle_s=idle_s)

    def start_worker(self) -> tuple[threading.Thread, threading.Event, list[RunSummary]]:
        """The real worker in a thread, until the returned event is set."""
        stop, summaries = threading.Event(), []
        worker = Worker(self.worker_config())
        thread = threading.Thread(target=lambda: summaries.append(worker.run(stop)), daemon=True)
        thread.start()
        return thread, stop, summaries

    def skip_input_to_end(self) -> None:
        """Commit the worker group's input offsets at the end of every partition, as an operator resetting
        the group to 'latest' during an incident would: the records before are never processed. (Only while
        no worker is a member: a stopped worker stays a static member for its session timeout.)"""
        consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap_servers, "group.id": self.group_id})
        try:
            offsets = []
            for partition in range(self.partitions):
                _, end = consumer.get_watermark_offsets(TopicPartition(self.input_topic, partition), timeout=10)
                offsets.append(TopicPartition(self.input_topic, partition, end))
            consumer.commit(offsets=offsets, asynchronous=False)
        finally:
            consumer.close()

    def store_path(self, partition: int) -> Path:
        return store_path(self.data_dir, self.input_topic, partition)

    # -- records by hand -------------------------------------------------------------------------------

    def produce(self, topic: str, records: Iterable[Record]) -> int:
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap_servers, "linger.ms": 5})
        count = 0
        for record in records:
            kwargs = {} if record.timestamp_ms is None else {"timestamp": record.timestamp_ms}
            producer.produce(topic, value=record.value, key=record.key, partition=record.partition, **kwargs)
            count += 1
        assert producer.flush(30) == 0
        return count

    def produce_input(self, records: Iterable[Record]) -> int:
        return self.produce(self.input_topic, records)

    def publish(self, records: Iterable[Record], name: str = "hand") -> None:
        """Write records to the output in one committed transaction, as the worker writes (key = messageId)."""
        producer = Producer(
            {"bootstrap.servers": self.kafka.bootstrap_servers, "transactional.id": f"{self.output_topic}-{name}"}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for record in records:
            kwargs = {} if record.timestamp_ms is None else {"timestamp": record.timestamp_ms}
            producer.produce(
                self.output_topic, value=record.value, key=record.key, partition=record.partition, **kwargs
            )
        producer.flush(30)
        producer.commit_transaction(30)

    def output_counts(self) -> Counter[bytes]:
        return count_ids(self.kafka, self.output_topic)

    # -- the jobs, in the shared session -------------------------------------------------------------

    def audit(self, spark, **fields) -> AuditReport:
        request = AuditRequest(
            input=fields.pop("input", TopicSource(self.input_topic)),
            output=fields.pop("output", TopicSource(self.output_topic)),
            kafka=self.kafka,
            **fields,
        )
        return run_audit(spark, request)

    def replay(self, spark, **fields) -> ReplayReport:
        request = ReplayRequest(
            kafka=self.kafka, input_topic=self.input_topic, output_topic=self.output_topic, **fields
        )
        return run_replay(spark, request)

    def cli_args(self, command: str, *extra: str) -> list[str]:
        return [command, "-b", self.kafka.bootstrap_servers, "-i", self.input_topic, "-o", self.output_topic, *extra]


def only(report, partition: int):
    (found,) = [p for p in report.partitions if p.partition == partition]
    return found


def samples(report: AuditReport, kind: str) -> set[bytes]:
    return {sample.id for sample in report.samples if sample.kind == kind}


def run_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str, exit_code: int = 2) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def ids_of(records: Sequence[Record]) -> set[bytes]:
    return {json.loads(r.value)["messageId"].encode() for r in records}

"""Helpers for the repartition tests: a producer that keeps sending (new ids, immediate retries, late retries,
unusable records) with librdkafka's default partitioner and a short metadata refresh, and workers of either
layout in threads."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from spark_support import Pipeline

from dedupectl.config import WorkerConfig, resolve_worker_config
from dedupectl.spark.repartition import BuildRequest, run_build
from dedupectl.verify import count_ids
from dedupectl.worker import RunSummary, Worker


def value(message_id: str) -> bytes:
    return json.dumps({"messageId": message_id, "type": "track", "event": "Order Completed"}).encode()


@dataclass
class KeepsSending:
    """Sends until stopped: each new id once, a tenth of them again right after (an immediate retry), every
    twentieth an id sent long before (a late retry), and every fiftieth an unusable record (a dead letter).
    The producer refreshes its metadata every half second, so it finds added partitions within one."""

    pipeline: Pipeline
    rate_per_s: float = 400.0
    sent: list[str] = field(default_factory=list)
    unusable: list[bytes] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> KeepsSending:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def wait_for(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.sent) < count:
            assert time.monotonic() < deadline, f"the producer sent {len(self.sent)} ids, not {count}"
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.pipeline.kafka.bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": 5,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        chooser = random.Random(11)
        topic, number = self.pipeline.input_topic, 0
        while not self._stop.is_set():
            message_id = f"id-{number:07d}"
            producer.produce(topic, key=message_id.encode(), value=value(message_id))
            self.sent.append(message_id)
            if number % 10 == 3:
                producer.produce(topic, key=message_id.encode(), value=value(message_id))
            if number % 20 == 7 and number > 100:
                late = self.sent[chooser.randrange(len(self.sent) - 50)]
                producer.produce(topic, key=late.encode(), value=value(late))
            if number % 50 == 9:
                key = f"bad-{number}".encode()
                producer.produce(topic, key=key, value=b"{not json")
                self.unusable.append(key)
            number += 1
            producer.poll(0)
            time.sleep(1 / self.rate_per_s)
        assert producer.flush(30) == 0


def worker_config(pipeline: Pipeline, worker_id: str = "w1", **fields) -> WorkerConfig:
    return resolve_worker_config(
        env={},
        flags={
            "bootstrap_servers": pipeline.kafka.bootstrap_servers,
            "input_topic": pipeline.input_topic,
            "output_topic": pipeline.output_topic,
            "group_id": pipeline.group_id,
            "data_dir": pipeline.data_dir,
            "worker_id": worker_id,
            "session_timeout_ms": 6000,
            "transaction_timeout_ms": 10_000,
            "partitioner": "crc32",
            **fields,
        },
    )


class WorkerThread:
    """The real worker in a thread of this process, until ``stop`` (as SIGTERM stops it)."""

    def __init__(self, config: WorkerConfig) -> None:
        self._stop = threading.Event()
        self.summaries: list[RunSummary] = []
        self.errors: list[BaseException] = []
        worker = Worker(config)

        def run() -> None:
            try:
                self.summaries.append(worker.run(self._stop))
            except BaseException as error:
                self.errors.append(error)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> RunSummary:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the worker did not stop"
        assert not self.errors, self.errors
        return self.summaries[0]


def build(pipeline: Pipeline, spark, new_count: int, **fields):
    request = BuildRequest(
        kafka=pipeline.kafka,
        input_topic=pipeline.input_topic,
        output_topic=pipeline.output_topic,
        data_dir=pipeline.data_dir,
        new_count=new_count,
        **fields,
    )
    return run_build(spark, request)


def dead_letters(pipeline: Pipeline) -> Counter[bytes]:
    return count_ids(pipeline.kafka, f"{pipeline.input_topic}.dead-letter")


def wait_until_output_has(pipeline: Pipeline, ids: set[bytes], timeout_s: float = 180) -> Counter[bytes]:
    deadline = time.monotonic() + timeout_s
    while True:
        counts = pipeline.output_counts()
        if ids <= set(counts) or time.monotonic() > deadline:
            return counts
        time.sleep(1)


def data_dir_entries(path: Path) -> list[str]:
    return sorted(child.name for child in path.iterdir())


def spawn_worker(pipeline: Pipeline, log: Path, *extra: str, crashpoint: str | None = None) -> subprocess.Popen:
    """``dedupectl run`` as a real process (so it can be SIGKILLed), its output in ``log``; ``crashpoint``:
    where it SIGKILLs itself (``dedupectl.worker.crashpoint``)."""
    args = [
        sys.executable, "-m", "dedupectl.cli.app",
        *pipeline.cli_args("run", "--group-id", pipeline.group_id, "-d", str(pipeline.data_dir)),
        "--worker-id", "w1", "--partitioner", "crc32", "--log-level", "info", *extra,
    ]  # fmt: skip
    env = {**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000"}
    if crashpoint:
        env["DEDUPECTL_CRASHPOINT"] = crashpoint
    with open(log, "a") as handle:
        return subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT, text=True)


def wait_until_recovered(log: Path, worker: subprocess.Popen, partitions: int, timeout_s: float = 120) -> None:
    """Until the worker's log says every one of its ``partitions`` partitions recovered."""
    deadline = time.monotonic() + timeout_s
    while log.read_text().count(" recovered") < partitions:
        assert worker.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)

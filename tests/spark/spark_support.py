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
import uuid
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
from reconcile.recovery import catch_up
from reconcile.scan import OutputReader, scan_output
from store.dedup_store import DedupStore
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

    def worker_config(
        self, worker_id: str = "w1", data_dir: Path | None = None, max_keys: int | None = None
    ) -> WorkerConfig:
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
                "max_keys": max_keys,
            },
        )

    def run_worker(self, idle_s: float = 2.0, data_dir: Path | None = None, max_keys: int | None = None) -> RunSummary:
        """Run the real worker in this process until the input has been idle for ``idle_s`` (``max_keys``: its
        aging policy)."""
        config = self.worker_config(data_dir=data_dir, max_keys=max_keys)
        return Worker(config).run(threading.Event(), exit_on_idle_s=idle_s)

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
        # idempotent: a retried batch keeps its place in the order sent
        producer = Producer(
            {"bootstrap.servers": self.kafka.bootstrap_servers, "linger.ms": 5, "enable.idempotence": True}
        )
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


# -- scenarios shared by the local[2] tests and the standalone cluster's --------------------------------


def lost_and_extra(pipeline: Pipeline) -> Pipeline:
    """One partition: e0-e5 came in; the output lacks e3 and holds x1, which never came in."""
    records = [event(f"e{i}") for i in range(6)]
    pipeline.produce_input(records)
    pipeline.publish([r for r in records if r.key != b"e3"] + [Record(b"x1", b"{}")])
    return pipeline


def check_lost_and_extra_audit(report: dict) -> None:
    """``audit --json`` of ``lost_and_extra``: one loss, one extra, nothing else."""
    assert (report["exit_code"], report["violations"]) == (1, 2)
    (p0,) = report["partitions"]
    assert (p0["input_records"], p0["distinct_ids"], p0["losses"], p0["extras"]) == (6, 6, 1, 1)
    assert {(s["kind"], s["id"]) for s in report["samples"]} == {("loss", "e3"), ("extra", "x1")}


def commit_group_offsets(pipeline: Pipeline, offsets: dict[int, int]) -> None:
    """Commit the worker group's input offsets, as a worker that has consumed up to there leaves them."""
    consumer = Consumer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "group.id": pipeline.group_id})
    try:
        consumer.commit(
            offsets=[TopicPartition(pipeline.input_topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def worker_behind(pipeline: Pipeline) -> list[Record]:
    """One partition whose worker is still catching up, and lost e2; returns the input records.

    Offsets: e0-e5 0-5, a record without an id 6, e6-e9 7-10. The worker consumed offsets 0-4 (committed 5)
    and published them, but e2 is lost from the output. Then it went on: e5 is in its store, not yet in the
    output replay reads (the output was read a moment before the store, while the worker published e5).
    e6-e9 and the record without an id it has not reached."""
    records = [event(f"e{i}") for i in range(6)] + [Record(None, b"not json")]
    records += [event(f"e{i}") for i in range(6, 10)]
    pipeline.produce_input(records)
    pipeline.publish([event(i) for i in ("e0", "e1", "e3", "e4")])
    commit_group_offsets(pipeline, {0: 5})
    with DedupStore.open(pipeline.store_path(0), topic=pipeline.input_topic, partition=0) as store:
        store.record([b"e0", b"e1", b"e3", b"e4", b"e5"], [0] * 5)
    return records


def worker_behind_replay_args(pipeline: Pipeline) -> list[str]:
    return pipeline.cli_args("replay", "--group-id", pipeline.group_id, "-d", str(pipeline.data_dir), "--json")


def check_worker_behind_replay(pipeline: Pipeline, records: Sequence[Record], report: dict) -> None:
    """``replay --json`` of ``worker_behind``: e2 re-driven, the ids beyond the group's offset apart."""
    (p0,) = report["partitions"]
    assert (p0["committed_offset"], p0["not_yet_consumed"], p0["invalid_records"]) == (5, 5, 1)
    assert (p0["missing"], p0["held_by_store"], p0["replayed"]) == (1, 0, 1)
    assert [s["id"] for s in report["samples"]] == ["e2"]
    assert (report["not_yet_consumed"], report["invalid_records"]) == (5, 1)

    consumer = Consumer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "group.id": "check"})
    try:  # the one replayed record is e2, appended to the input with where it came from
        consumer.assign([TopicPartition(pipeline.input_topic, 0, len(records))])
        message = consumer.poll(15)
        assert message is not None and message.key() == b"e2"
        assert dict(message.headers())["dedupectl.replayed-from"] == f"{pipeline.input_topic}[0]@2".encode()
    finally:
        consumer.close()


def messy_output(pipeline: Pipeline) -> None:
    """One output partition as a rebuild finds it after incidents: 2,500 ids of three shapes in two
    transactions, two of them published twice (at keyed ranks 10 and 1500, 1400 and 1501), and one record
    without a key."""
    ids = []
    for i in range(2500):
        ids.append([f"ajs-{uuid.UUID(int=i * 7919).hex}", str(uuid.UUID(int=i * 104729 + 1)), f"raw-{i}"][i % 3])
    records = [Record(i.encode(), b"{}", timestamp_ms=BASE_MS + n * 10) for n, i in enumerate(ids)]
    pipeline.publish(records[:1500], name="a")
    pipeline.publish([records[10], records[1400], Record(None, b"{}"), *records[1500:]], name="b")


def check_messy_output_rebuild(report: dict) -> None:
    """``rebuild --json`` (or the report's fields) of ``messy_output``."""
    assert (report["ids"], report["duplicate_records"], report["unkeyed_records"]) == (2500, 2, 1)
    assert report["records_read"] == 2503 and report["state"]["next_seq"] == 2502  # every keyed record numbered
    assert not report["without_duplicates"]  # the latest copies found by a window over the ids


def store_contents(path: Path) -> tuple:
    """Everything the store answers: state, (seq, id) in order, and (seq, timestamp) of every id."""
    with DedupStore.open_secondary(path) as store:
        order = list(store.iter_by_seq())
        lookups = store.lookup_many([message_id for _, message_id in order])
        state = store.state
    return (state.next_seq, state.first_live_seq), order, lookups


def latest_copies(pipeline: Pipeline, partition: int = 0, first_live_seq: int = 0) -> tuple:
    """``store_contents`` of the store the worker would have had over the whole output partition: every keyed
    record numbered by its rank, each id under its latest copy's number; aged to ``first_live_seq``."""
    keyed = [
        (message_id, batch.timestamp_ms(index))
        for batch in scan_output(pipeline.kafka, pipeline.output_topic, partition, -1)
        for index, message_id in enumerate(batch.ids)
        if message_id
    ]
    latest = {message_id: seq for seq, (message_id, _) in enumerate(keyed)}
    order = sorted((seq, message_id) for message_id, seq in latest.items() if seq >= first_live_seq)
    return (len(keyed), first_live_seq), order, [(seq, keyed[seq][1]) for seq, _ in order]


def recovered_store(pipeline: Pipeline, folder: Path, partition: int = 0) -> Path:
    """The store the worker's recovery records from the whole output partition, at ``folder``/store."""
    recovered = folder / "store"
    with (
        DedupStore.open(recovered, topic=pipeline.input_topic, partition=partition) as store,
        OutputReader(pipeline.kafka) as reader,
    ):
        catch_up(store, reader, pipeline.output_topic, partition)
    return recovered

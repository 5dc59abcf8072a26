"""A snapshot taken while a real worker process writes: restored into a new data directory and brought up to
date by the worker's recovery, it equals the live store id for id, sequence for sequence."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics
from dedupectl.sample_events import SampleSpec, generate
from reconcile.recovery import catch_up
from reconcile.scan import OutputReader
from store.dedup_store import DedupStore
from store.layout import store_path
from store.worker_status import read_statuses


def produce(bootstrap: str, topic: str, records, chunk: int = 0, pause_s: float = 0.0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for index, record in enumerate(records, 1):
        producer.produce(topic, value=record.value, key=record.key)
        if chunk and index % chunk == 0:
            producer.flush(30)
            time.sleep(pause_s)
    assert producer.flush(30) == 0


def store_ids(path: Path) -> list[tuple[int, bytes]]:
    with DedupStore.open_secondary(path) as store:
        return list(store.iter_by_seq())


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def recorded_ids(path: Path) -> int:
    if not (path / "CURRENT").exists():
        return 0
    with DedupStore.open_secondary(path) as store:
        return store.state.next_seq - store.state.first_live_seq


def test_snapshot_while_worker_writes_restores_to_the_live_store(kafka_broker, unique_name, tmp_path):
    kafka = KafkaConfig(kafka_broker.bootstrap_servers)
    topic = unique_name("snap-live")
    output = f"{topic}-out"
    create_topics(kafka, [topic, output, f"{topic}.dead-letter"], 1)
    records = list(generate(SampleSpec(40_000, duplicate_ratio=0.05, seed=5)))
    distinct = len({r.key for r in records if r.kind == "new"})
    first, rest = records[:10_000], records[10_000:]
    data_dir, snapshots = tmp_path / "data", tmp_path / "snapshots"
    snapshots.mkdir()  # a destination must exist: a missing one is refused, never made on the data disk
    live_path = store_path(data_dir, topic, 0)

    produce(kafka.bootstrap_servers, topic, first)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dedupectl.cli.app",
            "run",
            "-b",
            kafka.bootstrap_servers,
            "-i",
            topic,
            "-o",
            output,
            "-d",
            str(data_dir),
            "--worker-id",
            "snapshotted",
            "--group-id",
            f"group-{topic}",
            "--batch-max-messages",
            "2000",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000"},
    )
    try:
        wait_until(lambda: recorded_ids(live_path) > 5_000, 60, "the worker to record the first wave")
        # the rest arrives in small chunks, so the worker is mid-stream when the snapshot is taken
        feeder = threading.Thread(target=produce, args=(kafka.bootstrap_servers, topic, rest, 1_000, 0.1))
        feeder.start()
        time.sleep(0.5)
        result = CliRunner().invoke(
            app, ["snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", str(snapshots), "--json"]
        )
        assert result.exit_code == 0, result.output
        (created,) = json.loads(result.stdout)
        feeder.join(60)
        assert "snapshotted" in created["taken_by"] and f"pid {worker.pid}" in created["taken_by"]
        assert 0 < created["id_count"] < distinct, "the snapshot should land mid-stream"
        leftovers = [name for name in (".snapshot-requests", ".snapshot-staging") if (data_dir / name).exists()]
        assert leftovers == [], "no empty request or staging folders left in the data directory"
        wait_until(lambda: recorded_ids(live_path) == distinct, 90, "the worker to record every id")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr[-2000:]
    assert not read_statuses(data_dir), "a cleanly stopped worker removes its status file"

    manifest = json.loads((snapshots / created["snapshot_id"] / "manifest.json").read_text())
    assert manifest["id_count"] == created["id_count"]
    assert manifest["output_offset"] > 0 and manifest["tool_version"]
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"])
    assert manifest["effective_window_s"] is not None

    restored_dir = tmp_path / "restored"
    result = CliRunner().invoke(
        app,
        ["snapshot", "restore", created["snapshot_id"], "--from", str(snapshots), "-d", str(restored_dir), "--json"],
    )
    assert result.exit_code == 0, result.output
    restored_path = store_path(restored_dir, topic, 0)
    with DedupStore.open_existing(restored_path) as store, OutputReader(kafka) as reader:
        assert store.state.next_seq - store.state.first_live_seq == created["id_count"]
        recovery = catch_up(store, reader, output, 0)  # what the worker does on assignment
    assert recovery.recorded == distinct - created["id_count"]

    live = store_ids(live_path)
    assert len(live) == distinct
    assert store_ids(restored_path) == live  # same ids, in the same sequence


def test_create_times_out_clearly_when_the_live_worker_does_not_answer(tmp_path):
    """A store held by a process whose worker does not serve snapshot requests (e.g. an older release)."""
    data_dir = tmp_path / "data"
    path = store_path(data_dir, "quiet", 0)
    status = data_dir / "worker-old.json"
    with DedupStore.open(path, topic="quiet", partition=0) as store:
        store.record([b"a"], [1], output_offset=1)
        status.write_text(
            json.dumps(
                {"pid": os.getpid(), "host": socket.gethostname(), "worker_id": "old", "input_topic": "quiet"}
                | {"partitions": [0], "updated_at": time.time()}
            )
        )
        result = CliRunner().invoke(app, ["snapshot", "create", "-d", str(data_dir), "-p", "0", "--wait", "1"])
    assert result.exit_code != 0
    assert "did not take the checkpoint of quiet[0] within 1s" in str(result.exception)
    assert not list((data_dir / ".snapshot-requests").glob("*.request")), "a withdrawn request is removed"
    assert not (data_dir / "snapshots").exists() or not any((data_dir / "snapshots").iterdir())

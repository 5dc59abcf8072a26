"""Exactly-once under SIGKILL: a worker killed over and over, at random moments and at chosen points of the
batch protocol, while input keeps arriving; afterwards every distinct valid id is in the output exactly
once and every invalid record is in the dead-letter topic exactly once."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from dedupectl.sample_events import SampleSpec, generate
from dedupectl.verify import check_output, count_ids

# CI runs these a second time on the previous Kafka line (scripts/test.sh)
pytestmark = pytest.mark.kafka_compat

CRASHPOINTS = ("after-produce", "after-commit", "after-record")


def feed(pipeline, records, stop: threading.Event, chunk: int = 2_000, pause_s: float = 0.6) -> None:
    """Produce ``records`` in chunks with pauses, so they arrive while a worker runs."""
    producer = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "enable.idempotence": True})
    for start in range(0, len(records), chunk):
        for record in records[start : start + chunk]:
            producer.produce(pipeline.input_topic, value=record.value, key=record.key)
        producer.flush(30)
        if stop.wait(pause_s):
            break
    assert producer.flush(30) == 0


def wait_until_serving(worker, status_file, timeout: float = 60.0) -> None:
    """Until this process has partitions (its status file names its pid), so a kill timer measures work, not
    start-up: on a loaded machine start-up alone can outlast a short random delay."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        try:
            status = json.loads(status_file.read_text())
            if status["pid"] == worker.pid and status["partitions"]:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)


def output_end_offsets(pipeline) -> int:
    consumer = Consumer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "group.id": "offsets-probe"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(pipeline.output_topic, p), timeout=10)[1]
            for p in range(pipeline.partitions)
        )
    finally:
        consumer.close()


@pytest.mark.slow
def test_sigkill_at_awkward_points_neither_duplicates_nor_loses(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=4)
    spec = SampleSpec(100_000, duplicate_ratio=0.06, invalid_ratio=0.002, seed=11)
    records = list(generate(spec))
    rng = random.Random(2026)
    data_dir = tmp_path / "data"
    cycles, progressed, self_killed = 24, 0, 0
    slice_size = -(-len(records) // cycles)
    for cycle in range(cycles):
        # each run gets fresh input, arriving while it starts and works: the kill always finds work in hand
        fresh = records[cycle * slice_size : (cycle + 1) * slice_size]
        feeder = threading.Thread(target=feed, args=(pipeline, fresh, threading.Event(), 500, 0.05))
        feeder.start()
        env = {}
        if cycle % 2:  # every other run kills itself at a chosen point of the batch protocol
            env["DEDUPECTL_CRASHPOINT"] = f"{rng.choice(CRASHPOINTS)}:{rng.randint(1, 4)}"
        before = output_end_offsets(pipeline)
        worker = pipeline.spawn_worker("crashy", data_dir, "--batch-max-messages", "300", env=env)
        wait_until_serving(worker, data_dir / "worker-crashy.json")
        try:
            worker.wait(timeout=rng.uniform(0.2, 1.5))
        except subprocess.TimeoutExpired:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
        else:
            self_killed += 1
        _, stderr = worker.communicate()
        feeder.join(timeout=60)
        assert not feeder.is_alive()
        assert worker.returncode == -signal.SIGKILL, f"worker exited {worker.returncode}: {stderr[-2000:]}"
        progressed += output_end_offsets(pipeline) > before

    final = pipeline.spawn_worker("crashy", data_dir, "--exit-on-idle", "5", "--json")
    _, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr[-2000:]

    expected = {record.key for record in records if record.kind == "new"}
    invalid = sum(record.kind not in ("new", "duplicate") for record in records)
    check = check_output(pipeline.kafka, pipeline.output_topic, expected)
    assert check.duplicated_ids == 0, check
    assert check.missing_ids == 0, check
    assert check.unexpected_ids == 0, check
    assert check.records == len(expected)
    assert sum(count_ids(pipeline.kafka, pipeline.dead_letter_topic).values()) == invalid
    # the kills really landed mid-stream: most runs published something before dying, some died by crashpoint
    assert progressed >= cycles // 2, f"only {progressed} of {cycles} runs published before being killed"
    assert self_killed >= 3

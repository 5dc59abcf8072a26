"""Zombie fencing: a worker stalled mid-stream (SIGSTOP) is replaced by another; when the stalled one wakes
up, whatever it had in flight is refused by the broker, and the output still holds every id once."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from test_worker_crash import feed, output_end_offsets
from waiting import wait_for

from dedupectl.sample_events import SampleSpec, generate
from dedupectl.verify import check_output

# CI runs these a second time on the previous Kafka line (scripts/test.sh)
pytestmark = pytest.mark.kafka_compat


@pytest.mark.slow
def test_stalled_worker_is_fenced_and_no_duplicate_reaches_the_output(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=2)
    records = list(generate(SampleSpec(30_000, duplicate_ratio=0.08, seed=3)))
    stop_feeding = threading.Event()
    feeder = threading.Thread(target=feed, args=(pipeline, records, stop_feeding, 1_000, 0.3), daemon=True)
    feeder.start()

    first = pipeline.spawn_worker("first", tmp_path / "first", "--batch-max-messages", "300")
    second = None
    try:
        wait_for(lambda: output_end_offsets(pipeline) > 2_000, 60, "the first worker to publish")
        first.send_signal(signal.SIGSTOP)  # stalled mid-stream, most likely inside an open transaction
        stalled_at = output_end_offsets(pipeline)
        second = pipeline.spawn_worker("second", tmp_path / "second", "--batch-max-messages", "300")
        # the second worker takes over once the group drops the first and its open transaction times out
        wait_for(lambda: output_end_offsets(pipeline) > stalled_at + 2_000, 90, "the second worker to take over")
        first.send_signal(signal.SIGCONT)  # the zombie wakes up with a batch in hand
        feeder.join(timeout=120)
        assert not feeder.is_alive()
        time.sleep(8)  # both live: the group splits the partitions between them
        for worker in (first, second):
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in (first, second):
            _, stderr = worker.communicate(timeout=60)
            # 0: stopped by SIGTERM after a clean commit; 2: refused as fenced — never a duplicate either way
            assert worker.returncode in (0, 2), stderr[-3000:]
    finally:
        stop_feeding.set()
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGCONT)
                worker.kill()
                worker.wait()

    drain = pipeline.spawn_worker("second", tmp_path / "second", "--exit-on-idle", "4")
    _, stderr = drain.communicate(timeout=180)
    assert drain.returncode == 0, stderr[-2000:]
    expected = {record.key for record in records if record.kind == "new"}
    check = check_output(pipeline.kafka, pipeline.output_topic, expected)
    assert check.exactly_once, check


def test_a_twin_with_the_same_worker_id_fences_the_first_out(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=1)
    records = list(generate(SampleSpec(2_000, duplicate_ratio=0.05, seed=9)))
    pipeline.produce((record.key, record.value) for record in records)
    first = pipeline.spawn_worker("twin", tmp_path / "a")
    try:
        wait_for(lambda: output_end_offsets(pipeline) > 0, 60, "the first worker to publish")
        second = pipeline.spawn_worker("twin", tmp_path / "b", "--exit-on-idle", "4")
        _, first_err = first.communicate(timeout=90)
        _, second_err = second.communicate(timeout=90)
    finally:
        for worker in (first,):
            if worker.poll() is None:
                worker.kill()
    lines = [line for line in first_err.splitlines() if line.startswith("error:")]
    assert first.returncode == 2, first_err[-2000:]
    assert lines and "fenced" in lines[-1] and "worker_id" in lines[-1], first_err[-2000:]
    assert second.returncode == 0, second_err[-2000:]
    expected = {record.key for record in records if record.kind == "new"}
    assert check_output(pipeline.kafka, pipeline.output_topic, expected).exactly_once

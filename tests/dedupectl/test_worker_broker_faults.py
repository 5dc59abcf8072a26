"""Transient broker faults are ridden out: a worker started while its broker is down waits for it, keeps its
process, and publishes every id exactly once when the broker comes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from conftest import Pipeline
from waiting import wait_for

from dedupectl.devbroker import LocalBroker
from dedupectl.kafka_clients import create_topics
from dedupectl.sample_events import SampleSpec, generate
from dedupectl.verify import check_output
from reconcile.kafka import KafkaConfig

pytestmark = pytest.mark.kafka_compat


@pytest.fixture
def own_broker(tmp_path: Path, broker_kafka_version: str):
    """A broker of this test's own, which the test may stop, kill and start again on its data."""
    broker = LocalBroker(tmp_path / "broker", heap_mb=384, kafka_version=broker_kafka_version)
    try:
        yield broker
    finally:
        broker.stop()


def _pipeline(broker: LocalBroker, root: Path, partitions: int = 2) -> Pipeline:
    kafka = KafkaConfig(broker.start())
    create_topics(kafka, ["events", "events.dead-letter", "events-out"], partitions)
    return Pipeline(kafka, "events", "events-out", "events.dead-letter", partitions, root)


def _all_published(pipeline: Pipeline, expected: set[bytes]) -> bool:
    time.sleep(1)  # a full read of the output per poll
    return check_output(pipeline.kafka, pipeline.output_topic, expected).missing_ids == 0


def _wait_or_show(worker, condition, timeout_s: float, what: str) -> None:
    """``wait_for``, failing with the worker's log: what it retried, and what it met."""
    try:
        wait_for(condition, timeout_s, what)
    except AssertionError:
        worker.kill()
        raise AssertionError(
            f"timed out waiting for {what}; the worker's log:\n{worker.communicate()[1][-5000:]}"
        ) from None


def _stop(worker) -> tuple[int, str]:
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=120)
    return worker.returncode, stderr


@pytest.mark.slow
def test_a_worker_started_before_its_broker_waits_for_it(own_broker: LocalBroker, tmp_path: Path) -> None:
    pipeline = _pipeline(own_broker, tmp_path)
    records = list(generate(SampleSpec(5_000, duplicate_ratio=0.1, seed=21)))
    pipeline.produce((record.key, record.value) for record in records)
    own_broker.stop()

    worker = pipeline.spawn_worker("early", tmp_path / "data", "--broker-retry-for", "3m")
    try:
        time.sleep(20)
        assert worker.poll() is None, worker.communicate()[1][-2000:]
        own_broker.start()
        expected = {record.key for record in records if record.kind == "new"}
        _wait_or_show(worker, lambda: _all_published(pipeline, expected), 180, "the worker to publish")
        code, stderr = _stop(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert code == 0, stderr[-3000:]
    assert "retrying in" in stderr, "each retry is logged"
    assert check_output(pipeline.kafka, pipeline.output_topic, expected).exactly_once

"""Recovery waits for a transaction left open on the output: a former owner's batch that commits after the
worker took the partition over must be in the store before the worker publishes, or its ids go out twice."""

from __future__ import annotations

import logging
import threading

import pytest
from confluent_kafka import Producer

from dedupectl.verify import check_output

pytestmark = pytest.mark.kafka_compat

COMMIT_AFTER_S = 4.0


def _open_transaction(pipeline, ids: list[bytes]) -> Producer:
    """A former owner's batch of ``ids``, produced to output partition 0 in a transaction left open."""
    producer = Producer(
        {
            "bootstrap.servers": pipeline.kafka.bootstrap_servers,
            "transactional.id": f"former-owner-{pipeline.input_topic}",
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for message_id in ids:
        producer.produce(pipeline.output_topic, value=b'{"former": true}', key=message_id, partition=0)
    assert producer.flush(30) == 0
    return producer


def test_recovery_waits_for_an_open_transaction_on_the_output(make_pipeline, caplog) -> None:
    pipeline = make_pipeline(partitions=1)
    former = [f"former-{i}".encode() for i in range(20)]
    fresh = [f"fresh-{i}".encode() for i in range(30)]
    zombie = _open_transaction(pipeline, former)
    # late retries of the former owner's ids, then new ones: the worker must drop every retry
    pipeline.produce((message_id, b'{"event": 1}') for message_id in [*former, *fresh])
    committer = threading.Timer(COMMIT_AFTER_S, lambda: zombie.commit_transaction(30))
    committer.start()
    try:
        with caplog.at_level(logging.INFO, logger="dedupectl.worker"):
            summary = pipeline.run_worker(idle_s=3.0)
    finally:
        committer.join()
        zombie.close()
    check = check_output(pipeline.kafka, pipeline.output_topic, [*former, *fresh])
    assert check.exactly_once, check
    assert summary.duplicates == len(former), "every retry of the former owner's ids was dropped"
    assert summary.published == len(fresh)
    assert "waiting for an open transaction on the output to end" in caplog.text

"""Kafka client helpers against the real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics, flush_at_exit


def test_a_fenced_producer_flushes_at_exit_without_raising_its_fatal_error_again(kafka_broker, unique_name):
    kafka = KafkaConfig(kafka_broker.bootstrap_servers)
    topic = unique_name("fenced")
    create_topics(kafka, [topic], 1)
    settings = {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": unique_name("txn")}
    zombie = Producer(settings)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"in flight")
    successor = Producer(settings)
    successor.init_transactions(30)  # bumps the epoch: the zombie is fenced
    with pytest.raises(KafkaException) as commit:
        zombie.commit_transaction(30)
    assert commit.value.args[0].fatal()
    # the worker's shutdown path: what librdkafka raises here would mask the FencedError being reported
    assert flush_at_exit(zombie, 5) >= 0
    successor.flush(5)

"""Fixtures for reconcile tests (helpers live in reconcile_support.py)."""

from __future__ import annotations

import pytest
from reconcile_support import Pipeline

from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics


@pytest.fixture
def make_pipeline(kafka_broker, unique_name, tmp_path):
    """``make_pipeline(partitions=1)`` -> a Pipeline with fresh input, output and dead-letter topics."""

    def make(partitions: int = 1) -> Pipeline:
        kafka = KafkaConfig(kafka_broker.bootstrap_servers)
        name = unique_name("rec")
        create_topics(kafka, [name, f"{name}-out", f"{name}.dead-letter"], partitions)
        return Pipeline(kafka, name, f"{name}-out", partitions, tmp_path)

    return make

"""Fixtures for worker tests: a fresh set of topics on the shared broker (``pipeline_support.Pipeline``)."""

from __future__ import annotations

import pytest
from pipeline_support import Pipeline

from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics


@pytest.fixture
def make_pipeline(kafka_broker, unique_name, tmp_path):
    """``make_pipeline(partitions=4)`` -> a Pipeline with fresh input, output and dead-letter topics."""

    def make(partitions: int = 4, output_partitions: int | None = None) -> Pipeline:
        kafka = KafkaConfig(kafka_broker.bootstrap_servers)
        name = unique_name("events")
        create_topics(kafka, [name, f"{name}.dead-letter"], partitions)
        create_topics(kafka, [f"{name}-out"], output_partitions or partitions)
        return Pipeline(kafka, name, f"{name}-out", f"{name}.dead-letter", partitions, tmp_path)

    return make

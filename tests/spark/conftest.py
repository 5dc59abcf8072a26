"""Fixtures for the Spark job tests: one local[2] SparkSession for the whole session, and fresh pipelines.

Starting Spark costs a JVM and ~10-30 s on a shared machine, so every test shares the one session (the
jobs' own ``spark_session`` reuses an active session instead of starting another). It is started with the
project's own set-up (dedupectl.spark.session): the Kafka connector jars from the project's cache, Spark's
logs in a file, not on the console.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from spark_support import Pipeline

from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics
from dedupectl.spark import session as spark_setup


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    """A local[2] SparkSession with the Kafka connector, quiet, stopped at the end of the test session."""
    # test data is tiny: fewer shuffle partitions spare ~100 near-empty tasks per job
    conf = {"spark.sql.shuffle.partitions": "4"}
    settings = spark_setup.SparkSettings(master="local[2]", conf=conf, app_name="dedupectl-tests")
    jars = spark_setup.preflight(settings)
    with spark_setup.spark_session(settings, jars) as (spark, _info):
        yield spark


@pytest.fixture
def make_pipeline(kafka_broker, unique_name, tmp_path):
    """``make_pipeline(partitions=2)`` -> a Pipeline with fresh input, output and dead-letter topics."""

    def make(partitions: int = 2) -> Pipeline:
        kafka = KafkaConfig(kafka_broker.bootstrap_servers)
        name = unique_name("spark")
        create_topics(kafka, [name, f"{name}-out", f"{name}.dead-letter"], partitions)
        return Pipeline(kafka, name, f"{name}-out", partitions, tmp_path)

    return make

"""Fixtures shared by every test package.

Fixtures that start real servers live here, one per server, session-scoped: starting a server costs
seconds and the machine has two cores, so each runs once per test session and tests isolate themselves by
unique names (topics, groups, transactional ids) rather than by fresh servers.

The Kafka release the brokers run is the pom's default unless the run asks for another with
``--kafka-version`` (or ``DEDUPECTL_TEST_KAFKA_VERSION``); scripts/test.sh runs the tests marked
``kafka_compat`` a second time that way, on the previous Kafka line.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable, Iterator

import pytest
from spark_standalone import StandaloneCluster

from dedupectl.devbroker import LocalBroker
from dedupectl.kafka_jars import kafka_version, resolve_kafka_version

TEST_VERSION_ENV = "DEDUPECTL_TEST_KAFKA_VERSION"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kafka-version",
        default=os.environ.get(TEST_VERSION_ENV) or None,
        help=f"Kafka release of the test brokers (default: ${TEST_VERSION_ENV}, else tools/kafka/pom.xml's)",
    )


def pytest_report_header(config: pytest.Config) -> str:
    return f"kafka broker: {config.getoption('--kafka-version') or kafka_version()}"


@pytest.fixture(scope="session")
def broker_kafka_version(request: pytest.FixtureRequest) -> str:
    """The Kafka release every broker of this run starts (never the developer's ``DEDUPECTL_DEV_KAFKA_VERSION``)."""
    return resolve_kafka_version(request.config.getoption("--kafka-version") or kafka_version())


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory, broker_kafka_version: str) -> Iterator[LocalBroker]:
    """A real single-node Kafka broker (KRaft) on 127.0.0.1; use ``kafka_broker.bootstrap_servers``.

    Topics are not auto-created: create each one a test needs, with a name from ``unique_name``.
    """
    broker = LocalBroker(tmp_path_factory.mktemp("kafka-broker"), kafka_version=broker_kafka_version)
    broker.start()  # on failure start() stops what it spawned and raises with the broker's log tail
    try:
        yield broker
    finally:  # also after failures and Ctrl-C: the broker runs in its own session and would outlive pytest
        broker.stop()


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """``unique_name("orders")`` -> ``"orders-1a2b3c4d"``: names that no other test (or rerun) shares."""

    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(scope="session")
def moto_endpoint_url() -> Iterator[str]:
    """A local moto server (S3, EC2/EBS, …) on 127.0.0.1 for the whole session; yields its endpoint URL.

    It holds no credentials of its own: tests that call it set dummy AWS credentials in their environment
    (monkeypatch), and isolate themselves by unique bucket names and fresh volumes/instances.
    """
    import logging
    import socket

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per AWS call is noise
    with socket.socket() as probe:  # a free port; the server binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Spark standalone cluster on 127.0.0.1 from pyspark's own distribution: a master and one worker
    (2 cores, 1 GiB for executors) with a plain node's environment; ``spark_cluster.master_url``."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield cluster
    finally:  # the daemons run in their own sessions and would outlive pytest
        cluster.stop()


@pytest.fixture(scope="session")
def secure_kafka_broker(tmp_path_factory: pytest.TempPathFactory, broker_kafka_version: str) -> Iterator[LocalBroker]:
    """A secured single-node broker (``LocalBroker(secure=True)``): SASL_SSL with SCRAM-SHA-512 users and an mTLS
    listener, TLS from a CA made for the session, and an authorizer that denies what no ACL allows.

    Started only by the tests that ask for it. ``secure_kafka_broker.client_settings()`` connects as its super
    user; ``tests/secure_kafka.py`` makes least-privilege users and their ACLs.
    """
    broker = LocalBroker(tmp_path_factory.mktemp("kafka-secure"), kafka_version=broker_kafka_version, secure=True)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def generations_of(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """``generations_of(n)``: the stores this process opens start a new generation every ``n`` sequence
    numbers, so a test of a few thousand ids sees several (production's are the id filter's stretch, at least
    65,536 numbers)."""
    from store.dedup_store import DedupStore

    def set_numbers(numbers: int) -> None:
        monkeypatch.setattr(DedupStore, "generation_ids", lambda self: numbers)

    return set_numbers


@pytest.fixture
def short_generations(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], int]:
    """``window_for(n)``: the ``window_ids`` that gives a store generations (and id filter stretches) of about
    ``n`` numbers, the floors that keep them long in production lifted for the test."""
    from store import dedup_store, generations
    from store.id_filter import GROUPS

    monkeypatch.setattr(dedup_store, "MIN_FILTER_WINDOW", 1)
    monkeypatch.setattr(generations, "MIN_GENERATION_IDS", 1)

    def window_for(numbers: int) -> int:
        return math.floor(numbers * (GROUPS - 1) / dedup_store.FILTER_SLACK)

    return window_for

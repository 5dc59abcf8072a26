"""The partition check against a real broker: records a producer put in another partition than the topic's
partitioner gives their key are counted (``dedupectl_misrouted_records_total``), published as usual or, with
``--misrouted dead-letter``, dead letters with reason ``misrouted`` (exactly once, in the batch's
transaction); records without a key are counted as unkeyed; ``--partitioner any`` checks nothing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from collections import Counter

from confluent_kafka import Producer
from test_worker_dedup import read_all

from dedupectl.partitioner import murmur2_partition
from dedupectl.worker import Worker
from dedupectl.worker.routing import AUTO_SETTLE_RECORDS

PARTITIONS = 4
MISROUTED = [f"moved-{n}".encode() for n in range(6)]
COPIED = MISROUTED[:3]  # also sent, in their own partition, by a producer that hashes as the topic does


def wrong_partition(key: bytes) -> int:
    return (murmur2_partition(key, PARTITIONS) + 1) % PARTITIONS


def value(key: bytes | None, n: int) -> bytes:
    return json.dumps({"messageId": (key or b"").decode() or f"unkeyed-{n}", "n": n}).encode()


def produce_mixed(pipeline, right: int) -> None:
    """``right`` keyed records in their murmur2 partition (a Java-like producer), the misrouted ones, copies of
    some of them where they belong, and three records without a key."""
    producer = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "partitioner": "murmur2_random"})
    for n in range(right):
        key = f"ok-{n}".encode()
        producer.produce(pipeline.input_topic, value(key, n), key)
    for n, key in enumerate(MISROUTED):
        producer.produce(pipeline.input_topic, value(key, 1000 + n), key, partition=wrong_partition(key))
    for n, key in enumerate(COPIED):
        producer.produce(pipeline.input_topic, value(key, 2000 + n), key)
    for n in range(3):
        producer.produce(pipeline.input_topic, value(None, 3000 + n), None, partition=n)
    assert producer.flush(30) == 0


def misrouted_by_partition() -> Counter:
    return Counter(wrong_partition(key) for key in MISROUTED)


def test_auto_settles_on_murmur2_and_counts_what_is_elsewhere(make_pipeline, caplog):
    pipeline = make_pipeline(partitions=PARTITIONS)
    right = AUTO_SETTLE_RECORDS + 200
    produce_mixed(pipeline, right)
    caplog.set_level(logging.INFO, logger="dedupectl.worker")
    worker = Worker(pipeline.config())  # the defaults: --partitioner auto --misrouted publish
    summary = worker.run(threading.Event(), exit_on_idle_s=2.0)
    assert (summary.misrouted, summary.unkeyed, summary.dead_letters) == (len(MISROUTED), 3, 0)
    registry = worker.metrics.registry
    for partition in range(PARTITIONS):
        labels = {"partition": str(partition)}
        assert (
            registry.get_sample_value("dedupectl_misrouted_records_total", labels)
            == (misrouted_by_partition()[partition])
        )
        assert registry.get_sample_value("dedupectl_unkeyed_records_total", labels) == (1 if partition < 3 else 0)
    settled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("partitioner:")]
    assert len(settled) == 1 and "checked against murmur2" in settled[0]
    logged = [r.getMessage() for r in caplog.records if "but murmur2 puts it in partition" in r.getMessage()]
    assert len(logged) == len(MISROUTED)
    key = MISROUTED[0]
    assert any(
        f"key '{key.decode()}' is in partition {wrong_partition(key)}, but murmur2 puts it in partition "
        f"{murmur2_partition(key, PARTITIONS)}" in line
        for line in logged
    )
    # published as usual: the copies in the two partitions are never compared, so both go out
    output = Counter(message.key() for message in read_all(pipeline, pipeline.output_topic))
    assert all(output[key] == (2 if key in COPIED else 1) for key in MISROUTED)
    assert sum(output.values()) == right + len(MISROUTED) + len(COPIED) + 3


def test_dead_letter_sends_misrouted_records_to_the_dead_letter_topic_exactly_once(make_pipeline):
    pipeline = make_pipeline(partitions=PARTITIONS)
    produce_mixed(pipeline, 40)
    run = pipeline.cli_args(
        "w1", pipeline.root / "data", "--partitioner", "murmur2", "--misrouted", "dead-letter",
        "--batch-max-messages", "7", "--exit-on-idle", "2", "--json",
    )  # fmt: skip
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["misrouted"], summary["dead_letters"], summary["unkeyed"]) == (len(MISROUTED), len(MISROUTED), 3)
    assert summary["published"] == 40 + len(COPIED) + 3
    dead = read_all(pipeline, pipeline.dead_letter_topic)
    assert sorted(message.key() for message in dead) == sorted(MISROUTED)  # each once
    for message in dead:
        headers = dict(message.headers())
        key = message.key()
        assert headers["dedupectl.reason"] == b"misrouted"
        assert headers["dedupectl.detail"].decode() == (
            f"in partition {wrong_partition(key)}, but murmur2 puts its key in partition "
            f"{murmur2_partition(key, PARTITIONS)}"
        )
        assert headers["dedupectl.source.partition"] == str(wrong_partition(key)).encode()
    output = read_all(pipeline, pipeline.output_topic)
    published = Counter(message.key() for message in output)
    assert all(published[key] == (1 if key in COPIED else 0) for key in MISROUTED)
    assert all(m.partition() == murmur2_partition(m.key(), PARTITIONS) for m in output if m.key() in COPIED)
    # a second run reads from the committed offsets: nothing is dead-lettered or published again
    again = subprocess.run(run, capture_output=True, text=True, timeout=120, env=_env())
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["consumed"] == 0
    assert len(read_all(pipeline, pipeline.dead_letter_topic)) == len(MISROUTED)
    assert len(read_all(pipeline, pipeline.output_topic)) == len(output)


def test_any_checks_nothing(make_pipeline):
    pipeline = make_pipeline(partitions=PARTITIONS)
    produce_mixed(pipeline, 40)
    worker = Worker(pipeline.config(partitioner="any", misrouted="dead-letter"))
    summary = worker.run(threading.Event(), exit_on_idle_s=2.0)
    assert (summary.misrouted, summary.unkeyed, summary.dead_letters) == (0, 0, 0)
    assert summary.published == 40 + len(MISROUTED) + len(COPIED) + 3
    registry = worker.metrics.registry
    for partition in range(PARTITIONS):
        assert registry.get_sample_value("dedupectl_misrouted_records_total", {"partition": str(partition)}) is None


def _env() -> dict[str, str]:
    return {**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000"}

"""The worker against a real broker: repeats dropped (first wins) within a batch, across batches and
across restarts; dead letters kept with their reasons; output partition = input partition."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, TopicPartition

from dedupectl.worker import Worker

# CI runs these a second time on the previous Kafka line (scripts/test.sh)
pytestmark = pytest.mark.kafka_compat


def event(message_id: str, n: int) -> bytes:
    return json.dumps({"messageId": message_id, "n": n}).encode()


def read_all(pipeline, topic: str) -> list:
    """Every committed record of ``topic``, as confluent Message objects, partition by partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": pipeline.kafka.bootstrap_servers,
            "group.id": "test-reader",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    records = []
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: set[int] = set()
    while len(at_end) < partitions:
        for message in consumer.consume(1000, 1.0):
            if message.error():
                at_end.add(message.partition())
            else:
                records.append(message)
    consumer.close()
    return records


def numbers_by_id(records) -> dict[bytes, list[int]]:
    found: dict[bytes, list[int]] = {}
    for message in records:
        found.setdefault(message.key(), []).append(json.loads(message.value())["n"])
    return found


def test_repeats_within_a_batch_are_dropped_first_wins(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    ids = ["a", "b", "a", "c", "a", "b"]
    pipeline.produce((i.encode(), event(i, n)) for n, i in enumerate(ids))
    summary = pipeline.run_worker()
    assert (summary.consumed, summary.published, summary.duplicates) == (6, 3, 3)
    assert summary.commits >= 1
    assert numbers_by_id(read_all(pipeline, pipeline.output_topic)) == {b"a": [0], b"b": [1], b"c": [3]}


def test_repeats_across_batches_are_dropped(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    ids = [f"id-{n % 7}" for n in range(40)]
    pipeline.produce((i.encode(), event(i, n)) for n, i in enumerate(ids))
    summary = pipeline.run_worker(pipeline.config(batch_max_messages=3))
    assert summary.batches >= 10
    assert (summary.published, summary.duplicates) == (7, 33)
    assert numbers_by_id(read_all(pipeline, pipeline.output_topic)) == {f"id-{n}".encode(): [n] for n in range(7)}


def test_a_repeat_in_the_batch_after_its_first_is_dropped_while_that_one_commits(make_pipeline):
    # one record per batch: each repeat is planned while the batch holding its first occurrence commits, before
    # that batch is in the store
    pipeline = make_pipeline(partitions=1)
    ids = ["a", "a", "b", "b", "a", "c", "b", "c"]
    pipeline.produce((i.encode(), event(i, n)) for n, i in enumerate(ids))
    summary = pipeline.run_worker(pipeline.config(batch_max_messages=1))
    assert summary.batches == summary.commits == 8
    assert (summary.consumed, summary.published, summary.duplicates) == (8, 3, 5)
    assert numbers_by_id(read_all(pipeline, pipeline.output_topic)) == {b"a": [0], b"b": [2], b"c": [5]}


def test_repeats_across_restarts_are_dropped(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    pipeline.produce([(b"a", event("a", 0)), (b"b", event("b", 1))])
    assert pipeline.run_worker().published == 2
    pipeline.produce([(b"a", event("a", 2)), (b"c", event("c", 3)), (b"b", event("b", 4))])
    second = pipeline.run_worker()
    assert (second.consumed, second.published, second.duplicates) == (3, 1, 2)
    assert numbers_by_id(read_all(pipeline, pipeline.output_topic)) == {b"a": [0], b"b": [1], b"c": [3]}


def test_output_goes_to_the_same_partition_keyed_by_id(make_pipeline):
    pipeline = make_pipeline(partitions=3)
    for partition in range(3):
        pipeline.produce([(None, event(f"p{partition}", partition))], partition=partition)
    pipeline.run_worker()
    records = read_all(pipeline, pipeline.output_topic)
    assert sorted((m.partition(), m.key()) for m in records) == [(0, b"p0"), (1, b"p1"), (2, b"p2")]


def test_dead_letters_keep_the_record_and_say_why(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    records = [
        (None, b'{"type": "track"}'),
        (None, b'{"messageId": ""}'),
        (b"k1", b"{not json"),
        (b"good", event("good", 0)),
    ]
    pipeline.produce(records)
    summary = pipeline.run_worker()
    assert (summary.consumed, summary.published, summary.dead_letters) == (4, 1, 3)
    dead = read_all(pipeline, pipeline.dead_letter_topic)
    reasons = {}
    for message in dead:
        headers = dict(message.headers())
        reasons[message.value()] = headers["dedupectl.reason"].decode()
        assert headers["dedupectl.source.topic"].decode() == pipeline.input_topic
        assert headers["dedupectl.source.partition"] == b"0"
        assert int(headers["dedupectl.source.offset"]) in range(3)
        assert headers["dedupectl.detail"]
    assert reasons == {
        b'{"type": "track"}': "missing-id",
        b'{"messageId": ""}': "empty-id",
        b"{not json": "unparseable-value",
    }
    assert [m.key() for m in read_all(pipeline, pipeline.output_topic)] == [b"good"]


def test_metrics_are_served_per_partition(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce([(b"a", event("a", 0)), (b"a", event("a", 1)), (None, b"nope")])
    worker = Worker(pipeline.config())
    port = worker.metrics.serve(0, "127.0.0.1")
    import threading

    worker.run(threading.Event(), exit_on_idle_s=2)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'dedupectl_messages_consumed_total{partition="0"} 3.0' in text
    assert 'dedupectl_messages_published_total{partition="0"} 1.0' in text
    assert 'dedupectl_duplicates_dropped_total{partition="0"} 1.0' in text
    assert 'dedupectl_dead_letters_total{partition="0"} 1.0' in text
    assert 'dedupectl_store_keys{partition="0"} 1.0' in text
    assert 'dedupectl_transactions_total{outcome="committed"}' in text
    assert "dedupectl_batch_seconds_bucket" in text


def test_on_call_metrics_are_served(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce((f"id-{n}".encode(), event(f"id-{n}", n)) for n in range(100))
    worker = Worker(pipeline.config())
    port = worker.metrics.serve(0, "127.0.0.1")
    started = time.time()
    worker.run(threading.Event(), exit_on_idle_s=6)  # outlasts a maintenance round, which measures lag and disk
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    def value(series: str) -> float:
        found = re.search("^" + re.escape(series) + r" (\S+)$", text, re.MULTILINE)
        assert found, f"{series} is not served"
        return float(found[1])

    assert value('dedupectl_consumer_lag{partition="0"}') == 0
    assert value("dedupectl_last_commit_timestamp_seconds") >= started
    assert value("dedupectl_end_to_end_latency_seconds_count") >= 1
    assert value('dedupectl_store_bytes{partition="0"}') > 0
    assert 0 < value("dedupectl_data_dir_free_bytes") <= value("dedupectl_data_dir_size_bytes")
    assert value('dedupectl_recovery_seconds{partition="0"}') >= 0
    assert re.search(r'^dedupectl_build_info\{librdkafka="[^"]+",python="[^"]+",version="[^"]+"\} 1\.0$', text, re.M)


def test_worker_ages_its_store_to_the_size_bound(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce((f"id-{n}".encode(), event(f"id-{n}", n)) for n in range(300))
    worker = Worker(pipeline.config(max_keys=50, batch_max_messages=100))
    port = worker.metrics.serve(0, "127.0.0.1")
    import threading

    worker.run(threading.Event(), exit_on_idle_s=2)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'dedupectl_aged_ids_total{partition="0"} 250.0' in text
    assert 'dedupectl_store_keys{partition="0"} 50.0' in text
    assert 'dedupectl_effective_window_seconds{partition="0"}' in text
    # the id filter is sized for the bound (at least its minimum window), and reported
    filter_bytes = float(re.search(r'dedupectl_id_filter_bytes\{partition="0"\} (\S+)', text)[1])
    assert filter_bytes > 0
    # an id aged out of the window is new again; one still inside it is a repeat
    pipeline.produce([(b"id-0", event("id-0", 1000)), (b"id-299", event("id-299", 1001))])
    again = pipeline.run_worker(pipeline.config(max_keys=50))
    assert (again.published, again.duplicates) == (1, 1)
    assert numbers_by_id(read_all(pipeline, pipeline.output_topic))[b"id-0"] == [0, 1000]

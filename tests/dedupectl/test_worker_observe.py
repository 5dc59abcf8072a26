"""``dedupectl run --observe`` against a real broker: it decides as a worker would, against a store and group
of its own, publishes nothing (no output, no dead letter), commits its own group's input offsets, and
reports what it would have published and dropped, the dropped copies to the duplicates topic if set; the
worker that follows it decides the same."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, TopicPartition
from test_worker_dedup import read_all
from test_worker_duplicates import assert_copies_exactly_once, keyed, with_duplicates_topic

from dedupectl.config import resolve_worker_config
from dedupectl.errors import ConfigError
from dedupectl.worker import Worker


def committed_offsets(pipeline, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "group.id": group})
    try:
        wanted = [TopicPartition(pipeline.input_topic, p) for p in range(pipeline.partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=10)}
    finally:
        consumer.close()


def test_an_observer_decides_as_a_worker_and_publishes_nothing(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    topic = with_duplicates_topic(pipeline)
    pipeline.produce(keyed(["a", "b", "a", "c"]), partition=0)
    pipeline.produce([*keyed(["p", "p"], start=10), (None, b"{not json")], partition=1)
    observer = pipeline.config(observe=True, duplicates_topic=topic)
    assert observer.group_id == f"group-{pipeline.input_topic}.observe"
    assert observer.data_dir == (pipeline.root / "data-w1.observe").absolute()

    observed = pipeline.run_worker(observer)
    assert (observed.published, observed.duplicates, observed.dead_letters) == (4, 2, 1)
    assert observed.duplicates_produced == 2 and observed.recovered == 0
    assert read_all(pipeline, pipeline.output_topic) == [] and read_all(pipeline, pipeline.dead_letter_topic) == []
    assert committed_offsets(pipeline, observer.group_id) == {0: 4, 1: 3}
    assert committed_offsets(pipeline, f"group-{pipeline.input_topic}") == {0: -1001, 1: -1001}
    assert not (pipeline.root / "data-w1").exists(), "the observer wrote into the worker's data directory"
    assert len(assert_copies_exactly_once(pipeline, topic, observed=True)) == 2

    # a second run keeps deciding against what it recorded: an old repeat is dropped, a new id counted
    pipeline.produce(keyed(["a", "d"], start=20), partition=0)
    again = pipeline.run_worker(observer)
    assert (again.published, again.duplicates, again.duplicates_produced) == (1, 1, 1)
    assert read_all(pipeline, pipeline.output_topic) == []

    # the worker, in its own group and data directory, publishes what the observer said it would
    worker = pipeline.run_worker(pipeline.config())
    assert (worker.published, worker.duplicates, worker.dead_letters) == (5, 3, 1)
    assert sorted(m.key() for m in read_all(pipeline, pipeline.output_topic)) == [b"a", b"b", b"c", b"d", b"p"]


def test_run_observe_needs_no_output_topic_and_says_it_observed(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce(keyed(["x", "x", "y"]))
    args = [
        sys.executable, "-m", "dedupectl.cli.app", "run", "--observe", "-b", pipeline.kafka.bootstrap_servers,
        "-t", pipeline.input_topic, "--group-id", "g", "-d", str(pipeline.root / "data"), "--worker-id", "w1",
        "--exit-on-idle", "2", "--json",
    ]  # fmt: skip
    env = {**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["observed"], summary["published"], summary["duplicates_dropped"]) == (True, 2, 1)
    assert (pipeline.root / "data.observe").is_dir() and not (pipeline.root / "data").exists()
    assert committed_offsets(pipeline, "g.observe") == {0: 3}
    assert read_all(pipeline, pipeline.output_topic) == []


def test_an_observer_derives_its_group_and_directory_from_the_workers():
    flags = {"bootstrap_servers": "b:9092", "input_topic": "events", "data_dir": "/var/lib/dedupectl"}
    observer = resolve_worker_config(env={}, flags={**flags, "observe": True})
    assert (observer.group_id, str(observer.data_dir), observer.output_topic) == (
        "dedupectl.events.observe",
        "/var/lib/dedupectl.observe",
        None,
    )
    assert observer.transactional_id_prefix == "dedupectl-dedupectl.events.observe-"


def test_a_worker_refuses_an_observers_directory_and_an_observer_a_workers(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce(keyed(["x"]))
    observer = pipeline.config(observe=True)
    pipeline.run_worker(observer, idle_s=1)
    misplaced = pipeline.config(data_dir=observer.data_dir)
    with pytest.raises(ConfigError, match="holds an observer's stores"):
        Worker(misplaced).run(threading.Event(), exit_on_idle_s=1)
    assert read_all(pipeline, pipeline.output_topic) == []

    worker = pipeline.config()
    pipeline.run_worker(worker, idle_s=1)
    observing_it = replace(observer, data_dir=worker.data_dir)
    with pytest.raises(ConfigError, match="holds a worker's stores"):
        Worker(observing_it).run(threading.Event(), exit_on_idle_s=1)
    assert not (worker.data_dir / "OBSERVER").exists()


@pytest.mark.parametrize("crashpoint", ["after-produce:2", "after-commit:2"])
def test_an_observer_killed_mid_batch_never_publishes_and_copies_stay_once(make_pipeline, crashpoint):
    pipeline = make_pipeline(partitions=2)
    topic = with_duplicates_topic(pipeline)
    rng = random.Random(3)
    pipeline.produce(keyed([f"id-{rng.randrange(300)}" for _ in range(900)]))
    data_dir = pipeline.root / "data"
    args = ("--observe", "--duplicates-topic", topic, "--batch-max-messages", "100")
    killed = pipeline.spawn_worker("w1", data_dir, *args, env={"DEDUPECTL_CRASHPOINT": crashpoint})
    _, stderr = killed.communicate(timeout=180)
    assert killed.returncode == -signal.SIGKILL, stderr[-2000:]
    final = pipeline.spawn_worker("w1", data_dir, *args, "--exit-on-idle", "3", "--json")
    stdout, stderr = final.communicate(timeout=180)
    assert final.returncode == 0, stderr[-2000:]
    assert json.loads(stdout)["observed"] is True

    assert read_all(pipeline, pipeline.output_topic) == [] and read_all(pipeline, pipeline.dead_letter_topic) == []
    headers = [dict(m.headers()) for m in read_all(pipeline, topic)]
    sources = Counter((h["dedupectl.source.partition"], h["dedupectl.source.offset"]) for h in headers)
    assert sources and max(sources.values()) == 1, "a copy produced twice"
    assert committed_offsets(pipeline, f"group-{pipeline.input_topic}.observe") == {
        p: end for p, end in input_ends(pipeline).items()
    }


def input_ends(pipeline) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "group.id": "ends-probe"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(pipeline.input_topic, p), timeout=10)[1]
            for p in range(pipeline.partitions)
        }
    finally:
        consumer.close()

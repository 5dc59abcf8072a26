"""``dedupectl trace`` on a real stream: a retried id, a dead-lettered one, one aged out of the store and one
not consumed yet, each traced in its partition (chosen by murmur2, as the producer did) on the project's
broker after a real worker ran over them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer
from pipeline_support import Pipeline

from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics
from dedupectl.partitioner import murmur2_partition
from dedupectl.trace import DEAD_LETTERED, DUPLICATE, NOT_CONSUMED, PUBLISHED, TraceRequest, trace_message
from reconcile.ranges import parse_bound
from reconcile.scan import OutputReader

PARTITIONS = 3
MAX_KEYS = 100
KEYLESS_PARTITION = 1
LONG_GONE = "long-gone-1"  # in the partition of "aged", the only one whose store ages ids out
NEVER_SENT = "never-sent-5"


@pytest.fixture(scope="module")
def stream(kafka_broker, tmp_path_factory):
    """One worker run over the four cases, then two records it never consumes; shared by the tests below."""
    kafka, name = KafkaConfig(kafka_broker.bootstrap_servers), f"trace-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [name, f"{name}-out", f"{name}.dead-letter"], PARTITIONS)
    pipeline = Pipeline(kafka, name, f"{name}-out", f"{name}.dead-letter", PARTITIONS, tmp_path_factory.mktemp("trace"))
    # idempotent: a retried batch keeps its place, and "aged" must come before the fillers that age it out
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "partitioner": "murmur2_random", "enable.idempotence": True}
    )

    sent = []

    def send(message_id: str, value: bytes | None = None) -> None:
        producer.produce(name, key=message_id, value=value or json.dumps({"messageId": message_id}).encode())
        sent.append(message_id)

    aged_partition = murmur2_partition(b"aged", PARTITIONS)
    # sent two hours ago: far older than the window, so the default range (the window) does not reach it
    producer.produce(name, key=LONG_GONE, value=b'{"x": 1}', timestamp=int(time.time() * 1000) - 2 * 3600_000)
    send("aged")
    fillers = (f"fill-{n}" for n in range(10_000))
    for filler in [f for f in fillers if murmur2_partition(f.encode(), PARTITIONS) == aged_partition][: 3 * MAX_KEYS]:
        send(filler)  # pushes "aged" out of a store that keeps MAX_KEYS ids
    send("retried")
    send("retried")  # the client's retry
    send("dead", b"{not json")
    # no key: the id is the JSON field, and the producer chose the partition
    producer.produce(name, value=json.dumps({"messageId": "keyless"}).encode(), partition=KEYLESS_PARTITION)
    assert producer.flush(30) == 0
    config = pipeline.config(max_keys=MAX_KEYS)
    consumed, expected = 0, len(sent) + 2  # and the two records produced without send()
    for _ in range(5):  # a run ends after 2 s without input: on a loaded machine a fetch can take longer
        consumed += pipeline.run_worker(config).consumed
        if consumed >= expected:
            break
    assert consumed == expected, f"the worker consumed {consumed} of {expected} records"
    send("late")  # the worker has stopped: nobody consumes it
    send("retried")  # another retry, also left for later
    assert producer.flush(30) == 0
    return pipeline, config


def _trace(stream, message_id: str, **fields):
    pipeline, config = stream
    request = TraceRequest(
        kafka=pipeline.kafka,
        input_topic=pipeline.input_topic,
        output_topic=pipeline.output_topic,
        dead_letter_topic=pipeline.dead_letter_topic,
        group_id=config.group_id,
        message_id=message_id,
        data_dir=config.data_dir,
        **{"start": parse_bound("1h", "--from"), **fields},
    )
    return trace_message(request)


def _output_key(pipeline, partition: int, offset: int) -> bytes:
    with OutputReader(pipeline.kafka) as reader:
        (batch,) = [b for b in reader.scan(pipeline.output_topic, partition, offset, stop_offset=offset + 1) if b.ids]
    return batch.ids[0]


def test_a_retried_id_is_published_once_and_its_repeat_dropped(stream) -> None:
    report = _trace(stream, "retried")
    assert report.partition == murmur2_partition(b"retried", PARTITIONS) and "murmur2" in report.partition_from
    first, repeat, later = report.occurrences
    assert first.outcome == PUBLISHED and _output_key(stream[0], report.partition, first.output_offset) == b"retried"
    assert repeat.outcome == DUPLICATE and repeat.duplicate_of == first.offset
    assert later.outcome == NOT_CONSUMED and later.offset >= report.committed_offset > repeat.offset
    assert report.store.held and report.store.seq is not None and report.store.age_seconds < 600
    assert not report.other_publications
    # the input, output and dead-letter partitions, one each, and how much of each
    assert [s.topic for s in report.scanned] == [
        stream[0].input_topic,
        stream[0].output_topic,
        stream[0].dead_letter_topic,
    ]
    assert report.scanned[0].partition == report.partition and report.scanned[0].records >= 3


def test_a_dead_lettered_id_shows_its_reason(stream) -> None:
    (only,) = _trace(stream, "dead").occurrences
    assert only.outcome == DEAD_LETTERED and only.reason.startswith("unparseable-value")
    assert only.dead_letter_offset is not None


def test_an_aged_out_id_was_published_and_the_store_no_longer_holds_it(stream) -> None:
    report = _trace(stream, "aged")
    (only,) = report.occurrences
    assert only.outcome == PUBLISHED and _output_key(stream[0], report.partition, only.output_offset) == b"aged"
    assert report.store.checked and not report.store.held and "aged out" in report.store.note
    assert report.store.window_seconds is not None


def test_a_record_without_a_key_is_found_by_its_json_field(stream) -> None:
    report = _trace(stream, "keyless", partition=KEYLESS_PARTITION)
    (only,) = report.occurrences
    assert report.partition_from.startswith("given") and only.outcome == PUBLISHED
    assert _output_key(stream[0], KEYLESS_PARTITION, only.output_offset) == b"keyless" and report.store.held


def test_an_id_not_consumed_yet_says_so(stream) -> None:
    report = _trace(stream, "late")
    (only,) = report.occurrences
    assert only.outcome == NOT_CONSUMED and not report.store.held and "never published" in report.store.note


def test_the_command_defaults_to_the_window_and_reads_only_the_given_partition(stream) -> None:
    pipeline, config = stream
    command = [sys.executable, "-m", "dedupectl.cli.app", "trace", "retried", "-b", pipeline.kafka.bootstrap_servers]
    command += ["-i", pipeline.input_topic, "-o", pipeline.output_topic, "--group-id", config.group_id]
    command += ["-d", str(config.data_dir)]
    result = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["range_from"].startswith("the store's effective window")
    assert [o["outcome"] for o in report["occurrences"]][:2] == [PUBLISHED, DUPLICATE]
    elsewhere = (report["partition"] + 1) % PARTITIONS
    other = subprocess.run([*command, "-p", str(elsewhere)], capture_output=True, text=True, timeout=60)
    assert other.returncode == 0 and "no occurrence in the range read" in other.stdout
    assert f"{pipeline.input_topic}[{elsewhere}]" in other.stdout


def _trace_cli(stream, message_id: str, *extra: str) -> subprocess.CompletedProcess:
    pipeline, config = stream
    command = [sys.executable, "-m", "dedupectl.cli.app", "trace", message_id, "-b", pipeline.kafka.bootstrap_servers]
    command += ["-i", pipeline.input_topic, "-o", pipeline.output_topic, "--group-id", config.group_id]
    command += ["-d", str(config.data_dir), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_an_id_older_than_the_window_is_named_aged_out_not_never_sent(stream) -> None:
    partition = murmur2_partition(b"aged", PARTITIONS)
    assert murmur2_partition(LONG_GONE.encode(), PARTITIONS) == partition
    assert murmur2_partition(NEVER_SENT.encode(), PARTITIONS) == partition
    aged = _trace_cli(stream, LONG_GONE)
    assert aged.returncode == 0, aged.stderr
    text = " ".join(aged.stdout.split())  # as read: the lines wrap at the terminal's width
    assert "store: not held: aged out of the window (published at output offset 0, before the store's cut" in text
    assert "the store aged the id out" in text and "--partitioner" not in text
    report = json.loads(_trace_cli(stream, LONG_GONE, "--json").stdout)
    assert report["store"]["aged_out"] and report["store"]["published_at"] == 0 and not report["occurrences"]
    assert report["store"]["cut_offset"] > 0  # the output below the cut was read too, and listed
    assert report["scanned"][-1]["start_offset"] == 0 and report["scanned"][-1]["records"] > 0

    never = _trace_cli(stream, NEVER_SENT)
    assert never.returncode == 0, never.stderr
    text = " ".join(never.stdout.split())
    assert "store: not held: never published in the range read" in text and "--partitioner" in text

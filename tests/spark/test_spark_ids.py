"""The Spark jobs read ids where the worker does: from a record header (``id_header``) whatever the key,
with the worker's dead-letter reasons for records without one; archived input, which keeps no headers,
is refused."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from spark_support import Record, samples

from dedupectl.errors import ConfigError
from dedupectl.spark.sources import FileSource

HEADER = "ce_id"


def _produce_with_headers(pipeline, records) -> None:
    producer = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers})
    for n, (key, headers) in enumerate(records):
        value = json.dumps({"n": n, "type": "track"}).encode()
        producer.produce(pipeline.input_topic, value=value, key=key, partition=0, headers=headers)
    assert producer.flush(30) == 0


def test_audit_and_replay_read_ids_from_the_header(make_pipeline, spark_session):
    pipeline = make_pipeline(partitions=1)
    _produce_with_headers(
        pipeline,
        [
            (b"user-1", [(HEADER, b"e-0")]),
            (b"user-1", [(HEADER, b"e-1")]),  # same key, another id
            (b"user-2", [(HEADER, b"e-0")]),  # a retry under another key
            (b"user-3", None),  # no header: a dead letter, not the id "user-3"
            (b"user-4", [(HEADER, b"e-2")]),  # never published: a loss
            (None, [(HEADER, b"e-3")]),
        ],
    )
    pipeline.publish([Record(key, b"{}") for key in (b"e-0", b"e-1", b"e-3", b"e-1")])

    report = pipeline.audit(spark_session, id_header=HEADER)
    assert report.total("input_records") == 6 and report.total("dead_letters") == 1
    assert dict(report.dead_letter_reasons) == {"missing-id": 1}
    assert samples(report, "loss") == {b"e-2"}
    assert samples(report, "duplicate") == {b"e-1"}
    assert samples(report, "extra") == set()

    dry = pipeline.replay(spark_session, dry_run=True, id_header=HEADER)
    assert dry.total("missing") == 1 and {s.id for s in dry.samples} == {b"e-2"}


def test_audit_of_archived_input_by_header_is_refused(make_pipeline, spark_session, tmp_path):
    pipeline = make_pipeline(partitions=1)
    archive = tmp_path / "input.jsonl"
    archive.write_text('{"key": "user-1", "value": "{}"}\n')
    with pytest.raises(ConfigError, match="archives keep no headers"):
        pipeline.audit(spark_session, input=FileSource(str(archive), "jsonl"), id_header=HEADER)

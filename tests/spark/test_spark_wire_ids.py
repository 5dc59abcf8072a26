"""The Spark jobs read ids in Avro values (Confluent wire format) as the worker does, on local[2]: the writer
schema from a schema file travels to the executors inside the request, with the worker's dead-letter reasons."""

from __future__ import annotations

from spark_support import Record, samples
from wire_values import avro_event, avro_value, write_avsc

from dedupectl.schemas import schema_source


def test_audit_and_replay_read_avro_ids(make_pipeline, spark_session, tmp_path):
    pipeline = make_pipeline(partitions=1)
    schemas = schema_source("avro", {7: str(write_avsc(tmp_path))}, None, None, 5.0)
    pipeline.produce_input(
        [
            Record(None, avro_value(7, avro_event("e-0")), partition=0),
            Record(None, avro_value(7, avro_event("e-1")), partition=0),
            Record(None, avro_value(7, avro_event("e-0")), partition=0),  # a retry
            Record(b"e-2", avro_value(7, avro_event(None)), partition=0),  # keyed: its key is its id
            Record(None, avro_value(7, avro_event("e-3")), partition=0),  # never published: a loss
            Record(b"e-4", b"not avro", partition=0),  # keyed, but a dead letter
            Record(None, avro_value(8, avro_event("e-5")), partition=0),  # a schema id in no file
            Record(None, avro_value(7, avro_event(None)), partition=0),  # no id
        ]
    )
    pipeline.publish([Record(key, b"{}") for key in (b"e-0", b"e-1", b"e-2", b"e-1")])

    report = pipeline.audit(spark_session, value_format="avro", schemas=schemas)
    assert report.total("input_records") == 8 and report.total("dead_letters") == 3
    assert dict(report.dead_letter_reasons) == {"undecodable-value": 1, "unknown-schema": 1, "missing-id": 1}
    assert samples(report, "loss") == {b"e-3"}
    assert samples(report, "duplicate") == {b"e-1"}
    assert samples(report, "extra") == set()

    dry = pipeline.replay(spark_session, dry_run=True, value_format="avro", schemas=schemas)
    assert dry.total("missing") == 1 and {s.id for s in dry.samples} == {b"e-3"}

"""Ids in Avro and Protobuf values (Confluent wire format) against a real broker, writer schemas from
--schema-file: repeats dropped exactly once, every unusable record dead-lettered with its reason, and a schema
registry that does not answer retried for --broker-retry-for, then one line and exit 2, never a dead letter."""

from __future__ import annotations

import json
import os
import subprocess

from test_worker_dedup import read_all
from wire_values import avro_event, avro_value, proto_value, write_avsc, write_descriptor_set

from dedupectl.messages import extract_id
from dedupectl.trace import DUPLICATE, PUBLISHED, TraceRequest, trace_message
from reconcile.ranges import parse_bound


def numbered(records):
    """Each record with a header naming its number, to find it again in the output or the dead letters."""
    return [(key, value, [("n", str(n).encode())]) for n, (key, value) in enumerate(records)]


def numbers(messages) -> list[int]:
    return sorted(int(dict(message.headers())["n"]) for message in messages)


def dead_reasons(pipeline) -> dict[int, str]:
    found = {}
    for message in read_all(pipeline, pipeline.dead_letter_topic):
        headers = dict(message.headers())
        found[int(headers["n"])] = headers["dedupectl.reason"].decode()
    return found


def test_the_worker_reads_avro_ids_from_schema_files(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    schema = write_avsc(pipeline.root)
    records = [
        (None, avro_value(7, avro_event("a-0"))),  # 0
        (None, avro_value(7, avro_event("a-1"))),  # 1
        (None, avro_value(7, avro_event("a-0"))),  # 2: a repeat
        (b"a-1", avro_value(7, avro_event(None))),  # 3: a repeat by its key
        (b"a-2", avro_value(7, avro_event(None))),  # 4: keyed
        (b"a-3", b"not avro"),  # 5: keyed, but its value does not decode
        (None, avro_value(99, avro_event("a-4"))),  # 6: a schema id in no file
        (None, avro_value(7, avro_event(None))),  # 7: no key, a null messageId
        (None, avro_value(7, avro_event(" "))),  # 8: a blank one
        (None, avro_value(7, avro_event("a-5"))[:8]),  # 9: cut short in its id
        (None, avro_value(7, avro_event("a-2"))),  # 10: a repeat of the keyed one
    ]
    pipeline.produce(numbered(records), partition=0)
    run = pipeline.cli_args(
        "w1", pipeline.root / "data", "--value-format", "avro", "--schema-file", f"7={schema}", "--exit-on-idle", "2"
    )
    done = subprocess.run([*run, "--json"], capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["consumed"], summary["published"], summary["duplicates_dropped"], summary["dead_letters"]) == (
        11,
        3,
        3,
        5,
    )
    output = read_all(pipeline, pipeline.output_topic)
    assert sorted(message.key() for message in output) == [b"a-0", b"a-1", b"a-2"]
    assert numbers(output) == [0, 1, 4]
    assert dead_reasons(pipeline) == {
        5: "undecodable-value",
        6: "unknown-schema",
        7: "missing-id",
        8: "empty-id",
        9: "undecodable-value",
    }
    # a restart reads its ids back from the output: repeats stay dropped
    pipeline.produce(numbered([(None, avro_value(7, avro_event("a-1")))] * 2), partition=0)
    again = subprocess.run([*run, "--json"], capture_output=True, text=True, timeout=120, env=_env())
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["published"], json.loads(again.stdout)["duplicates_dropped"]) == (0, 2)
    # trace reads ids as the worker does
    config = pipeline.config(data_dir=pipeline.root / "data", value_format="avro", schema_files={7: str(schema)})
    report = trace_message(
        TraceRequest(
            kafka=pipeline.kafka,
            input_topic=pipeline.input_topic,
            output_topic=pipeline.output_topic,
            dead_letter_topic=pipeline.dead_letter_topic,
            group_id=config.group_id,
            message_id="a-1",
            start=parse_bound("1h", "--from"),
            partition=0,
            data_dir=config.data_dir,
            value_format="avro",
            schemas=config.schemas,
        )
    )
    assert [o.outcome for o in report.occurrences] == [PUBLISHED, DUPLICATE, DUPLICATE, DUPLICATE]


def test_the_worker_reads_protobuf_ids_by_pointer_from_a_descriptor_set(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    records = [
        (None, proto_value(3, context_id="p-0", event="x")),  # 0
        (None, proto_value(3, context_id="p-1")),  # 1
        (None, proto_value(3, context_id="p-0", message_id="top-level is not read")),  # 2: a repeat
        (None, proto_value(3, message_id="no context")),  # 3: context unset
        (None, proto_value(3, context_id="")),  # 4: empty
        (None, proto_value(5, context_id="p-2")),  # 5: unknown schema id
        (None, proto_value(3, context_id="p-3") + b"\xff"),  # 6: not an acme.Event
        (b"keyed", proto_value(3, context_id="p-0")),  # 7: a keyed record's id is its key
    ]
    pipeline.produce(numbered(records), partition=1)
    config = pipeline.config(
        value_format="protobuf",
        id_field="/context/messageId",
        schema_files={3: str(write_descriptor_set(pipeline.root))},
        batch_max_messages=3,
    )
    summary = pipeline.run_worker(config)
    assert (summary.consumed, summary.published, summary.duplicates, summary.dead_letters) == (8, 3, 1, 4)
    output = read_all(pipeline, pipeline.output_topic)
    assert sorted(message.key() for message in output) == [b"keyed", b"p-0", b"p-1"]
    assert dead_reasons(pipeline) == {3: "missing-id", 4: "empty-id", 5: "unknown-schema", 6: "undecodable-value"}
    assert extract_id(None, records[0][1], "protobuf", "/context/messageId", schemas=config.schemas) == b"p-0"


def test_an_unanswering_schema_registry_is_retried_then_one_line_and_exit_2(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce(numbered([(b"r-0", avro_value(11, avro_event("r-0")))]), partition=0)
    with_registry = pipeline.cli_args(
        "w1",
        pipeline.root / "data",
        "--value-format",
        "avro",
        "--schema-registry",
        "http://127.0.0.1:9",  # discard: nothing listens, the connection is refused
        "--broker-retry-for",
        "4s",
        "--exit-on-idle",
        "30",
    )
    done = subprocess.run(with_registry, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "schema registry http://127.0.0.1:9" in errors[0] and "still failing after 4s" in errors[0]
    assert "retrying in" in done.stderr  # each retry logged
    assert "Traceback" not in done.stderr
    assert read_all(pipeline, pipeline.dead_letter_topic) == []
    assert read_all(pipeline, pipeline.output_topic) == []


def _env() -> dict[str, str]:
    return {**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000"}

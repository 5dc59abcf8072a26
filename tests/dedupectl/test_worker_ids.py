"""Where the id is, against a real broker: a record header (``--id-header``) or a nested JSON field (a JSON
Pointer in ``--id-field``); repeats dropped exactly once, records without the id dead-lettered with the reason."""

from __future__ import annotations

import json
import os
import subprocess

from test_worker_dedup import read_all

from dedupectl.trace import DUPLICATE, PUBLISHED, TraceRequest, trace_message
from reconcile.ranges import parse_bound


def event(n: int, **fields) -> bytes:
    return json.dumps({"n": n, **fields}).encode()


def first_numbers(records) -> dict[bytes, list[int]]:
    found: dict[bytes, list[int]] = {}
    for message in records:
        found.setdefault(message.key(), []).append(json.loads(message.value())["n"])
    return found


def dead_reasons(pipeline) -> dict[int, tuple[str, str]]:
    found = {}
    for message in read_all(pipeline, pipeline.dead_letter_topic):
        headers = dict(message.headers())
        found[json.loads(message.value())["n"]] = (
            headers["dedupectl.reason"].decode(),
            headers["dedupectl.detail"].decode(),
        )
    return found


def test_the_worker_takes_ids_from_a_header_given_by_its_flag(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    # keyed by user, as such producers do: two events of one user are two ids, a retry under another key one
    records = [
        (b"user-1", event(0), [("ce_id", b"e-0"), ("trace", b"t")]),
        (b"user-1", event(1), [("ce_id", b"e-1")]),
        (b"user-2", event(2), [("ce_id", b"e-0")]),
        (b"user-1", event(3), [("ce_id", b"e-1")]),
        (b"user-3", event(4)),  # no headers
        (b"user-3", event(5), [("ce_id", b"")]),
        (None, event(6), [("ce_id", b"e-2")]),
    ]
    pipeline.produce(records, partition=0)
    pipeline.produce(
        [(b"user-9", event(7), [("ce_id", b"e-9")]), (b"user-9", event(8), [("ce_id", b"e-9")])], partition=1
    )
    run = pipeline.cli_args("w1", pipeline.root / "data", "--id-header", "ce_id", "--exit-on-idle", "2", "--json")
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["consumed"], summary["published"], summary["duplicates_dropped"], summary["dead_letters"]) == (
        9,
        4,
        3,
        2,
    )
    output = read_all(pipeline, pipeline.output_topic)
    assert first_numbers(output) == {b"e-0": [0], b"e-1": [1], b"e-2": [6], b"e-9": [7]}
    assert sorted((m.key(), m.partition()) for m in output) == [(b"e-0", 0), (b"e-1", 0), (b"e-2", 0), (b"e-9", 1)]
    assert dict(next(m for m in output if m.key() == b"e-0").headers()) == {"ce_id": b"e-0", "trace": b"t"}
    assert dead_reasons(pipeline) == {
        4: ("missing-id", "no 'ce_id' header"),
        5: ("empty-id", "the 'ce_id' header is empty"),
    }
    # a restart reads its ids back from the output: repeats stay dropped
    pipeline.produce(
        [(b"user-5", event(9), [("ce_id", b"e-1")]), (b"user-5", event(10), [("ce_id", b"e-3")])], partition=0
    )
    again = subprocess.run(run, capture_output=True, text=True, timeout=120, env=_env())
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["published"], json.loads(again.stdout)["duplicates_dropped"]) == (1, 1)
    assert first_numbers(read_all(pipeline, pipeline.output_topic))[b"e-3"] == [10]
    # trace reads ids as the worker does: by the header, whatever the key
    config = pipeline.config(data_dir=pipeline.root / "data", id_header="ce_id")
    request = TraceRequest(
        kafka=pipeline.kafka,
        input_topic=pipeline.input_topic,
        output_topic=pipeline.output_topic,
        dead_letter_topic=pipeline.dead_letter_topic,
        group_id=config.group_id,
        message_id="e-1",
        start=parse_bound("1h", "--from"),
        partition=0,
        data_dir=config.data_dir,
        id_header=config.id_header,
    )
    report = trace_message(request)
    assert [o.outcome for o in report.occurrences] == [PUBLISHED, DUPLICATE, DUPLICATE]
    assert report.store.held


def test_the_worker_takes_ids_from_a_nested_field_by_json_pointer(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    nested = [
        (None, event(0, context={"messageId": "m-0"})),
        (None, event(1, context={"messageId": "m-1"})),
        (None, event(2, context={"messageId": "m-0"}, messageId="top-level is not read")),
        (None, event(3, context={})),
        (None, event(4, context={"messageId": 4})),
        (None, event(5, context={"messageId": "m-1"})),
        (b"keyed", event(6, context={"messageId": "m-0"})),  # a keyed record's id is its key
    ]
    pipeline.produce(nested, partition=0)
    pipeline.produce(
        [(None, event(7, context={"messageId": "m-7"})), (None, event(8, context={"messageId": "m-7"}))], partition=1
    )
    summary = pipeline.run_worker(pipeline.config(id_field="/context/messageId", batch_max_messages=3))
    assert (summary.consumed, summary.published, summary.duplicates, summary.dead_letters) == (9, 4, 3, 2)
    output = read_all(pipeline, pipeline.output_topic)
    assert first_numbers(output) == {b"m-0": [0], b"m-1": [1], b"keyed": [6], b"m-7": [7]}
    assert dead_reasons(pipeline) == {
        3: ("missing-id", "no record key and no '/context/messageId' field"),
        4: ("invalid-id", "'/context/messageId' is a JSON number, not a string"),
    }


def _env() -> dict[str, str]:
    return {**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000"}

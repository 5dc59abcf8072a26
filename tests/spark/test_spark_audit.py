"""dedupectl audit: a clean pipeline is reported clean; injected duplicates, losses and extras are found
exactly, with their samples; time and offset ranges, the window, and archived files."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from spark_support import BASE_MS, Record, event, only, samples
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.sample_events import SampleSpec, produce_sample
from dedupectl.spark.sources import FileSource, kafka_records, resolve_topic_ranges, spark_kafka_options
from dedupectl.worker import Worker
from reconcile.ranges import Bound
from reconcile.scan import scan_output

S = 1000  # ms


def test_clean_pipeline_then_exactly_the_injected_violations(make_pipeline, spark_session):
    pipeline = make_pipeline(partitions=2)
    spec = SampleSpec(count=1500, duplicate_ratio=0.05, invalid_ratio=0.03, seed=11)
    produced = produce_sample(pipeline.kafka, pipeline.input_topic, spec)
    pipeline.run_worker()

    clean = pipeline.audit(spark_session)
    assert clean.violations == 0 and clean.exit_code == 0
    assert clean.total("input_records") == 1500
    assert clean.total("dead_letters") == produced.invalid > 0
    assert sum(clean.dead_letter_reasons.values()) == produced.invalid
    assert clean.total("distinct_ids") == clean.total("output_records") == produced.distinct_ids
    assert {p.partition for p in clean.partitions} == {0, 1}
    assert all(p.status == "exactly once" for p in clean.partitions)

    # inject: one id published twice, one id published that never came in, one input never published
    published = next(iter(scan_output(pipeline.kafka, pipeline.output_topic, 1, -1))).ids[5]
    pipeline.publish([Record(published, b"{}", partition=1), Record(b"extra-1", b"{}", partition=0)])
    pipeline.produce_input([event("lost-1", partition=0)])

    report = pipeline.audit(spark_session)
    assert report.exit_code == 1 and report.violations == 3
    assert (only(report, 1).duplicate_ids, only(report, 1).duplicate_records) == (1, 1)
    assert (only(report, 0).extras, only(report, 0).losses) == (1, 1)
    assert (only(report, 0).duplicate_ids, only(report, 1).losses, only(report, 1).extras) == (0, 0, 0)
    assert samples(report, "duplicate") == {published}
    assert samples(report, "extra") == {b"extra-1"}
    assert samples(report, "loss") == {b"lost-1"}
    (loss,) = [s for s in report.samples if s.kind == "loss"]
    assert loss.offsets == (only(report, 0).input_offsets[1] - 1,)  # the input offset it came in at
    (duplicate,) = [s for s in report.samples if s.kind == "duplicate"]
    assert len(duplicate.offsets) == 2  # both output offsets


def _incident_pipeline(make_pipeline):
    """One partition with record timestamps fixed around a range [T+100 s, T+200 s):

    input   a0-a4 at T+0..4 s, b0-b9 at T+100..109 s, then a retry of a2 at T+150 s
    output  a0-a4, b0-b9 but b3 and b7, x1 (never came in) at T+104.5 s, a second b5 at T+160 s,
            a second b1 at T+5000 s, and last b3 with its own timestamp (delivered late, e.g. by replay)
    """
    pipeline = make_pipeline(partitions=1)
    a = [event(f"a{i}", timestamp_ms=BASE_MS + i * S) for i in range(5)]
    b = [event(f"b{i}", timestamp_ms=BASE_MS + (100 + i) * S) for i in range(10)]
    pipeline.produce_input([*a, *b, event("a2", timestamp_ms=BASE_MS + 150 * S)])
    published = [*a, *(r for r in b if r.key not in (b"b3", b"b7"))]
    pipeline.publish(published)
    pipeline.publish(
        [
            Record(b"x1", b"{}", timestamp_ms=BASE_MS + 104_500),
            Record(b"b5", b"{}", timestamp_ms=BASE_MS + 160 * S),
            Record(b"b1", b"{}", timestamp_ms=BASE_MS + 5000 * S),
            b[3],
        ],
        name="late",
    )
    return pipeline


def test_time_range_window_lookback_and_late_delivery(make_pipeline, spark_session):
    pipeline = _incident_pipeline(make_pipeline)
    start, stop = Bound("T+100s", timestamp_ms=BASE_MS + 100 * S), Bound("T+200s", timestamp_ms=BASE_MS + 200 * S)

    report = pipeline.audit(spark_session, start=start, stop=stop, window_ms=120 * S)
    p0 = only(report, 0)
    # a2's retry is covered by a2 published within the window before the range; b3 arrived late: delivered
    assert samples(report, "loss") == {b"b7"} and p0.losses == 1
    assert samples(report, "extra") == {b"x1"} and p0.extras == 1
    assert samples(report, "duplicate") == {b"b5"} and (p0.duplicate_ids, p0.duplicate_records) == (1, 1)
    assert p0.repeats_beyond_window == 1  # b1 again 4900 s later: the store forgets by then, as designed
    assert p0.input_records == 11 and p0.distinct_ids == 11  # b0-b9 and the a2 retry
    assert p0.output_records == 11  # b0-b9 but b7, x1, and the second b5 are in the range's time span

    # without a window nothing is "too far apart", and nothing before the range is read
    whole = pipeline.audit(spark_session, start=start, stop=stop)
    assert samples(whole, "loss") == {b"b7", b"a2"}
    assert samples(whole, "duplicate") == {b"b5", b"b1"} and only(whole, 0).repeats_beyond_window == 0


def test_offset_range_compares_the_output_of_the_inputs_time_span(make_pipeline, spark_session):
    pipeline = _incident_pipeline(make_pipeline)
    # input offsets 5-14 are b0-b9: their timestamps span T+100 s .. T+109 s
    report = pipeline.audit(spark_session, start=Bound("5", offset=5), stop=Bound("15", offset=15), window_ms=120 * S)
    p0 = only(report, 0)
    assert p0.input_offsets == (5, 15) and p0.input_records == 10
    assert samples(report, "loss") == {b"b7"}
    assert samples(report, "extra") == {b"x1"}  # a0-a4 lie outside the span: not extras
    assert samples(report, "duplicate") == {b"b5"} and p0.repeats_beyond_window == 1


def test_archived_files_give_the_same_answer_as_the_topics(make_pipeline, spark_session, tmp_path):
    pipeline = make_pipeline(partitions=1)
    records = [event(f"e{i}", timestamp_ms=BASE_MS + i * S) for i in range(40)]
    records.append(Record(None, b"not json", timestamp_ms=BASE_MS + 50 * S))  # a dead letter
    pipeline.produce_input(records)
    pipeline.publish([r for r in records[:40] if r.key != b"e7"] + [Record(b"zz", b"{}", timestamp_ms=BASE_MS)])
    from_topics = pipeline.audit(spark_session)

    # the output archived as Parquet, the way Spark's Kafka source reads it
    options = spark_kafka_options(pipeline.kafka)
    output_range = resolve_topic_ranges(pipeline.kafka, pipeline.output_topic, [0], None, None)
    kafka_records(spark_session, options, pipeline.output_topic, output_range).where("key is not null").write.parquet(
        str(tmp_path / "out.parquet")
    )
    # the input as JSON lines: Kafka records with an object value, plus bare events archived elsewhere
    lines = [
        json.dumps(
            {"partition": 0, "offset": offset, "timestamp": r.timestamp_ms, "key": r.key and r.key.decode(),
             "value": json.loads(r.value) if r.key else r.value.decode()}
        )
        for offset, r in enumerate(records)
    ]  # fmt: skip
    lines += [json.dumps({"messageId": "bare-1", "type": "track"}), json.dumps({"messageId": "", "type": "track"})]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")

    from_files = pipeline.audit(
        spark_session,
        input=FileSource(str(tmp_path / "in.jsonl")),
        output=FileSource(str(tmp_path / "out.parquet")),
    )
    topic_p0, file_p0 = only(from_topics, 0), only(from_files, 0)
    assert (topic_p0.losses, topic_p0.extras, topic_p0.dead_letters) == (1, 1, 1)
    for name in ("input_records", "dead_letters", "distinct_ids", "output_records", "losses", "extras"):
        assert getattr(file_p0, name) == getattr(topic_p0, name), name
    # bare events carry no partition: their own row, one valid (and lost) id, one empty id (a dead letter)
    unknown = only(from_files, None)
    assert (unknown.input_records, unknown.dead_letters, unknown.losses) == (2, 1, 1)
    assert samples(from_files, "loss") == {b"e7", b"bare-1"}
    assert from_files.dead_letter_reasons == {"unparseable-value": 1, "empty-id": 1}


def test_reconcile_apply_on_an_aged_store_then_retries_of_the_newest_ids_leave_audit_clean(
    make_pipeline, spark_session
):
    """A worker that ages by count, late retries (2 h later) of ids it has aged out, then the runbook's
    ``reconcile --apply`` and retries of the newest ids: nothing published twice within the window."""
    pipeline = make_pipeline(partitions=1)
    config = replace(pipeline.worker_config(), max_keys=500, batch_max_messages=250)
    first = [event(f"a{i:04d}", timestamp_ms=BASE_MS + i) for i in range(1_500)]
    pipeline.produce_input(first)
    Worker(config).run(threading.Event(), exit_on_idle_s=2.0)
    late = [event(f"a{i:04d}", timestamp_ms=BASE_MS + 7_200 * S + i) for i in range(100)]
    new = [event(f"b{i:04d}", timestamp_ms=BASE_MS + 7_200 * S + 100 + i) for i in range(300)]
    pipeline.produce_input(late + new)
    Worker(config).run(threading.Event(), exit_on_idle_s=2.0)

    args = pipeline.cli_args("reconcile", "-d", str(pipeline.data_dir), "-p", "0", "--apply", "--json")
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    found = json.loads(result.stdout)["partitions"][0]
    assert (result.exit_code, found["recorded"], found["missing_from_store"]) == (0, 0, 0)
    assert found["older_than_window"] == 1_400  # 1,900 published, 500 kept: aged ids and the late ones' first copies

    newest = [message_id for message_id, _ in list(pipeline.output_counts().items())[-200:]]
    pipeline.produce_input([event(message_id.decode(), timestamp_ms=BASE_MS + 7_300 * S) for message_id in newest])
    Worker(config).run(threading.Event(), exit_on_idle_s=2.0)
    assert all(pipeline.output_counts()[message_id] == 1 for message_id in newest)

    report = pipeline.audit(spark_session, window_ms=3_600 * S)
    assert report.violations == 0 and report.exit_code == 0
    assert only(report, 0).repeats_beyond_window == 100  # the late retries: published again by design

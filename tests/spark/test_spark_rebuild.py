"""dedupectl rebuild: the store built from the output by SST ingest equals the one the worker builds (same
ids, sequence numbers, timestamps, order of aging), and the worker runs on it.

Both sides are compared through DedupStore's own reading API, never through bytes this test decodes: if
the store's layout changes (store/codec.py) and the bulk load does not follow, lookups, timestamps or the
sequence order differ and these tests fail."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from pathlib import Path

from spark_support import (
    BASE_MS,
    Record,
    check_messy_output_rebuild,
    event,
    messy_output,
    recovered_store,
    store_contents,
)

from dedupectl.sample_events import SampleSpec, produce_sample
from dedupectl.spark.rebuild import RebuildRequest, run_rebuild
from store.aging import AgingPolicy, age_step
from store.bulk_load import LoadLayout
from store.dedup_store import DedupStore
from store.footprint import ids_files
from store.layout import store_path


def _rebuild(pipeline, spark, partition: int, data_dir, **fields):
    request = RebuildRequest(
        kafka=pipeline.kafka,
        input_topic=pipeline.input_topic,
        output_topic=pipeline.output_topic,
        partition=partition,
        data_dir=data_dir,
        **fields,
    )
    return run_rebuild(spark, request)


def test_rebuild_equals_the_workers_store_and_the_worker_runs_on_it(make_pipeline, spark_session, tmp_path):
    pipeline = make_pipeline(partitions=2)
    produce_sample(pipeline.kafka, pipeline.input_topic, SampleSpec(count=4000, duplicate_ratio=0.05, seed=5))
    pipeline.run_worker()
    worker_store = pipeline.store_path(0)
    rebuilt_dir = tmp_path / "rebuilt"

    report = _rebuild(pipeline, spark_session, 0, rebuilt_dir)
    rebuilt = store_path(rebuilt_dir, pipeline.input_topic, 0)
    assert report.store == rebuilt and report.duplicate_records == 0 and report.unkeyed_records == 0
    assert report.without_duplicates
    worker_view, rebuilt_view = store_contents(worker_store), store_contents(rebuilt)
    assert rebuilt_view == worker_view  # same ids, same sequence numbers, same timestamps
    assert report.ids == worker_view[0][0] > 1500
    with DedupStore.open_secondary(worker_store) as store:
        # the end of the read (past the last transaction marker); the worker stops at its last record + 1
        assert report.state.output_offset == report.output_offsets[1] == store.state.output_offset + 1
        assert report.state.input_offset == -1  # unknown: the worker's group offsets say where input resumes

    # the worker runs on the rebuilt store: old ids stay deduplicated, new ones are published once
    old = [message_id for _, message_id in worker_view[1][:20]]
    pipeline.produce_input([Record(i, b'{"messageId": "%s"}' % i, partition=0) for i in old])
    new = [event(f"after-rebuild-{i}", partition=0) for i in range(30)]
    pipeline.produce_input(new)
    summary = pipeline.run_worker(data_dir=rebuilt_dir)
    assert summary.duplicates >= 20 and summary.published == 30
    counts = pipeline.output_counts()
    assert max(counts.values()) == 1 and all(r.key in counts for r in new)
    with DedupStore.open_secondary(rebuilt) as store:
        assert store.state.next_seq == report.ids + 30
        assert [i for _, i in store.iter_by_seq(report.ids)] == [r.key for r in new]


def test_rebuild_equals_recovery_over_a_messy_output(make_pipeline, spark_session, tmp_path, generations_of):
    """Duplicates, an unkeyed record, mixed id shapes, several batches and SST files (a small layout; fewer
    files than FIFO's merge trigger), the files sent to the driver as on a cluster: still what the worker's
    recovery records, and it ages alike."""
    pipeline = make_pipeline(partitions=1)
    messy_output(pipeline)

    layout = LoadLayout(batch_ids=100, bucket_ids=1000)
    generations_of(1000)  # a generation per file
    report = _rebuild(pipeline, spark_session, 0, tmp_path / "rebuilt", ship_files=True, layout=layout)
    check_messy_output_rebuild(asdict(report))
    assert report.files == 3  # 1000, 1000 and 500 ids

    rebuilt, recovered = _same_as_recovery(pipeline, tmp_path)

    with DedupStore.open_existing(rebuilt) as store:
        ranges = [f.seq_range for f in ids_files(store)]
        assert ranges == [(0, 999), (1000, 1999), (2000, 2499)]  # one stretch of sequence numbers per generation
        result = age_step(store, AgingPolicy(max_keys=1000))
        assert result.generations_dropped == 1  # the oldest generation, whole: its ids are all below the cut (1500)
    with DedupStore.open_existing(recovered) as store:
        age_step(store, AgingPolicy(max_keys=1000))
    assert store_contents(rebuilt) == store_contents(recovered)  # the same ids aged out


def _same_as_recovery(pipeline, tmp_path: Path) -> tuple[Path, Path]:
    """Record partition 0's output the worker's way (recovery) and check the rebuilt store holds the same."""
    recovered = recovered_store(pipeline, tmp_path / "recovered")
    rebuilt = store_path(tmp_path / "rebuilt", pipeline.input_topic, 0)
    assert store_contents(rebuilt) == store_contents(recovered)
    return rebuilt, recovered


def test_rebuild_hands_over_any_id_shape_without_a_shuffle(make_pipeline, spark_session, tmp_path, generations_of):
    """No duplicate, so the ids are numbered the fast way (by their place in the read); mixed shapes, ids with
    a newline or bytes that are not UTF-8, an unkeyed record and two transactions (markers leave offset gaps),
    handed over on the local master: still what recovery records. The session's settings are left as found."""
    pipeline = make_pipeline(partitions=1)
    shapes = [
        lambda i: f"ajs-{uuid.UUID(int=i * 7919).hex}".encode(),
        lambda i: str(uuid.UUID(int=i * 104729 + 1)).encode(),
        lambda i: f"raw-{i}\n".encode(),
        lambda i: b"\xff\xfe" + i.to_bytes(4, "big"),
    ]
    ids = [shapes[i % 4](i) for i in range(1800)]
    records = [Record(i, b"{}", timestamp_ms=BASE_MS + n * 10) for n, i in enumerate(ids)]
    pipeline.publish(records[:900], name="a")
    pipeline.publish([Record(None, b"{}"), *records[900:]], name="b")
    planned = spark_session.conf.get("spark.sql.optimizer.plannedWrite.enabled")

    layout = LoadLayout(batch_ids=100, bucket_ids=700)  # three files
    generations_of(700)  # a generation each
    report = _rebuild(pipeline, spark_session, 0, tmp_path / "rebuilt", ship_files=False, layout=layout)
    assert report.without_duplicates and (report.ids, report.duplicate_records, report.unkeyed_records) == (1800, 0, 1)
    assert report.files == 3 and report.seconds_handing_over > 0
    assert spark_session.conf.get("spark.sql.optimizer.plannedWrite.enabled") == planned

    rebuilt, _ = _same_as_recovery(pipeline, tmp_path)
    with DedupStore.open_secondary(rebuilt) as store:
        assert [f.seq_range for f in ids_files(store)] == [(0, 699), (700, 1399), (1400, 1799)]

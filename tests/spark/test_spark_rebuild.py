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
    latest_copies,
    messy_output,
    recovered_store,
    store_contents,
)

from dedupectl.sample_events import SampleSpec, produce_sample
from dedupectl.spark import rebuild_order
from dedupectl.spark.rebuild import RebuildRequest, run_rebuild
from dedupectl.spark.sources import PartitionRange
from reconcile.scan import scan_output
from store.aging import AgingPolicy, age_step
from store.bulk_load import LoadLayout
from store.codec import encode_ids
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


def test_rebuild_holds_each_republished_id_at_its_latest_copy(make_pipeline, spark_session, tmp_path):
    """Late retries of ids the worker's window had aged out were rightly published again. The rebuilt store
    numbers every output record by its rank and holds each id at its latest copy (number, timestamp, output
    offset), as the worker's store does; aged alike, it keeps what the worker's keeps, so a worker on it
    publishes neither the newest ids nor the retried ones again."""
    window = 200
    pipeline = make_pipeline(partitions=1)
    early = [event(f"early-{i}", timestamp_ms=BASE_MS + i) for i in range(600)]
    pipeline.produce_input(early)
    pipeline.run_worker(max_keys=window)
    retried = [event(f"early-{i}", timestamp_ms=BASE_MS + 10_000 + i) for i in range(40)]  # long aged out
    later = [event(f"later-{i}", timestamp_ms=BASE_MS + 20_000 + i) for i in range(100)]
    pipeline.produce_input([*retried, *later])
    assert pipeline.run_worker(max_keys=window).published == 140  # the retries published again, rightly
    worker_store, rebuilt_dir = pipeline.store_path(0), tmp_path / "rebuilt"

    report = _rebuild(pipeline, spark_session, 0, rebuilt_dir)
    rebuilt = store_path(rebuilt_dir, pipeline.input_topic, 0)
    assert (report.records_read, report.ids, report.duplicate_records, report.unkeyed_records) == (740, 700, 40, 0)
    assert not report.without_duplicates

    output = [
        (message_id, batch.offset(index), batch.timestamp_ms(index))
        for batch in scan_output(pipeline.kafka, pipeline.output_topic, 0, -1)
        for index, message_id in enumerate(batch.ids)
    ]
    with DedupStore.open_secondary(worker_store) as store:
        assert store.state.next_seq == 740 and store.state.first_live_seq == 740 - window
        live = [message_id for _, message_id in store.iter_by_seq()]
        workers = _recorded(store, live)
    with DedupStore.open_secondary(rebuilt) as store:
        assert _recorded(store, live) == workers  # id by id: number, timestamp, output offset
        # every number's batch: each output record's timestamp and offset, and digests of the ids as published
        numbers = range(len(output))
        assert store.ledger.timestamps(numbers) == [stamp for _, _, stamp in output]
        assert store.ledger.output_offsets(numbers) == [offset for _, offset, _ in output]
        assert store.ledger.match_digests(encode_ids([message_id for message_id, _, _ in output]), 0) == []
        last_copy = {message_id: seq for seq, (message_id, _, _) in enumerate(output)}
        every_id = list(last_copy)
        assert store.live_seqs(encode_ids(every_id)) == [last_copy[i] for i in every_id]
        assert store.state == report.state and report.state.next_seq == 740

    with DedupStore.open_existing(rebuilt) as store:
        while not age_step(store, AgingPolicy(max_keys=window)).done:
            pass
    assert store_contents(rebuilt) == store_contents(worker_store)  # the same ids aged out, the same kept

    resent = [event(message_id.decode(), timestamp_ms=BASE_MS + 30_000) for message_id in live[-100:]]
    resent += [event(r.key.decode(), timestamp_ms=BASE_MS + 30_000) for r in retried]
    pipeline.produce_input(resent)
    summary = pipeline.run_worker(data_dir=rebuilt_dir, max_keys=window)
    assert (summary.published, summary.duplicates) == (0, 140)
    counts = pipeline.output_counts()
    assert [counts[r.key] for r in retried] == [2] * 40 and sum(counts.values()) == 740


def test_ranges_out_of_offset_order_are_numbered_by_spans(spark_session, monkeypatch):
    """Read ranges that overlap in offsets (not what Spark's Kafka source gives, but possible): every keyed
    record is still numbered by its rank in offset order, and each repeated id held at its latest copy."""
    keys = [b"a", b"b", None, b"a", b"c", b"b", b"d", b"a"]
    rows = [(key, 10 + 2 * n, BASE_MS + n) for n, key in enumerate(keys)]
    records = spark_session.createDataFrame(rows, "key binary, offset long, timestamp_ms long").repartition(3)
    by_spans = []
    numbered_by_spans = rebuild_order._numbered_by_spans
    monkeypatch.setattr(rebuild_order, "_numbered_by_spans", lambda *a: by_spans.append(1) or numbered_by_spans(*a))
    ordered = rebuild_order.order_ids(records, PartitionRange(0, 10, 26))
    assert by_spans  # the round-robin partitions overlap in offsets
    try:
        found = sorted(tuple(row) for row in ordered.numbered.collect())
        assert (ordered.ids, ordered.keyed_records, ordered.unkeyed_records) == (4, 7, 1)
    finally:
        for frame in ordered.cached:
            frame.unpersist()
    keyed = [(key, 10 + 2 * n, BASE_MS + n) for n, key in enumerate(keys) if key is not None]
    last = {key: seq for seq, (key, _, _) in enumerate(keyed)}
    assert found == [(seq, key, stamp, offset, last[key] == seq) for seq, (key, offset, stamp) in enumerate(keyed)]


def _recorded(store: DedupStore, ids: list[bytes]) -> dict[bytes, tuple[int | None, int | None, int | None]]:
    """Each id's (sequence number, timestamp, output offset) as the store's reading API answers them."""
    seqs = store.live_seqs(encode_ids(ids))
    held = sorted(seq for seq in seqs if seq is not None)
    stamps = dict(zip(held, store.ledger.timestamps(held), strict=True))
    offsets = dict(zip(held, store.ledger.output_offsets(held), strict=True))
    return {i: (seq, stamps.get(seq), offsets.get(seq)) for i, seq in zip(ids, seqs, strict=True)}


def test_rebuild_over_a_messy_output_holds_each_id_at_its_latest_copy(
    make_pipeline, spark_session, tmp_path, generations_of
):
    """Duplicates, an unkeyed record, mixed id shapes, several batches and SST files (a small layout; fewer
    files than FIFO's merge trigger), the files sent to the driver as on a cluster: every keyed record
    numbered by its rank, each id under its latest copy, and it ages by those numbers."""
    pipeline = make_pipeline(partitions=1)
    messy_output(pipeline)

    layout = LoadLayout(batch_ids=100, bucket_ids=1000)
    generations_of(1000)  # a generation per file
    report = _rebuild(pipeline, spark_session, 0, tmp_path / "rebuilt", ship_files=True, layout=layout)
    check_messy_output_rebuild(asdict(report))
    assert report.files == 3  # 1000, 1000 and 502 sequence numbers

    rebuilt = store_path(tmp_path / "rebuilt", pipeline.input_topic, 0)
    assert store_contents(rebuilt) == latest_copies(pipeline)
    with DedupStore.open_existing(rebuilt) as store:
        ranges = [f.seq_range for f in ids_files(store)]
        assert ranges == [(0, 999), (1000, 1999), (2000, 2501)]  # one stretch of sequence numbers per generation
        result = age_step(store, AgingPolicy(max_keys=1000))
        assert result.generations_dropped == 1  # the oldest generation, whole: its ids are all below the cut (1502)
    # the ids published twice are live under their second copies (1500 and 1501)
    assert store_contents(rebuilt) == latest_copies(pipeline, first_live_seq=1502)


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

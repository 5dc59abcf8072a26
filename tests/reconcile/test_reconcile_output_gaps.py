"""An output that lost offsets a store needs: recovery refuses the partition (and notes the gap in the store)
instead of reading on from whatever is left; reconcile reports the gap and never advances over it. The log
start is moved with DeleteRecords, which is what retention does to it (the worker tests let retention run)."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from reconcile_support import ids, only_partition

from reconcile.errors import OutputGapError
from reconcile.gaps import find_gap
from reconcile.recovery import catch_up
from reconcile.scan import OutputReader
from store.codec import GAP_RETENTION, GAP_TRUNCATED
from store.dedup_store import DedupStore


def delete_records_before(pipeline, offset: int, partition: int = 0) -> None:
    """Move the output partition's log start to ``offset``, as retention would."""
    from dedupectl.kafka_clients import admin_client

    admin = admin_client(pipeline.kafka)  # kept alive until its futures are answered
    futures = admin.delete_records([TopicPartition(pipeline.output_topic, partition, offset)])
    for future in futures.values():
        future.result(timeout=30)


def record_as_worker(store: DedupStore, published: list[bytes], first_offset: int) -> None:
    """Record a batch the way the worker does: each id's offset, covered up to the offset after the last."""
    now = int(time.time() * 1000)
    offsets = range(first_offset, first_offset + len(published))
    store.record(published, [now] * len(published), output_offsets=offsets, output_offset=offsets[-1] + 1)


def test_recovery_refuses_a_store_retention_ran_past_and_resumes_once_accepted(make_pipeline):
    pipeline = make_pipeline()
    first, second = ids("a", 40), ids("b", 20)
    pipeline.publish(first)  # 0-39, marker 40
    with pipeline.open_store() as store:
        record_as_worker(store, first, 0)  # covers 40
    pipeline.publish(second, name="more")  # 41-60, marker 61: never recorded
    delete_records_before(pipeline, 50)

    with pipeline.open_store() as store, OutputReader(pipeline.kafka) as reader:
        with pytest.raises(OutputGapError) as refused:
            catch_up(store, reader, pipeline.output_topic, 0)
        assert refused.value.exit_code == 3
        assert (refused.value.gap.kind, refused.value.gap.covered, refused.value.gap.low) == (GAP_RETENTION, 40, 50)
        message = str(refused.value)
        assert "partition 0 refused" in message and "retention deleted offsets 40-49" in message
        assert "dedupectl accept-gap" in message and "\n" not in message
        assert store.state.next_seq == 40 and store.state.output_offset == 40  # nothing recorded, nothing moved
        assert store.gaps.refused == refused.value.gap

        store.accept_gap("restored an old snapshot", "ops@host", int(time.time() * 1000))
        result = catch_up(store, reader, pipeline.output_topic, 0)
        assert (result.start_offset, result.recorded) == (50, 11)
        assert store.state.output_offset == pipeline.end_offset()
    assert pipeline.store_ids() == first + second[9:]  # the gap's ids are unknown: the override's cost


def test_retention_that_took_only_the_newest_batch_s_commit_marker_is_no_gap(make_pipeline):
    pipeline = make_pipeline()
    published = ids("c", 30)
    pipeline.publish(published)  # 0-29, marker 30
    with pipeline.open_store() as store:
        record_as_worker(store, published, 0)  # covers 30: the marker
    delete_records_before(pipeline, pipeline.end_offset())  # an idle partition's whole log went

    with pipeline.open_store() as store, OutputReader(pipeline.kafka) as reader:
        result = catch_up(store, reader, pipeline.output_topic, 0)
        assert (result.scanned, result.recorded) == (0, 0)
        assert store.state.output_offset == pipeline.end_offset() and store.gaps.refused is None


def test_recovery_refuses_an_output_that_ends_below_the_store(make_pipeline):
    pipeline = make_pipeline()
    pipeline.publish(ids("d", 5))  # 0-4, marker 5: a recreated topic, short of what the store covered
    with pipeline.open_store() as store:
        record_as_worker(store, ids("old", 100), 0)  # covers 100
    with pipeline.open_store() as store, OutputReader(pipeline.kafka) as reader:
        with pytest.raises(OutputGapError, match=r"ends at offset 6, below offset 100 the store covers") as refused:
            catch_up(store, reader, pipeline.output_topic, 0)
        assert (refused.value.gap.kind, refused.value.gap.low, refused.value.gap.end) == (GAP_TRUNCATED, 0, 6)
        store.accept_gap("topic recreated", "ops@host", int(time.time() * 1000))
        assert store.state.output_offset == 0 and store.ledger.output_offsets([0]) == [None]
        result = catch_up(store, reader, pipeline.output_topic, 0)
        assert result.recorded == 5 and store.ledger.output_offsets([100, 104]) == [0, 4]


def test_an_open_transaction_holding_the_stable_offset_back_is_no_truncation(make_pipeline):
    pipeline = make_pipeline()
    open_txn = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "transactional.id": unique_txn()})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce(pipeline.output_topic, key=b"pending", value=b"{}", partition=0)
    assert open_txn.flush(30) == 0  # offset 0, open: the stable offset stays at 0
    try:
        published = ids("e", 10)
        committed = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "transactional.id": unique_txn()})
        committed.init_transactions(30)
        committed.begin_transaction()
        for message_id in published:
            committed.produce(pipeline.output_topic, key=message_id, value=b"{}", partition=0)
        committed.commit_transaction(30)  # 1-10, marker 11 (pipeline.publish would wait for the stable offset)
        with pipeline.open_store() as store, OutputReader(pipeline.kafka) as reader:
            record_as_worker(store, published, 1)  # covers 11, past the stable offset
            bounds = reader.bounds(pipeline.output_topic, 0)
            assert bounds.end < store.state.output_offset
            assert find_gap(store, reader, pipeline.output_topic, 0, bounds) is None
    finally:
        open_txn.abort_transaction(30)


def unique_txn() -> str:
    return f"open-{time.monotonic_ns()}"


def test_reconcile_reports_a_retention_gap_and_apply_does_not_advance_over_it(make_pipeline):
    pipeline = make_pipeline()
    first, second = ids("f", 40), ids("g", 20)
    pipeline.publish(first)
    with pipeline.open_store() as store:
        record_as_worker(store, first, 0)
    pipeline.publish(second, name="more")  # 41-60, marker 61
    delete_records_before(pipeline, 50)

    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report, 0)
    assert (code, found["status"]) == (1, "output gap")
    assert (found["output_gap"]["kind"], found["output_gap"]["covered"], found["output_gap"]["low"]) == (
        "retention",
        40,
        50,
    )
    assert found["missing_from_store"] == 11  # what the output still holds is compared as usual

    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report, 0)
    assert (code, found["status"], found["recorded"]) == (1, "output gap", 11)
    assert found["coverage_after"]["output_offset"] == 40  # the worker still refuses it: only an operator accepts


def test_reconcile_does_not_compare_an_output_that_ends_below_the_store(make_pipeline):
    pipeline = make_pipeline()
    pipeline.publish(ids("h", 5))
    with pipeline.open_store() as store:
        record_as_worker(store, ids("old", 100), 0)
    for extra in ((), ("--apply",)):
        code, report = pipeline.reconcile("-p", "0", *extra)
        found = only_partition(report, 0)
        assert (code, found["status"], found["records_scanned"]) == (1, "output gap", 0)
        assert found["output_gap"]["kind"] == "truncated"
        assert found["coverage_after"] == found["coverage_before"]
    result = pipeline.reconcile_process("-p", "0")
    assert result.returncode == 1
    assert "partition 0: output gap: output" in result.stdout and "ends at offset 6" in result.stdout


def test_a_strict_scan_refuses_a_start_retention_deleted_where_a_plain_one_warns(make_pipeline, caplog):
    pipeline = make_pipeline()
    pipeline.publish(ids("i", 20))  # 0-19, marker 20
    delete_records_before(pipeline, 10)
    with OutputReader(pipeline.kafka) as reader:
        with pytest.raises(OutputGapError) as refused:
            list(reader.scan(pipeline.output_topic, 0, 5, strict_start=True))
        assert (refused.value.gap.covered, refused.value.gap.low) == (5, 10)
        with caplog.at_level(logging.WARNING, logger="reconcile.scan"):
            scanned = [message_id for batch in reader.scan(pipeline.output_topic, 0, 5) for message_id in batch.ids]
        assert scanned == ids("i", 10, start=10)
        assert "deleted by retention" in caplog.text
        assert reader.log_end(pipeline.output_topic, 0) == 21

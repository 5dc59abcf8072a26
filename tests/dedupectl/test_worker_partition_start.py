"""What the worker does with a partition it starts without input: an empty store is logged and counted with
the output it will read, every held partition is recovered from the output and exports its window from
assignment on, and aged files below the cut are dropped without new input."""

from __future__ import annotations

import json
import logging
import shutil
import threading

import pytest
from waiting import wait_for

from dedupectl.metrics import WorkerMetrics
from dedupectl.worker import Worker
from dedupectl.worker import loop as worker_module
from store.aging import advance_cut
from store.dedup_store import DedupStore
from store.footprint import ids_files
from store.layout import store_path


def records(first: int, count: int) -> list[tuple[bytes, bytes]]:
    ids = [f"ajs-{n:032x}" for n in range(first, first + count)]
    return [(i.encode(), json.dumps({"messageId": i}).encode()) for i in ids]


def test_an_empty_store_is_reported_and_every_window_exported_before_any_input(make_pipeline, caplog):
    pipeline = make_pipeline(partitions=2)
    pipeline.produce(records(0, 20), partition=0)
    pipeline.produce(records(20, 30), partition=1)
    config = pipeline.config()
    assert pipeline.run_worker(config).published == 50
    shutil.rmtree(store_path(config.data_dir, config.input_topic, 0))  # partition 0's store is lost

    metrics, stop = WorkerMetrics(), threading.Event()
    sample = metrics.registry.get_sample_value
    thread = threading.Thread(target=Worker(config, metrics).run, args=(stop,))
    with caplog.at_level(logging.INFO, logger="dedupectl.worker"):
        thread.start()
        try:  # no new input: nothing but the assignment can export these
            wait_for(lambda: sample("dedupectl_effective_window_seconds", {"partition": "1"}) is not None)
            wait_for(lambda: sample("dedupectl_effective_window_seconds", {"partition": "0"}) is not None)
            window = sample("dedupectl_effective_window_seconds", {"partition": "1"})
            assert 0 <= window < 600
            assert sample("dedupectl_empty_store_starts_total", {"partition": "0"}) == 1
            # recovered on assignment, with no input: the lost store holds its 20 ids again
            wait_for(lambda: sample("dedupectl_recovered_ids_total", {"partition": "0"}) == 20)
            assert sample("dedupectl_empty_store_starts_total", {"partition": "1"}) is None
            # 20 records plus the transactions' commit markers
            assert sample("dedupectl_recovery_read_offsets", {"partition": "0"}) >= 20
        finally:
            stop.set()
            thread.join(60)
    lines = [r.getMessage() for r in caplog.records if "starts from" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("partition 0 starts from a new empty store: recovery reads the whole output")
    assert "offsets 0.." in lines[0]


def test_aged_generations_go_without_new_input(make_pipeline, monkeypatch, generations_of):
    monkeypatch.setattr(worker_module, "MAINTENANCE_S", 0.2)
    generations_of(1_000)
    pipeline = make_pipeline(partitions=1)
    config = pipeline.config(max_keys=1_000)
    path = store_path(config.data_dir, config.input_topic, 0)
    with DedupStore.open(path, topic=config.input_topic, partition=0) as store:
        for first in (0, 1_000):  # two generations: ids 0..999 and 1000..1999
            store.record([f"ajs-{n:032x}".encode() for n in range(first, first + 1_000)], [1] * 1_000)
            store.flush()
        advance_cut(store, 1_000)  # the first generation is all below the cut, and still on disk
        assert [file.seq_range for file in ids_files(store)] == [(0, 999), (1_000, 1_999)]

    summary = pipeline.run_worker(config, idle_s=3.0)
    assert summary.consumed == 0
    with DedupStore.open_secondary(path) as store:
        assert [file.seq_range for file in ids_files(store)] == [(1_000, 1_999)]


@pytest.mark.parametrize(
    "revoked_gauges", ["dedupectl_effective_window_seconds", "dedupectl_store_keys", "dedupectl_id_filter_bytes"]
)
def test_a_revoked_partition_exports_no_stale_gauge(revoked_gauges):
    metrics = WorkerMetrics()
    metrics.window_seconds.labels("3").set(10.0)
    metrics.store_keys.labels("3").set(5)
    metrics.id_filter_bytes.labels("3").set(2_400_000)
    metrics.forget_store(3)
    metrics.forget_store(4)  # never exported: nothing to drop
    assert metrics.registry.get_sample_value(revoked_gauges, {"partition": "3"}) is None


def test_a_partition_is_recovered_when_assigned_though_no_input_arrives(make_pipeline, caplog, tmp_path):
    # a store put back from an older copy (a snapshot restored): the output holds what came after it
    pipeline = make_pipeline(partitions=1)
    pipeline.produce(records(0, 300))
    config = pipeline.config()
    assert pipeline.run_worker(config).published == 300
    path = store_path(config.data_dir, config.input_topic, 0)
    older = tmp_path / "older"
    with DedupStore.open_secondary(path) as store:
        assert store.state.next_seq == 300
    shutil.copytree(path, older)
    pipeline.produce(records(300, 500))
    assert pipeline.run_worker(config).published == 500
    shutil.rmtree(path)
    shutil.copytree(older, path)  # as `snapshot restore` places it

    with caplog.at_level(logging.INFO, logger="dedupectl.worker"):
        summary = pipeline.run_worker(config)  # no new input at all
    assert (summary.consumed, summary.published, summary.recovered) == (0, 0, 500)
    assert any(r.getMessage().startswith("partition 0 recovered:") for r in caplog.records)
    with DedupStore.open_secondary(path) as store:
        assert store.state.next_seq == 800
        assert all(store.contains_many([key for key, _ in records(0, 800)]))

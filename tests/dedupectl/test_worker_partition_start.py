"""What the worker says about a partition it starts without input: an empty store is logged and counted with
the output it will read, every held partition exports its window from assignment on, and aged files below
the cut are dropped without new input."""

from __future__ import annotations

import json
import logging
import math
import shutil
import threading

import pytest
from waiting import wait_for

from dedupectl import worker as worker_module
from dedupectl.metrics import WorkerMetrics
from dedupectl.worker import Worker
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
            assert math.isnan(sample("dedupectl_effective_window_seconds", {"partition": "0"}))  # no id yet
            assert sample("dedupectl_empty_store_starts_total", {"partition": "0"}) == 1
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

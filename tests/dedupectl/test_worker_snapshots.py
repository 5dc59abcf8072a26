"""Scheduled snapshots as the worker's metrics show them: each one published is counted, and so is each
failure, by step, from series exported at 0 when the worker starts."""

from __future__ import annotations

import json
import threading

from waiting import wait_for

from dedupectl.metrics import WorkerMetrics
from dedupectl.worker import Worker


def test_scheduled_snapshots_published_and_failed_are_counted(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=1)
    pipeline.produce([(None, json.dumps({"messageId": f"id-{n}"}).encode()) for n in range(20)], partition=0)
    backups = tmp_path / "backup-disk"
    backups.mkdir()
    config = pipeline.config(snapshot_every="1s", snapshot_to=str(backups))
    metrics, stop = WorkerMetrics(), threading.Event()

    def sample(name: str, step: str | None = None) -> float | None:
        return metrics.registry.get_sample_value(name, None if step is None else {"step": step})

    worker = Worker(config, metrics)
    for step in ("checkpoint", "publish", "round", "prune"):
        assert sample("dedupectl_snapshot_failures_total", step) == 0, "exported before any round"
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: sample("dedupectl_snapshots_published_total") >= 1)
        assert sorted(p.name for p in backups.iterdir() if not p.name.startswith("."))
        backups.rename(tmp_path / "unmounted")  # the backup disk goes away under a running worker
        wait_for(lambda: sample("dedupectl_snapshot_failures_total", "round") >= 1)
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    assert not backups.exists(), "a vanished destination is not recreated"

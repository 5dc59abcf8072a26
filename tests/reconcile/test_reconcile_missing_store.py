"""``--all`` means every partition of the output topic: a partition whose store is gone is a finding."""

from __future__ import annotations

import shutil

from reconcile_support import ids, only_partition


def test_a_partition_without_a_store_is_reported_not_skipped(make_pipeline):
    pipeline = make_pipeline(partitions=3)
    for partition in range(3):
        pipeline.produce_input(ids(f"p{partition}", 20), partition=partition)
    pipeline.run_worker()
    shutil.rmtree(pipeline.store_path(1))  # the worker is stopped: its store for partition 1 is lost

    code, report = pipeline.reconcile("--all")
    assert code == 1
    assert report["partitions_without_store"] == [1]
    assert [p["partition"] for p in report["partitions"]] == [0, 2]
    assert all(only_partition(report, p)["status"] == "in sync" for p in (0, 2))

    shown = pipeline.reconcile_process("--all")
    assert shown.returncode == 1
    assert "no store" in shown.stdout and "rebuild-lost-store.md" in shown.stdout
    assert "partition 1: no store in" in " ".join(shown.stdout.split())

    code, report = pipeline.reconcile("-p", "0", "-p", "2")  # the partitions asked for: nothing missing
    assert code == 0 and report["partitions_without_store"] == []

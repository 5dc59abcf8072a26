"""Reconcile while a worker runs: it reads a secondary instance and does not disturb the worker (which
keeps publishing exactly once); --apply refuses while the worker holds the store, naming it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

from reconcile_support import ids
from waiting import wait_for

from dedupectl.verify import count_ids


def spawn_worker(pipeline, worker_id: str = "w1") -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable, "-m", "dedupectl.cli.app", "run", "-b", pipeline.kafka.bootstrap_servers,
            "-i", pipeline.input_topic, "-o", pipeline.output_topic, "--group-id", f"group-{pipeline.input_topic}",
            "-d", str(pipeline.data_dir), "--worker-id", worker_id, "--log-level", "warning", "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def test_reconcile_beside_a_running_worker(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    first = ids("live", 2000)
    pipeline.produce_input(first[:1000], partition=0)
    pipeline.produce_input(first[1000:], partition=1)
    worker = spawn_worker(pipeline)
    try:
        wait_for(lambda: pipeline.end_offset(0) > 1000 and pipeline.end_offset(1) > 1000, what="the first 2000")
        wait_for(lambda: (pipeline.data_dir / "worker-w1.json").exists(), what="the status file")

        # input keeps arriving (the worker publishing and recording) while reconcile reads beside it
        more = ids("more", 6000)
        feeder = threading.Thread(
            target=lambda: [
                pipeline.produce_input(more[i : i + 200], partition=i // 200 % 2) for i in range(0, 6000, 200)
            ]
        )
        feeder.start()
        reports = []
        while feeder.is_alive() or not reports:
            reports.append(pipeline.reconcile("--all"))
        feeder.join()
        for code, report in reports:
            assert code == 0, report
            for found in report["partitions"]:
                assert (found["missing_from_store"], found["unpublished"], found["duplicate_records"]) == (0, 0, 0)
                assert found["records_scanned"] >= 1000

        result = pipeline.reconcile_process("-p", "1", "--apply")
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert "partition 1's store" in lines[0] and "is held by worker 'w1' (pid " in lines[0]
        assert "stop the worker for this partition before reconcile --apply" in lines[0]

        wait_for(lambda: pipeline.end_offset(0) + pipeline.end_offset(1) >= 8000, what="the worker to keep up")
        assert worker.poll() is None  # undisturbed: still running
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert json.loads(out)["published"] == 8000
    counts = count_ids(pipeline.kafka, pipeline.output_topic)
    assert len(counts) == 8000 and max(counts.values()) == 1

    code, report = pipeline.reconcile("--all", "--apply")  # stopped: the repair path opens, finds nothing
    assert code == 0 and [p["status"] for p in report["partitions"]] == ["in sync", "in sync"]

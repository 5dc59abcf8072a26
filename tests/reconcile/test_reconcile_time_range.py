"""--from/--to as times: resolved per partition to the first offset at or after the time (offsets_for_times);
a time range that resolves reversed is refused."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from reconcile_support import ids, only_partition


def iso_now() -> str:
    """Now as ISO-8601, between two publications (which get the broker's clock as timestamps)."""
    time.sleep(0.3)
    moment = datetime.now(tz=UTC).isoformat()
    time.sleep(0.3)
    return moment


def test_time_bounds_resolve_to_offsets(make_pipeline):
    pipeline = make_pipeline()
    old, middle, recent = ids("old", 10), ids("mid", 10), ids("new", 10)
    pipeline.publish(old)  # offsets 0-9, marker 10
    before_middle = iso_now()
    pipeline.publish(middle, name="mid")  # offsets 11-20, marker 21
    before_recent = iso_now()
    pipeline.publish(recent, name="new")  # offsets 22-31, marker 32
    pipeline.record(old + middle + recent, output_offset=pipeline.end_offset())

    code, report = pipeline.reconcile("-p", "0", "--from", before_middle)
    found = only_partition(report)
    assert (code, found["start_offset"], found["end_offset"], found["records_scanned"]) == (0, 11, 33, 20)
    assert found["seq_window"] == [10, 30]  # the store covers nothing past the end: up to its newest id

    code, report = pipeline.reconcile("-p", "0", "--from", before_middle, "--to", before_recent)
    found = only_partition(report)
    assert (code, found["start_offset"], found["end_offset"], found["records_scanned"]) == (0, 11, 22, 10)
    assert (found["seq_window"], found["unpublished"], found["missing_from_store"]) == ([10, 20], 0, 0)

    code, report = pipeline.reconcile("-p", "0", "--from", "1h")
    assert (code, only_partition(report)["records_scanned"]) == (0, 30)

    result = pipeline.reconcile_process("-p", "0", "--from", "22", "--to", before_middle)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "range starts at offset 22 (22) after it ends at offset 11" in lines[0]

"""Large ranges are compared a group of records at a time, a healthy group as one run of sequence numbers:
groups that repeat earlier ones, lack ids or follow a repair still get the exact report (here with groups
of 10 records, so a small topic spans many)."""

from __future__ import annotations

import pytest
from reconcile_support import ids, only_partition

import reconcile.comparison
import reconcile.diff


@pytest.fixture
def fast_path(monkeypatch) -> list[bool]:
    """Groups of 10 records in batches of 5; returns, per group compared, whether it took the fast path."""
    monkeypatch.setattr(reconcile.diff, "GROUP_RECORDS", 10)
    monkeypatch.setattr(reconcile.diff, "SCAN_BATCH", 5)
    taken: list[bool] = []
    feed_run = reconcile.comparison.Comparison.feed_run

    def spy(self, group, advance_to, first_offset=None):
        taken.append(feed_run(self, group, advance_to, first_offset))
        return taken[-1]

    monkeypatch.setattr(reconcile.comparison.Comparison, "feed_run", spy)
    return taken


def test_groups_that_repeat_or_lack_ids_are_compared_exactly(make_pipeline, fast_path):
    pipeline = make_pipeline()
    published = ids("g", 40)
    pipeline.publish(published)  # offsets 0-39, marker 40
    pipeline.record(published, output_offset=pipeline.end_offset())
    # by hand: g-0..g-9 again, exactly (a run of numbers, all matched before), then 3 ids never recorded
    pipeline.publish([*published[:10], b"n-0", b"n-1", b"n-2"], name="by-hand")  # offsets 41-53

    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report)
    assert fast_path == [True] * 4 + [False, False]  # g-0..g-39 are runs; the repeats and n-* are not
    assert code == 1
    assert found["records_scanned"] == 53
    assert (found["duplicate_records"], found["duplicate_ids"]) == (10, 10)
    assert found["missing_from_store"] == 3
    assert (found["unpublished"], found["seq_window"]) == (0, [0, 40])
    assert {s["id"]: s["repeat_offsets"] for s in found["samples"]["duplicates"]} == {
        f"g-{i:06d}": [41 + i] for i in range(10)
    }
    assert [(s["id"], s["offset"]) for s in found["samples"]["missing_from_store"]] == [
        ("n-0", 51),
        ("n-1", 52),
        ("n-2", 53),
    ]

    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert (found["recorded"], found["coverage_after"]["output_offset"]) == (3, 55)  # past the marker at 54
    assert pipeline.store_ids()[-3:] == [b"n-0", b"n-1", b"n-2"]

    pipeline.publish(ids("h", 25), name="later")  # offsets 55-79, marker 80: groups after the repair
    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert (found["missing_from_store"], found["recorded"]) == (25, 25)
    assert found["coverage_after"]["output_offset"] == 81
    fast_path.clear()
    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report)
    assert (found["missing_from_store"], found["unpublished"], found["duplicate_records"]) == (0, 0, 10)
    assert found["seq_window"] == [0, 68]
    assert fast_path.count(True) >= 6  # the groups of the repaired store and of h-* are runs again

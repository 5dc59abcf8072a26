"""Ids in the store that the output never published (an aborted transaction) are reported; --apply removes
them, never an id the output holds, and a repeat run finds nothing."""

from __future__ import annotations

from reconcile_support import ids, only_partition


def test_an_aborted_transactions_id_in_the_store_is_reported_and_removed(make_pipeline):
    pipeline = make_pipeline()
    before, after = ids("c", 30), ids("d", 30, start=100)
    pipeline.publish(before)
    pipeline.publish([b"ghost-1", b"ghost-2"], abort=True, name="aborted")  # never visible read_committed
    pipeline.publish(after)
    # the store recorded the aborted ids as if they had been published, between the two committed batches
    pipeline.record([*before, b"ghost-1", b"ghost-2", *after], output_offset=pipeline.end_offset())

    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report)
    assert code == 1
    assert (found["records_scanned"], found["missing_from_store"], found["duplicate_records"]) == (60, 0, 0)
    assert found["unpublished"] == 2 and found["unpublished_verified"] is True
    assert [(s["id"], s["seq"]) for s in found["samples"]["unpublished"]] == [("ghost-1", 30), ("ghost-2", 31)]
    assert found["status"] == "out of sync"

    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert (code, found["removed"], found["status"]) == (0, 2, "repaired")
    assert pipeline.store_ids() == before + after  # every id the output holds is still there

    code, report = pipeline.reconcile("-p", "0")
    assert code == 0 and only_partition(report)["unpublished"] == 0


def test_an_unpublished_id_at_the_stores_newest_end_is_reported(make_pipeline):
    pipeline = make_pipeline()
    published = ids("e", 20)
    pipeline.publish(published)
    pipeline.publish([b"tail-ghost"], abort=True, name="aborted")
    pipeline.record([*published, b"tail-ghost"], output_offset=pipeline.end_offset())

    code, report = pipeline.reconcile("-p", "0", "--from", "10")
    found = only_partition(report)
    assert code == 1
    assert found["seq_window"] == [10, 21]  # the store covers nothing past the end: its newest ids are in play
    assert [s["id"] for s in found["samples"]["unpublished"]] == ["tail-ghost"]


def test_apply_over_a_sub_range_keeps_ids_published_outside_it(make_pipeline):
    pipeline = make_pipeline()
    first, middle, last = ids("f", 20), ids("g", 10), ids("h", 20)
    pipeline.publish(first)  # offsets 0-19
    pipeline.publish(middle, name="middle")  # offsets 21-30
    pipeline.publish(last, name="last")  # offsets 32-51
    # a store whose sequence order is not the output's: the middle ids were recorded last (as a repair of a
    # lost middle by an earlier --apply leaves them)
    pipeline.record(first + last + middle, output_offset=pipeline.end_offset())

    code, report = pipeline.reconcile("-p", "0", "--from", "32", "--apply")
    found = only_partition(report)
    # the window [20, 50) holds the middle ids at 40-49 and the range lacks them: the output holds them
    # before the range, so they are kept, not reported
    assert (found["unpublished"], found["published_outside_range"], found["removed"]) == (0, 10, 0)
    assert code == 0
    assert sorted(pipeline.store_ids()) == sorted(first + middle + last)

"""Duplicates written into the output topic by hand are reported exactly: how many records, which ids,
at which offsets; --apply cannot remove them from the output and says so with exit 1."""

from __future__ import annotations

from reconcile_support import ids, only_partition


def test_hand_written_duplicates_are_reported_exactly(make_pipeline):
    pipeline = make_pipeline()
    published = ids("a", 50)
    pipeline.publish(published)  # offsets 0-49, commit marker at 50
    pipeline.record(published, output_offset=pipeline.end_offset())
    # by hand: a-3 once more, a-7 twice more, the block a-10..a-12 again, and m-1 (never recorded) twice
    repeats = [published[3], published[7], published[7], *published[10:13], b"m-1", b"m-1"]
    pipeline.publish(repeats, name="by-hand")  # offsets 51-58

    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report)
    assert code == 1
    assert found["records_scanned"] == 58
    assert (found["duplicate_records"], found["duplicate_ids"]) == (7, 6)
    assert found["missing_from_store"] == 1
    assert found["unpublished"] == 0
    samples = {s["id"]: s["repeat_offsets"] for s in found["samples"]["duplicates"]}
    assert samples == {"a-000003": [51], "a-000007": [52, 53], "a-000010": [54], "a-000011": [55],
                       "a-000012": [56], "m-1": [58]}  # fmt: skip
    assert [(s["id"], s["offset"]) for s in found["samples"]["missing_from_store"]] == [("m-1", 57)]

    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert code == 1  # the output still holds duplicates: nothing reconcile can repair
    assert (found["recorded"], found["status"]) == (1, "duplicates in output")
    assert pipeline.store_ids()[-1] == b"m-1"

    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report)
    assert (found["missing_from_store"], found["duplicate_records"], found["duplicate_ids"]) == (0, 7, 6)
    assert found["status"] == "duplicates in output"


def test_a_range_counts_only_repeats_inside_it(make_pipeline):
    pipeline = make_pipeline()
    published = ids("b", 40)
    pipeline.publish(published)  # offsets 0-39, marker 40
    pipeline.publish(published[:5], name="again")  # offsets 41-45, marker 46
    pipeline.record(published, output_offset=pipeline.end_offset())

    code, report = pipeline.reconcile("-p", "0", "--from", "41")
    found = only_partition(report)
    assert found["records_scanned"] == 5
    assert found["duplicate_records"] == 0  # their first copies are outside the range
    # repeats of the oldest ids stretch the window back over b-5..b-39, which the range lacks: the rest of
    # the partition holds them, so they are not reported (nor would --apply remove them)
    assert found["seq_window"] == [0, 40]
    assert (found["unpublished"], found["published_outside_range"]) == (0, 35)
    assert code == 0

    code, report = pipeline.reconcile("-p", "0", "--to", "41")
    found = only_partition(report)
    assert (code, found["records_scanned"], found["duplicate_records"], found["unpublished"]) == (0, 40, 0, 0)

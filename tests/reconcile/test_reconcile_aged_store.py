"""A store that aged out its oldest ids: output records older than its window are counted as such, not as
missing, and --apply does not put them back."""

from __future__ import annotations

from dataclasses import replace

from reconcile_support import ids, only_partition


def test_ids_aged_out_are_not_missing(make_pipeline):
    pipeline = make_pipeline()
    published = ids("s", 50)
    pipeline.publish(published)
    pipeline.record(published, output_offset=pipeline.end_offset())
    with pipeline.open_store() as store:  # age out the oldest 20, as the store's aging does
        store.forget_many(published[:20])
        store.write_state(replace(store.state, first_live_seq=20))
    pipeline.publish(ids("t", 5), name="late")  # published after, recorded by nobody: truly missing

    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert (found["older_than_window"], found["missing_from_store"], found["recorded"]) == (20, 5, 5)
    assert found["unpublished"] == 0 and found["seq_window"] == [20, 50]
    assert code == 0
    assert pipeline.store_ids() == published[20:] + ids("t", 5)  # the aged ids stay out

    code, report = pipeline.reconcile("-p", "0")
    assert code == 0 and only_partition(report)["older_than_window"] == 20

"""A store that aged out its oldest ids: output records older than its window are counted as such, not as
missing, and --apply does not put them back."""

from __future__ import annotations

import threading
from dataclasses import replace

from reconcile_support import ids, only_partition

from dedupectl.verify import count_ids
from dedupectl.worker import Worker
from reconcile.scan import scan_output


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


def _run_aging_worker(pipeline, max_keys: int, batch: int = 250) -> None:
    config = replace(pipeline.worker_config(), max_keys=max_keys, batch_max_messages=batch)
    Worker(config).run(threading.Event(), exit_on_idle_s=2.0)
    for partition in range(pipeline.partitions):  # the last commit's marker lands a moment after it returns
        pipeline.wait_stable(partition)


def test_late_retries_of_aged_ids_do_not_make_aged_ids_missing(make_pipeline):
    """A worker that ages by count, then late retries of ids it aged out (published again, rightly) among
    new ids: the output holds those ids twice, the earlier copy before the cut. Reconcile places the cut
    exactly, --apply records nothing, and re-sending the newest ids publishes none of them again."""
    pipeline = make_pipeline()
    first = ids("a", 3_000)
    pipeline.produce_input(first)
    _run_aging_worker(pipeline, max_keys=1_000)
    late = first[:200]  # aged out by now: new again, as designed
    second = [message_id for pair in zip(late, ids("b", 200), strict=True) for message_id in pair] + ids("b", 400, 200)
    pipeline.produce_input(second)
    _run_aging_worker(pipeline, max_keys=1_000)
    published = count_ids(pipeline.kafka, pipeline.output_topic)
    assert sum(published.values()) == 3_800 and {n for n in published.values()} == {1, 2}
    assert {message_id for message_id, n in published.items() if n == 2} == set(late)
    with pipeline.open_store() as store:
        before = store.state
        assert before.live_ids == 1_000
        cut_offset = store.ledger.window_start_offset()
    # the live window is a-2800..a-2999 then the second run: every record before a-2800 is older than it
    records = [(offset, message_id) for batch in scan_output(pipeline.kafka, pipeline.output_topic, 0, -1)
               for offset, message_id in zip(batch.offsets, batch.ids, strict=True)]  # fmt: skip
    at_cut = [message_id for offset, message_id in records if offset == cut_offset]
    where = {message_id: offset for offset, message_id in records if message_id in (b"a-002800", b"a-002999")}
    assert at_cut == [b"a-002800"], f"store {before}, window cut at {cut_offset}; output offsets {where}"

    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report)
    assert (found["missing_from_store"], found["duplicate_records"], found["unpublished"]) == (0, 0, 0)
    assert found["older_than_window"] == 2_800 and found["status"] == "in sync" and code == 0

    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert (found["recorded"], found["removed"], found["put_back"], code) == (0, 0, 0, 0)
    with pipeline.open_store() as store:  # only the covered offset moves, past the last transaction marker
        assert replace(store.state, output_offset=before.output_offset) == before

    newest = [message_id for _, message_id in records[-300:]]
    pipeline.produce_input(newest)
    _run_aging_worker(pipeline, max_keys=1_000)
    assert count_ids(pipeline.kafka, pipeline.output_topic) == published  # none published again


def test_ids_lost_inside_the_window_go_back_in_their_place(make_pipeline):
    """Ids missing from the middle of an aged store's window are put back under their own numbers, so
    the aging order is unchanged: the newest id stays in the window and its repeat is still dropped."""
    pipeline = make_pipeline()
    sent = ids("c", 2_000)
    pipeline.produce_input(sent)
    _run_aging_worker(pipeline, max_keys=1_500)
    lost = [sent[n] for n in (600, 601, 1_234, 1_999)]
    with pipeline.open_store() as store:
        store.forget_many(lost)  # as if a file of the store were damaged
        before = store.state
    order = pipeline.store_ids()

    code, report = pipeline.reconcile("-p", "0")
    found = only_partition(report)
    assert (found["missing_from_store"], found["put_back"], found["older_than_window"], code) == (4, 4, 500, 1)

    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert (found["recorded"], found["put_back"], found["unplaceable"], found["status"], code) == (
        4, 4, 0, "repaired", 0,
    )  # fmt: skip
    with pipeline.open_store() as store:
        assert (store.state.next_seq, store.state.first_live_seq) == (
            before.next_seq,
            before.first_live_seq,
        )  # no new sequence number: the cut and the bound see the same store
        assert store.contains_many(lost) == [True] * 4
    assert pipeline.store_ids() == sent[500:] and len(order) == 1_496

    pipeline.produce_input([sent[-1], *ids("d", 10)])  # the newest id again, and 10 new ones (aging runs)
    _run_aging_worker(pipeline, max_keys=1_500)
    published = count_ids(pipeline.kafka, pipeline.output_topic)
    assert published[sent[-1]] == 1 and sum(published.values()) == 2_010


def test_ids_missing_where_no_batch_recorded_them_are_not_appended(make_pipeline):
    """A store written without output offsets (recorded without them) that lacks ids inside what it
    recorded: there is no place for them in its aging order, so --apply refuses to append them."""
    pipeline = make_pipeline()
    published = ids("h", 60)
    pipeline.publish(published)
    pipeline.record(published, output_offset=pipeline.end_offset())
    with pipeline.open_store() as store:
        store.forget_many(published[10:13])
    code, report = pipeline.reconcile("-p", "0", "--apply")
    found = only_partition(report)
    assert (found["missing_from_store"], found["unplaceable"], found["recorded"]) == (3, 3, 0)
    assert found["status"] == "out of sync" and code == 1
    with pipeline.open_store() as store:
        assert store.state.next_seq == 60 and store.contains_many(published[10:13]) == [False] * 3
    result = pipeline.reconcile_process("-p", "0", "--apply")
    assert result.returncode == 1 and "rebuild-lost-store.md" in result.stdout

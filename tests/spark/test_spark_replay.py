"""dedupectl replay: fills injected losses through the worker, a second replay publishes nothing, replaying
twice or while the worker runs creates no duplicate, and ids a store still holds are reported."""

from __future__ import annotations

import time
from collections import Counter

from spark_support import event, ids_of, only

from store.dedup_store import DedupStore


def _lost_incident(pipeline, before: int = 30, skipped: int = 20, after: int = 30):
    """Records the worker never processed: the group's offsets were moved past them (as an operator
    resetting the group to 'latest' during an incident does); then the worker publishes what follows.
    Returns (published before the lost ones in time, lost, published after)."""
    first = [event(f"first-{i}", partition=i % 2) for i in range(before)]
    lost = [event(f"lost-{i}", partition=i % 2) for i in range(skipped)]
    last = [event(f"last-{i}", partition=i % 2) for i in range(after)]
    pipeline.produce_input(lost)
    pipeline.skip_input_to_end()
    pipeline.produce_input([*first, *last, first[0]])  # a retry of an old id: in the output, never replayed
    pipeline.run_worker(idle_s=1.5)
    return first, lost, last


def _wait_for_output(pipeline, expected: int, timeout_s: float = 60) -> Counter:
    deadline = time.monotonic() + timeout_s
    while True:
        counts = pipeline.output_counts()
        if sum(counts.values()) >= expected or time.monotonic() > deadline:
            return counts
        time.sleep(0.5)


def test_replay_fills_losses_once_and_a_second_replay_publishes_nothing(make_pipeline, spark_session):
    pipeline = make_pipeline(partitions=2)
    first, lost, last = _lost_incident(pipeline)
    assert set(pipeline.output_counts()) == ids_of(first) | ids_of(last)

    dry = pipeline.replay(spark_session, dry_run=True)
    assert dry.total("missing") == len(lost) and dry.total("replayed") == 0
    assert {s.id for s in dry.samples} <= ids_of(lost) and len(dry.samples) == 10  # 5 per partition

    # twice before the worker runs: both copies wait in the input, the worker publishes one of each
    report = pipeline.replay(spark_session)
    assert report.total("replayed") == len(lost) and report.exit_code == 0
    assert {p.partition: p.replayed for p in report.partitions} == {0: 10, 1: 10}
    assert only(report, 0).input_records == 41  # lost, first, last of partition 0 and the retry of first-0
    assert pipeline.replay(spark_session).total("replayed") == len(lost)
    pipeline.run_worker(idle_s=1.5)
    counts = pipeline.output_counts()
    assert set(counts) == ids_of(first) | ids_of(lost) | ids_of(last)
    assert max(counts.values()) == 1

    # once the worker caught up there is nothing left to re-drive
    again = pipeline.replay(spark_session)
    assert again.total("missing") == 0 and again.total("replayed") == 0
    pipeline.run_worker(idle_s=1.5)
    assert pipeline.output_counts() == counts


def test_replay_while_the_worker_runs_creates_no_duplicates(make_pipeline, spark_session):
    pipeline = make_pipeline(partitions=2)
    first, lost, last = _lost_incident(pipeline, skipped=30)
    expected = ids_of(first) | ids_of(lost) | ids_of(last)
    thread, stop, summaries = pipeline.start_worker()
    try:
        # the worker consumes the replayed records while the next replay reads the output: whatever the
        # second one finds missing, and re-produces, races with the worker's own publication of the first
        replayed = [pipeline.replay(spark_session).total("replayed") for _ in range(2)]
        counts = _wait_for_output(pipeline, len(expected))
        time.sleep(3)  # let the worker consume (and drop) what the second replay produced
        counts = pipeline.output_counts()
    finally:
        stop.set()
        thread.join(timeout=60)
    assert replayed[0] == 30
    assert set(counts) == expected
    assert max(counts.values()) == 1, [key for key, n in counts.items() if n > 1]
    assert summaries[0].duplicates >= replayed[1]  # the second replay's copies were dropped, not published


def test_ids_a_store_still_holds_are_reported(make_pipeline, spark_session):
    pipeline = make_pipeline(partitions=1)
    records = [event(f"e{i}") for i in range(6)]
    pipeline.produce_input(records)
    pipeline.publish(records[:3])  # the output holds e0-e2; e3-e5 are missing from it
    with DedupStore.open(pipeline.store_path(0), topic=pipeline.input_topic, partition=0) as store:
        store.record([b"e0", b"e1", b"e2", b"e4"], [0] * 4)  # e4: published once, then lost from the output

    report = pipeline.replay(spark_session, dry_run=True, data_dir=pipeline.data_dir)
    p0 = only(report, 0)
    assert (p0.missing, p0.held_by_store, p0.replayed) == (3, 1, 0)
    assert report.exit_code == 1
    assert [s.id for s in report.samples] == [b"e3", b"e4", b"e5"]

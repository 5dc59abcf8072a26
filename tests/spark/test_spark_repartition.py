"""dedupectl repartition: 4 -> 8 partitions while a producer keeps sending, workers running before and after,
with immediate and late retries of ids published before the change: every id exactly once in the output,
none lost, the dead letters exactly the unusable records."""

from __future__ import annotations

import signal

import pytest
from confluent_kafka import Producer
from repartition_support import (
    KeepsSending,
    WorkerThread,
    build,
    dead_letters,
    spawn_worker,
    value,
    wait_until_output_has,
    wait_until_recovered,
    worker_config,
)

from dedupectl.errors import RepartitionError
from dedupectl.repartition.cutover import CutoverRequest, cutover
from dedupectl.repartition.manifest import BUILT, Manifest, staging_dir
from reconcile.kafka import partition_counts
from store.dedup_store import DedupStore
from store.layout import is_moved_aside


def _cutover(pipeline):
    request = CutoverRequest(
        pipeline.kafka, pipeline.input_topic, pipeline.output_topic, pipeline.data_dir, pipeline.group_id, 6000
    )
    return cutover(request)


def test_four_to_eight_partitions_while_producing_exactly_once(make_pipeline, spark_session):
    pipeline = make_pipeline(partitions=4)
    producer = KeepsSending(pipeline).start()
    old_layout = WorkerThread(worker_config(pipeline))
    producer.wait_for(2500)
    wait_until_output_has(pipeline, {message_id.encode() for message_id in producer.sent[:2000]})

    report = build(pipeline, spark_session, 8)  # workers and producer go on meanwhile
    assert report.partitioner == "crc32"  # found in the output's records
    assert [store.partition for store in report.stores] == list(range(8))
    assert sum(store.ids for store in report.stores) >= 2000
    producer.wait_for(len(producer.sent) + 500)  # the old workers publish past the build's read

    old_layout.stop()
    result = _cutover(pipeline)
    counts = partition_counts(pipeline.kafka, [pipeline.input_topic, pipeline.output_topic])
    assert counts == {pipeline.input_topic: 8, pipeline.output_topic: 8}
    assert sum(tail.recorded for tail in result.tails) > 0  # the tails were folded in
    assert len(result.moved_aside) == 4 and all(is_moved_aside(path) for path in result.moved_aside)
    assert not staging_dir(pipeline.data_dir, pipeline.input_topic).exists()
    for partition in range(8):
        with DedupStore.open_secondary(pipeline.store_path(partition)) as store:
            assert store.state.output_offset == result.covered[partition]
            assert (partition < 4) == (store.state.output_offset > 0)

    before = list(producer.sent)
    new_layout = WorkerThread(worker_config(pipeline, misrouted="forward"))
    producer.wait_for(len(producer.sent) + 1500)
    _send_again(pipeline, before[: len(before) // 2 : 3])  # late retries of ids published before the change
    producer.stop()

    expected = {message_id.encode() for message_id in producer.sent}
    wait_until_output_has(pipeline, expected)
    summary = new_layout.stop()
    assert summary.misrouted > 0  # records of the old count in the old partitions were forwarded
    output = pipeline.output_counts()
    repeated = {key: n for key, n in output.items() if n > 1}
    assert not repeated, f"{len(repeated)} ids published more than once, e.g. {sorted(repeated)[:5]}"
    assert set(output) == expected, (len(expected - set(output)), len(set(output) - expected))
    assert dead_letters(pipeline) == {key: 1 for key in producer.unusable}


def _stopped_cleanly(worker, log) -> None:
    """Stopped by SIGTERM: 0 after finishing the batch in hand, or by the signal when nothing was in hand."""
    assert worker.wait(120) in (0, -signal.SIGTERM), log.read_text()[-3000:]


def _send_again(pipeline, message_ids: list[str]) -> None:
    producer = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "enable.idempotence": True})
    for message_id in message_ids:
        producer.produce(pipeline.input_topic, key=message_id.encode(), value=value(message_id))
    assert producer.flush(30) == 0


def test_workers_killed_before_and_after_the_cutover_neither_duplicate_nor_lose(make_pipeline, spark_session, tmp_path):
    pipeline = make_pipeline(partitions=4)
    producer = KeepsSending(pipeline).start()
    old_layout = WorkerThread(worker_config(pipeline))
    producer.wait_for(2500)
    wait_until_output_has(pipeline, {message_id.encode() for message_id in producer.sent[:2000]})
    build(pipeline, spark_session, 8)
    old_layout.stop()

    # the old layout's worker dies between committing a batch and recording it: its store is behind
    log = tmp_path / "worker.log"
    killed = spawn_worker(pipeline, log, crashpoint="after-commit:3")
    assert killed.wait(120) == -signal.SIGKILL
    with pytest.raises(RepartitionError, match=r"not its end|transaction is open"):
        _cutover(pipeline)
    counts = partition_counts(pipeline.kafka, [pipeline.input_topic, pipeline.output_topic])
    assert set(counts.values()) == {4}  # refused: nothing changed
    assert Manifest.load(staging_dir(pipeline.data_dir, pipeline.input_topic)).phase == BUILT

    # as the refusal says: the old layout's worker recovers, stops; then the cutover goes through
    log = tmp_path / "recovering-worker.log"
    recovering = spawn_worker(pipeline, log)
    wait_until_recovered(log, recovering, 4)
    recovering.send_signal(signal.SIGTERM)
    _stopped_cleanly(recovering, log)
    _cutover(pipeline)

    # the new layout's worker dies with a batch's records (and forwards) produced, not committed
    new_log = tmp_path / "new-worker.log"
    killed = spawn_worker(pipeline, new_log, "--misrouted", "forward", crashpoint="after-produce:4")
    assert killed.wait(120) == -signal.SIGKILL, new_log.read_text()[-3000:]
    new_log = tmp_path / "new-worker-again.log"
    new_layout = spawn_worker(pipeline, new_log, "--misrouted", "forward")
    producer.wait_for(len(producer.sent) + 1500)
    before = producer.sent[:2000]
    _send_again(pipeline, before[::4])  # late retries of ids published before the change
    producer.stop()

    expected = {message_id.encode() for message_id in producer.sent}
    wait_until_output_has(pipeline, expected)
    new_layout.send_signal(signal.SIGTERM)
    _stopped_cleanly(new_layout, new_log)
    output = pipeline.output_counts()
    repeated = {key: n for key, n in output.items() if n > 1}
    assert not repeated, f"{len(repeated)} ids published more than once, e.g. {sorted(repeated)[:5]}"
    assert set(output) == expected, (len(expected - set(output)), len(set(output) - expected))
    assert dead_letters(pipeline) == {key: 1 for key in producer.unusable}

"""A worker whose output no longer holds what its store needs refuses the partition: exit 3 and one line
that says what to do, the refusal kept in the store and shown by `dedupectl window`; after the operator's
`dedupectl accept-gap` it runs again, and the acceptance is shown too. Against the real broker: retention
that really moves the output's log start, and an output topic deleted and recreated."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from typer.testing import CliRunner
from waiting import wait_for

from dedupectl.cli.app import app
from dedupectl.errors import OutputGapError, TopicError
from dedupectl.kafka_clients import admin_client, create_topics
from dedupectl.metrics import WorkerMetrics
from dedupectl.verify import count_ids
from dedupectl.worker import Worker
from store.layout import store_path


def records(first: int, count: int) -> list[tuple[bytes, bytes]]:
    ids = [f"ajs-{n:032x}" for n in range(first, first + count)]
    return [(i.encode(), json.dumps({"messageId": i}).encode()) for i in ids]


def set_topic_config(kafka, topic: str, **settings: str) -> None:
    admin = admin_client(kafka)
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in settings.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def watermarks(kafka, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "t"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def recreate_topic(kafka, topic: str, partitions: int) -> None:
    admin = admin_client(kafka)
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(timeout=30)

    def created() -> bool:
        try:
            create_topics(kafka, [topic], partitions)
        except (TopicError, KafkaException):  # still being deleted
            return False
        return watermarks(kafka, topic) == (0, 0)

    wait_for(created, timeout_s=60, what=f"{topic} recreated")


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


def window_of(data_dir) -> tuple[int, dict]:
    code, out = cli("window", "-d", str(data_dir), "--json")
    (record,) = json.loads(out)
    return code, record


def test_a_store_retention_ran_past_is_refused_until_the_gap_is_accepted(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=1)
    config = pipeline.config()
    path = store_path(config.data_dir, config.input_topic, 0)
    pipeline.produce(records(0, 50))
    assert pipeline.run_worker(config).published == 50
    old_copy = tmp_path / "old-store"
    shutil.copytree(path, old_copy)  # the worker is stopped: a plain copy is a consistent snapshot
    pipeline.produce(records(50, 50))
    assert pipeline.run_worker(config).published == 50

    # retention deletes the whole output, past what the old copy covers
    set_topic_config(pipeline.kafka, pipeline.output_topic, retention_ms="2000", segment_ms="200")
    wait_for(lambda: watermarks(pipeline.kafka, pipeline.output_topic)[0] >= 100, 120, "retention to run")
    set_topic_config(pipeline.kafka, pipeline.output_topic, retention_ms="604800000", segment_ms="604800000")
    low, _ = watermarks(pipeline.kafka, pipeline.output_topic)
    shutil.rmtree(path)
    shutil.copytree(old_copy, path)  # restored from the old snapshot

    pipeline.produce([*records(100, 10), *records(60, 5)])  # new ids, and repeats of ids published in the gap
    worker = pipeline.spawn_worker("w1", config.data_dir, "--exit-on-idle", "15")
    _, stderr = worker.communicate(timeout=180)
    assert worker.returncode == 3, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: partition 0 refused: output {pipeline.output_topic}[0] starts at offset {low}, ")
    assert "retention deleted offsets" in last and "dedupectl accept-gap" in last
    assert "Traceback" not in stderr

    code, shown = window_of(config.data_dir)
    assert code == 1  # a refused partition is a finding
    assert (shown["refused_gap"]["kind"], shown["refused_gap"]["low"]) == ("retention", low)
    assert shown["accepted_gaps"] == []

    code, _ = cli("accept-gap", "-d", str(config.data_dir), "-p", "0", "--reason", "restored an old snapshot")
    assert code == 0
    summary = pipeline.run_worker(config)
    # the override's cost, as documented: the gap's ids are unknown, so their repeats are published once more
    assert (summary.published, summary.duplicates) == (15, 0)

    code, shown = window_of(config.data_dir)
    assert code == 0 and shown["refused_gap"] is None
    (accepted,) = shown["accepted_gaps"]
    assert (accepted["gap"]["kind"], accepted["gap"]["low"], accepted["reason"]) == (
        "retention",
        low,
        "restored an old snapshot",
    )
    assert "@" in accepted["by"] and accepted["from_seq"] == 50


def test_a_recreated_output_topic_is_refused_until_the_gap_is_accepted(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    config = pipeline.config()
    pipeline.produce(records(0, 40))
    assert pipeline.run_worker(config).published == 40
    recreate_topic(pipeline.kafka, pipeline.output_topic, 1)

    pipeline.produce([*records(40, 10), *records(0, 5)])  # new ids, and repeats of ids the old topic held
    metrics = WorkerMetrics()
    with pytest.raises(OutputGapError, match=r"partition 0 refused: .* ends at offset 0, below offset") as refused:
        Worker(config, metrics).run(threading.Event(), exit_on_idle_s=15)
    assert refused.value.exit_code == 3
    sample = metrics.registry.get_sample_value
    assert sample("dedupectl_partition_refused", {"partition": "0", "reason": "truncated"}) == 1
    assert window_of(config.data_dir)[1]["refused_gap"]["kind"] == "truncated"

    code, _ = cli("accept-gap", "-d", str(config.data_dir), "-p", "0", "--reason", "output topic recreated")
    assert code == 0
    summary = pipeline.run_worker(config)
    # the store kept its window: repeats of the old topic's ids are still dropped
    assert (summary.published, summary.duplicates) == (10, 5)
    published = count_ids(pipeline.kafka, pipeline.output_topic)
    assert len(published) == 10 and set(published.values()) == {1}

    code, shown = window_of(config.data_dir)
    assert code == 0 and shown["refused_gap"] is None
    assert [gap["gap"]["kind"] for gap in shown["accepted_gaps"]] == ["truncated"]

"""The cutover without Spark: from empty staged stores and a build that read nothing, the fold of the tails alone
builds the new layout (the same code path that folds what the workers published after a build's read). A
cutover stopped half-way is finished by running it again, and the worker waits for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dedupectl.errors import RepartitionError
from dedupectl.partitioner import crc32_partition
from dedupectl.repartition import cutover as cutover_module
from dedupectl.repartition.cutover import CutoverRequest, cutover
from dedupectl.repartition.manifest import CUTTING_OVER, Manifest, refuse_cutover_under_way, staging_dir
from dedupectl.verify import count_ids
from reconcile.kafka import partition_counts
from store.dedup_store import DedupStore
from store.layout import store_path


def _cli(pipeline, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "dedupectl.cli.app", "repartition", *args, "-b", pipeline.kafka.bootstrap_servers,
        "-t", pipeline.input_topic, "-o", pipeline.output_topic, "-d", str(data_dir),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result


def _event(message_id: bytes) -> tuple[bytes, bytes]:
    return message_id, b'{"messageId": "%s"}' % message_id


def test_a_cutover_stopped_half_way_is_finished_and_the_new_layout_is_exact(make_pipeline, tmp_path, monkeypatch):
    pipeline = make_pipeline(partitions=4)
    data_dir = tmp_path / "data"
    old_ids = [b"id-%05d" % n for n in range(1200)]
    pipeline.produce(map(_event, old_ids))
    pipeline.run_worker(pipeline.config(data_dir=data_dir, partitioner="crc32"))

    plan = json.loads(_cli(pipeline, data_dir, "plan", "--partition-count", "8", "--rate", "1000", "--json").stdout)
    assert (plan["old_count"], plan["new_count"], plan["partitioner"]) == (4, 8, "crc32")
    assert plan["partitioner_found"]  # from the output's 1,200 keyed records
    assert plan["stores"] == list(range(8)) and plan["output_records"] >= len(old_ids)
    assert plan["bytes_per_id_measured"] and plan["build_seconds"] == plan["output_records"] / 1000
    assert "crc32 (found in the output)" in _cli(pipeline, data_dir, "plan", "--partition-count", "8").stdout

    staging = staging_dir(data_dir, pipeline.input_topic)
    staging.mkdir()
    for partition in range(8):
        DedupStore.open(store_path(staging, pipeline.input_topic, partition), topic=pipeline.input_topic,
                        partition=partition).close()  # fmt: skip
    Manifest(pipeline.input_topic, pipeline.output_topic, 4, 8, "crc32", (0, 0, 0, 0), 0).save(staging)
    request = CutoverRequest(
        pipeline.kafka, pipeline.input_topic, pipeline.output_topic, data_dir, f"group-{pipeline.input_topic}", 6000
    )

    # stopped after the output grew, before the input did (as a cutover killed there would be)
    grow = cutover_module.grow_partitions

    def fail_on_input(kafka, topic, count):
        if topic == pipeline.input_topic:
            raise RepartitionError("stopped here by the test")
        return grow(kafka, topic, count)

    monkeypatch.setattr(cutover_module, "grow_partitions", fail_on_input)
    with pytest.raises(RepartitionError, match="stopped here"):
        cutover(request)
    manifest = Manifest.load(staging)
    assert manifest.phase == CUTTING_OVER and manifest.steps == ("folded", "output-grown")
    with pytest.raises(RepartitionError, match="under way"):
        refuse_cutover_under_way(data_dir, pipeline.input_topic)

    monkeypatch.setattr(cutover_module, "grow_partitions", grow)
    report = cutover(request)
    assert report.resumed and report.tails == ()  # folded by the first run, not again
    assert partition_counts(pipeline.kafka, [pipeline.input_topic, pipeline.output_topic]) == {
        pipeline.input_topic: 8,
        pipeline.output_topic: 8,
    }
    refuse_cutover_under_way(data_dir, pipeline.input_topic)  # finished: nothing to refuse
    for partition in range(8):
        mine = [i for i in old_ids if crc32_partition(i, 8) == partition]
        others = [i for i in old_ids if crc32_partition(i, 8) != partition]
        with DedupStore.open_secondary(store_path(data_dir, pipeline.input_topic, partition)) as store:
            assert all(store.contains_many(mine)) and not any(store.contains_many(others))
            assert store.state.output_offset == report.covered[partition]
            assert store.state.next_seq == len(mine)

    # the new layout: every old id again (all in its new partition), and new ids, each published once
    new_ids = [b"new-%05d" % n for n in range(300)]
    pipeline.produce(map(_event, old_ids + new_ids + new_ids[:50]))
    summary = pipeline.run_worker(pipeline.config(data_dir=data_dir, partitioner="crc32", misrouted="forward"))
    assert summary.published == len(new_ids)
    counts = count_ids(pipeline.kafka, pipeline.output_topic)
    assert set(counts) == set(old_ids + new_ids) and max(counts.values()) == 1

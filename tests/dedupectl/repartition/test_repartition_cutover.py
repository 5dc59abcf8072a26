"""The cutover without Spark: from empty staged stores and a build that read nothing, the fold of the tails alone
builds the new layout (the same code path that folds what the workers published after a build's read). A
cutover stopped half-way is finished by running it again, and the worker waits for it."""

from __future__ import annotations

import json
import os
import signal
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
from dedupectl.worker.crashpoint import ENVIRONMENT as CRASHPOINT
from reconcile.kafka import partition_counts
from store.dedup_store import DedupStore
from store.layout import store_path


def _command(pipeline, data_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "dedupectl.cli.app", "repartition", *args, "-b", pipeline.kafka.bootstrap_servers,
        "-t", pipeline.input_topic, "-o", pipeline.output_topic, "-d", str(data_dir),
    ]  # fmt: skip


def _cli(pipeline, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        _command(pipeline, data_dir, *args), capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert result.returncode == 0, result.stderr
    return result


def _event(message_id: bytes) -> tuple[bytes, bytes]:
    return message_id, b'{"messageId": "%s"}' % message_id


def _staged_build(pipeline, data_dir: Path, old_ids: list[bytes]) -> CutoverRequest:
    """The old layout's output and stores, and a staged build of empty stores that read nothing: the cutover's
    fold of the tails then builds the whole new layout."""
    pipeline.produce(map(_event, old_ids))
    pipeline.run_worker(pipeline.config(data_dir=data_dir, partitioner="crc32"))
    staging = staging_dir(data_dir, pipeline.input_topic)
    staging.mkdir()
    for partition in range(8):
        DedupStore.open(store_path(staging, pipeline.input_topic, partition), topic=pipeline.input_topic,
                        partition=partition).close()  # fmt: skip
    Manifest(pipeline.input_topic, pipeline.output_topic, 4, 8, "crc32", (0, 0, 0, 0), 0).save(staging)
    return CutoverRequest(
        pipeline.kafka, pipeline.input_topic, pipeline.output_topic, data_dir, f"group-{pipeline.input_topic}", 6000
    )


def _check_new_layout(pipeline, data_dir: Path, old_ids: list[bytes], covered) -> None:
    """Both topics at 8 partitions, each store holding exactly its ids, and a worker of the new layout that
    drops every old id again and publishes each new one once."""
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
            assert store.state.output_offset == covered[partition]
            assert store.state.next_seq == len(mine)
    new_ids = [b"new-%05d" % n for n in range(300)]
    pipeline.produce(map(_event, old_ids + new_ids + new_ids[:50]))
    summary = pipeline.run_worker(pipeline.config(data_dir=data_dir, partitioner="crc32", misrouted="forward"))
    assert summary.published == len(new_ids)
    counts = count_ids(pipeline.kafka, pipeline.output_topic)
    assert set(counts) == set(old_ids + new_ids) and max(counts.values()) == 1


def test_a_cutover_stopped_half_way_is_finished_and_the_new_layout_is_exact(make_pipeline, tmp_path, monkeypatch):
    pipeline = make_pipeline(partitions=4)
    data_dir = tmp_path / "data"
    old_ids = [b"id-%05d" % n for n in range(1200)]
    request = _staged_build(pipeline, data_dir, old_ids)

    plan = json.loads(_cli(pipeline, data_dir, "plan", "--partition-count", "8", "--rate", "1000", "--json").stdout)
    assert (plan["old_count"], plan["new_count"], plan["partitioner"]) == (4, 8, "crc32")
    assert plan["partitioner_found"]  # from the output's 1,200 keyed records
    assert plan["stores"] == list(range(8)) and plan["output_records"] >= len(old_ids)
    assert plan["bytes_per_id_measured"] and plan["build_seconds"] == plan["output_records"] / 1000
    assert "crc32 (found in the output)" in _cli(pipeline, data_dir, "plan", "--partition-count", "8").stdout

    # stopped after the output grew, before the input did
    grow = cutover_module.grow_partitions

    def fail_on_input(kafka, topic, count):
        if topic == pipeline.input_topic:
            raise RepartitionError("stopped here by the test")
        return grow(kafka, topic, count)

    monkeypatch.setattr(cutover_module, "grow_partitions", fail_on_input)
    with pytest.raises(RepartitionError, match="stopped here"):
        cutover(request)
    manifest = Manifest.load(staging_dir(data_dir, pipeline.input_topic))
    assert manifest.phase == CUTTING_OVER and manifest.steps == ("folded", "output-grown")
    with pytest.raises(RepartitionError, match="under way"):
        refuse_cutover_under_way(data_dir, pipeline.input_topic)

    monkeypatch.setattr(cutover_module, "grow_partitions", grow)
    report = cutover(request)
    assert report.resumed and report.tails == ()  # folded by the first run, not again
    _check_new_layout(pipeline, data_dir, old_ids, report.covered)


@pytest.mark.parametrize("crashpoint", ["cutover-fold:2", "cutover-step:2", "cutover-swap:3"])
def test_a_cutover_sigkilled_at_each_step_is_finished_by_running_it_again(make_pipeline, tmp_path, crashpoint):
    """SIGKILLed after two old partitions' tails are folded, after the output grew, or after three stores of
    eight were swapped: the worker refuses to start, and the cutover run again finishes an exact layout."""
    pipeline = make_pipeline(partitions=4)
    data_dir = tmp_path / "data"
    old_ids = [b"id-%05d" % n for n in range(800)]
    _staged_build(pipeline, data_dir, old_ids)
    group = ("--group-id", f"group-{pipeline.input_topic}")  # the workers' own: the cutover waits for it to be empty
    env = {**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000"}  # the workers' (the pipeline's config)
    killed = subprocess.run(
        _command(pipeline, data_dir, "cutover", *group),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**env, CRASHPOINT: crashpoint},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with pytest.raises(RepartitionError, match="under way"):
        refuse_cutover_under_way(data_dir, pipeline.input_topic)

    _cli(pipeline, data_dir, "cutover", *group, env=env)
    kept = next(data_dir.glob(f".{pipeline.input_topic}.repartitioned-*"))
    _check_new_layout(pipeline, data_dir, old_ids, Manifest.load(kept).covered)

"""dedupectl repartition refuses, in one line with exit 2 and nothing changed: a count that does not grow, a
partitioner it cannot determine, too little disk, old stores not at their output's end, a worker still running
on the data directory; and the worker refuses to start while a cutover is under way."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from small_volume import SmallVolume, VolumeUnavailable

from dedupectl.errors import RepartitionError
from dedupectl.repartition.cutover import CutoverRequest, cutover
from dedupectl.repartition.manifest import BUILT, Manifest, staging_dir
from dedupectl.repartition.plan import PlanRequest, make_plan
from dedupectl.worker import Worker
from reconcile.kafka import partition_counts

ROOT = Path(__file__).resolve().parents[3]


def _cli(pipeline, data_dir: Path, *args: str, wrap=list) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "dedupectl.cli.app", "repartition", *args, "-b", pipeline.kafka.bootstrap_servers,
        "-t", pipeline.input_topic, "-o", pipeline.output_topic, "-d", str(data_dir),
    ]  # fmt: skip
    if args[0] == "cutover":
        command += ["--group-id", f"group-{pipeline.input_topic}"]
    # this checkout's code, also where ``wrap`` enters another mount namespace (and starts from another directory)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(wrap(command), capture_output=True, text=True, timeout=120, check=False, env=env)


def _one_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _keyed(pipeline, count: int) -> None:
    pipeline.produce((f"id-{n}".encode(), b'{"messageId": "id-%d"}' % n) for n in range(count))


def _staged(pipeline, data_dir: Path, partitioner: str = "crc32") -> Path:
    """A build's manifest, as the cutover finds it (its refusals come before it reads a staged store)."""
    staging = staging_dir(data_dir, pipeline.input_topic)
    staging.mkdir(parents=True)
    Manifest(pipeline.input_topic, pipeline.output_topic, 4, 8, partitioner, (0, 0, 0, 0), 0).save(staging)
    return staging


def _unchanged(pipeline, staging: Path) -> None:
    counts = partition_counts(pipeline.kafka, [pipeline.input_topic, pipeline.output_topic])
    assert set(counts.values()) == {4}
    assert Manifest.load(staging).phase == BUILT


def test_a_count_that_does_not_grow_is_refused(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=4)
    for count in (4, 2):
        result = _cli(pipeline, tmp_path / "data", "plan", "--partition-count", str(count))
        line = _one_line(result, f"--partition-count {count}", "grow")
        assert "4 partitions" in line
    assert set(partition_counts(pipeline.kafka, [pipeline.input_topic, pipeline.output_topic]).values()) == {4}


def test_a_partitioner_that_cannot_be_determined_is_refused(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=4)
    _keyed(pipeline, 300)
    pipeline.run_worker(pipeline.config(data_dir=tmp_path / "data", partitioner="any"))
    _one_line(_cli(pipeline, tmp_path / "data", "plan", "--partition-count", "8"), "cannot determine", "--partitioner")
    # two producers with different partitioners: no one partitioner matches every record
    _keyed(pipeline, 1200)
    producer = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "partitioner": "murmur2"})
    for n in range(2000, 2600):
        producer.produce(pipeline.input_topic, key=f"id-{n}".encode(), value=b'{"messageId": "id-%d"}' % n)
    assert producer.flush(30) == 0
    pipeline.run_worker(pipeline.config(data_dir=tmp_path / "data", partitioner="any"))
    with pytest.raises(RepartitionError, match=r"cannot determine.*crc32 matched"):
        make_plan(PlanRequest(pipeline.kafka, pipeline.input_topic, pipeline.output_topic, tmp_path / "data", 8))
    # named, it is taken as given
    given = PlanRequest(pipeline.kafka, pipeline.input_topic, pipeline.output_topic, tmp_path / "d", 8, "crc32")
    assert make_plan(given).partitioner == "crc32"


def test_too_little_disk_is_refused(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=4)
    _keyed(pipeline, 1500)
    pipeline.run_worker(pipeline.config(data_dir=tmp_path / "data"))
    try:
        volume = SmallVolume(tmp_path / "volume", size_mib=4)
    except VolumeUnavailable as error:
        pytest.skip(f"no small filesystem on this machine: {error}")
    try:
        volume.fill(leave_bytes=8192)
        result = _cli(pipeline, volume.path / "data", "build", "--partition-count", "8", wrap=volume.wrap)
        line = _one_line(result, "free")
        assert "bytes in" in line
        assert not staging_dir(volume.path / "data", pipeline.input_topic).exists()
    finally:
        volume.close()


def test_stores_behind_their_output_are_refused(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=4)
    data_dir = tmp_path / "data"
    _keyed(pipeline, 400)
    pipeline.run_worker(pipeline.config(data_dir=data_dir))
    staging = _staged(pipeline, data_dir)
    # records the store of partition 1 never recorded (as after a worker killed between commit and record)
    producer = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers})
    for n in range(3):
        producer.produce(pipeline.output_topic, key=f"late-{n}".encode(), value=b"{}", partition=1)
    assert producer.flush(30) == 0
    line = _one_line(_cli(pipeline, data_dir, "cutover"), "not its end", "start the worker on the old layout")
    assert f"{pipeline.input_topic}-1" in line
    _unchanged(pipeline, staging)


def test_a_running_worker_is_refused_and_a_worker_waits_for_an_unfinished_cutover(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=4)
    data_dir = tmp_path / "data"
    _keyed(pipeline, 100)
    stop = threading.Event()
    worker = Worker(pipeline.config(data_dir=data_dir))
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not list(data_dir.glob(f"{pipeline.input_topic}-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        staging = _staged(pipeline, data_dir)
        request = CutoverRequest(
            pipeline.kafka, pipeline.input_topic, pipeline.output_topic, data_dir, f"group-{pipeline.input_topic}", 6000
        )
        with pytest.raises(RepartitionError, match="stop every worker"):
            cutover(request)
        _unchanged(pipeline, staging)
    finally:
        stop.set()
        thread.join(60)

    # a cutover begun and not finished: the worker refuses to start on the data directory
    Manifest.load(staging).with_phase("cutting-over").save(staging)
    result = subprocess.run(
        pipeline.cli_args("w1", data_dir, "--exit-on-idle", "3"), capture_output=True, text=True, timeout=120
    )
    line = _one_line(result, "cutover", "under way", "dedupectl repartition cutover")
    assert "8 partitions" in line

"""The worker on a volume that fills up, or turns read-only, against the real broker: it stops with exit 74
and one line that names the data directory and says what to do; killed while the disk is full, and
restarted once there is room, it resumes and the output holds every id exactly once."""

from __future__ import annotations

import signal
import threading

import pytest
from small_volume import SmallVolume, VolumeUnavailable
from test_worker_crash import feed, output_end_offsets
from waiting import wait_for

from dedupectl.errors import DiskFullError
from dedupectl.sample_events import SampleSpec, generate
from dedupectl.verify import check_output

# a bound the 24 MiB volume holds (the default sizes a 25 MB id filter per partition)
SMALL_BOUND = ("--max-keys", "200000")

pytestmark = pytest.mark.slow


@pytest.fixture
def volume(tmp_path):
    try:
        small = SmallVolume(tmp_path / "volume", size_mib=24)
    except VolumeUnavailable as error:
        pytest.skip(f"no small filesystem on this machine: {error}")
    try:
        yield small
    finally:
        small.close()


def finish(worker, timeout_s: float = 120) -> tuple[int, list[str]]:
    """The worker's exit code and the lines of its stderr."""
    _, stderr = worker.communicate(timeout=timeout_s)
    return worker.returncode, stderr.splitlines()


def assert_one_line_disk_error(code: int, lines: list[str], data_dir, kind: str) -> None:
    assert code == DiskFullError.exit_code == 74, "\n".join(lines[-30:])
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, "\n".join(lines[-30:])
    assert f"the data directory {data_dir} {kind}" in errors[0], errors[0]
    assert "then restart the worker: it resumes where it stopped, with nothing lost or duplicated" in errors[0]


def test_a_full_disk_stops_the_worker_in_one_line_and_restarts_resume_exactly_once(make_pipeline, volume):
    pipeline = make_pipeline(partitions=2)
    records = list(generate(SampleSpec(30_000, duplicate_ratio=0.05, seed=11)))
    first, rest = records[:10_000], records[10_000:]
    pipeline.produce((record.key, record.value) for record in first)
    data_dir = volume.path / "data"

    def spawn(*extra: str):
        return pipeline.spawn_worker(
            "w1", data_dir, "--batch-max-messages", "500", *SMALL_BOUND, *extra, wrap=volume.wrap
        )

    # killed mid-stream once the disk is full
    worker = spawn()
    try:
        wait_for(lambda: output_end_offsets(pipeline) > 4_000, 90, "the worker to publish")
        worker.send_signal(signal.SIGSTOP)
        volume.fill()
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    killed_at = output_end_offsets(pipeline)

    # a restart on the full disk: refused in one line
    code, lines = finish(spawn())
    assert_one_line_disk_error(code, lines, data_dir, "is out of space")
    assert "0 B left of 24.0 MiB" in lines[-1]

    # room again, input arriving, and the disk fills up under the running worker
    volume.free()
    feeder = threading.Thread(target=feed, args=(pipeline, rest, threading.Event(), 1_000, 0.3), daemon=True)
    feeder.start()
    worker = spawn()
    try:
        wait_for(lambda: output_end_offsets(pipeline) > killed_at + 2_000, 90, "the restarted worker to publish")
        volume.fill()
        code, lines = finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert_one_line_disk_error(code, lines, data_dir, "is out of space")
    feeder.join(timeout=120)
    assert not feeder.is_alive()

    # room again: the store opens, recovery records what the failed write missed, and the rest goes through
    volume.free()
    code, lines = finish(spawn("--exit-on-idle", "4"), timeout_s=180)
    assert code == 0, "\n".join(lines[-30:])
    expected = {record.key for record in records if record.kind == "new"}
    check = check_output(pipeline.kafka, pipeline.output_topic, expected)
    assert check.exactly_once, check


def test_a_volume_turned_read_only_is_refused_in_one_line_and_a_restart_resumes(make_pipeline, volume):
    # a volume the kernel turned read-only after disk errors; tmpfs cannot go read-only while files are open
    # for writing, so the worker is killed first, as a crash-looping supervisor would find it
    pipeline = make_pipeline(partitions=1)
    records = list(generate(SampleSpec(4_000, duplicate_ratio=0.05, seed=12)))
    half = len(records) // 2
    pipeline.produce((record.key, record.value) for record in records[:half])
    data_dir = volume.path / "data"
    worker = pipeline.spawn_worker("w1", data_dir, *SMALL_BOUND, wrap=volume.wrap)
    try:
        wait_for(lambda: output_end_offsets(pipeline) >= 1_000, 90, "the worker to publish")
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    volume.remount("ro")
    pipeline.produce((record.key, record.value) for record in records[half:])

    code, lines = finish(pipeline.spawn_worker("w1", data_dir, *SMALL_BOUND, wrap=volume.wrap))
    assert_one_line_disk_error(code, lines, data_dir, "is on a read-only filesystem")
    assert "remount it read-write" in lines[-1]

    volume.remount("rw")
    code, lines = finish(pipeline.spawn_worker("w1", data_dir, "--exit-on-idle", "4", *SMALL_BOUND, wrap=volume.wrap))
    assert code == 0, "\n".join(lines[-30:])
    expected = {record.key for record in records if record.kind == "new"}
    assert check_output(pipeline.kafka, pipeline.output_topic, expected).exactly_once


def test_a_stop_that_cannot_write_what_it_owes_exits_74_and_a_restart_resumes(make_pipeline, volume):
    # the disk fills while the worker idles; its stop then cannot save the id filter it owes
    pipeline = make_pipeline(partitions=1)
    records = list(generate(SampleSpec(4_000, duplicate_ratio=0.05, seed=13)))
    expected = {record.key for record in records if record.kind == "new"}
    pipeline.produce((record.key, record.value) for record in records)
    data_dir = volume.path / "data"
    worker = pipeline.spawn_worker("w1", data_dir, *SMALL_BOUND, wrap=volume.wrap)
    try:
        wait_for(lambda: output_end_offsets(pipeline) >= len(expected), 90, "the worker to publish everything")
        volume.fill()
        worker.send_signal(signal.SIGTERM)
        code, lines = finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert_one_line_disk_error(code, lines, data_dir, "is out of space")

    volume.free()
    code, lines = finish(pipeline.spawn_worker("w1", data_dir, "--exit-on-idle", "4", *SMALL_BOUND, wrap=volume.wrap))
    assert code == 0, "\n".join(lines[-30:])
    assert check_output(pipeline.kafka, pipeline.output_topic, expected).exactly_once

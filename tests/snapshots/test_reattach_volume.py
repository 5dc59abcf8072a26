"""``dedupectl reattach`` against the session's moto server: a volume moved from one instance to another with
its partition checked on both sides; refusals for wrong tags, wrong zone and a live worker; --stop-worker
with a real worker process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics
from snapshots.backends.aws import translate_aws_error
from snapshots.volumes import mount_of
from store.worker_status import read_statuses


def reattach_args(ec2, volume: str, instance: str, *extra: str) -> list[str]:
    return [
        "reattach", "--partition", "3", "--volume", volume, "--to-instance", instance,
        "--endpoint-url", ec2.endpoint_url, "--poll-interval", "0.05", *extra,
    ]  # fmt: skip


def error_line(stderr: str) -> str:
    """The last line: reattach prints each completed check on stderr before the one-line error."""
    lines = stderr.strip().splitlines()
    assert sum(line.startswith("error:") for line in lines) == 1 and "Traceback" not in stderr
    return lines[-1]


def live_status(data_dir, topic: str, partition: int) -> None:
    """A status file naming this test process (alive, started before the file) as the partition's worker."""
    data_dir.mkdir(parents=True, exist_ok=True)
    status = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "worker_id": "busy",
        "input_topic": topic,
        "partitions": [partition],
        "updated_at": time.time(),
    }
    (data_dir / "worker-busy.json").write_text(json.dumps(status))


def test_reattach_moves_the_volume_and_checks_both_sides(cli, ec2, make_store, volume_mount):
    old, new = ec2.instance(), ec2.instance()
    tags = {"dedupectl:topic": "events", "dedupectl:partition": "3"}
    volume = ec2.volume(tags, attach_to=old, device=volume_mount.device)
    data_dir = volume_mount.path
    make_store(data_dir, "events", 3, 500)

    plan = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir), "--unmount", "--dry-run", "--json"))
    assert plan.exit_code == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["dry_run"] and planned["from_instance"] == old
    assert [s["name"] for s in planned["steps"] if s["status"] == "planned"] == [
        "unmount", "detach", "wait detached", "attach", "wait attached", "check attached",
    ]  # fmt: skip
    assert ec2.attached_to(volume) == old and os.path.ismount(data_dir), "a dry run changes nothing"

    result = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir), "--unmount", "--json"))
    assert result.exit_code == 0, result.stderr
    moved = json.loads(result.stdout)
    assert ec2.attached_to(volume) == new
    steps = {s["name"]: s for s in moved["steps"]}
    assert list(steps) == [
        "check volume", "check target instance", "check store", "check device", "check worker", "unmount",
        "detach", "wait detached", "attach", "wait attached", "check attached",
    ]  # fmt: skip
    assert "events[3]" in steps["check store"]["detail"] and "output offset 500" in steps["check store"]["detail"]
    assert f"({volume_mount.device}, ext4), the device {volume} is attached as" in steps["check device"]["detail"]
    assert all(s["status"] == "done" and s["seconds"] >= 0 for s in moved["steps"])
    assert "still tagged for partition 3" in steps["check attached"]["detail"]
    assert not os.path.ismount(data_dir), "unmounted before the detach"
    assert "✓ detach (" in result.stderr and "s): from " + old in result.stderr, "steps print live with timings"

    again = cli(*reattach_args(ec2, volume, new))
    assert again.exit_code == 2 and f"already attached to {new}" in again.stderr


def test_reattach_refuses_when_the_checked_store_is_not_on_the_volume(cli, ec2, tmp_path, make_store):
    old, new = ec2.instance(), ec2.instance()
    volume = ec2.volume({"dedupectl:topic": "events", "dedupectl:partition": "3"}, attach_to=old)
    data_dir = tmp_path / "on-root"
    make_store(data_dir, "events", 3, 50)
    mount = mount_of(data_dir)
    verdict = "is not on" if mount.is_root else "cannot be shown to be on"
    for extra in ((), ("--dry-run",)):
        result = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir), *extra))
        assert result.exit_code == 2
        assert error_line(result.stderr) == (
            f"error: the store in {data_dir} {verdict} volume {volume}: {data_dir} is on "
            f"{mount.describe()} ({mount.source}, {mount.fstype}); {volume} is attached as /dev/sdf: a tag is not "
            f"proof: give the data directory on {volume}'s mount (`findmnt -T {data_dir}` shows its device, which "
            f"must be the one {volume} is attached as, or an NVMe device whose serial is it)"
        )
        assert ec2.attached_to(volume) == old, "nothing detached"

    loose = ec2.volume({"dedupectl:topic": "events", "dedupectl:partition": "3"})
    result = cli(*reattach_args(ec2, loose, new, "--data-dir", str(data_dir)))
    assert result.exit_code == 2 and f"{verdict} volume {loose}" in error_line(result.stderr)
    assert "is attached as nothing" in result.stderr


@pytest.fixture
def fake_umount(tmp_path, monkeypatch):
    """An ``umount`` first on PATH that records its argument and exits with ``fake_umount.code`` (and says
    ``fake_umount.says`` on stderr): the unmount step without root."""

    class Umount:
        code, says = 0, ""
        log = tmp_path / "umount.log"

        def arm(self) -> None:
            script.write_text(f"#!/bin/sh\necho \"$1\" >> {self.log}\necho '{self.says}' >&2\nexit {self.code}\n")
            script.chmod(0o755)

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "umount"
    umount = Umount()
    umount.arm()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return umount


def test_reattach_on_a_mount_table_without_root(cli, ec2, make_store, tmp_path, fake_kernel, fake_umount):
    """What the loop-mounted tests check for real, from a mount table and an NVMe serial made here: the device
    check, the unmount plan and step, the live-worker refusal, --stop-worker, and the move itself."""
    old, new = ec2.instance(), ec2.instance()
    tags = {"dedupectl:topic": "events", "dedupectl:partition": "3"}
    volume = ec2.volume(tags, attach_to=old)
    data_dir = tmp_path / "mnt"
    make_store(data_dir, "events", 3, 500)
    fake_kernel.nvme("nvme1n1", volume.replace("-", ""))
    fake_kernel.mount(data_dir, "/dev/nvme1n1")
    on_volume = f"{data_dir} is on {data_dir} (/dev/nvme1n1, ext4), which is volume {volume}"

    plan = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir), "--unmount", "--dry-run", "--json"))
    assert plan.exit_code == 0, plan.stderr
    steps = {s["name"]: s for s in json.loads(plan.stdout)["steps"]}
    assert (steps["check device"]["status"], steps["check device"]["detail"]) == ("done", on_volume)
    assert (steps["unmount"]["status"], steps["unmount"]["detail"]) == ("planned", f"would run umount {data_dir}")

    mounted = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir)))
    assert mounted.exit_code == 2
    assert error_line(mounted.stderr).startswith(f"error: {data_dir} is on {data_dir}, still mounted: detaching")

    live_status(data_dir, "events", 3)
    busy = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir), "--unmount"))
    assert busy.exit_code == 2 and "serves partition 3: refusing to detach its volume" in error_line(busy.stderr)
    (data_dir / "worker-busy.json").unlink()

    fake_umount.code, fake_umount.says = 32, f"umount: {data_dir}: target is busy."
    fake_umount.arm()
    stuck = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir), "--unmount"))
    assert stuck.exit_code == 2
    assert error_line(stuck.stderr).startswith(f"error: umount {data_dir} failed: umount: {data_dir}: target is busy.")
    assert ec2.attached_to(volume) == old, "nothing detached by any refusal"

    fake_umount.code, fake_umount.says = 0, ""
    fake_umount.arm()
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # the partition's worker
    try:
        time.sleep(0.05)  # the status file is written after the process started, as a worker writes it
        status = {"pid": stand_in.pid, "host": socket.gethostname(), "worker_id": "stand-in",
                  "input_topic": "events", "partitions": [3, 5], "updated_at": time.time()}  # fmt: skip
        (data_dir / "worker-stand-in.json").write_text(json.dumps(status))
        args = ("--data-dir", str(data_dir), "--stop-worker", "--unmount", "--json")
        moved = cli(*reattach_args(ec2, volume, new, *args))
        assert moved.exit_code == 0, moved.stderr
    finally:
        stand_in.kill()
        stand_in.wait()
    steps = json.loads(moved.stdout)["steps"]
    assert [s["name"] for s in steps][-7:] == [
        "stop worker", "unmount", "detach", "wait detached", "attach", "wait attached", "check attached",
    ]  # fmt: skip
    assert "exited" in steps[-7]["detail"] and "also serves 5" in steps[-7]["detail"]
    assert stand_in.returncode == -signal.SIGTERM, "stopped by SIGTERM, before the unmount"
    assert ec2.attached_to(volume) == new
    assert fake_umount.log.read_text().splitlines() == [str(data_dir)] * 2


def test_reattach_refuses_a_volume_the_serial_shows_is_another(cli, ec2, make_store, tmp_path, fake_kernel):
    old, new = ec2.instance(), ec2.instance()
    tags = {"dedupectl:topic": "events", "dedupectl:partition": "3"}
    holder = ec2.volume(tags, attach_to=old)
    moved = ec2.volume(tags, attach_to=old, device="/dev/sdg")  # tagged alike, but not what -d is on
    data_dir = tmp_path / "mnt"
    make_store(data_dir, "events", 3, 50)
    fake_kernel.nvme("nvme1n1", holder.replace("-", ""), partitions=("nvme1n1p1",))
    fake_kernel.mount(data_dir, "/dev/nvme1n1p1")
    result = cli(*reattach_args(ec2, moved, new, "--data-dir", str(data_dir), "--dry-run"))
    assert result.exit_code == 2
    assert error_line(result.stderr) == (
        f"error: the store in {data_dir} is not on volume {moved}: {data_dir} is on {data_dir} "
        f"(/dev/nvme1n1p1, ext4), which is volume {holder}: pass the volume that holds it, or a data directory "
        f"on {moved}'s mount"
    )
    assert ec2.attached_to(moved) == old


def test_reattach_refuses_wrong_partition_zone_or_missing_tags(cli, ec2):
    old, same_zone, other_zone = ec2.instance(), ec2.instance(), ec2.instance("us-east-1b")
    wrong = ec2.volume({"dedupectl:partition": "4"}, attach_to=old)
    result = cli(*reattach_args(ec2, wrong, same_zone))
    assert result.exit_code == 2
    assert error_line(result.stderr) == (
        f"error: volume {wrong} is tagged for partition(s) 4, not 3: "
        "pass the volume of this partition (see its dedupectl:partition tag)"
    )

    untagged = ec2.volume({}, attach_to=ec2.instance())
    result = cli(*reattach_args(ec2, untagged, same_zone))
    assert result.exit_code == 2 and f"volume {untagged} has no dedupectl:partition tag" in result.stderr

    right = ec2.volume({"dedupectl:partition": "3"}, attach_to=old)
    result = cli(*reattach_args(ec2, right, other_zone))
    assert result.exit_code == 2
    assert error_line(result.stderr).startswith(
        f"error: wrong availability zone: volume {right} is in us-east-1a but instance {other_zone} is in us-east-1b"
    )
    assert ec2.attached_to(wrong) == old and ec2.attached_to(right) == old, "nothing was detached"

    missing = cli(*reattach_args(ec2, "vol-0123456789abcdef0", same_zone))
    assert missing.exit_code == 2 and "vol-0123456789abcdef0 does not exist" in missing.stderr


def test_reattach_refuses_while_the_partitions_worker_is_live(cli, ec2, make_store, volume_mount):
    old, new = ec2.instance(), ec2.instance()
    tags = {"dedupectl:topic": "events", "dedupectl:partition": "3"}
    volume = ec2.volume(tags, attach_to=old, device=volume_mount.device)
    data_dir = volume_mount.path
    make_store(data_dir, "events", 3, 10)
    live_status(data_dir, "events", 3)
    result = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir)))
    assert result.exit_code == 2
    assert "worker 'busy'" in result.stderr and "serves partition 3: refusing to detach its volume" in result.stderr
    assert "--stop-worker" in result.stderr
    assert ec2.attached_to(volume) == old


def test_stop_worker_stops_a_real_worker_then_moves_the_volume(cli, ec2, kafka_broker, unique_name, volume_mount):
    kafka = KafkaConfig(kafka_broker.bootstrap_servers)
    topic = unique_name("reattach")
    create_topics(kafka, [topic, f"{topic}-out", f"{topic}.dead-letter"], 4)
    data_dir = volume_mount.path
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "dedupectl.cli.app", "run", "-b", kafka.bootstrap_servers, "-i", topic,
            "-o", f"{topic}-out", "-d", str(data_dir), "--worker-id", "mover", "--log-level", "warning",
        ],
        env={**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not any(3 in s.partitions for s in read_statuses(data_dir)):
            assert worker.poll() is None, worker.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the worker never took partition 3"
            time.sleep(0.2)
        old, new = ec2.instance(), ec2.instance()
        tags = {"dedupectl:topic": topic, "dedupectl:partition": "3"}
        volume = ec2.volume(tags, attach_to=old, device=volume_mount.device)

        refused = cli(*reattach_args(ec2, volume, new, "--data-dir", str(data_dir)))
        assert refused.exit_code == 2 and "worker 'mover'" in refused.stderr

        args = ("--data-dir", str(data_dir), "--stop-worker", "--unmount", "--json")
        result = cli(*reattach_args(ec2, volume, new, *args))
        assert result.exit_code == 0, result.stderr
        steps = {s["name"]: s for s in json.loads(result.stdout)["steps"]}
        assert "exited" in steps["stop worker"]["detail"] and "also serves 0,1,2" in steps["stop worker"]["detail"]
        assert ec2.attached_to(volume) == new
        assert worker.wait(timeout=30) == 0, "SIGTERM is a graceful stop"
        assert not os.path.ismount(data_dir) and steps["unmount"]["status"] == "done"
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("UnauthorizedOperation", "permission denied: these AWS credentials may not call ec2:DetachVolume on vol-1"),
        ("AccessDenied", "permission denied: these AWS credentials may not call ec2:DetachVolume on vol-1"),
        ("VolumeInUse", "volume vol-1 is in use (msg): detach it first"),
        ("InvalidVolume.ZoneMismatch", "volume and instance are in different availability zones (msg)"),
        ("IncorrectState", "vol-1 is not in a state that allows ec2:DetachVolume (msg)"),
        ("AuthFailure", "AWS rejected the credentials (AuthFailure)"),
        ("Throttling", "AWS ec2:DetachVolume on vol-1 failed: Throttling (msg)"),
    ],
)
def test_aws_error_codes_become_operator_messages(code, expected):
    error = ClientError({"Error": {"Code": code, "Message": "msg"}}, "DetachVolume")
    assert expected in str(translate_aws_error(error, "ec2:DetachVolume", "vol-1"))


def test_missing_credentials_message():
    message = str(translate_aws_error(NoCredentialsError(), "ec2:DescribeVolumes", "vol-1"))
    assert message.startswith("no AWS credentials found: set AWS_PROFILE")

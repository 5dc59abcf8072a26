"""Fixtures for snapshot and reattach tests: small real stores, the CLI in and out of process, AWS
credentials for the session's moto server, and the mounts and block devices a volume check reads (a real
loop-mounted filesystem with root, a mount table and /sys/class/block of the test's own making without)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dedupectl.cli.app import main
from store.dedup_store import DedupStore
from store.layout import store_path

ROOT = Path(__file__).resolve().parents[2]


def _make_store(data_dir: Path, topic: str, partition: int, count: int, *, start: int = 0) -> Path:
    """A real store holding ``count`` ids, as a worker would have recorded them."""
    path = store_path(data_dir, topic, partition)
    with DedupStore.open(path, topic=topic, partition=partition) as store:
        for offset in range(start, start + count, 5_000):
            ids = [f"{topic}-{partition}-{n:08d}".encode() for n in range(offset, min(offset + 5_000, start + count))]
            store.record(ids, [1_700_000_000_000 + n for n in range(len(ids))], input_offset=offset + len(ids))
        store.record([], [], output_offset=start + count)
    return path


def _tree_digest(path: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under ``path``: proof that nothing there was touched."""
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file()}


@pytest.fixture
def make_store() -> Callable[..., Path]:
    """``make_store(data_dir, topic, partition, count)`` -> the path of a real store holding ``count`` ids."""
    return _make_store


@pytest.fixture
def tree_digest() -> Callable[[Path], dict[str, tuple[int, int]]]:
    """``tree_digest(path)``: (size, mtime) of every file below ``path``, to prove nothing was touched."""
    return _tree_digest


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """``cli("snapshot", "list", ...)``: the console-script entry point (``app.main``) in this process, so
    errors come out exactly as the operator sees them: one line on stderr and the exit code."""

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["dedupectl", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture
def cli_process() -> Callable[..., CliResult]:
    """``cli_process("snapshot", "list", ..., env={...})``: ``python -m dedupectl.cli.app`` in a subprocess,
    for the exact one-line error and exit code the operator gets."""

    def run(*args: str, env: dict[str, str] | None = None) -> CliResult:
        completed = subprocess.run(
            [sys.executable, "-m", "dedupectl.cli.app", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            cwd=ROOT,
            timeout=120,
        )
        return CliResult(completed.returncode, completed.stdout, completed.stderr)

    return run


@pytest.fixture
def aws_env(moto_endpoint_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Dummy credentials and a region for the moto server, in this test's environment only."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "DEDUPECTL_S3_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    return moto_endpoint_url


@dataclass(frozen=True)
class Ec2:
    """The moto EC2 API plus helpers to make what a reattach needs."""

    client: object
    endpoint_url: str

    def instance(self, zone: str = "us-east-1a") -> str:
        reservation = self.client.run_instances(
            ImageId="ami-03cf127a",
            MinCount=1,
            MaxCount=1,
            InstanceType="t3.micro",
            Placement={"AvailabilityZone": zone},
        )
        return reservation["Instances"][0]["InstanceId"]

    def volume(
        self, tags: dict[str, str], zone: str = "us-east-1a", attach_to: str | None = None, device: str = "/dev/sdf"
    ) -> str:
        spec = [{"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
        volume_id = self.client.create_volume(AvailabilityZone=zone, Size=10, TagSpecifications=spec)["VolumeId"]
        if attach_to is not None:
            self.client.attach_volume(VolumeId=volume_id, InstanceId=attach_to, Device=device)
        return volume_id

    def attached_to(self, volume_id: str) -> str | None:
        (volume,) = self.client.describe_volumes(VolumeIds=[volume_id])["Volumes"]
        return next((a["InstanceId"] for a in volume.get("Attachments", []) if a["State"] == "attached"), None)


@pytest.fixture
def ec2(aws_env: str) -> Ec2:
    import boto3

    return Ec2(boto3.client("ec2", endpoint_url=aws_env), aws_env)


@dataclass(frozen=True)
class VolumeMount:
    path: Path  # the mount point: a data directory on a filesystem of its own
    device: str  # the block device it is mounted from, e.g. /dev/loop3


@pytest.fixture
def volume_mount(tmp_path: Path) -> Iterator[VolumeMount]:
    """A real ext4 filesystem on a loop device mounted at ``tmp_path/mnt``: a data directory on a volume of its
    own, as on an instance (attach the moto volume as ``device`` to stand for it in EC2). Needs root."""
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("mkfs.ext4", "losetup", "mount", "umount")):
        pytest.skip("a loop-mounted filesystem needs root, mkfs.ext4, losetup, mount and umount")
    image, mount = tmp_path / "volume.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    attached = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
    if attached.returncode != 0:
        pytest.skip(f"no loop device: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    try:
        mounted = subprocess.run(["mount", device, str(mount)], capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount {device}: {mounted.stderr.strip()}")
        yield VolumeMount(mount, device)
    finally:
        if os.path.ismount(mount):
            subprocess.run(["umount", "--lazy", str(mount)], check=False)
        subprocess.run(["losetup", "--detach", device], check=False, capture_output=True)


@dataclass(frozen=True)
class FakeKernel:
    """A mount table and a ``/sys/class/block`` of the test's own making, read by ``snapshots.volumes`` in
    place of the kernel's: which device holds a directory, and which EBS volume an NVMe device is."""

    mountinfo: Path
    sys_block: Path
    devices: Path

    def mount(self, point: Path, source: str, fstype: str = "ext4") -> None:
        """Add a line to the mount table: ``point`` mounted from ``source`` (escaped as the kernel does)."""
        escaped = os.path.realpath(point).replace("\\", "\\134").replace(" ", "\\040")
        number = 100 + len(self.mountinfo.read_text().splitlines())
        with self.mountinfo.open("a") as table:
            table.write(f"{number} 1 259:{number} / {escaped} rw,relatime shared:{number} - {fstype} {source} rw\n")

    def nvme(self, disk: str, serial: str, partitions: tuple[str, ...] = ()) -> None:
        """An NVMe disk (``nvme1n1``) whose controller reports ``serial``, as EBS on Nitro does (``vol0abc…``),
        with its partitions (``nvme1n1p1``), linked from sys/class/block the way the kernel links them."""
        controller_name = re.fullmatch(r"(nvme\d+)n\d+", disk)
        assert controller_name is not None, disk
        controller = self.devices / "nvme" / controller_name.group(1)
        node = controller / disk
        node.mkdir(parents=True)
        (controller / "serial").write_text(f"{serial:<20}\n")  # the kernel pads it with spaces
        (node / "device").symlink_to(controller)
        (self.sys_block / disk).symlink_to(node)
        for partition in partitions:
            (node / partition).mkdir()
            (self.sys_block / partition).symlink_to(node / partition)


@pytest.fixture
def fake_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    """The volume checks' view of mounts and devices, without root: the root filesystem on /dev/vda1 and
    nothing else until the test adds it (``fake_kernel.mount``, ``fake_kernel.nvme``)."""
    import snapshots.volumes

    root = tmp_path / "kernel"
    kernel = FakeKernel(root / "mountinfo", root / "sys" / "class" / "block", root / "sys" / "devices")
    kernel.sys_block.mkdir(parents=True)
    kernel.devices.mkdir(parents=True)
    kernel.mountinfo.write_text("21 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n")
    monkeypatch.setattr(snapshots.volumes, "MOUNTINFO", kernel.mountinfo)
    monkeypatch.setattr(snapshots.volumes, "SYS_BLOCK", kernel.sys_block)
    return kernel

"""``dedupectl reattach``: move a partition's EBS volume to another instance, the way Segment did.

Checks come first and change nothing: the volume's tags name the partition (and topic); the target instance
is in the volume's availability zone; where the data directory is reachable (``--data-dir``, the volume's
mount on this host), the store on it belongs to that partition and no live worker serves it (``--stop-worker``
sends it SIGTERM and waits); the data directory's filesystem, when it is a separate mount, is unmounted
(``--unmount``) or the move is refused. Then: detach (with the InstanceId, which EC2 accepts and moto requires), wait
until available, attach, wait until attached, and check the attachment and tags on the target side.
With ``--data-dir``, the directory's mount must be the volume being moved (its device against the volume's
attachment): a store validated on another disk says nothing about the volume.
``--dry-run`` runs the checks and prints the remaining steps as a plan.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from snapshots.backends.aws import AwsOptions, aws_errors
from snapshots.backends.ebs import (
    TAG_PARTITION,
    TAG_TOPIC,
    describe_volume,
    live_attachment,
    tagged_partitions,
    tags_of,
    wait_for,
)
from snapshots.errors import ReattachError
from snapshots.stop_worker import stop_worker
from snapshots.volumes import mount_of, require_on_volume
from store.dedup_store import DedupStore
from store.errors import DedupeError
from store.layout import store_path
from store.worker_status import describe, is_live, read_statuses

LIVE_ATTACHMENT = ("attaching", "attached")


@dataclass(frozen=True)
class ReattachRequest:
    partition: int
    volume_id: str
    to_instance: str
    topic: str | None = None
    data_dir: Path | None = None
    device: str = "/dev/sdf"
    stop_worker: bool = False
    unmount: bool = False
    dry_run: bool = False
    timeout_s: float = 300.0
    poll_s: float = 2.0
    stop_timeout_s: float = 60.0


@dataclass(frozen=True)
class Step:
    name: str
    detail: str
    seconds: float
    status: str  # done, planned, skipped


@dataclass(frozen=True)
class ReattachResult:
    volume_id: str
    topic: str | None
    partition: int
    from_instance: str | None
    to_instance: str
    availability_zone: str
    device: str
    dry_run: bool
    steps: tuple[Step, ...]
    total_seconds: float


class _Steps:
    def __init__(self, on_step: Callable[[Step], None] | None) -> None:
        self.steps: list[Step] = []
        self._on_step = on_step

    def _add(self, step: Step) -> None:
        self.steps.append(step)
        if self._on_step is not None:
            self._on_step(step)

    @contextmanager
    def run(self, name: str) -> Iterator[list[str]]:
        """Time the block; it appends its one-line outcome to the yielded list."""
        detail: list[str] = []
        started = time.perf_counter()
        yield detail
        self._add(Step(name, "; ".join(detail), time.perf_counter() - started, "done"))

    def note(self, name: str, detail: str, status: str) -> None:
        self._add(Step(name, detail, 0.0, status))


def _attachment(volume: dict) -> str | None:
    for attachment in volume.get("Attachments", []):
        if attachment.get("State") in LIVE_ATTACHMENT:
            return attachment["InstanceId"]
    return None


def _check_tags(volume: dict, request: ReattachRequest) -> str | None:
    """The topic the volume is for (from the tags or the request); raises unless it holds the partition."""
    tags = tags_of(volume)
    partitions = tagged_partitions(tags)
    volume_id = request.volume_id
    if partitions is None:
        raise ReattachError(
            f"volume {volume_id} has no {TAG_PARTITION} tag, so nothing says it holds partition {request.partition}",
            f"check what it holds, then tag it: aws ec2 create-tags --resources {volume_id} "
            f"--tags Key={TAG_PARTITION},Value={request.partition}",
        )
    if request.partition not in partitions:
        raise ReattachError(
            f"volume {volume_id} is tagged for partition(s) {','.join(map(str, sorted(partitions)))}, "
            f"not {request.partition}",
            "pass the volume of this partition (see its dedupectl:partition tag)",
        )
    tagged_topic = tags.get(TAG_TOPIC)
    if request.topic and tagged_topic and tagged_topic != request.topic:
        raise ReattachError(
            f"volume {volume_id} is tagged for topic {tagged_topic!r}, not {request.topic!r}", "check --topic"
        )
    return request.topic or tagged_topic


def _instance(ec2, instance_id: str) -> dict:
    with aws_errors("ec2:DescribeInstances", instance_id):
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    instances = [instance for reservation in reservations for instance in reservation["Instances"]]
    if not instances:
        raise ReattachError(f"instance {instance_id} does not exist", "check the id and --region")
    return instances[0]


def _check_store(data_dir: Path, topic: str, partition: int) -> str:
    path = store_path(data_dir, topic, partition)
    if not path.exists():
        raise ReattachError(
            f"no store for {topic}[{partition}] at {path}",
            "pass --data-dir as the volume's mount on this host, or leave it out to rely on the tags alone",
        )
    with DedupStore.open_secondary(path) as store:
        identity, state = store.identity, store.state
    if (identity.topic, identity.partition) != (topic, partition):
        raise ReattachError(
            f"the store at {path} belongs to {identity.topic}[{identity.partition}], not {topic}[{partition}]",
            "the volume's tags and its contents disagree: check which volume holds which partition",
        )
    return f"{path} is {topic}[{partition}] (output offset {state.output_offset}, {state.next_seq} ids recorded)"


def _check_device(request: ReattachRequest, volume: dict) -> str:
    """The store checked in the data directory must be on the volume being moved (the check an EBS snapshot
    makes too)."""
    attachment = live_attachment(volume)
    device = None if attachment is None else attachment.get("Device")
    return require_on_volume(Path(request.data_dir), request.volume_id, device, ReattachError)


def _check_worker(request: ReattachRequest, topic: str | None, steps: _Steps) -> None:
    if request.data_dir is None:
        steps.note(
            "check worker",
            "no --data-dir: cannot read worker status files here; make sure the partition's worker is stopped",
            "skipped",
        )
        return
    live = [
        status
        for status in read_statuses(request.data_dir)
        if request.partition in status.partitions and (topic is None or status.input_topic == topic) and is_live(status)
    ]
    if not live:
        steps.note("check worker", f"no live worker serves partition {request.partition}", "done")
        return
    status = live[0]
    if not request.stop_worker:
        raise ReattachError(
            f"{describe(status)} serves partition {request.partition}: refusing to detach its volume",
            "stop it first, or pass --stop-worker to SIGTERM it and wait for it to exit",
        )
    others = sorted(set(status.partitions) - {request.partition})
    extra = f" (it also serves {','.join(map(str, others))}: the group moves them elsewhere)" if others else ""
    if request.dry_run:
        steps.note("stop worker", f"would SIGTERM {describe(status)} and wait{extra}", "planned")
        return
    with steps.run("stop worker") as detail:
        seconds = stop_worker(status, timeout_s=request.stop_timeout_s)
        detail.append(f"{describe(status)} exited {seconds:.1f}s after SIGTERM{extra}")


def _check_mount(request: ReattachRequest, steps: _Steps) -> None:
    """A volume must not be detached while its filesystem is mounted. The data directory's mount is that
    volume's, unless it is the root filesystem (which cannot be the volume being moved). The mount is read
    from the same table as the device check, so both speak of the same filesystem."""
    if request.data_dir is None:
        return
    mount = mount_of(request.data_dir).point
    if mount == Path("/"):
        steps.note("check mount", f"{request.data_dir} is on the root filesystem: nothing to unmount", "done")
        return
    if request.dry_run:
        action = f"would run umount {mount}" if request.unmount else f"{mount} must be unmounted before the detach"
        steps.note("unmount", action, "planned")
        return
    if not request.unmount:
        raise ReattachError(
            f"{request.data_dir} is on {mount}, still mounted: detaching it now could corrupt the filesystem",
            f"stop the worker, umount {mount}, and rerun without -d (its checks passed), or pass --unmount",
        )
    with steps.run("unmount") as detail:
        completed = subprocess.run(["umount", str(mount)], capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise ReattachError(
                f"umount {mount} failed: {completed.stderr.strip() or completed.returncode}",
                "close what still uses it (lsof +f -- " + str(mount) + "), then rerun",
            )
        detail.append(f"unmounted {mount}")


def reattach_volume(
    request: ReattachRequest, *, aws: AwsOptions | None = None, on_step: Callable[[Step], None] | None = None
) -> ReattachResult:
    started = time.perf_counter()
    steps = _Steps(on_step)
    ec2 = (aws or AwsOptions()).client("ec2")
    volume, topic, source = _check_volume(ec2, request, steps)
    zone = volume["AvailabilityZone"]
    _check_target(ec2, request, zone, steps)
    if request.data_dir is not None and topic is not None:
        with steps.run("check store") as detail:
            detail.append(_check_store(request.data_dir, topic, request.partition))
    else:
        steps.note("check store", "not reachable from here (no --data-dir or no topic): tags checked only", "skipped")
    if request.data_dir is not None:
        with steps.run("check device") as detail:
            detail.append(_check_device(request, volume))
    _check_worker(request, topic, steps)
    _check_mount(request, steps)

    if request.dry_run:
        _plan_move(request, source, steps)
    else:
        _move(ec2, request, source, steps)
        _check_attached(ec2, request, steps)
    return ReattachResult(
        volume_id=request.volume_id,
        topic=topic,
        partition=request.partition,
        from_instance=source,
        to_instance=request.to_instance,
        availability_zone=zone,
        device=request.device,
        dry_run=request.dry_run,
        steps=tuple(steps.steps),
        total_seconds=time.perf_counter() - started,
    )


def _check_volume(ec2, request: ReattachRequest, steps: _Steps) -> tuple[dict, str | None, str | None]:
    """The volume, its topic (from its tags) and the instance it is attached to."""
    volume_id, target = request.volume_id, request.to_instance
    with steps.run("check volume") as detail:
        volume = describe_volume(ec2, volume_id)
        topic = _check_tags(volume, request)
        source = _attachment(volume)
        zone = volume["AvailabilityZone"]
        if source == target:
            raise ReattachError(f"volume {volume_id} is already attached to {target}", "nothing to do")
        detail.append(
            f"tagged for partition {request.partition}{f' of {topic}' if topic else ''}, {volume['State']} "
            f"in {zone}, attached to {source or 'nothing'}"
        )
    return volume, topic, source


def _check_target(ec2, request: ReattachRequest, zone: str, steps: _Steps) -> None:
    volume_id, target = request.volume_id, request.to_instance
    with steps.run("check target instance") as detail:
        instance = _instance(ec2, target)
        target_zone = instance.get("Placement", {}).get("AvailabilityZone")
        state = instance.get("State", {}).get("Name")
        if target_zone != zone:
            raise ReattachError(
                f"wrong availability zone: volume {volume_id} is in {zone} but instance {target} is in {target_zone}",
                f"a volume attaches only within its zone: snapshot it (snapshot create --location ebs:{volume_id}) and "
                f"restore it in {target_zone} (snapshot restore ID --location ebs: --availability-zone {target_zone})",
            )
        if state in ("shutting-down", "terminated"):
            raise ReattachError(f"instance {target} is {state}", "pick a running or stopped instance")
        taken = {mapping.get("DeviceName") for mapping in instance.get("BlockDeviceMappings", [])}
        if request.device in taken:
            raise ReattachError(f"device {request.device} is already used on {target}", "pass another --device")
        detail.append(f"{state} in {target_zone}, {request.device} free")


def _plan_move(request: ReattachRequest, source: str | None, steps: _Steps) -> None:
    volume_id, target = request.volume_id, request.to_instance
    if source is not None:
        steps.note("detach", f"detach {volume_id} from {source}", "planned")
        steps.note("wait detached", f"until {volume_id} is available", "planned")
    steps.note("attach", f"attach {volume_id} to {target} as {request.device}", "planned")
    steps.note("wait attached", f"until {volume_id} is attached to {target}", "planned")
    steps.note("check attached", f"attachment and {TAG_PARTITION} tag seen from {target}", "planned")


def _check_attached(ec2, request: ReattachRequest, steps: _Steps) -> None:
    volume_id, target = request.volume_id, request.to_instance
    with steps.run("check attached") as detail:
        volume = describe_volume(ec2, volume_id)
        _check_tags(volume, request)
        if _attachment(volume) != target:
            raise ReattachError(f"volume {volume_id} is not attached to {target} after attaching")
        detail.append(f"{volume_id} attached to {target}, still tagged for partition {request.partition}")


def _move(ec2, request: ReattachRequest, source: str | None, steps: _Steps) -> None:
    volume_id, target = request.volume_id, request.to_instance
    if source is not None:
        with steps.run("detach") as detail, aws_errors("ec2:DetachVolume", volume_id):
            ec2.detach_volume(VolumeId=volume_id, InstanceId=source)
            detail.append(f"from {source}")
        with steps.run("wait detached") as detail:
            wait_for(
                lambda: describe_volume(ec2, volume_id)["State"] == "available",
                f"{volume_id} to detach",
                request.timeout_s,
                request.poll_s,
            )
            detail.append(f"{volume_id} is available")
    try:
        with steps.run("attach") as detail, aws_errors("ec2:AttachVolume", volume_id):
            ec2.attach_volume(VolumeId=volume_id, InstanceId=target, Device=request.device)
            detail.append(f"to {target} as {request.device}")
        with steps.run("wait attached") as detail:
            wait_for(
                lambda: _attachment_state(describe_volume(ec2, volume_id), target) == "attached",
                f"{volume_id} to attach to {target}",
                request.timeout_s,
                request.poll_s,
            )
            detail.append(f"{volume_id} is attached")
    except DedupeError as error:
        where = f"detached from {source}" if source else "not attached"
        raise ReattachError(
            f"{error.message}; volume {volume_id} is now {where}",
            "fix the cause and rerun the same command (it skips the detach)",
        ) from error


def _attachment_state(volume: dict, instance_id: str) -> str | None:
    for attachment in volume.get("Attachments", []):
        if attachment.get("InstanceId") == instance_id:
            return attachment.get("State")
    return None

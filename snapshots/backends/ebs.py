"""Snapshots as EC2 snapshots of the EBS volume that holds the data directory (``--location ebs:vol-…``).

The checkpoint is first published on the volume itself (``<data_dir>/snapshots/<id>``, hard links: free),
then the volume is snapshotted. An EBS snapshot is point-in-time from the moment ``CreateSnapshot`` returns,
so the on-volume copy is removed right after: the EC2 snapshot holds it, with its manifest, and its tags
carry the manifest's summary (topic, partition, offsets, id count) for listing. To restore, create a volume
from it (``snapshot restore ID --location ebs: --availability-zone …``), attach and mount it, then restore
``<mount>/snapshots/<id>`` like any local snapshot, which checks every file.

Volumes are tagged ``dedupectl:topic`` and ``dedupectl:partition`` (comma-separated when a worker serves
several); a volume tagged for other partitions is refused. A tag never proves a volume holds the store: only
the data directory's device does (``snapshots.volumes.require_on_volume``, the check reattach makes too).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from snapshots.backends.aws import AwsOptions, aws_errors
from snapshots.backends.base import SnapshotInfo, VerifyReport
from snapshots.backends.local import LocalBackend
from snapshots.errors import CloudError, SnapshotError, SnapshotNotFoundError
from snapshots.manifest import TOOL_VERSION, Manifest
from snapshots.progress import TransferProgress
from snapshots.volumes import require_on_volume

TAG_PREFIX = "dedupectl:"
TAG_SNAPSHOT_ID = "dedupectl:snapshot-id"
TAG_TOPIC = "dedupectl:topic"
TAG_PARTITION = "dedupectl:partition"
ON_VOLUME_DIR = "snapshots"


def tags_of(resource: dict) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in resource.get("Tags", [])}


def tagged_partitions(tags: dict[str, str]) -> set[int] | None:
    """The partitions a volume's tags name, or None when it carries no partition tag."""
    raw = tags.get(TAG_PARTITION)
    if raw is None:
        return None
    try:
        return {int(part) for part in raw.split(",") if part.strip()}
    except ValueError as error:
        raise CloudError(f"unreadable {TAG_PARTITION} tag {raw!r}", "tag it as 3 or 3,7") from error


def describe_volume(ec2, volume_id: str) -> dict:
    with aws_errors("ec2:DescribeVolumes", volume_id):
        volumes = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    if not volumes:
        raise CloudError(f"{volume_id} does not exist", "check the id and the region (--region)")
    return volumes[0]


def live_attachment(volume: dict) -> dict | None:
    """The volume's attachment that is attaching or attached, or None."""
    for attachment in volume.get("Attachments", []):
        if attachment.get("State") in ("attaching", "attached"):
            return attachment
    return None


def wait_for(check, what: str, timeout_s: float, poll_s: float) -> float:
    """Poll ``check()`` until true; returns the seconds waited."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise CloudError(f"timed out after {timeout_s:.0f}s waiting for {what}", "check the AWS console, retry")
        time.sleep(poll_s)
    return time.monotonic() - started


class EbsBackend:
    kind = "ebs"

    def __init__(self, volume_id: str | None, aws: AwsOptions, data_dir: Path | None = None) -> None:
        self.volume_id = volume_id
        self.data_dir = data_dir
        self._aws = aws
        self._ec2 = None
        self.poll_s = 2.0
        self.timeout_s = 600.0

    def describe(self) -> str:
        return f"ebs:{self.volume_id or ''}"

    @property
    def ec2(self):
        if self._ec2 is None:
            self._ec2 = self._aws.client("ec2")
        return self._ec2

    def _require_volume(self) -> str:
        if not self.volume_id:
            raise SnapshotError(
                "ebs: needs the id of the volume that holds the data directory",
                "write the destination as ebs:vol-0123… (there is no instance metadata to find it)",
            )
        return self.volume_id

    def check_writable(self) -> None:
        """The volume exists and is attached (which partitions it holds: check_partition)."""
        volume_id = self._require_volume()
        if self.data_dir is None:
            raise SnapshotError("ebs: snapshots need --data-dir (the volume's mount)")
        volume = describe_volume(self.ec2, volume_id)
        if live_attachment(volume) is None:
            raise SnapshotError(
                f"volume {volume_id} is not attached to any instance (it is {volume.get('State', '?')}), "
                f"so it does not hold the data directory {self.data_dir}",
                "pass the volume attached here that holds the data directory (see lsblk, and its mount)",
            )

    def check_data_dir(self, topic: str) -> None:
        """Before the partitions are known (a worker's start): the volume is attached, not tagged for another
        topic, and holds the data directory. Each snapshot still checks its own partition (check_partition)."""
        self.check_writable()
        volume = describe_volume(self.ec2, self._require_volume())
        tags = tags_of(volume)
        if tags.get(TAG_TOPIC) not in (None, topic):
            raise SnapshotError(
                f"volume {self.volume_id} is tagged for topic {tags[TAG_TOPIC]!r}, not {topic!r}",
                "pass the volume that holds this worker's data directory",
            )
        attachment = live_attachment(volume) or {}
        require_on_volume(Path(self.data_dir), self.volume_id, attachment.get("Device"), SnapshotError)

    def check_partition(self, topic: str, partition: int) -> None:
        """Refuse unless the volume holds this partition's store: it must be attached, not tagged for other
        partitions, and the data directory's device must be that volume."""
        volume = describe_volume(self.ec2, self._require_volume())
        tags = tags_of(volume)
        partitions = tagged_partitions(tags)
        tagged_topic = tags.get(TAG_TOPIC)
        if (tagged_topic is not None and tagged_topic != topic) or (
            partitions is not None and partition not in partitions
        ):
            shown = ",".join(str(p) for p in sorted(partitions or ())) or "?"
            raise SnapshotError(
                f"volume {self.volume_id} is tagged for {tagged_topic or '?'} partition(s) {shown}, "
                f"not {topic} partition {partition}",
                "pass the volume that holds this partition's data directory",
            )
        attachment = live_attachment(volume)
        if attachment is None:
            raise SnapshotError(
                f"volume {self.volume_id} is not attached to any instance (it is {volume.get('State', '?')}), "
                f"so it does not hold the store of {topic}[{partition}] in {self.data_dir}",
                "pass the volume attached here that holds the data directory (see lsblk, and its mount)",
            )
        require_on_volume(Path(self.data_dir), self.volume_id, attachment.get("Device"), SnapshotError)

    def publish(self, checkpoint_dir: Path, manifest: Manifest, progress: TransferProgress) -> str:
        volume_id = self._require_volume()
        self.check_partition(manifest.topic, manifest.partition)
        on_volume = LocalBackend(Path(self.data_dir) / ON_VOLUME_DIR, link=True, create=True)
        on_volume.check_writable()
        on_volume.publish(checkpoint_dir, manifest, progress)
        tags = {
            "Name": manifest.snapshot_id,
            TAG_SNAPSHOT_ID: manifest.snapshot_id,
            TAG_TOPIC: manifest.topic,
            TAG_PARTITION: str(manifest.partition),
            "dedupectl:input-offset": str(manifest.input_offset),
            "dedupectl:output-offset": str(manifest.output_offset),
            "dedupectl:id-count": str(manifest.id_count),
            "dedupectl:total-bytes": str(manifest.total_bytes),
            "dedupectl:created-ms": str(manifest.created_ms),
            "dedupectl:checkpoint-path": f"{ON_VOLUME_DIR}/{manifest.snapshot_id}",
            "dedupectl:tool-version": TOOL_VERSION,
        }
        try:
            with aws_errors("ec2:CreateSnapshot", volume_id):
                created = self.ec2.create_snapshot(
                    VolumeId=volume_id,
                    Description=f"dedupectl snapshot {manifest.snapshot_id}",
                    TagSpecifications=[
                        {"ResourceType": "snapshot", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                    ],
                )
        finally:  # point-in-time once CreateSnapshot returned: the volume's copy is no longer needed
            on_volume.delete(manifest.snapshot_id)
            with contextlib.suppress(OSError):  # the folder made for that copy, when nothing else is in it
                on_volume.root.rmdir()
        return created["SnapshotId"]

    def _snapshots(self, snapshot_id: str | None = None) -> list[dict]:
        filters = [{"Name": "tag-key", "Values": [TAG_SNAPSHOT_ID]}]
        if snapshot_id is not None:
            filters = [{"Name": f"tag:{TAG_SNAPSHOT_ID}", "Values": [snapshot_id]}]
        if self.volume_id:
            filters.append({"Name": "volume-id", "Values": [self.volume_id]})
        found: list[dict] = []
        with aws_errors("ec2:DescribeSnapshots", self.describe()):
            for page in self.ec2.get_paginator("describe_snapshots").paginate(OwnerIds=["self"], Filters=filters):
                found.extend(page["Snapshots"])
        return found

    def _find(self, snapshot_id: str) -> dict:
        found = self._snapshots(snapshot_id)
        if not found:
            raise SnapshotNotFoundError(
                f"no EBS snapshot tagged {TAG_SNAPSHOT_ID}={snapshot_id}"
                + (f" of volume {self.volume_id}" if self.volume_id else ""),
                f"see `dedupectl snapshot list --location {self.describe()}`",
            )
        return found[0]

    @staticmethod
    def _info(snapshot: dict) -> SnapshotInfo:
        tags = tags_of(snapshot)

        def number(key: str, default: int = -1) -> int:
            try:
                return int(tags.get(f"{TAG_PREFIX}{key}", default))
            except ValueError:
                return default

        return SnapshotInfo(
            snapshot_id=tags[TAG_SNAPSHOT_ID],
            topic=tags.get(TAG_TOPIC, "?"),
            partition=number("partition"),
            input_offset=number("input-offset"),
            output_offset=number("output-offset"),
            id_count=number("id-count", 0),
            total_bytes=number("total-bytes", 0),
            created_ms=number("created-ms", 0),
            location=snapshot["SnapshotId"],
            state=snapshot.get("State", "?"),
        )

    def list(self) -> list[SnapshotInfo]:
        return sorted((self._info(s) for s in self._snapshots()), key=lambda info: info.snapshot_id)

    def list_incomplete(self) -> list[str]:
        return []  # an EC2 snapshot exists whole or not at all; pending ones are listed with their state

    def empty_note(self) -> str:
        of = f" of volume {self.volume_id}" if self.volume_id else ""
        return f"no EBS snapshots tagged {TAG_SNAPSHOT_ID}{of} in this region"

    def verify(self, snapshot_id: str, progress: TransferProgress) -> VerifyReport:
        snapshot = self._find(snapshot_id)
        state, ebs_id = snapshot.get("State"), snapshot["SnapshotId"]
        problems: tuple[str, ...] = ()
        if state == "error":
            problems = (f"EBS snapshot {ebs_id} of {snapshot_id} failed: {snapshot.get('StateMessage', '')}",)
        elif state != "completed":
            problems = (f"EBS snapshot {ebs_id} of {snapshot_id} is still {state} ({snapshot.get('Progress', '?')})",)
        note = (
            "EC2 reports the snapshot complete; its files are checked against the manifest on restore "
            f"(restore --location <mount>/{ON_VOLUME_DIR})"
        )
        return VerifyReport(snapshot_id, ebs_id, 0, 0, problems, note)

    def delete(self, snapshot_id: str) -> None:
        for snapshot in self._snapshots(snapshot_id):
            with aws_errors("ec2:DeleteSnapshot", snapshot["SnapshotId"]):
                self.ec2.delete_snapshot(SnapshotId=snapshot["SnapshotId"])

    def create_volume(self, snapshot_id: str, availability_zone: str, volume_type: str = "gp3") -> tuple[str, str]:
        """A new volume from the snapshot, tagged for its partition, once available: (EBS snapshot, volume)."""
        snapshot = self._find(snapshot_id)
        if snapshot.get("State") != "completed":
            raise SnapshotError(
                f"EBS snapshot {snapshot['SnapshotId']} is {snapshot.get('State')}", "wait until it is completed"
            )
        info = self._info(snapshot)
        tags = [
            {"Key": "Name", "Value": f"dedupectl {info.topic}-{info.partition}"},
            {"Key": TAG_TOPIC, "Value": info.topic},
            {"Key": TAG_PARTITION, "Value": str(info.partition)},
            {"Key": TAG_SNAPSHOT_ID, "Value": snapshot_id},
        ]
        with aws_errors("ec2:CreateVolume", snapshot["SnapshotId"]):
            volume = self.ec2.create_volume(
                SnapshotId=snapshot["SnapshotId"],
                AvailabilityZone=availability_zone,
                VolumeType=volume_type,
                TagSpecifications=[{"ResourceType": "volume", "Tags": tags}],
            )
        volume_id = volume["VolumeId"]
        wait_for(
            lambda: describe_volume(self.ec2, volume_id)["State"] == "available",
            f"volume {volume_id} to become available",
            self.timeout_s,
            self.poll_s,
        )
        return snapshot["SnapshotId"], volume_id

"""EBS snapshots against the session's moto server: create (tagged), list, verify, restore as a volume, prune;
a volume tagged for another partition is refused."""

from __future__ import annotations

import json


def tags(resource: dict) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in resource.get("Tags", [])}


def test_ebs_create_list_verify_restore_prune(cli, ec2, tmp_path, make_store, unique_name, fake_kernel):
    topic = unique_name("ebs")
    data_dir = tmp_path / "data"
    make_store(data_dir, topic, 2, 3_000)
    fake_kernel.mount(data_dir, "/dev/xvdf")  # the volume's device, attached as /dev/sdf: what proves it holds it
    instance = ec2.instance()
    volume = ec2.volume({"dedupectl:topic": topic, "dedupectl:partition": "2"}, attach_to=instance)
    endpoint = ["--endpoint-url", ec2.endpoint_url]

    result = cli("snapshot", "create", "-d", str(data_dir), "-p", "2", "--to", f"ebs:{volume}", *endpoint, "--json")
    assert result.exit_code == 0, result.stderr
    (created,) = json.loads(result.stdout)
    assert created["location"].startswith("snap-")
    (snapshot,) = ec2.client.describe_snapshots(SnapshotIds=[created["location"]])["Snapshots"]
    assert snapshot["VolumeId"] == volume
    assert (
        tags(snapshot).items()
        >= {
            "dedupectl:snapshot-id": created["snapshot_id"],
            "dedupectl:topic": topic,
            "dedupectl:partition": "2",
            "dedupectl:output-offset": "3000",
            "dedupectl:id-count": "3000",
        }.items()
    )
    assert not (data_dir / "snapshots").exists(), "the on-volume copy goes once CreateSnapshot returned"

    listed = json.loads(cli("snapshot", "list", "--from", f"ebs:{volume}", *endpoint, "--json").stdout)
    assert [(i["snapshot_id"], i["state"], i["output_offset"]) for i in listed] == [
        (created["snapshot_id"], "completed", 3000)
    ]
    verified = cli("snapshot", "verify", created["snapshot_id"], "--from", "ebs:", *endpoint, "--json")
    assert verified.exit_code == 0 and json.loads(verified.stdout)["ok"]

    restored = cli(
        "snapshot", "restore", created["snapshot_id"], "--from", "ebs:", "--availability-zone", "us-east-1b",
        *endpoint, "--json",
    )  # fmt: skip
    assert restored.exit_code == 0, restored.stderr
    new_volume = json.loads(restored.stdout)["volume_id"]
    (volume_info,) = ec2.client.describe_volumes(VolumeIds=[new_volume])["Volumes"]
    assert volume_info["AvailabilityZone"] == "us-east-1b" and volume_info["State"] == "available"
    assert volume_info["SnapshotId"] == created["location"]
    assert tags(volume_info)["dedupectl:partition"] == "2" and tags(volume_info)["dedupectl:topic"] == topic

    second = json.loads(
        cli("snapshot", "create", "-d", str(data_dir), "-p", "2", "--to", f"ebs:{volume}", *endpoint, "--json").stdout
    )[0]
    pruned = json.loads(cli("snapshot", "prune", "--from", f"ebs:{volume}", "--keep", "1", *endpoint, "--json").stdout)
    assert [d["snapshot_id"] for d in pruned["deleted"]] == [created["snapshot_id"]]
    remaining = ec2.client.describe_snapshots(OwnerIds=["self"], Filters=[{"Name": "volume-id", "Values": [volume]}])
    assert [s["SnapshotId"] for s in remaining["Snapshots"]] == [second["location"]]


def test_volume_tagged_for_another_partition_is_refused(cli, ec2, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "orders", 0, 100)
    volume = ec2.volume({"dedupectl:topic": "orders", "dedupectl:partition": "1,5"})
    endpoint = ["--endpoint-url", ec2.endpoint_url]
    result = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", f"ebs:{volume}", *endpoint)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: volume {volume} is tagged for orders partition(s) 1,5, not orders partition 0: "
        "pass the volume that holds this partition's data directory"
    )
    snapshots = ec2.client.describe_snapshots(OwnerIds=["self"], Filters=[{"Name": "volume-id", "Values": [volume]}])
    assert snapshots["Snapshots"] == []

    no_volume = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", "ebs:", *endpoint)
    assert no_volume.exit_code == 2 and "ebs: needs the id of the volume" in no_volume.stderr
    unknown = cli("snapshot", "verify", "orders-0-20260101T000000.000Z", "--from", "ebs:", *endpoint)
    assert unknown.exit_code == 2 and "no EBS snapshot tagged dedupectl:snapshot-id=orders-0-20260101" in unknown.stderr

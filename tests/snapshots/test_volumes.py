"""Which device holds a directory and whether it is a given EBS volume, read from a mount table and a
/sys/class/block made by the test (no root, no EC2): the logic the loop-mounted tests exercise for real."""

from __future__ import annotations

import pytest

from snapshots.volumes import ebs_volume_of_device, mount_of, placement, same_device

VOLUME = "vol-0abc123def4567890"
OTHER = "vol-0fff000111222333a"


def test_mount_of_takes_the_deepest_mount_and_the_last_of_a_stack(fake_kernel, tmp_path):
    data = tmp_path / "srv" / "data disk"
    data.mkdir(parents=True)
    fake_kernel.mount(tmp_path / "srv", "/dev/xvdg")
    fake_kernel.mount(data, "/dev/xvdf")
    fake_kernel.mount(data, "/dev/nvme2n1")  # mounted on top of the first: the one a path reaches

    assert mount_of(data / "events-3" / "not-yet") == mount_of(data)
    mount = mount_of(data)
    assert (mount.point, mount.source, mount.fstype, mount.is_root) == (data, "/dev/nvme2n1", "ext4", False)
    assert mount_of(tmp_path / "srv" / "other").source == "/dev/xvdg"
    root = mount_of(tmp_path / "elsewhere")
    assert root.is_root and root.source == "/dev/vda1" and root.describe() == "the root filesystem"


def test_an_nvme_serial_names_the_ebs_volume_of_a_disk_and_its_partitions(fake_kernel):
    fake_kernel.nvme("nvme1n1", VOLUME.replace("-", ""), partitions=("nvme1n1p1",))
    fake_kernel.nvme("nvme2n1", "AWS1A2B3C4D5E6F7A8B9")  # an instance-store disk: its serial is no volume

    assert ebs_volume_of_device("/dev/nvme1n1") == VOLUME
    assert ebs_volume_of_device("/dev/nvme1n1p1") == VOLUME, "a partition is on its disk's volume"
    assert ebs_volume_of_device("/dev/nvme2n1") is None
    assert ebs_volume_of_device("/dev/nvme9n1") is None, "a device the kernel does not list"
    assert ebs_volume_of_device("overlay") is None and ebs_volume_of_device("tmpfs") is None


def test_placement_trusts_the_serial_over_the_device_name(fake_kernel, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    fake_kernel.nvme("nvme1n1", VOLUME.replace("-", ""), partitions=("nvme1n1p1",))
    fake_kernel.mount(data, "/dev/nvme1n1p1")

    on = placement(data, VOLUME, "/dev/sdf")
    assert on.on is True
    assert on.found == f"{data} is on {data} (/dev/nvme1n1p1, ext4), which is volume {VOLUME}"
    # the serial is definite: a volume attached under the very device name still is another volume
    off = placement(data, OTHER, "/dev/nvme1n1p1")
    assert off.on is False and off.found.endswith(f"which is volume {VOLUME}")


@pytest.mark.parametrize(
    ("source", "attachment", "on"),
    [
        ("/dev/xvdf", "/dev/sdf", True),  # Xen renames sdf to xvdf
        ("/dev/xvdf1", "/dev/sdf", True),
        ("/dev/xvdg", "/dev/sdf", None),  # another device, but nothing names its volume
        ("/dev/xvdf", None, None),  # the volume is attached nowhere
    ],
)
def test_placement_by_device_name_without_a_serial(fake_kernel, tmp_path, source, attachment, on):
    data = tmp_path / "data"
    data.mkdir()
    fake_kernel.mount(data, source)
    found = placement(data, VOLUME, attachment)
    assert found.on is on
    if on is None:
        assert found.found.endswith(f"{VOLUME} is attached as {attachment or 'nothing'}")


def test_a_directory_on_the_root_filesystem_is_not_shown_on_a_volume(fake_kernel, tmp_path):
    found = placement(tmp_path / "data", VOLUME, "/dev/sdf")
    assert found.on is None and found.mount.is_root
    assert (
        found.found
        == f"{tmp_path / 'data'} is on the root filesystem (/dev/vda1, ext4); {VOLUME} is attached as /dev/sdf"
    )


@pytest.mark.parametrize(
    ("mounted", "attached", "same"),
    [
        ("/dev/xvdf", "/dev/sdf", True),
        ("/dev/xvdf1", "/dev/sdf", True),
        ("/dev/sdf", "/dev/sdf", True),
        ("/dev/sdf", "/dev/xvdf", True),
        ("/dev/xvdg", "/dev/sdf", False),
        ("/dev/vda", "/dev/sdf", False),
        ("overlay", "/dev/sdf", False),
        ("/dev/xvdf", "", False),
    ],
)
def test_mount_device_against_attachment_device(mounted, attached, same):
    assert same_device(mounted, attached) is same

"""Which block device holds a directory, and whether that device is a given EBS volume.

Read from the kernel, never guessed: ``/proc/self/mountinfo`` gives the mount holding the directory and its
source device. An NVMe device (Nitro instances) carries the EBS volume id, without its dash, as its
controller's serial number (``/sys/class/block/<dev>/device/serial``): that answer is definite either way.
Otherwise the device is compared with the volume's attachment device: the same node (a udev symlink such as
``/dev/sdf -> nvme1n1`` resolves to it), or the same name once Xen's ``xvd`` and ``sd`` prefixes are
equated (``/dev/sdf`` attaches as ``/dev/xvdf``; a partition ``xvdf1`` is on it).

``require_on_volume`` is the one decision every command that acts on a store's volume makes (an EBS snapshot,
a reattach): only what the kernel shows proves a directory is on a volume. A tag is what someone wrote
about the volume, not where the files are.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from store.errors import DedupeError

MOUNTINFO = Path("/proc/self/mountinfo")
SYS_BLOCK = Path("/sys/class/block")
_XEN_NAME = re.compile(r"^(?:xv|s)d([a-z]+)\d*$")


@dataclass(frozen=True)
class Mount:
    point: Path
    source: str  # the device (/dev/nvme1n1p1, /dev/xvdf) or a pseudo source (tmpfs, overlay)
    fstype: str

    @property
    def is_root(self) -> bool:
        return self.point == Path("/")

    def describe(self) -> str:
        return "the root filesystem" if self.is_root else f"{self.point}"


@dataclass(frozen=True)
class Placement:
    """Whether a directory is on a volume: ``on`` True/False when known, None when nothing can tell."""

    mount: Mount
    on: bool | None
    found: str  # what was found, for the operator


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mount_of(path: Path, mountinfo: Path | None = None) -> Mount:
    """The mount that holds ``path`` (the nearest existing ancestor when it does not exist yet)."""
    real = Path(os.path.realpath(path))
    best: Mount | None = None
    for line in (mountinfo or MOUNTINFO).read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) < 5 or len(rest) < 2:
            continue
        point = Path(_unescape(parts[4]))
        if (real == point or point in real.parents) and (best is None or len(point.parts) >= len(best.point.parts)):
            best = Mount(point, _unescape(rest[1]), rest[0])  # later lines win a tie: they are mounted on top
    return best or Mount(Path("/"), "?", "?")


def ebs_volume_of_device(source: str, sys_block: Path | None = None) -> str | None:
    """The EBS volume id an NVMe device (or its partition) reports as its serial, or None."""
    if not source.startswith("/dev/"):
        return None
    entry = (sys_block or SYS_BLOCK) / Path(os.path.realpath(source)).name
    if not entry.exists():
        return None
    node = Path(os.path.realpath(entry))
    for candidate in (node, node.parent):  # a partition's directory sits inside its disk's
        serial_file = candidate / "device" / "serial"
        if serial_file.is_file():
            serial = serial_file.read_text().strip()
            if re.fullmatch(r"vol[0-9a-f]+", serial):
                return f"vol-{serial[3:]}"
            return None
    return None


def same_device(source: str, attachment_device: str) -> bool:
    """Whether the mount's source device is the attachment's device node or its Xen-renamed twin."""
    if not source.startswith("/dev/") or not attachment_device:
        return False
    if os.path.exists(attachment_device) and os.path.realpath(attachment_device) == os.path.realpath(source):
        return True
    mounted, attached = Path(source).name, Path(attachment_device).name
    if mounted == attached:
        return True
    left, right = _XEN_NAME.match(mounted), _XEN_NAME.match(attached)
    return left is not None and right is not None and left.group(1) == right.group(1)


def placement(
    path: Path,
    volume_id: str,
    attachment_device: str | None,
    *,
    mountinfo: Path | None = None,
    sys_block: Path | None = None,
) -> Placement:
    """Is ``path`` on volume ``volume_id``, attached here as ``attachment_device``? (``mountinfo`` and
    ``sys_block`` default to the kernel's, read at call time.)"""
    mount = mount_of(path, mountinfo)
    where = f"{path} is on {mount.describe()} ({mount.source}, {mount.fstype})"
    serial = ebs_volume_of_device(mount.source, sys_block)
    if serial is not None:
        return Placement(mount, serial == volume_id, f"{where}, which is volume {serial}")
    if attachment_device and same_device(mount.source, attachment_device):
        return Placement(mount, True, f"{where}, the device {volume_id} is attached as")
    return Placement(mount, None, f"{where}; {volume_id} is attached as {attachment_device or 'nothing'}")


def require_on_volume(path: Path, volume_id: str, attachment_device: str | None, error: type[DedupeError]) -> str:
    """What shows the store in ``path`` is on ``volume_id``; raises ``error`` (one line, with how to prove it)
    when the kernel does not show it. A directory on the root filesystem whose device does not show the volume
    is called not on it: a data volume is attached beside the root one."""
    found = placement(path, volume_id, attachment_device)
    if found.on:
        return found.found
    if found.on is False:
        verdict, hint = "is not on", f"pass the volume that holds it, or a data directory on {volume_id}'s mount"
    else:
        verdict = "is not on" if found.mount.is_root else "cannot be shown to be on"
        hint = (
            f"a tag is not proof: give the data directory on {volume_id}'s mount (`findmnt -T {path}` shows its "
            f"device, which must be the one {volume_id} is attached as, or an NVMe device whose serial is it)"
        )
    raise error(f"the store in {path} {verdict} volume {volume_id}: {found.found}", hint)

"""A small filesystem for a worker's data directory: a tmpfs in a mount namespace of its own, so a test can
fill it, free it and remount it without touching the machine's mounts. Processes reach it through ``wrap``.

Needs ``unshare`` and ``nsenter`` (util-linux) and the right to mount a tmpfs in a new mount namespace: root,
or any user where unprivileged user namespaces are allowed.
"""

from __future__ import annotations

import os
import select
import shlex
import subprocess
from pathlib import Path

READY = "ready"
HOLD_S = 1800  # the namespace's holder ends by itself even if the test process is killed
FILL_ATTEMPTS = 5


class VolumeUnavailable(Exception):
    """This machine does not let the test make the volume."""


class SmallVolume:
    """A tmpfs of ``size_mib`` at ``mountpoint``, seen only by processes started through ``wrap``."""

    def __init__(self, mountpoint: Path, size_mib: int, timeout_s: float = 30) -> None:
        self.path = Path(mountpoint)
        self.path.mkdir(parents=True, exist_ok=True)
        self._user_namespace = os.geteuid() != 0
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if self._user_namespace:
            unshare[1:1] = ["--user", "--map-root-user"]
        script = (
            f"mount -t tmpfs -o size={size_mib}m dedupectl-test {shlex.quote(str(self.path))} "
            f"&& echo {READY} && exec sleep {HOLD_S}"
        )
        try:
            self._holder = subprocess.Popen(
                [*unshare, "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except OSError as error:
            raise VolumeUnavailable(f"cannot run unshare: {error}") from error
        ready, _, _ = select.select([self._holder.stdout], [], [], timeout_s)
        if not ready or self._holder.stdout.readline().strip() != READY:
            self.close()
            raise VolumeUnavailable(f"cannot mount a tmpfs in a new mount namespace: {self._holder.stderr.read()}")
        self._ballast = 0

    def wrap(self, args: list[str]) -> list[str]:
        """``args`` as a command that runs in the volume's mount namespace."""
        enter = ["nsenter", f"--target={self._holder.pid}", "--mount"]
        if self._user_namespace:
            enter += ["--user", "--preserve-credentials"]
        return [*enter, "--", *args]

    def sh(self, script: str) -> str:
        """Run a shell script in the namespace; its stdout."""
        result = subprocess.run(self.wrap(["sh", "-c", script]), capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{script}: {result.stderr}"
        return result.stdout

    def free_bytes(self) -> int:
        return int(self.sh(f"df -B1 --output=avail {shlex.quote(str(self.path))} | tail -n 1"))

    def fill(self, leave_bytes: int = 0) -> None:
        """Take all but ``leave_bytes`` of the free space with a ballast file (all of it: writes fail)."""
        self._ballast += 1
        ballast = shlex.quote(str(self.path / f"ballast-{self._ballast}"))
        if leave_bytes:
            self.sh(f"fallocate -l {max(self.free_bytes() - leave_bytes, 4096)} {ballast}")
            return
        # to the last block: a write that fails with ENOSPC is the proof. A running worker may delete a file
        # meanwhile (a log or a merged SST file no longer needed): what it frees is filled again
        for attempt in range(FILL_ATTEMPTS):
            self.sh(f"dd if=/dev/zero of={ballast}-{attempt} bs=64K 2>/dev/null || true; sync")
            if self.free_bytes() == 0:
                return
        raise AssertionError(f"{self.path} still has {self.free_bytes()} bytes free after {FILL_ATTEMPTS} fills")

    def free(self) -> None:
        """Delete every ballast file."""
        self.sh(f"rm -f {shlex.quote(str(self.path))}/ballast-*")

    def remount(self, mode: str) -> None:
        """``mode`` "ro" or "rw"."""
        self.sh(f"mount -o remount,{mode} {shlex.quote(str(self.path))}")

    def close(self) -> None:
        """End the namespace's holder; the tmpfs goes with the last process inside the namespace."""
        if self._holder.poll() is None:
            self._holder.kill()
        self._holder.wait()
        for stream in (self._holder.stdout, self._holder.stderr):
            stream.close()

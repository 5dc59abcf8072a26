"""What the peers need around them: their virtualenv, a Redis server, and a description of the machine."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "benchmarks" / "requirements-peers.txt"
VENV_DIR = ROOT / "benchmarks" / ".venv-peers"


# --- the peers' virtualenv ----------------------------------------------------------------------------------


def peers_python(venv_dir: Path = VENV_DIR, requirements: Path = REQUIREMENTS, log=print) -> Path:
    """The interpreter of the peers' virtualenv, created (or re-created when the pins changed) on first use.

    A venv of its own because quixstreams pins confluent-kafka<2.13 and the project runs 2.16.
    """
    python = venv_dir / "bin" / "python"
    stamp = venv_dir / "requirements.sha256"
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return python
    log(f"installing the peers ({requirements.name}) into {venv_dir}")
    shutil.rmtree(venv_dir, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], check=True)
    (venv_dir / ".gitignore").write_text("*\n")  # the venv ignores itself: nothing in it belongs in git
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    result = subprocess.run([*pip, "-r", str(requirements)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"could not install the peers into {venv_dir}:\n{result.stderr[-3000:]}")
    stamp.write_text(wanted + "\n")
    return python


def package_versions(python: Path, packages: list[str]) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, sys, confluent_kafka\n"
        "found = {p: m.version(p) for p in sys.argv[1:]}\n"
        "found['librdkafka'] = confluent_kafka.libversion()[0]\n"
        "print(json.dumps(found))"
    )
    result = subprocess.run([str(python), "-c", code, *packages], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


# --- Redis --------------------------------------------------------------------------------------------------


def find_redis_server(install: bool, log=print) -> str:
    """``redis-server`` from PATH; if missing, install Debian's package when allowed (root with apt-get)."""
    found = shutil.which("redis-server")
    if found:
        return found
    apt = shutil.which("apt-get")
    if install and apt and os.geteuid() == 0:
        log("redis-server is not installed: installing Debian's redis-server package")
        quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "redis-server"]):
            subprocess.run(command, env=quiet, capture_output=True, check=False)
        found = shutil.which("redis-server")
        if found:
            return found
    raise SystemExit(
        "redis-server is not on PATH and could not be installed here: install it "
        "(`sudo apt-get install redis-server` on Debian/Ubuntu) or skip the Redis peer with --systems"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """A throwaway ``redis-server`` on 127.0.0.1: no snapshots, no AOF (pure memory), stopped on exit."""

    def __init__(self, executable: str, workdir: Path) -> None:
        self.executable = executable
        self.workdir = workdir
        self.port = 0
        self._process: subprocess.Popen | None = None

    def start(self, timeout: float = 15) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        command = [
            self.executable, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
            "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log"), "--daemonize", "no",
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.command("PING") == b"PONG":
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}; see {self.workdir / 'redis.log'}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()

    def used_memory(self) -> int:
        """INFO memory's ``used_memory``: bytes Redis has allocated for its data and itself."""
        return int(self.info("memory")["used_memory"])

    def info(self, section: str) -> dict[str, str]:
        text = self.command("INFO", section).decode()
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))

    def version(self) -> str:
        return self.info("server").get("redis_version", "?")

    def command(self, *args: str) -> bytes | int:
        """One command over RESP (the harness runs in the project's env, which has no Redis client)."""
        request = f"*{len(args)}\r\n".encode() + b"".join(
            f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args
        )
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as conn:
            conn.sendall(request)
            reply = conn.makefile("rb")
            header = reply.readline()
            kind, rest = header[:1], header[1:].strip()
            if kind == b"+":
                return rest
            if kind == b":":
                return int(rest)
            if kind == b"$":
                return reply.read(int(rest)) if int(rest) >= 0 else b""
            raise OSError(f"redis answered {header!r}")


# --- the JVM peers -----------------------------------------------------------------------------------------


def jvm_versions(classpath: str) -> dict[str, str]:
    """The Java runtime and the versions of the jars on the JVM peers' classpath that the results name."""
    banner = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    runtime = re.search(r'^(\w+) version "([^"]+)"', banner, re.MULTILINE)
    found = {"java": f"{runtime.group(2)} ({runtime.group(1)})" if runtime else "?"}
    for folder in (Path(entry.rstrip("*")) for entry in classpath.split(os.pathsep) if entry.endswith("*")):
        for jar in folder.glob("*.jar"):
            name, _, version = jar.stem.rpartition("-")
            if name in ("kafka-streams", "rocksdbjni"):
                found[name] = version
    return found


# --- the machine --------------------------------------------------------------------------------------------


def machine_info() -> dict[str, object]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    mem_kib = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")), 0)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": models[0] if models else platform.processor() or "unknown",
        "memory_gib": round(mem_kib / 2**20, 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
    }

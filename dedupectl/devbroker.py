"""The project's local Apache Kafka broker: one KRaft node on 127.0.0.1 for the demo, tests and benchmarks.

The broker is assembled from Maven Central jars (``tools/kafka/pom.xml``), cached once per Kafka version,
and run as a plain ``java ... kafka.Kafka server.properties`` process in its own session so it outlives the
command that started it. The version is the pom's ``kafka.version`` unless one is asked for (an argument, or
``DEDUPECTL_DEV_KAFKA_VERSION``); Kafka 3.x and 4.x differ here only in their logging (log4j 1 or log4j 2).
Everything a broker owns lives in one state directory::

    state_dir/
      server.properties   broker + controller config (ports are kept across restarts when still free)
      log4j.properties    broker logging (log4j2.properties for Kafka 4): INFO for Kafka, WARN elsewhere
      kafka-version       the Kafka version that formatted data/ (a state dir keeps its version)
      data/               log.dirs (KRaft metadata and topic data; survives a stop)
      logs/               server.log (log4j), broker.out (JVM stdout/stderr)
      broker.json         {pid, bootstrap, kafka_version, started_at} while a broker runs; removed by stop()

``secure=True`` makes the node a secured one (``dedupectl.devbroker_security``): SASL_SSL and mTLS listeners,
an authorizer that denies what no ACL allows, and the TLS material and admin credentials in the state dir.
A state dir keeps the mode it was formatted in.

The internal topics (consumer offsets, transaction state) have replication factor 1, so consumer groups and
transactions work on the single node; the librdkafka mock cluster cannot stand in for this (it does not
enforce transactions, offsets or fencing).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import psutil

from dedupectl.devbroker_security import DevSecurity, SecurePorts
from dedupectl.errors import LocalBrokerError
from dedupectl.kafka_jars import (
    LOG_TAIL_LINES,
    VERSION_ENV,
    KafkaLine,
    ensure_kafka_libs,
    kafka_line,
    last_lines,
    require_tool,
    resolve_kafka_version,
)

DEFAULT_STATE_DIR = Path(".dedupectl") / "broker"
HOST = "127.0.0.1"

# JVM flags as in Kafka's own start scripts, minus GC logging, plus C1-only JIT: the broker starts faster and
# its C2 compiler threads no longer compete with the tests for the cores.
JVM_FLAGS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)

# Settings that make one node a complete cluster for tests; ports, paths and ids are added per start.
BROKER_SETTINGS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    # Internal topics at RF 1 (a single node has no other replica) and few partitions (fast first use).
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    # Tests join groups often and use short sessions; topics are always created on purpose.
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "auto.create.topics.enable": "false",
    # A SIGKILLed worker's open transaction is aborted soon after its transaction.timeout.ms expires,
    # instead of up to 10 s later (the default check interval).
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
    # Retention only where a topic sets retention.ms, and then within seconds: tests publish records with old
    # timestamps, which a default retention would delete at its next check.
    "log.retention.ms": "-1",
    "log.retention.check.interval.ms": "1000",
    # Two cores: keep the thread pools small.
    "num.network.threads": "2",
    "num.io.threads": "4",
}


@dataclass(frozen=True)
class BrokerStatus:
    """What ``status()`` reports; ``pid`` and ``bootstrap`` are None when no broker runs, ``kafka_version``
    when the state dir was never formatted."""

    running: bool
    pid: int | None
    bootstrap: str | None
    state_dir: Path
    kafka_version: str | None = None
    secure: bool = False
    mtls_bootstrap: str | None = None  # a secure broker's mTLS listener
    client_config: Path | None = None  # a secure broker's admin config file (dedupectl -c)


@dataclass(frozen=True)
class _Ports:
    broker: int
    controller: int
    mtls: int | None = None  # a secure broker's second client listener


class LocalBroker:
    """A single-node KRaft broker whose files all live in ``state_dir``.

    ``start()`` is idempotent: if ``broker.json`` names a live broker of this state dir, its bootstrap is
    returned. As a context manager the broker is started on entry and stopped on exit.

    ``kafka_version`` (else ``$DEDUPECTL_DEV_KAFKA_VERSION``) is the release to run; without either, a state dir
    keeps the version that formatted it and a new one gets the pom's. A state dir formatted by another
    version is refused rather than upgraded or downgraded in place.
    """

    def __init__(
        self, state_dir: Path, heap_mb: int = 512, kafka_version: str | None = None, secure: bool | None = None
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.heap_mb = heap_mb
        self.requested_version = kafka_version
        self.requested_secure = secure  # None: the mode the state dir was formatted in (plain when new)
        self._process: subprocess.Popen[bytes] | None = None
        self._server_log_start = 0  # where this start's lines begin in logs/server.log

    @classmethod
    def from_state_dir(cls, path: Path) -> LocalBroker:
        """Reattach to the broker of ``path`` (running or stopped); fails if no broker was ever set up there."""
        broker = cls(path)
        if not broker._properties_path.is_file() and not broker._record_path.is_file():
            raise LocalBrokerError(
                f"no local broker in {broker.state_dir}",
                f"start one with `dedupectl dev broker start --state-dir {path}`",
            )
        return broker

    # paths

    @property
    def _properties_path(self) -> Path:
        return self.state_dir / "server.properties"

    @property
    def _version_path(self) -> Path:
        return self.state_dir / "kafka-version"

    @property
    def _record_path(self) -> Path:
        return self.state_dir / "broker.json"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def security(self) -> DevSecurity | None:
        """The TLS material and credentials of a secure state dir; None for a plain broker."""
        return DevSecurity(self.state_dir) if self._secure_mode() else None

    def client_settings(self) -> dict[str, str]:
        """librdkafka settings that connect to this broker as its super user (none for a plain broker)."""
        security = self.security
        return security.admin_settings() if security else {}

    @property
    def bootstrap_servers(self) -> str:
        """The running broker's ``host:port``; fails if it does not run."""
        status = self.status()
        if not status.running or status.bootstrap is None:
            raise LocalBrokerError(f"the local broker in {self.state_dir} is not running", self._start_hint())
        return status.bootstrap

    # lifecycle

    def start(self, timeout: float = 90) -> str:
        """Start the broker (or find it already running) and return its bootstrap ``127.0.0.1:PORT``."""
        version = self._version_to_run()
        secure = self._mode_to_run()
        current = self.status()
        if current.running and current.bootstrap:
            return current.bootstrap
        libs = ensure_kafka_libs(version)
        java = require_tool("java", "install a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)")
        line = kafka_line(version)
        security = DevSecurity(self.state_dir) if secure else None
        if security:
            security.ensure_material()
        ports = self._choose_ports(secure)
        self._write_config(ports, line, security)
        self._format_storage(java, libs, line, version, security)
        bootstrap = f"{HOST}:{ports.broker}"
        self._process = self._spawn(java, libs, line)
        extra = {}
        if security:
            client_config = security.write_admin_config(bootstrap)
            extra = {"mtls_bootstrap": f"{HOST}:{ports.mtls}", "client_config": str(client_config)}
        self._write_record(self._process.pid, bootstrap, version, extra)
        try:
            self._wait_until_ready(bootstrap, timeout)
        except BaseException:
            self.stop(timeout=10)
            raise
        return bootstrap

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM the broker (a clean shutdown), SIGKILL it after ``timeout``; a stopped broker is a no-op."""
        pid = self._live_pid()
        if pid is not None:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            if not self._wait_for_exit(pid, timeout):
                with suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                self._wait_for_exit(pid, 10)
        self._reap()
        self._record_path.unlink(missing_ok=True)

    def status(self) -> BrokerStatus:
        """Whether the broker recorded in ``broker.json`` still runs (a reused pid does not count)."""
        record = self._read_record()
        pid, bootstrap = self._live_pid(record), record.get("bootstrap")
        version, secure = self.formatted_version(), self._secure_mode()
        if pid is None or not isinstance(bootstrap, str):
            return BrokerStatus(False, None, None, self.state_dir, version, secure)
        mtls, client_config = record.get("mtls_bootstrap"), record.get("client_config")
        return BrokerStatus(
            True, pid, bootstrap, self.state_dir, version, secure,
            mtls if isinstance(mtls, str) else None, Path(client_config) if isinstance(client_config, str) else None,
        )  # fmt: skip

    def formatted_version(self) -> str | None:
        """The Kafka version that formatted this state dir's data, None before the first start."""
        try:
            return self._version_path.read_text().strip() or None
        except OSError:
            return None

    def _version_to_run(self) -> str:
        formatted = self.formatted_version()
        asked = self.requested_version or os.environ.get(VERSION_ENV)
        version = resolve_kafka_version(asked or formatted)
        if formatted is not None and version != formatted:
            raise LocalBrokerError(
                f"the broker in {self.state_dir} holds the data of Kafka {formatted}, not {version}",
                f"start it with --kafka-version {formatted}, or delete {self.state_dir} to start an empty "
                f"Kafka {version} broker",
            )
        return version

    def _secure_mode(self) -> bool:
        """Whether this state dir's broker is (or will be) a secure one."""
        if self.requested_secure is not None and self.formatted_version() is None:
            return self.requested_secure
        return (self.state_dir / "admin-password").is_file()

    def _mode_to_run(self) -> bool:
        formatted = (self.state_dir / "data" / "meta.properties").is_file()
        secure = self._secure_mode()
        if formatted and self.requested_secure is not None and self.requested_secure != secure:
            have, asked = ("secure", "plain") if secure else ("plain", "secure")
            raise LocalBrokerError(
                f"the broker in {self.state_dir} was formatted {have}, not {asked}",
                f"start it {'with' if secure else 'without'} --secure, or use another --state-dir",
            )
        return secure

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # config and storage

    def _choose_ports(self, secure: bool) -> _Ports:
        """Reuse the previous ports when all are free (the exported bootstrap stays valid), else new ones."""
        previous = _read_properties(self._properties_path)
        with suppress(KeyError, ValueError, IndexError):
            advertised = [int(listener.rsplit(":", 1)[1]) for listener in previous["advertised.listeners"].split(",")]
            controller = int(previous["controller.quorum.voters"].rsplit(":", 1)[1])
            ports = _Ports(advertised[0], controller, advertised[1] if secure else None)
            if all(_port_is_free(port) for port in (ports.broker, ports.controller, ports.mtls) if port is not None):
                return ports
        return _free_ports(secure)

    def _write_config(self, ports: _Ports, line: KafkaLine, security: DevSecurity | None) -> None:
        (self.state_dir / "data").mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            **BROKER_SETTINGS,
            "listeners": f"PLAINTEXT://{HOST}:{ports.broker},CONTROLLER://{HOST}:{ports.controller}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{ports.broker}",
            "controller.quorum.voters": f"1@{HOST}:{ports.controller}",
            "log.dirs": str(self.state_dir / "data"),
        }
        if security is not None and ports.mtls is not None:
            settings.update(security.broker_settings(SecurePorts(ports.broker, ports.mtls), ports.controller, HOST))
        lines = [f"{key}={value}" for key, value in settings.items()]
        self._properties_path.write_text("# written by dedupectl.devbroker\n" + "\n".join(lines) + "\n")
        self._properties_path.chmod(0o600)  # a secure broker's holds its key and admin password
        log_config = self.state_dir / line.log_config_name
        log_config.write_text(line.log_template.format(log_file=self.logs_dir / "server.log"))

    def _java_command(self, java: str, libs: Path, line: KafkaLine, main_class: str, *args: str) -> list[str]:
        log_flag = line.log_config_flag.format(self.state_dir / line.log_config_name)
        return [java, log_flag, "-cp", f"{libs}/*", main_class, *args]

    def _format_storage(
        self, java: str, libs: Path, line: KafkaLine, version: str, security: DevSecurity | None
    ) -> None:
        """Format log.dirs for KRaft once; a restart keeps the cluster and its topics.

        Skipped when already formatted: ``--ignore-formatted`` alone is not enough, as StorageTool still fails
        when the new cluster id differs from the one in meta.properties.
        """
        if (self.state_dir / "data" / "meta.properties").is_file():
            if self.formatted_version() is None:  # formatted before state dirs recorded their version
                self._version_path.write_text(version + "\n")
            return
        command = self._java_command(
            java, libs, line, "kafka.tools.StorageTool",
            "format", "-t", _new_cluster_id(), "-c", str(self._properties_path), "--ignore-formatted",
            *(security.format_args() if security else []),
        )  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = last_lines(result.stdout + result.stderr, LOG_TAIL_LINES)
            raise LocalBrokerError(
                f"formatting the broker storage in {self.state_dir / 'data'} failed:\n{tail}",
                f"delete {self.state_dir} to start from an empty broker",
            )
        self._version_path.write_text(version + "\n")

    # the process

    def _spawn(self, java: str, libs: Path, line: KafkaLine) -> subprocess.Popen[bytes]:
        heap = f"{self.heap_mb}m"
        command = self._java_command(java, libs, line, "kafka.Kafka", str(self._properties_path))
        command[1:1] = [f"-Xms{heap}", f"-Xmx{heap}", *JVM_FLAGS]
        self._server_log_start = _size(self.logs_dir / "server.log")
        with open(self.logs_dir / "broker.out", "wb") as out:
            # Its own session: the broker outlives the CLI that started it and can be signalled as a group.
            return subprocess.Popen(
                command, cwd=self.state_dir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def _wait_until_ready(self, bootstrap: str, timeout: float) -> None:
        """Poll until the broker serves metadata; fail early (with the log) if the process dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                raise LocalBrokerError(
                    f"the local broker exited with code {code} while starting:\n{self._log_tail()}",
                    f"see {self.logs_dir}",
                )
            if _serves_metadata(bootstrap, self.client_settings()):
                return
            time.sleep(0.25)
        raise LocalBrokerError(
            f"the local broker did not become ready on {bootstrap} within {timeout:g}s:\n{self._log_tail()}",
            f"see {self.logs_dir}, or start it with a longer timeout",
        )

    def _live_pid(self, record: dict[str, object] | None = None) -> int | None:
        """The recorded pid if that process is alive and is this state dir's broker (not a reused pid)."""
        pid = (record if record is not None else self._read_record()).get("pid")
        if not isinstance(pid, int):
            return None
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            cmdline = process.cmdline()
        except psutil.Error:
            return None
        is_ours = "kafka.Kafka" in cmdline and str(self._properties_path) in cmdline
        return pid if is_ours else None

    def _wait_for_exit(self, pid: int, timeout: float) -> bool:
        if self._process is not None and self._process.pid == pid:
            try:
                self._process.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        try:
            psutil.Process(pid).wait(timeout)
        except psutil.NoSuchProcess:
            return True
        except psutil.TimeoutExpired:
            return False
        return True

    def _reap(self) -> None:
        """Collect our own child's exit status so it does not linger as a zombie."""
        if self._process is not None:
            with suppress(subprocess.TimeoutExpired):
                self._process.wait(1)
            self._process = None

    # broker.json and logs

    def _write_record(self, pid: int, bootstrap: str, version: str, extra: dict[str, str]) -> None:
        record = {
            "pid": pid, "bootstrap": bootstrap, "kafka_version": version, "started_at": datetime.now(UTC).isoformat(),
            **extra,
        }  # fmt: skip
        temporary = self._record_path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(record, indent=2) + "\n")
        temporary.replace(self._record_path)

    def _read_record(self) -> dict[str, object]:
        try:
            record = json.loads(self._record_path.read_text())
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def _log_tail(self) -> str:
        """What this start logged: the JVM's own output, then the broker's warnings and errors."""
        parts = []
        out = self.logs_dir / "broker.out"
        if jvm_output := _read_from(out, 0).strip():
            parts.append(f"--- {out} ---\n{last_lines(jvm_output, LOG_TAIL_LINES)}")
        server_log = self.logs_dir / "server.log"
        if broker_log := _read_from(server_log, self._server_log_start).strip():
            problems = _problem_entries(broker_log) or last_lines(broker_log, LOG_TAIL_LINES)
            parts.append(f"--- {server_log} (warnings and errors) ---\n{last_lines(problems, LOG_TAIL_LINES)}")
        return "\n".join(parts) or "(the broker wrote no log)"

    def _start_hint(self) -> str:
        return f"start it with `dedupectl dev broker start --state-dir {self.state_dir}`"


# --- small helpers ------------------------------------------------------------------------------------------


def _new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes as url-safe base64 without padding (22 characters).

    Like Kafka's own ``Uuid.randomUuid``, never one starting with "-": StorageTool would read it as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _free_ports(secure: bool = False) -> _Ports:
    """Distinct free ports on 127.0.0.1 (the sockets are held open while choosing, so they differ)."""
    with socket.socket() as first, socket.socket() as second, socket.socket() as third:
        for probe in (first, second, third):
            probe.bind((HOST, 0))
        mtls = third.getsockname()[1] if secure else None
        return _Ports(broker=first.getsockname()[1], controller=second.getsockname()[1], mtls=mtls)


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        # As the JVM does: a port whose old connections linger in TIME_WAIT is still free to listen on.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def _serves_metadata(bootstrap: str, settings: dict[str, str]) -> bool:
    """True once the broker accepts connections and lists itself in metadata."""
    host, port = bootstrap.rsplit(":", 1)
    try:
        # A plain TCP probe first: librdkafka would log every refused connection to stderr.
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    from confluent_kafka.admin import AdminClient  # imported late: the CLI's stop/status do not need it

    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except Exception:  # KafkaException while the broker is still fencing/registering itself
        return False


def _read_properties(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs if not key.lstrip().startswith("#")}


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _read_from(path: Path, offset: int) -> str:
    """The text of ``path`` from ``offset`` on (from the start if the file rolled over and shrank)."""
    if not path.is_file():
        return ""
    with path.open("rb") as file:
        file.seek(offset if offset <= _size(path) else 0)
        return file.read().decode("utf-8", errors="replace")


def _problem_entries(log_text: str) -> str:
    """The WARN, ERROR and FATAL entries of a log4j log, each with its continuation (stack trace) lines."""
    kept: list[str] = []
    keep = False
    for line in log_text.splitlines():
        if line.startswith("["):  # an entry starts with its timestamp: "[2024-01-01 00:00:00,000] WARN ..."
            keep = any(f"] {level} " in line for level in ("WARN", "ERROR", "FATAL"))
        if keep:
            kept.append(line)
    return "\n".join(kept)

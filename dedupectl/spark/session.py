"""The SparkSession every job runs in, the checks that make its failures one clear line, and spark-submit.

Before a JVM starts, ``preflight`` checks what would otherwise fail slowly or cryptically: Java 17+ (Spark 4
needs it; the launcher adds the ``--add-opens`` module flags Java 17 needs by itself), the Kafka connector
jars, and for a standalone master that it answers Spark's RPC (Spark would retry for a minute, then fail).

Spark's console output (the launcher's banner, log4j, the JVM's own warnings, Python worker tracebacks)
goes to a log file per run under ``<cache>/spark-logs/``: the operator sees dedupectl's progress and result,
and the log's path when something fails. ``spark.ui.showConsoleProgress`` is off; jobs report progress
through ``dedupectl.spark.progress``.

Under ``spark-submit`` (``--print-submit``) Spark is already configured: the session is taken as it is.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from dedupectl.errors import ConfigError, SparkError
from dedupectl.spark.jars import ConnectorJars, cache_root, ensure_connector_jars
from dedupectl.spark.rpc_probe import spark_rpc_problem

DEFAULT_MASTER = "local[*]"
MIN_JAVA = 17
MASTER_PROBE_S = 3.0
KEEP_LOGS = 20
SUBMIT_ENTRY = Path(__file__).resolve().parent / "submit.py"
# The Python driver of an application started by spark-submit finds its JVM through these.
_SUBMITTED_ENV = "PYSPARK_GATEWAY_PORT"

LOG4J2 = """\
# dedupectl: Spark's log goes to this run's log file (the JVM's stderr), never to the operator's console
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
logger.kafka.name = org.apache.kafka
logger.kafka.level = warn
"""

_LOCAL = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$")
_STANDALONE = re.compile(r"^spark://(?P<hosts>[^/]+)$")
_OTHER_MASTERS = re.compile(r"^(yarn|k8s://.+|mesos://.+)$")
# settings under which a master accepts no request before an authentication or TLS handshake
_SECURED_RPC = ("spark.authenticate", "spark.network.crypto.enabled", "spark.ssl.rpc.enabled")
# where the driver listens, and the address it gives executors to connect back to
_DRIVER_ADDRESS = ("spark.driver.host", "spark.driver.bindAddress")


@dataclass(frozen=True)
class SparkSettings:
    """Where and how a job runs: ``master`` as spark-submit takes it, plus ``--conf`` overrides."""

    master: str = DEFAULT_MASTER
    conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    app_name: str = "dedupectl"

    @property
    def local(self) -> bool:
        return bool(_LOCAL.match(self.master))


def parse_conf(
    pairs: Sequence[str] | None, option: str = "--conf", example: str = "spark.executor.memory=4g"
) -> dict[str, str]:
    """``key=value`` pairs of a repeatable option (``--conf`` as spark-submit takes them)."""
    conf = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {pair!r} is not key=value", f"write it as {option} {example}")
        conf[key.strip()] = value
    return conf


def submitted() -> bool:
    """True inside an application launched by ``spark-submit`` (Spark is configured already)."""
    return _SUBMITTED_ENV in os.environ


# -- preflight -------------------------------------------------------------------------------------------


def check_master(master: str, *, probe: bool = True, conf: Mapping[str, str] | None = None) -> None:
    """Refuse a malformed master; for ``spark://`` (with ``probe``) fail fast unless a listed master answers
    Spark's RPC (a port that only accepts connections may be another service: Spark would retry for a minute).
    With authentication or RPC encryption in ``conf`` the probe only connects (the master wants a handshake)."""
    if _LOCAL.match(master) or _OTHER_MASTERS.match(master):
        return
    standalone = _STANDALONE.match(master)
    if not standalone:
        raise ConfigError(
            f"--master {master!r} is not a Spark master URL",
            "use local[*], local[N], spark://host:7077, yarn or k8s://https://host:443",
        )
    for host_port in standalone["hosts"].split(","):
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--master {master!r}: {host_port!r} is not host:port", "e.g. spark://spark-master:7077")
    if not probe:
        return
    speak = not any(str((conf or {}).get(key, "")).lower() == "true" for key in _SECURED_RPC)
    reasons = []
    for host_port in standalone["hosts"].split(","):
        host, _, port = host_port.rpartition(":")
        problem = spark_rpc_problem(host.strip("[]"), int(port), MASTER_PROBE_S, speak=speak)
        if problem is None:
            return
        reasons.append(f"{host_port}: {problem}")
    raise SparkError(
        f"cannot reach the Spark master {master} ({'; '.join(reasons)})",
        "check --master and that the master runs (its web UI shows the spark:// URL to use)",
    )


def java_version() -> tuple[str, int]:
    """The ``java`` Spark's launcher will use (``$JAVA_HOME/bin/java`` or ``java`` on PATH) and its major version."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = str(Path(home) / "bin" / "java")
        if not os.access(java, os.X_OK):
            raise SparkError(
                f"JAVA_HOME={home} holds no bin/java", f"point JAVA_HOME at a Java {MIN_JAVA}+ runtime or unset it"
            )
    else:
        found = shutil.which("java")
        if found is None:
            raise SparkError(
                "Java is not installed (no `java` on PATH and no JAVA_HOME); Spark needs it",
                f"install a Java {MIN_JAVA}+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)",
            )
        java = found
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SparkError(f"cannot run {java} -version: {error}", f"install a Java {MIN_JAVA}+ runtime") from error
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if not match:
        raise SparkError(f"cannot tell the version of {java}", f"install a Java {MIN_JAVA}+ runtime")
    major = int(match[2]) if match[1] == "1" else int(match[1])  # "1.8.0_x" is Java 8
    if major < MIN_JAVA:
        raise SparkError(
            f"{java} is Java {major}; Spark needs Java {MIN_JAVA} or newer",
            f"install Java {MIN_JAVA}+ and point JAVA_HOME at it",
        )
    return java, major


def preflight(settings: SparkSettings, progress=None) -> ConnectorJars | None:
    """Everything checked before a JVM starts; returns the connector jars (None under spark-submit)."""
    if submitted():
        return None
    check_master(settings.master, conf=settings.conf)
    java_version()
    return ensure_connector_jars(progress)


# -- the session -----------------------------------------------------------------------------------------


def executor_python(settings: SparkSettings) -> str | None:
    """The interpreter executors start Python workers with: the operator's ``spark.pyspark.python`` or
    ``PYSPARK_PYTHON``, else on local and standalone masters this very interpreter (it has dedupectl, and
    the CLI may run from a virtualenv that is not on PATH). None: Spark's own default (``python3`` on the
    executors' PATH, for YARN and Kubernetes whose executors run elsewhere)."""
    chosen = settings.conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    if chosen:
        return chosen
    return sys.executable if settings.local or _STANDALONE.match(settings.master) else None


def loopback_master(master: str) -> bool:
    """True for a ``spark://`` master whose every host is a loopback address of this machine (127.0.0.0/8,
    ``::1``, or a name that resolves only to those): its workers, and so its executors, run on this host."""
    standalone = _STANDALONE.match(master)
    if not standalone:
        return False
    for host_port in standalone["hosts"].split(","):
        host = host_port.rpartition(":")[0].strip("[]")
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
        except (OSError, UnicodeError):
            return False
        if not addresses or not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
            return False
    return True


def driver_address(settings: SparkSettings) -> dict[str, str]:
    """Where the driver listens and what it tells executors to connect to, for a cluster master: 127.0.0.1
    when the master is on loopback (Spark would pick the host's name, or another interface's address when
    that name resolves to loopback: the driver would listen off loopback for a cluster that lives on it);
    else, or when the operator set either, Spark's own choice and the operator's ``--conf``."""
    if not any(key in settings.conf for key in _DRIVER_ADDRESS) and loopback_master(settings.master):
        return dict.fromkeys(_DRIVER_ADDRESS, "127.0.0.1")
    return {}


@contextmanager
def _python_for_executors(python: str | None) -> Iterator[None]:
    """PySpark's driver takes the executors' interpreter from ``PYSPARK_PYTHON`` when the context starts (it
    ignores ``spark.pyspark.python`` unless spark-submit launched it): set it for that moment only."""
    before = os.environ.get("PYSPARK_PYTHON")
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


@dataclass
class SessionInfo:
    """What a job reports about where it ran."""

    master: str
    log_file: Path | None


def new_log_file(app_name: str) -> Path:
    """A fresh log file under ``<cache>/spark-logs`` (the oldest beyond KEEP_LOGS are removed)."""
    folder = cache_root() / "spark-logs"
    folder.mkdir(parents=True, exist_ok=True)
    logs = sorted(folder.glob("*.log"), key=lambda path: path.stat().st_mtime)
    for old in logs[: max(len(logs) - KEEP_LOGS + 1, 0)]:
        with suppress(OSError):
            old.unlink()
    (folder / "log4j2.properties").write_text(LOG4J2)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '-', app_name)}-{stamp}-{os.getpid()}.log"


def spark_conf_entries(settings: SparkSettings, jars: ConnectorJars | None, log_config: Path | None) -> dict[str, str]:
    """The Spark configuration a job starts with: project defaults, then the operator's ``--conf``."""
    conf: dict[str, str] = {
        "spark.app.name": settings.app_name,
        "spark.ui.showConsoleProgress": "false",  # dedupectl shows progress itself
    }
    if jars is not None:
        conf["spark.jars"] = ",".join(str(jar) for jar in jars.jars)
    if settings.local:
        conf.update(
            {
                "spark.master": settings.master,
                "spark.ui.enabled": "false",  # no web server on a laptop or a test run
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.memory": "2g",
                "spark.sql.shuffle.partitions": "16",  # 200 near-empty tasks cost more than they hold
            }
        )
    else:
        conf["spark.master"] = settings.master
        conf.update(driver_address(settings))
    python = executor_python(settings)
    if python is not None:
        conf["spark.pyspark.python"] = python
    if log_config is not None:
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={log_config}"
    for key, value in settings.conf.items():
        if key == "spark.driver.extraJavaOptions" and key in conf:
            value = f"{conf[key]} {value}"
        conf[key] = value
    return conf


@contextmanager
def spark_session(settings: SparkSettings, jars: ConnectorJars | None) -> Iterator[tuple[object, SessionInfo]]:
    """A SparkSession for one job, stopped afterwards; an already active one (a test's, a notebook's) is
    used as it is and left running."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active, SessionInfo(active.sparkContext.master, None)
        return
    if submitted():
        spark = SparkSession.builder.appName(settings.app_name).getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        try:
            yield spark, SessionInfo(spark.sparkContext.master, None)
        finally:
            spark.stop()
        return
    log_file = new_log_file(settings.app_name)
    conf = SparkConf(loadDefaults=False)
    for key, value in spark_conf_entries(settings, jars, log_file.parent / "log4j2.properties").items():
        conf.set(key, value)
    with open(log_file, "ab") as log:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
            with _python_for_executors(conf.get("spark.pyspark.python")):
                context = SparkContext(conf=conf, gateway=gateway)
        except Exception as error:
            raise SparkError(f"Spark did not start: {_first_line(error)}", f"see the Spark log {log_file}") from error
        spark = SparkSession(context)
        context.setLogLevel("WARN")
        try:
            yield spark, SessionInfo(settings.master, log_file)
        finally:
            spark.stop()
            # the next session in this process must launch its own JVM, with its own configuration
            SparkContext._gateway = None
            SparkContext._jvm = None
            with suppress(Exception):
                gateway.shutdown()
            if gateway.proc is not None:
                with suppress(Exception):
                    gateway.proc.stdin.close()
                    gateway.proc.wait(timeout=30)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- spark-submit ----------------------------------------------------------------------------------------


def submit_command(settings: SparkSettings, jars: ConnectorJars | None, job_args: Sequence[str]) -> list[str]:
    """The ``spark-submit`` command that runs the same job on ``settings.master``."""
    command = [_spark_submit(), "--master", settings.master, "--name", settings.app_name]
    if jars is not None:
        command += ["--jars", ",".join(str(jar) for jar in jars.jars)]
    for key, value in settings.conf.items():
        command += ["--conf", f"{key}={value}"]
    for key, value in driver_address(settings).items():
        command += ["--conf", f"{key}={value}"]
    python = executor_python(settings)
    if python is not None and "spark.pyspark.python" not in settings.conf:
        # the driver spark-submit starts and its executors import dedupectl: this interpreter has it
        command += ["--conf", f"spark.pyspark.python={python}"]
    command += ["--conf", "spark.ui.showConsoleProgress=false", str(SUBMIT_ENTRY), *job_args]
    return command


def _spark_submit() -> str:
    """``spark-submit`` of the Spark on PATH (a cluster's gateway), else the one pyspark ships."""
    if shutil.which("spark-submit"):
        return "spark-submit"
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit")


def format_command(command: Sequence[str]) -> str:
    return " ".join(shlex.quote(part) for part in command)


def submit_plan(settings: SparkSettings, command: str, argv: Sequence[str], notify=None) -> tuple[str, bool]:
    """``--print-submit``: the spark-submit command line that runs ``command`` (``audit``…) as the operator
    gave it in ``argv`` (dedupectl's arguments), and whether secrets were redacted.

    Secret-looking ``-X``/``--spark-kafka-option`` values are replaced by ``***`` (pass secrets with
    ``--config`` or the environment on the cluster instead of a command line)."""
    check_master(settings.master, probe=False)  # the cluster may be reachable only from where it is submitted
    jars = ensure_connector_jars(notify)
    args, redacted = redact_args(job_arguments(command, argv))
    return format_command(submit_command(settings, jars, args)), redacted


def job_arguments(command: str, argv: Sequence[str]) -> list[str]:
    """``command`` and its arguments from ``argv``, less what spark-submit itself says or this run alone
    asked for (``--master``, ``--print-submit``) and the global options given before the command."""
    words = command.split()  # a command of a group is several words: ``repartition build``
    at = next((i for i in range(len(argv)) if list(argv[i : i + len(words)]) == words), None)
    args = list(argv[at + len(words) :]) if at is not None else list(argv)
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--master":
            skip = True
        elif not arg.startswith("--master=") and arg != "--print-submit":
            kept.append(arg)
    return [*words, *kept]


def redact_args(args: Sequence[str]) -> tuple[list[str], bool]:
    from reconcile.kafka import redact  # loads confluent_kafka: not for the CLI's --help, which quotes this module

    out, redacted = [], False
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and value and redact({key: value})[key] != value:
            arg, redacted = f"{key}=***", True
        out.append(arg)
    return out, redacted

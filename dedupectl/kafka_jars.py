"""The Kafka broker's jars, fetched once per version from Maven Central (``tools/kafka/pom.xml``) with Maven and
cached; which version runs (the pom's ``kafka.version``, or one asked for), and what differs between the lines.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from dedupectl.errors import LocalBrokerError

POM_PATH = Path(__file__).resolve().parent.parent / "tools" / "kafka" / "pom.xml"
VERSION_ENV = "DEDUPECTL_DEV_KAFKA_VERSION"
LOG_TAIL_LINES = 25

LOG4J_TEMPLATE = """\
log4j.rootLogger=WARN, file
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File={log_file}
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=3
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

# The same logging for Kafka 4, which reads log4j 2 configuration only.
LOG4J2_TEMPLATE = """\
status = warn
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = info
logger.apache.name = org.apache.kafka
logger.apache.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.filePattern = {log_file}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
"""


@dataclass(frozen=True)
class KafkaLine:
    """What differs between Kafka major versions: the pom profile (logging binding) and the logging config."""

    profile: str
    log_config_name: str
    log_config_flag: str  # a JVM system property, formatted with the config's path
    log_template: str


LINES = {
    3: KafkaLine("kafka-3", "log4j.properties", "-Dlog4j.configuration=file:{}", LOG4J_TEMPLATE),
    4: KafkaLine("kafka-4", "log4j2.properties", "-Dlog4j2.configurationFile={}", LOG4J2_TEMPLATE),
}


# --- the jars -----------------------------------------------------------------------------------------------


def kafka_version() -> str:
    """The Kafka version the pom pins (its ``kafka.version`` property): the default of every broker."""
    pom = _require_pom()
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = ET.parse(pom).getroot().findtext("m:properties/m:kafka.version", namespaces=namespace)
    if not version:
        raise LocalBrokerError(f"{pom} has no <kafka.version> property", "restore tools/kafka/pom.xml")
    return version.strip()


def resolve_kafka_version(requested: str | None = None) -> str:
    """The version asked for, else ``$DEDUPECTL_DEV_KAFKA_VERSION``, else the pom's; refused if no line supports it."""
    version = (requested or os.environ.get(VERSION_ENV) or "").strip() or kafka_version()
    kafka_line(version)
    return version


def kafka_line(version: str) -> KafkaLine:
    match = re.fullmatch(r"(\d+)\.\d+\.\d+", version)
    line = LINES.get(int(match.group(1))) if match else None
    if line is None:
        raise LocalBrokerError(
            f"Kafka version {version!r} is not supported by the local broker",
            f"choose a release of Kafka {' or '.join(f'{major}.x' for major in LINES)}, e.g. {kafka_version()}",
        )
    return line


def kafka_libs_dir(version: str | None = None) -> Path:
    """``${DEDUPECTL_CACHE_DIR:-~/.cache/dedupectl}/kafka-<version>/libs``: where the broker's jars live."""
    cache = Path(os.environ.get("DEDUPECTL_CACHE_DIR") or Path.home() / ".cache" / "dedupectl")
    return cache.expanduser() / f"kafka-{resolve_kafka_version(version)}" / "libs"


def ensure_kafka_libs(version: str | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """Return the jar folder of ``version`` (default: see ``resolve_kafka_version``), resolving it from Maven
    Central with ``mvn`` the first time.

    Maven copies into a temporary sibling folder that is renamed into place only when complete, so an
    interrupted download never leaves a half-filled ``libs``.
    """
    version = resolve_kafka_version(version)
    libs = kafka_libs_dir(version)
    _remove_abandoned_downloads(libs.parent)
    if _has_kafka_jar(libs):
        return libs
    mvn = require_tool("mvn", "install Maven 3 (e.g. `apt-get install maven`)")
    require_tool("java", "install a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)")
    libs.parent.mkdir(parents=True, exist_ok=True)
    staging = libs.parent / f".libs-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        if progress:
            progress(f"resolving Kafka {version} jars from Maven Central into {libs}")
        _mvn_copy_dependencies(mvn, version, staging)
        if not _has_kafka_jar(staging):
            raise LocalBrokerError(f"mvn finished but put no kafka_2.13 jar in {staging}", "check the pom")
        _publish(staging, libs)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return libs


def _require_pom() -> Path:
    if not POM_PATH.is_file():
        raise LocalBrokerError(
            f"the Kafka pom is missing at {POM_PATH}",
            "install dedupectl from a source checkout with `pip install -e .` (tools/kafka/pom.xml is needed)",
        )
    return POM_PATH


def require_tool(name: str, how: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LocalBrokerError(f"`{name}` is not on PATH; the local Kafka broker needs it", how)
    return path


def _has_kafka_jar(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("kafka_2.13-*.jar"))


def _remove_abandoned_downloads(parent: Path) -> None:
    """Delete staging folders left by killed downloads (their pid is gone); live ones are someone's.

    Run on every call: a killed fetch's orphaned mvn may still fill its folder after the next fetch began.
    """
    for staging in parent.glob(".libs-*-*"):
        pid = staging.name.split("-")[1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)


def _mvn_copy_dependencies(mvn: str, version: str, output: Path) -> None:
    command = [
        mvn, "-q", "-B", "-f", str(_require_pom()), "dependency:copy-dependencies",
        f"-Dkafka.version={version}", f"-P{kafka_line(version).profile}",
        f"-DoutputDirectory={output}", "-DincludeScope=runtime",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = last_lines(result.stdout + result.stderr, LOG_TAIL_LINES)
        raise LocalBrokerError(
            f"mvn could not resolve the Kafka {version} jars (exit {result.returncode}):\n{tail}",
            f"check that Maven Central is reachable and serves Kafka {version}, then run "
            f"`dedupectl dev fetch-kafka --kafka-version {version}` again",
        )


def _publish(staging: Path, libs: Path) -> None:
    """Rename the finished folder into place; if another process won the race, keep theirs."""
    try:
        staging.rename(libs)
    except OSError as error:
        if not _has_kafka_jar(libs):
            raise LocalBrokerError(f"could not move the Kafka jars into {libs}: {error}", f"remove {libs}") from error


def last_lines(text: str, count: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-count:])

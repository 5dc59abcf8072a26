"""Spark's Kafka connector jars: resolved once from Maven Central, cached, handed to Spark as ``spark.jars``.

Spark's own ``spark.jars.packages`` resolver (Ivy) cannot reach Maven Central from every network this runs on,
so the project resolves the jars itself, the way it fetches the local broker: ``mvn dependency:copy-dependencies``
on ``tools/spark/pom.xml`` into a staging folder, renamed into place when complete::

    ${DEDUPECTL_CACHE_DIR:-~/.cache/dedupectl}/spark-kafka-<pyspark version>_<scala>/
      jars/             the connector and what pyspark lacks (kafka-clients, commons-pool2, the token provider)
      connector.json    which connector version was resolved (see the fallback below)

The connector must match the installed pyspark (same Spark and Scala version): the pom is resolved with
``-Dspark.version`` / ``-Dscala.binary.version`` of the installed pyspark. If Maven Central does not hold
that version, the pom's ``dedupectl.fallback.*`` versions are tried and the choice is recorded. Jars pyspark
already bundles are dropped: two versions of one library on the classpath fail in ways that are hard to read.
"""

from __future__ import annotations

import json
import logging
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

from dedupectl.errors import SparkError

log = logging.getLogger(__name__)

POM_PATH = Path(__file__).resolve().parents[2] / "tools" / "spark" / "pom.xml"
CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
# ``name-1.2.3[-classifier].jar``: the version is the first dash-separated part that looks like d.d
_JAR_NAME = re.compile(r"^(?P<name>.+?)-(?P<version>\d+(?:\.\d+)+.*)\.jar$")


@dataclass(frozen=True)
class SparkInstall:
    """The pyspark this process runs: its version, Scala binary version and bundled jar folder."""

    version: str
    scala: str
    jars_dir: Path


@dataclass(frozen=True)
class ConnectorJars:
    """The resolved connector: the jar paths to pass as ``spark.jars`` and what was resolved."""

    jars: tuple[Path, ...]
    spark_version: str  # the installed pyspark
    connector_version: str  # the connector actually resolved (differs only on fallback)
    token_provider_version: str
    scala: str
    folder: Path

    @property
    def fallback(self) -> bool:
        return self.connector_version != self.spark_version


def spark_install() -> SparkInstall:
    """Version and Scala version of the installed pyspark (read from its bundled ``spark-core`` jar)."""
    try:
        import pyspark
    except ImportError as error:  # a dependency of the distribution: only a broken install lacks it
        raise SparkError("pyspark is not installed", "pip install 'pyspark>=3.5' (dedupectl depends on it)") from error
    jars_dir = Path(pyspark.__file__).resolve().parent / "jars"
    core = sorted(jars_dir.glob("spark-core_*.jar"))
    if not core:
        raise SparkError(f"pyspark at {jars_dir.parent} bundles no Spark jars", "reinstall pyspark from PyPI")
    scala = core[0].name.removeprefix("spark-core_").split("-", 1)[0]
    return SparkInstall(version=pyspark.__version__, scala=scala, jars_dir=jars_dir)


def cache_root() -> Path:
    return Path(os.environ.get("DEDUPECTL_CACHE_DIR") or Path.home() / ".cache" / "dedupectl").expanduser()


def connector_folder(install: SparkInstall) -> Path:
    return cache_root() / f"spark-kafka-{install.version}_{install.scala}"


def find_connector_jars(install: SparkInstall | None = None) -> ConnectorJars | None:
    """The cached connector for this pyspark, or None if it was never resolved (or is incomplete)."""
    install = install or spark_install()
    folder = connector_folder(install)
    jars = tuple(sorted((folder / "jars").glob("*.jar")))
    record_path = folder / "connector.json"
    if not any(jar.name.startswith(f"{CONNECTOR_ARTIFACT}_") for jar in jars) or not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text())
        return ConnectorJars(
            jars=jars,
            spark_version=install.version,
            connector_version=record["connector_version"],
            token_provider_version=record["token_provider_version"],
            scala=install.scala,
            folder=folder,
        )
    except (OSError, ValueError, KeyError):
        return None


def ensure_connector_jars(progress: Callable[[str], None] | None = None) -> ConnectorJars:
    """The connector jars for the installed pyspark, resolving them from Maven Central the first time."""
    install = spark_install()
    found = find_connector_jars(install)
    if found is not None:
        return found
    folder = connector_folder(install)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SparkError(
            f"Spark's Kafka connector jars are not in {folder / 'jars'} and `mvn` is not on PATH to fetch them",
            "install Maven 3 (e.g. `apt-get install maven`) or copy the jars of a machine that has them",
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_downloads(folder.parent)
    failures = []
    for connector_version, token_version in _candidates(install):
        if progress:
            progress(f"resolving Spark's Kafka connector {connector_version} (Scala {install.scala}) from Maven")
        staging = folder.parent / f".spark-kafka-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            output = _mvn_copy_dependencies(mvn, staging, connector_version, token_version, install.scala)
            if output is not None:
                failures.append(f"{connector_version}: {output}")
                continue
            _drop_bundled(staging, install.jars_dir)
            if connector_version != install.version:
                log.warning(
                    "Spark's Kafka connector %s is not on Maven Central; using %s (token provider %s) with pyspark %s",
                    install.version,
                    connector_version,
                    token_version,
                    install.version,
                )
            record = {
                "spark_version": install.version,
                "scala": install.scala,
                "connector_version": connector_version,
                "token_provider_version": token_version,
            }
            (staging / "connector.json").write_text(json.dumps(record, indent=2) + "\n")
            _publish(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        found = find_connector_jars(install)
        if found is not None:
            return found
    raise SparkError(
        f"mvn could not resolve Spark's Kafka connector for pyspark {install.version}: " + " | ".join(failures),
        "check that Maven Central is reachable (mvn -v; proxies in ~/.m2/settings.xml), then run the job again",
    )


def pom_property(name: str) -> str:
    if not POM_PATH.is_file():
        raise SparkError(
            f"the Spark connector pom is missing at {POM_PATH}",
            "install dedupectl from a source checkout with `pip install -e .` (tools/spark/pom.xml is needed)",
        )
    value = ET.parse(POM_PATH).getroot().findtext(f"m:properties/m:{name}", namespaces=_POM_NS)
    if not value:
        raise SparkError(f"{POM_PATH} has no <{name}> property", "restore tools/spark/pom.xml")
    return value.strip()


def _candidates(install: SparkInstall) -> list[tuple[str, str]]:
    """(connector, token provider) versions to try: the installed pyspark's first, then the pom's fallback."""
    exact = (install.version, install.version)
    fallback = (
        pom_property("dedupectl.fallback.spark.version"),
        pom_property("dedupectl.fallback.token.provider.version"),
    )
    return [exact] if fallback == exact else [exact, fallback]


def _mvn_copy_dependencies(mvn: str, output: Path, version: str, token_version: str, scala: str) -> str | None:
    """Copy the runtime jars into ``output``; None on success, else the tail of Maven's complaint."""
    command = [
        mvn, "-q", "-B", "-f", str(POM_PATH), "dependency:copy-dependencies",
        f"-DoutputDirectory={output}", "-DincludeScope=runtime",
        f"-Dspark.version={version}", f"-Dtoken.provider.version={token_version}", f"-Dscala.binary.version={scala}",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return None
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    missing = re.search(r"Could not find artifact (\S+)", text)
    if missing:
        return f"{missing[1]} is not on Maven Central"
    errors = [line.removeprefix("[ERROR]").strip() for line in text.splitlines() if line.startswith("[ERROR] ")]
    lines = errors or text.strip().splitlines() or [f"mvn exited {result.returncode}"]
    return lines[0][:300]


def _drop_bundled(folder: Path, bundled_dir: Path) -> None:
    """Remove jars of libraries pyspark already ships (whatever their version): Spark's win."""
    bundled = {_artifact(jar.name) for jar in bundled_dir.glob("*.jar")}
    for jar in folder.glob("*.jar"):
        if _artifact(jar.name) in bundled:
            jar.unlink()
    jars = folder / "jars"
    jars.mkdir()
    for jar in folder.glob("*.jar"):
        jar.rename(jars / jar.name)


def _artifact(filename: str) -> str:
    match = _JAR_NAME.match(filename)
    return match["name"] if match else filename.removesuffix(".jar")


def _remove_abandoned_downloads(parent: Path) -> None:
    """Delete staging folders of killed fetches (their pid is gone); live ones belong to another process."""
    for staging in parent.glob(".spark-kafka-*-*"):
        pid = staging.name.split("-")[3]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)


def _publish(staging: Path, folder: Path) -> None:
    """Rename the finished folder into place; if another process won the race, keep theirs."""
    if folder.exists() and not (folder / "connector.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)  # an incomplete folder from an older layout or a manual edit
    try:
        staging.rename(folder)
    except OSError as error:
        if not (folder / "connector.json").is_file():
            raise SparkError(f"could not move the connector jars into {folder}: {error}", f"remove {folder}") from error

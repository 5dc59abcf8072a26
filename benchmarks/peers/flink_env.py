"""The Flink peer's environment: PyFlink in a virtualenv of its own, and Flink's Kafka SQL connector jar.

PyFlink (``apache-flink``, pinned in benchmarks/requirements-flink.txt) brings Flink itself (its jars, the
RocksDB state backend included) and Apache Beam: about 850 MB, kept apart from the project's .venv and from
the Quix/Redis peers' (their pins clash). The connector is not in PyFlink: it is fetched from Maven Central
with ``mvn dependency:copy`` into ``${DEDUPECTL_CACHE_DIR:-~/.cache/dedupectl}/flink-kafka/``, staged and
renamed into place when complete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.peers.env import ROOT, package_versions, peers_python
from dedupectl.spark.jars import cache_root

VENV_DIR = ROOT / "benchmarks" / ".venv-flink"
REQUIREMENTS = ROOT / "benchmarks" / "requirements-flink.txt"
PYTHON = VENV_DIR / "bin" / "python"
# the connector release built for the pinned Flink minor version (requirements-flink.txt)
CONNECTOR = ("org.apache.flink", "flink-sql-connector-kafka", "5.0.0-2.2")
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def flink_python(log=print) -> Path:
    """The Flink virtualenv's interpreter, created (or re-created when the pins changed) on first use."""
    return peers_python(VENV_DIR, REQUIREMENTS, log=log)


def connector_jar() -> Path:
    _, artifact, version = CONNECTOR
    return cache_root() / "flink-kafka" / version / f"{artifact}-{version}.jar"


def ensure_connector_jar(log=print) -> Path:
    """The connector jar, fetched from Maven Central the first time."""
    jar = connector_jar()
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("`mvn` is not on PATH to fetch Flink's Kafka connector: install Maven 3 or skip flink")
    log(f"fetching {':'.join(CONNECTOR)} from Maven Central")
    staging = jar.parent.with_name(f".{jar.parent.name}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    command = [mvn, "-q", "-B", f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={':'.join(CONNECTOR)}",
               f"-DoutputDirectory={staging}"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not (staging / jar.name).is_file():
        shutil.rmtree(staging, ignore_errors=True)
        tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no jar"]
        raise SystemExit(f"mvn could not fetch {':'.join(CONNECTOR)} ({tail[0][:200]}): check Maven Central access")
    if jar.parent.exists():
        shutil.rmtree(jar.parent)
    staging.rename(jar.parent)
    return jar


def versions(python: Path) -> dict[str, str]:
    found = package_versions(python, ["apache-flink"])
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
    return {
        "apache-flink (PyFlink)": found["apache-flink"],
        "flink-sql-connector-kafka": CONNECTOR[2],
        "java": java[0].split('"')[1] if java and '"' in java[0] else "?",
    }

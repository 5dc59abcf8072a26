"""The JVM peers (benchmarks/peers/jvm: the Kafka Streams dedup app and the Java transactional copy) and the
classpath of Kafka's own perf tools, built with Maven from Maven Central at the broker's Kafka release.

The build lands in ``${DEDUPECTL_CACHE_DIR:-~/.cache/dedupectl}/peers-jvm-<kafka version>-<digest>``, the digest
being that of the sources and the pom, so a clean clone reuses it and an edit rebuilds it. Maven builds into a
temporary sibling that is renamed into place only when complete, as the broker's jars are.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from dedupectl.kafka_jars import ensure_kafka_libs, kafka_libs_dir, resolve_kafka_version

SOURCES = Path(__file__).resolve().parent / "jvm"


class JvmBuildFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class JvmPeers:
    kafka_version: str
    classpath: str  # the peers' classes, kafka-streams and their dependencies (run with `java -cp`)
    tools_classpath: str  # kafka-tools on the broker's own jars: ProducerPerformance, ConsumerPerformance


def jvm_peers(kafka_version: str | None = None, log=print) -> JvmPeers:
    """The built peers for ``kafka_version`` (default: the broker's), built first if the cache lacks them."""
    version = resolve_kafka_version(kafka_version)
    build = _build_dir(version)
    if not _complete(build):
        mvn, java = shutil.which("mvn"), shutil.which("java")
        if mvn is None or java is None:
            raise JvmBuildFailed("the JVM peers need `java` (17+) and `mvn` on PATH: install them, or pick "
                                 "other systems with --systems")  # fmt: skip
        log(f"building the JVM peers (Kafka {version}) with Maven into {build}")
        staging = build.parent / f".{build.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _maven_package(mvn, version, staging)
            try:
                staging.rename(build)
            except OSError:
                if not _complete(build):  # another process won the race with a complete build: keep theirs
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    broker_libs = ensure_kafka_libs(version)
    return JvmPeers(
        kafka_version=version,
        classpath=f"{build / 'classes.jar'}{os.pathsep}{build / 'libs'}/*",
        tools_classpath=f"{build / 'tools'}/*{os.pathsep}{broker_libs}/*",
    )


def _build_dir(version: str) -> Path:
    digest = hashlib.sha256()
    for path in sorted(p for p in SOURCES.rglob("*") if p.is_file() and "target" not in p.parts):
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes() + b"\0")
    return kafka_libs_dir(version).parent.parent / f"peers-jvm-{version}-{digest.hexdigest()[:16]}"


def _complete(build: Path) -> bool:
    return (build / "classes.jar").is_file() and any((build / "tools").glob("kafka-tools-*.jar"))


def _maven_package(mvn: str, version: str, output: Path) -> None:
    command = [mvn, "-q", "-B", "-f", str(SOURCES / "pom.xml"), "package",
               f"-Dkafka.version={version}", f"-Dpeers.build.dir={output}"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise JvmBuildFailed(f"mvn could not build the JVM peers for Kafka {version} (exit {result.returncode}); "
                             f"check that Maven Central is reachable:\n{tail}")  # fmt: skip

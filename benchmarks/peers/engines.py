"""What the Spark and Flink peers need before their runs: their jars and environments, their versions, and
for Flink (whose ~850 MB environment is too heavy for the test suite) a smoke run on a small input as part of
the benchmark itself."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from benchmarks.peers import flink_env
from benchmarks.peers.runner import Context, RunFailed, clean_run
from benchmarks.peers.systems import System
from dedupectl.kafka_clients import create_topics
from dedupectl.sample_events import SampleSpec, generate, produce_sample
from dedupectl.spark.jars import ensure_connector_jars, spark_install

SMOKE = SampleSpec(5_000, duplicate_ratio=0.02, seed=11)


def prepare(systems: list[System], log: Callable[[str], None] = print) -> dict[str, str]:
    """Fetch what the selected engines need (first use only) and return their versions."""
    versions: dict[str, str] = {}
    if any(system.name == "spark" for system in systems):
        jars = ensure_connector_jars(log)
        versions["pyspark"] = spark_install().version
        versions["spark-sql-kafka-0-10"] = jars.connector_version
        clients = [jar.name for jar in jars.jars if jar.name.startswith("kafka-clients-")]
        if clients:
            versions["kafka-clients (Spark)"] = clients[0].removeprefix("kafka-clients-").removesuffix(".jar")
    if any(system.needs_flink_env for system in systems):
        python = flink_env.flink_python(log=log)
        flink_env.ensure_connector_jar(log=log)
        versions.update(flink_env.versions(python))
    return versions


def smoke(ctx: Context, system: System) -> dict:
    """The system's clean run on a small input of its own; RunFailed unless it published each id once."""
    prefix = f"smoke-{uuid.uuid4().hex[:6]}-"
    scratch = ctx.scratch / "smoke"  # its state and logs apart from the measured runs'
    scratch.mkdir(exist_ok=True)
    small = dataclasses.replace(
        ctx,
        scratch=scratch,
        input_topic=f"{prefix}in",
        expected_ids=frozenset(record.key for record in generate(SMOKE) if record.kind == "new"),
        memory_from_ids=100,
        names_prefix=prefix,
    )
    create_topics(ctx.kafka, [small.input_topic], ctx.partitions)
    produce_sample(ctx.kafka, small.input_topic, SMOKE)
    figures = clean_run(small, system)
    check = figures["output_check"]
    if figures["consumed"] != SMOKE.count or (check["duplicated_ids"], check["missing_ids"]) != (0, 0):
        raise RunFailed(
            f"{system.name} smoke run on {SMOKE.count:,} events: consumed {figures['consumed']:,}, "
            f"{check['duplicated_ids']:,} duplicated ids, {check['missing_ids']:,} missing"
        )
    return figures

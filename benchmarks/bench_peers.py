"""dedupectl against the systems users would pick instead, on one broker, one data set, one machine, one run.

    python benchmarks/bench_peers.py [--count 1000000 | --ten-million] [--systems copy,naive,redis,quix,…]
        [--latency-rate 10000 --latency-seconds 60 | --no-latency | --latency-only]

Starts the project's local Kafka broker, produces ``--count`` Segment-like events (0.6% duplicates, 4
partitions) once, then runs each system in its own process, one after another, each reading that input with
its own group into its own output topic (see benchmarks/peers/):

- copy: a bare transactional copy (the floor); naive: the seed's loop, one transaction per message
  (time-bounded); redis: ``SET NX EX`` in front of a plain consumer/producer; quix: a Quix Streams
  exactly-once app with RocksDB state and a TTL; spark: Spark Structured Streaming's
  ``dropDuplicatesWithinWatermark`` (the project's pyspark; at-least-once Kafka sink); flink: Flink's SQL
  deduplication with RocksDB state and the exactly-once Kafka sink (PyFlink, in a local mini-cluster);
  dedupectl: ``dedupectl run``, its window bounded at the run's size (``--max-keys``, as the peers' TTL is a
  day); dedupectl-unbounded (only when named in ``--systems``): ``dedupectl run`` with no bound, so that each
  store's id filter grows with it while it runs;
- kstreams, kstreams-2t: a Kafka Streams exactly_once_v2 app with a RocksDB key-value store of messageIds
  (1 and 2 stream threads); java-copy: the transactional copy in Java; producer-perf, consumer-perf: Kafka's
  own ProducerPerformance and ConsumerPerformance, the ceiling (their own throughput; no crash run).

Per system: throughput, duplicates and losses read back with read_committed, peak RSS, memory per retained id,
state bytes per id, changelog bytes per id; then a crash run (SIGKILL once mid-stream, restart): duplicates,
losses and the time from the restart to the first record published; then a latency run (on by default;
``--no-latency`` skips it, ``--latency-only`` runs nothing else): on a fresh input topic, a fixed offered load
(``--latency-rate`` events/s for ``--latency-seconds``), each output record timed from its send to the moment
a read_committed reader got it (benchmarks/peers/latency.py; not for the naive loop or Kafka's perf tools).
The Quix and Redis peers run in
benchmarks/.venv-peers (created on first use from benchmarks/requirements-peers.txt); Redis is Debian's
redis-server, installed if missing (as root) and started on a free 127.0.0.1 port per run. The JVM peers are
built with Maven at the broker's Kafka release on first use (benchmarks/peers/jvm_build.py). The Flink peer
runs in benchmarks/.venv-flink (from benchmarks/requirements-flink.txt) with Flink's Kafka SQL connector from
Maven Central; the Spark peer's connector jars are the project's (dedupectl.spark.jars). Flink's environment
is too heavy for the test suite, so its smoke run (a small input of its own, checked exactly once) is part of
this benchmark and must pass before Flink is measured. Writes benchmarks/results/peers.md and peers.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)  # import `benchmarks.peers` from the checkout; this folder's scripts are not modules

import confluent_kafka  # noqa: E402

from benchmarks.peers import engines, env, latency, report  # noqa: E402
from benchmarks.peers.jvm_build import JvmBuildFailed, jvm_peers  # noqa: E402
from benchmarks.peers.runner import Context, RunFailed, clean_run, crash_run  # noqa: E402
from benchmarks.peers.systems import SYSTEMS  # noqa: E402
from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.kafka_jars import resolve_kafka_version  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate, produce_sample  # noqa: E402

console = Console(stderr=True)
PARTITIONS = 4
INPUT = "in"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000, help="events to produce (default 1M)")
    parser.add_argument("--ten-million", action="store_true", help="10M events: memory per id from 1M to 10M ids")
    parser.add_argument("--duplicates", type=float, default=0.006, help="share of duplicate events")
    parser.add_argument("--id-style", choices=["ajs", "uuid"], default="ajs")
    default_systems = ",".join(name for name, system in SYSTEMS.items() if system.by_default)
    parser.add_argument("--systems", default=default_systems, help="comma-separated subset, in this order")
    parser.add_argument("--no-crash", action="store_true", help="skip the crash runs")
    parser.add_argument("--kill-fraction", type=float, default=0.4, help="crash when the output holds this share")
    parser.add_argument("--naive-seconds", type=float, default=20.0, help="time bound of the naive loop")
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="a system exits after this long idle (not timed)"
    )
    parser.add_argument("--window-hours", type=float, default=24.0, help="Redis EX, Quix and Kafka Streams TTL")
    parser.add_argument("--process-timeout", type=float, default=3600.0, help="longest one process may run")
    parser.add_argument(
        "--settle-timeout", type=float, default=300.0, help="longest wait for a killed run's open transaction"
    )
    parser.add_argument("--latency-rate", type=float, default=10_000, help="latency run's offered load, events/s")
    parser.add_argument("--latency-seconds", type=float, default=60.0, help="how long the latency run's load lasts")
    parser.add_argument(
        "--latency-grace", type=float, default=30.0, help="after the load, longest wait for a system's last ids"
    )
    latency = parser.add_mutually_exclusive_group()
    latency.add_argument("--no-latency", action="store_true", help="skip the latency runs")
    latency.add_argument("--latency-only", action="store_true", help="only the latency runs (no input of --count)")
    parser.add_argument(
        "--dedupectl-batch-max-ms", type=int, help="dedupectl's --batch-max-ms (default: dedupectl's own)"
    )
    parser.add_argument(
        "--dedupectl-max-keys",
        type=int,
        help="dedupectl's --max-keys (default: the run's events, so nothing ages, as in the peers' day-long TTL; "
        "0: no bound)",
    )
    parser.add_argument("--no-install", action="store_true", help="do not apt-get install redis-server")
    parser.add_argument("--note", default="", help="a line for the results page (say, what else ran on the machine)")
    parser.add_argument("--scratch", type=Path, help="keep the broker, state and logs here (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/peers.json")
    parser.add_argument("--markdown", type=Path, default=ROOT / "benchmarks/results/peers.md")
    args = parser.parse_args()
    if args.ten_million:
        args.count = 10_000_000
    if args.dedupectl_max_keys is None:
        args.dedupectl_max_keys = max(args.count, int(args.latency_rate * args.latency_seconds))
    if args.dedupectl_max_keys < 0:
        parser.error("--dedupectl-max-keys must be 0 (no bound) or more")
    args.systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    return args


def main() -> None:
    args = _arguments()
    logging.getLogger("dedupectl.librdkafka").setLevel(logging.ERROR)  # broker warm-up retries are not news
    started, started_at = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = env.machine_info()
    systems = [SYSTEMS[name] for name in args.systems]
    versions = {
        "kafka": resolve_kafka_version(),  # what LocalBroker runs: the environment may choose it
        "confluent-kafka (project)": confluent_kafka.__version__,
        "librdkafka (project)": confluent_kafka.libversion()[0],
    }
    peers_python = ""
    if any(s.needs_peers_env for s in systems):
        python = env.peers_python(log=console.print)
        peers_python = str(python)
        versions.update(env.package_versions(python, ["quixstreams", "redis", "confluent-kafka"]))
        versions["confluent-kafka (peers)"] = versions.pop("confluent-kafka")
        versions["librdkafka (peers)"] = versions.pop("librdkafka")
        versions["redis-py"] = versions.pop("redis")
    jvm = None
    if any(s.needs_jvm for s in systems):
        try:
            jvm = jvm_peers(versions["kafka"], log=console.print)
        except JvmBuildFailed as error:
            raise SystemExit(f"error: {error}") from None
        versions.update(env.jvm_versions(jvm.classpath))
    versions.update(engines.prepare(systems, log=console.print))
    redis_executable = None
    if any(s.needs_redis for s in systems):
        redis_executable = env.find_redis_server(install=not args.no_install, log=console.print)

    spec = SampleSpec(0 if args.latency_only else args.count, duplicate_ratio=args.duplicates, id_style=args.id_style)
    expected, value_bytes = set(), 0
    for record in generate(spec):
        value_bytes += len(record.value)
        if record.kind == "new":
            expected.add(record.key)
    expected = frozenset(expected)
    load = latency.Load(args.latency_rate, args.latency_seconds, args.latency_grace, args.duplicates, args.id_style)
    clean: dict[str, dict] = {}
    crash: dict[str, dict] = {}
    latencies: dict[str, dict] = {}
    with (
        _scratch_dir(args.scratch) as scratch,
        LocalBroker(Path(scratch) / "broker") as broker,
    ):
        kafka = KafkaConfig(broker.bootstrap_servers)
        create_topics(kafka, [INPUT, f"{INPUT}.dead-letter"], PARTITIONS)
        if spec.count:
            with console.status(f"producing {args.count:,} events"):
                produce_started = time.monotonic()
                produce_sample(kafka, INPUT, spec)
            console.print(f"produced {args.count:,} events in {time.monotonic() - produce_started:.1f}s")
        if redis_executable:
            with env.RedisServer(redis_executable, Path(scratch) / "redis-version") as redis:
                versions["redis-server"] = redis.version()
        ctx = Context(
            kafka=kafka,
            input_topic=INPUT,
            partitions=PARTITIONS,
            scratch=Path(scratch),
            peers_python=peers_python,
            redis_executable=redis_executable,
            expected_ids=expected,
            memory_from_ids=1_000_000 if len(expected) >= 2_000_000 else max(len(expected) // 10, 1),
            idle_seconds=args.idle_seconds,
            naive_seconds=args.naive_seconds,
            window_seconds=int(args.window_hours * 3600),
            kill_fraction=args.kill_fraction,
            process_timeout=args.process_timeout,
            settle_timeout=args.settle_timeout,
            jvm=jvm,
            broker_data_dir=broker.state_dir / "data",
            count=spec.count,
            record_size=round(value_bytes / max(spec.count, 1)),
            dedupectl_options=("--batch-max-ms", str(args.dedupectl_batch_max_ms))
            if args.dedupectl_batch_max_ms is not None
            else (),
            window_ids=args.dedupectl_max_keys,
        )
        for system in [s for s in systems if s.needs_flink_env]:
            smoke = _attempt(f"{system.name}: smoke run", lambda s=system: engines.smoke(ctx, s))
            if "error" in smoke:  # not measured: the same error stands for its runs
                clean[system.name] = crash[system.name] = {"error": f"smoke run: {smoke['error']}"}
        measured = [s for s in systems if s.name not in clean]  # the smoke run failed for the others
        for system in measured if not args.latency_only else []:
            clean[system.name] = _attempt(f"{system.name}: clean run", lambda s=system: clean_run(ctx, s))
        if not args.no_crash and not args.latency_only:
            for system in [s for s in systems if s.name not in crash and not s.kafka_tool]:
                published = clean[system.name].get("output_check", {}).get("records") or len(expected)
                kill_at = max(int(published * args.kill_fraction), 1)
                crash[system.name] = _attempt(
                    f"{system.name}: crash run", lambda s=system, k=kill_at: crash_run(ctx, s, k)
                )
        for system in systems if not args.no_latency else []:
            if system not in measured:
                latencies[system.name] = clean[system.name]
            elif reason := latency.skip_reason(system):
                latencies[system.name] = {"skipped": reason}
            else:
                latencies[system.name] = _attempt(
                    f"{system.name}: latency run", lambda s=system: latency.latency_run(ctx, s, load)
                )
        if args.latency_only:
            clean, crash = {}, {}

    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result = {
        "started_at": started_at,
        "note": args.note,
        "elapsed_seconds": round(time.monotonic() - started, 1),
        "machine": machine,
        "versions": versions,
        "workload": {
            "count": spec.count,
            "duplicate_ratio": args.duplicates,
            "id_style": args.id_style,
            "partitions": PARTITIONS,
            "distinct_ids": len(expected),
        },
        "settings": {
            "idle_seconds": args.idle_seconds,
            "naive_seconds": args.naive_seconds,
            "window_seconds": ctx.window_seconds,
            "kill_fraction": args.kill_fraction,
            "memory_from_ids": ctx.memory_from_ids,
            "record_size": ctx.record_size,
            "dedupectl_options": list(ctx.dedupectl_options),
            "dedupectl_max_keys": ctx.window_ids,
        },
        "clean": clean,
        "ratios": report.ratios({k: v for k, v in clean.items() if "error" not in v}),
        "crash": crash,
        "latency_load": {
            "rate": load.rate,
            "seconds": load.seconds,
            "grace_seconds": load.grace_seconds,
            "duplicate_ratio": load.duplicate_ratio,
            "id_style": load.id_style,
            "partitions": PARTITIONS,
        },
        "latency": latencies,
    }
    page = report.markdown(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(page)
    Console().print(Markdown(page))
    console.print(f"written to {args.markdown} and {args.out}")


@contextlib.contextmanager
def _scratch_dir(keep: Path | None) -> Iterator[str]:
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="dedupectl-peers-") as scratch:
            yield scratch
    else:
        keep.mkdir(parents=True, exist_ok=True)
        yield str(keep.resolve())


def _attempt(title: str, run) -> dict:
    """One run; a failure is reported in the results (and the suite goes on) rather than ending the suite."""
    with console.status(title):
        started = time.monotonic()
        try:
            figures = run()
        except Exception as error:  # one failing system must not cost the others' figures
            message = str(error) if isinstance(error, RunFailed) else f"{type(error).__name__}: {error}"
            console.print(f"[red]{title} failed:[/red] {message}")
            return {"error": message}
    console.print(f"{title}: done in {time.monotonic() - started:.1f}s")
    return figures


if __name__ == "__main__":
    main()

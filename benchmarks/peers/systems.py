"""The systems under comparison: how to start each one, where it keeps state, what it promises."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.peers import flink_env

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "benchmarks" / "peers"


@dataclass(frozen=True)
class Setup:
    """Everything a command needs for one run (a clean run or a crash run) of one system."""

    bootstrap: str
    input_topic: str
    output_topic: str
    group: str
    state_dir: Path  # the system's own on-disk state (RocksDB), if it keeps any
    peers_python: str
    idle_seconds: float
    naive_seconds: float
    window_seconds: int
    window_ids: int = 0  # dedupectl's --max-keys: ids per partition its window keeps (0: no bound)
    redis_port: int = 0
    jvm_classpath: str = ""  # the JVM peers (benchmarks/peers/jvm_build.py)
    tools_classpath: str = ""  # Kafka's perf tools on the broker's jars
    count: int = 0  # input records: what a perf tool produces or consumes
    record_size: int = 0  # mean input value bytes: what the producer perf tool sends
    follow: bool = False  # run past the input's end while records still arrive (the latency run)
    dedupectl_options: tuple[str, ...] = ()  # more `dedupectl run` options (say, --batch-max-ms)


@dataclass(frozen=True)
class System:
    name: str
    guarantee: str
    dedups: bool  # False for the copy floor: its duplicates are the input's, by design
    finishes: bool  # False for the time-bounded naive loop: checked over the input it consumed
    stateful_on_disk: bool
    needs_peers_env: bool = False
    needs_redis: bool = False
    needs_jvm: bool = False
    kafka_tool: bool = False  # Kafka's own perf tool: its own throughput, no output to check, no crash run
    stream_threads: int = 1
    tool_properties: tuple[str, ...] = ()  # a perf tool's client settings (its --*.config file)
    needs_flink_env: bool = False  # runs in benchmarks/.venv-flink with Flink's Kafka connector (flink_env)
    commit_interval: str = ""  # when its output becomes readable: what bounds its latency from below
    bounded: bool = True  # dedupectl: its window bounded at Setup.window_ids, as the peers' TTL bounds theirs
    by_default: bool = True  # in a run that names no --systems

    @property
    def is_dedupectl(self) -> bool:
        return self.name.startswith("dedupectl")

    def command(self, s: Setup) -> list[str]:
        python = s.peers_python if self.needs_peers_env else sys.executable
        io = [s.bootstrap, s.input_topic, s.output_topic]
        follow = ["--idle-seconds", str(s.idle_seconds)] if s.follow else []
        if self.name == "copy":
            return [python, str(PEERS / "copy_floor.py"), *io, "--group", s.group, *follow]
        if self.name == "naive":
            return [python, str(PEERS / "naive.py"), *io, str(s.state_dir), "--group", s.group,
                    "--max-seconds", str(s.naive_seconds)]  # fmt: skip
        if self.name == "redis":
            return [python, str(PEERS / "redis_dedup.py"), *io, "--group", s.group, "--redis-port", str(s.redis_port),
                    "--window-seconds", str(s.window_seconds), "--idle-seconds", str(s.idle_seconds)]  # fmt: skip
        if self.name == "quix":
            return [python, str(PEERS / "quix_app.py"), *io, str(s.state_dir), "--group", s.group,
                    "--window-seconds", str(s.window_seconds), "--idle-seconds", str(s.idle_seconds)]  # fmt: skip
        if self.is_dedupectl:
            bound = ["--max-keys", str(s.window_ids)] if self.bounded and s.window_ids else []
            return [python, "-m", "dedupectl.cli.app", "run", "-b", s.bootstrap, "-t", s.input_topic,
                    "-o", s.output_topic, "--dead-letter-topic", f"{s.input_topic}.dead-letter",
                    "--group-id", s.group, "-d", str(s.state_dir), "--worker-id", "bench",
                    "--exit-on-idle", str(s.idle_seconds), "--log-level", "warning", "--json",
                    *bound, *s.dedupectl_options]  # fmt: skip
        java = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp"]
        if self.name.startswith("kstreams"):
            return [*java, s.jvm_classpath, "bench.peers.StreamsDedup", *io, str(s.state_dir), "--group", s.group,
                    "--threads", str(self.stream_threads), "--window-seconds", str(s.window_seconds),
                    "--idle-seconds", str(s.idle_seconds)]  # fmt: skip
        if self.name == "java-copy":
            return [*java, s.jvm_classpath, "bench.peers.TransactionalCopy", *io, "--group", s.group, *follow]
        config = str(s.state_dir / "tool.properties")  # written by the runner from tool_properties
        if self.name == "producer-perf":
            return ["java", "-cp", s.tools_classpath, "org.apache.kafka.tools.ProducerPerformance",
                    "--topic", s.output_topic, "--num-records", str(s.count), "--record-size", str(s.record_size),
                    "--throughput", "-1", "--producer.config", config,
                    "--producer-props", f"bootstrap.servers={s.bootstrap}"]  # fmt: skip
        if self.name == "consumer-perf":
            return ["java", "-cp", s.tools_classpath, "org.apache.kafka.tools.ConsumerPerformance",
                    "--bootstrap-server", s.bootstrap, "--topic", s.input_topic, "--messages", str(s.count),
                    "--group", s.group, "--consumer.config", config]  # fmt: skip
        if self.name == "spark":
            return [python, str(PEERS / "spark_streaming.py"), *io, str(s.state_dir),
                    "--window-seconds", str(s.window_seconds), "--idle-seconds", str(s.idle_seconds)]  # fmt: skip
        if self.name == "flink":
            return [str(flink_env.PYTHON), str(PEERS / "flink_sql.py"), *io, str(s.state_dir), "--group", s.group,
                    "--window-seconds", str(s.window_seconds),
                    "--connector-jar", str(flink_env.connector_jar()),
                    *(["--unbounded"] if s.follow else [])]  # fmt: skip
        raise ValueError(self.name)


_DEDUPECTL = System(
    "dedupectl",
    "exactly-once, RocksDB store",
    dedups=True,
    finishes=True,
    stateful_on_disk=True,
    commit_interval="a transaction per batch (up to 20,000 records or 100 ms: batch_max_ms)",
)
_KSTREAMS = "Kafka Streams exactly_once_v2, RocksDB store + changelog"
_KSTREAMS_COMMIT = "a transaction every 100 ms (commit.interval.ms, the exactly-once default)"
_JVM_SYSTEMS = (
    System(
        "kstreams",
        f"{_KSTREAMS}, 1 thread",
        dedups=True,
        finishes=True,
        stateful_on_disk=True,
        needs_jvm=True,
        commit_interval=_KSTREAMS_COMMIT,
    ),
    System(
        "kstreams-2t",
        f"{_KSTREAMS}, 2 threads",
        dedups=True,
        finishes=True,
        stateful_on_disk=True,
        needs_jvm=True,
        stream_threads=2,
        commit_interval=f"{_KSTREAMS_COMMIT}, per thread",
    ),
    System(
        "java-copy",
        "exactly-once copy in Java, no dedup (floor)",
        dedups=False,
        finishes=True,
        stateful_on_disk=False,
        needs_jvm=True,
        commit_interval="a transaction per poll (returns with the records fetched, up to 20,000)",
    ),
    # the ceiling: Kafka's own perf tools, same client batching as the Java copy, the input's mean record size
    System(
        "producer-perf",
        "Kafka ProducerPerformance: produce only, acks=all, idempotent",
        dedups=False,
        finishes=True,
        stateful_on_disk=False,
        needs_jvm=True,
        kafka_tool=True,
        tool_properties=("acks=all", "linger.ms=5", "batch.size=1000000"),
    ),
    System(
        "consumer-perf",
        "Kafka ConsumerPerformance: consume only, read_committed",
        dedups=False,
        finishes=True,
        stateful_on_disk=False,
        needs_jvm=True,
        kafka_tool=True,
        tool_properties=("isolation.level=read_committed", "fetch.max.bytes=67108864"),
    ),
)

SYSTEMS: dict[str, System] = {
    system.name: system
    for system in (
        System(
            "copy",
            "exactly-once copy, no dedup (floor)",
            dedups=False,
            finishes=True,
            stateful_on_disk=False,
            commit_interval="a transaction per consume() call (up to 20,000 records or 100 ms)",
        ),
        System(
            "naive",
            "exactly-once, 1 txn/message",
            dedups=True,
            finishes=False,
            stateful_on_disk=True,
            commit_interval="a transaction per record",
        ),
        System(
            "redis",
            "at-least-once + Redis SET NX EX",
            dedups=True,
            finishes=True,
            stateful_on_disk=False,
            needs_peers_env=True,
            needs_redis=True,
            commit_interval="no transaction: records readable once acknowledged; offsets per batch (100 ms)",
        ),
        System(
            "quix",
            "Quix Streams exactly-once, RocksDB state + TTL",
            dedups=True,
            finishes=True,
            stateful_on_disk=True,
            needs_peers_env=True,
            commit_interval="a transaction per checkpoint, every 5 s (commit_interval)",
        ),
        System(
            "spark",
            "at-least-once (Kafka sink) + dropDuplicatesWithinWatermark, RocksDB state",
            dedups=True,
            finishes=True,
            stateful_on_disk=True,
            commit_interval="no transaction: records readable once written; a micro-batch as soon as the last ends",
        ),
        System(
            "flink",
            "Flink SQL exactly-once (transactional sink), ROW_NUMBER dedup, RocksDB state",
            dedups=True,
            finishes=True,
            stateful_on_disk=True,
            needs_flink_env=True,
            commit_interval="a transaction per checkpoint, every 1 s",
        ),
        _DEDUPECTL,
        replace(
            _DEDUPECTL,
            name="dedupectl-unbounded",
            guarantee="exactly-once, RocksDB store, no --max-keys: its id filter grows with it",
            bounded=False,
            by_default=False,
        ),
        *_JVM_SYSTEMS,
    )
}

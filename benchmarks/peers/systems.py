"""The systems under comparison: how to start each one, where it keeps state, what it promises."""

from __future__ import annotations

import sys
from dataclasses import dataclass
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
    redis_port: int = 0


@dataclass(frozen=True)
class System:
    name: str
    guarantee: str
    dedups: bool  # False for the copy floor: its duplicates are the input's, by design
    finishes: bool  # False for the time-bounded naive loop: checked over the input it consumed
    stateful_on_disk: bool
    needs_peers_env: bool = False
    needs_redis: bool = False
    needs_flink_env: bool = False  # runs in benchmarks/.venv-flink with Flink's Kafka connector (flink_env)

    def command(self, s: Setup) -> list[str]:
        python = s.peers_python if self.needs_peers_env else sys.executable
        io = [s.bootstrap, s.input_topic, s.output_topic]
        if self.name == "copy":
            return [python, str(PEERS / "copy_floor.py"), *io, "--group", s.group]
        if self.name == "naive":
            return [python, str(PEERS / "naive.py"), *io, str(s.state_dir), "--group", s.group,
                    "--max-seconds", str(s.naive_seconds)]  # fmt: skip
        if self.name == "redis":
            return [python, str(PEERS / "redis_dedup.py"), *io, "--group", s.group, "--redis-port", str(s.redis_port),
                    "--window-seconds", str(s.window_seconds), "--idle-seconds", str(s.idle_seconds)]  # fmt: skip
        if self.name == "quix":
            return [python, str(PEERS / "quix_app.py"), *io, str(s.state_dir), "--group", s.group,
                    "--window-seconds", str(s.window_seconds), "--idle-seconds", str(s.idle_seconds)]  # fmt: skip
        if self.name == "dedupectl":
            return [python, "-m", "dedupectl.cli.app", "run", "-b", s.bootstrap, "-i", s.input_topic,
                    "-o", s.output_topic, "--dead-letter-topic", f"{s.input_topic}.dead-letter",
                    "--group-id", s.group, "-d", str(s.state_dir), "--worker-id", "bench",
                    "--exit-on-idle", str(s.idle_seconds), "--log-level", "warning", "--json"]  # fmt: skip
        if self.name == "spark":
            return [python, str(PEERS / "spark_streaming.py"), *io, str(s.state_dir),
                    "--window-seconds", str(s.window_seconds), "--idle-seconds", str(s.idle_seconds)]  # fmt: skip
        if self.name == "flink":
            return [str(flink_env.PYTHON), str(PEERS / "flink_sql.py"), *io, str(s.state_dir), "--group", s.group,
                    "--window-seconds", str(s.window_seconds),
                    "--connector-jar", str(flink_env.connector_jar())]  # fmt: skip
        raise ValueError(self.name)


SYSTEMS: dict[str, System] = {
    system.name: system
    for system in (
        System("copy", "exactly-once copy, no dedup (floor)", dedups=False, finishes=True, stateful_on_disk=False),
        System("naive", "exactly-once, 1 txn/message", dedups=True, finishes=False, stateful_on_disk=True),
        System(
            "redis",
            "at-least-once + Redis SET NX EX",
            dedups=True,
            finishes=True,
            stateful_on_disk=False,
            needs_peers_env=True,
            needs_redis=True,
        ),
        System(
            "quix",
            "Quix Streams exactly-once, RocksDB state + TTL",
            dedups=True,
            finishes=True,
            stateful_on_disk=True,
            needs_peers_env=True,
        ),
        System(
            "spark",
            "at-least-once (Kafka sink) + dropDuplicatesWithinWatermark, RocksDB state",
            dedups=True,
            finishes=True,
            stateful_on_disk=True,
        ),
        System(
            "flink",
            "Flink SQL exactly-once (transactional sink), ROW_NUMBER dedup, RocksDB state",
            dedups=True,
            finishes=True,
            stateful_on_disk=True,
            needs_flink_env=True,
        ),
        System("dedupectl", "exactly-once, RocksDB store", dedups=True, finishes=True, stateful_on_disk=True),
    )
}

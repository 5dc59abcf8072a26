"""Running one system: a clean run (throughput, memory, state, correctness) and a crash run (SIGKILL once
mid-stream, restart, correctness after recovery and the time to the first record published again)."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.peers.env import RedisServer
from benchmarks.peers.jvm_build import JvmPeers
from benchmarks.peers.probes import (
    Sample,
    Sampler,
    committed_offsets,
    dir_bytes,
    high_watermarks,
    memory_per_id,
    probe_consumer,
    wait_for_first_record,
    wait_until_settled,
)
from benchmarks.peers.systems import Setup, System
from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics
from dedupectl.verify import OutputCheck, check_output
from reconcile.scan import OutputReader


@dataclass(frozen=True)
class Context:
    """What every run of the suite shares."""

    kafka: KafkaConfig
    input_topic: str
    partitions: int
    scratch: Path
    peers_python: str
    redis_executable: str | None
    expected_ids: frozenset[bytes]  # the distinct messageIds of the input: what a correct output holds
    memory_from_ids: int  # memory per id is the growth from this many retained ids to the end
    idle_seconds: float
    naive_seconds: float
    window_seconds: int
    kill_fraction: float
    process_timeout: float
    settle_timeout: float  # how long to wait for open transactions on an output before reading it back
    names_prefix: str = ""  # for output topics and groups, when the broker is shared (tests)
    jvm: JvmPeers | None = None  # the JVM peers' build, when a system needs it
    broker_data_dir: Path | None = None  # the broker's log.dirs: changelog topics' bytes are read there
    count: int = 0  # input records
    record_size: int = 0  # mean input value bytes
    dedupectl_options: tuple[str, ...] = ()  # more `dedupectl run` options than the benchmark's own
    window_ids: int = 0  # dedupectl's --max-keys (0: no bound)

    def setup(self, system: System, role: str, redis_port: int = 0) -> Setup:
        return Setup(
            bootstrap=self.kafka.bootstrap_servers,
            input_topic=self.input_topic,
            output_topic=f"{self.names_prefix}out-{system.name}-{role}",
            group=f"{self.names_prefix}bench-{system.name}-{role}",
            state_dir=self.scratch / f"{system.name}-{role}-state",
            peers_python=self.peers_python,
            idle_seconds=self.idle_seconds,
            naive_seconds=self.naive_seconds,
            window_seconds=self.window_seconds,
            window_ids=self.window_ids,
            redis_port=redis_port,
            jvm_classpath=self.jvm.classpath if self.jvm else "",
            tools_classpath=self.jvm.tools_classpath if self.jvm else "",
            count=self.count,
            record_size=self.record_size,
            dedupectl_options=self.dedupectl_options,
        )


class RunFailed(RuntimeError):
    pass


# --- clean run ----------------------------------------------------------------------------------------------


def clean_run(ctx: Context, system: System) -> dict[str, Any]:
    if system.kafka_tool:
        return tool_run(ctx, system)
    with _redis_for(ctx, system, "clean") as redis, _processes() as started:
        setup = ctx.setup(system, "clean", redis.port if redis else 0)
        create_topics(ctx.kafka, [setup.output_topic], ctx.partitions)
        redis_before = redis.used_memory() if redis else 0
        sampler = Sampler(ctx.kafka, setup.output_topic, ctx.partitions, extra=_extra(redis, redis_before))
        process = started(_start(ctx, system, setup, "clean"))
        sampler.watch(process.pid)
        try:
            report = _finish(ctx, process, system, "clean")
        finally:
            sampler.stop()
        redis_bytes = redis.used_memory() - redis_before if redis else 0
        redis_peak = int(redis.info("memory")["used_memory_peak"]) if redis else None
    check, expected = _check(ctx, system, setup)
    consumed, busy = report["consumed"], report["busy_seconds"]
    per_id, from_ids, to_ids = memory_per_id(sampler.samples, ctx.memory_from_ids)
    state_bytes = dir_bytes(setup.state_dir) if system.stateful_on_disk else redis_bytes
    state_bytes = report.get("state_bytes", state_bytes)  # a system that deletes its state at the end measured it
    retained = check.distinct_ids if system.dedups else 0
    changelog = changelog_bytes(ctx.broker_data_dir, setup.group) if ctx.broker_data_dir else None
    return {
        "consumed": consumed,
        "busy_seconds": busy,
        "messages_per_second": round(consumed / busy, 1) if busy else 0.0,
        "peak_rss_mb": report["peak_rss_mb"],
        "memory_per_id_bytes": round(per_id, 1) if per_id is not None else None,
        "memory_measured_between_ids": [from_ids, to_ids],
        # [seconds since the first sample, RSS MiB, output records, outside memory MiB]: the memory curve
        "samples": _curve(sampler.samples),
        "state_bytes": state_bytes,
        "state_kind": "disk" if system.stateful_on_disk else ("redis used_memory" if redis else None),
        "state_bytes_per_id": round(state_bytes / retained, 1) if state_bytes and retained else None,
        "redis_used_memory_peak_mb": round(redis_peak / 2**20, 1) if redis_peak is not None else None,
        "changelog_bytes": changelog,
        "changelog_bytes_per_id": round(changelog / retained, 1) if changelog and retained else None,
        "expected_ids": expected,
        "output_check": asdict(check),
        "report": report,
    }


def changelog_bytes(data_dir: Path, group: str) -> int:
    """Bytes of the log segments of a group's changelog topics on the broker (Kafka Streams names them
    ``<application.id>-<store>-changelog``, Quix ``changelog__<group>--...``): state written twice."""
    total = 0
    for folder in data_dir.iterdir():
        topic = folder.name.rsplit("-", 1)[0]
        if folder.is_dir() and group in topic and "changelog" in topic:
            total += sum(segment.stat().st_size for segment in folder.glob("*.log"))
    return total


# --- Kafka's perf tools -------------------------------------------------------------------------------------


def tool_run(ctx: Context, system: System) -> dict[str, Any]:
    """Kafka's ProducerPerformance or ConsumerPerformance over ``ctx.count`` records of the input's size:
    the throughput the tool reports itself (the consumer's fetch rate, without its group join)."""
    with _processes() as started:
        setup = ctx.setup(system, "clean")
        create_topics(ctx.kafka, [setup.output_topic], ctx.partitions)
        setup.state_dir.mkdir(parents=True, exist_ok=True)
        (setup.state_dir / "tool.properties").write_text("\n".join(system.tool_properties) + "\n")
        sampler = Sampler(ctx.kafka, setup.output_topic, ctx.partitions)
        process = started(_start(ctx, system, setup, "clean"))
        sampler.watch(process.pid)
        try:
            stdout = _communicate(ctx, process, system, "clean")
        finally:
            sampler.stop()
    figures = parse_tool_output(system.name, stdout)
    if figures is None:
        raise RunFailed(f"{system.name} printed no figures; stdout ends {stdout[-500:]!r}")
    records, seconds = figures
    peak_rss = max((s.rss_bytes for s in sampler.samples), default=0)
    return {
        "consumed": records,
        "busy_seconds": round(seconds, 3),
        "messages_per_second": round(records / seconds, 1) if seconds else 0.0,
        "peak_rss_mb": round(peak_rss / 2**20, 1),
        "record_size": ctx.record_size,
        "tool_output": stdout[-2000:],
    }


_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


def parse_tool_output(name: str, stdout: str) -> tuple[int, float] | None:
    """(records, seconds) from a perf tool's summary: ProducerPerformance's last "N records sent, R
    records/sec" line; ConsumerPerformance's CSV line (its fetch time: the group join excluded)."""
    if name == "producer-perf":
        found = _PRODUCED.findall(stdout)
        if not found:
            return None
        records, rate = int(found[-1][0]), float(found[-1][1])
        return records, records / rate if rate else 0.0
    lines = [line for line in stdout.splitlines() if line.count(",") >= 9]
    if len(lines) < 2:
        return None
    header = [field.strip() for field in lines[0].split(",")]
    values = dict(zip(header, (field.strip() for field in lines[-1].split(",")), strict=False))
    try:
        return int(values["data.consumed.in.nMsg"]), float(values["fetch.time.ms"]) / 1000
    except (KeyError, ValueError):
        return None


# --- crash run ----------------------------------------------------------------------------------------------


def crash_run(ctx: Context, system: System, kill_at: int) -> dict[str, Any]:
    """Start, SIGKILL once the output holds ``kill_at`` records (committed or not), restart, check."""
    with _redis_for(ctx, system, "crash") as redis, _processes() as started:
        setup = ctx.setup(system, "crash", redis.port if redis else 0)
        create_topics(ctx.kafka, [setup.output_topic], ctx.partitions)
        sampler = Sampler(ctx.kafka, setup.output_topic, ctx.partitions, interval=0.05)
        first = started(_start(ctx, system, setup, "crash-1"))
        sampler.watch(first.pid)
        deadline = time.monotonic() + ctx.process_timeout
        while first.poll() is None and sampler.produced() < kill_at and time.monotonic() < deadline:
            time.sleep(0.02)
        killed_at = sampler.produced()
        killed = first.poll() is None
        if killed:
            _kill_tree(first)
        first.wait()
        sampler.stop()
        time.sleep(0.5)  # produce requests already on the wire land: nothing past here is the dead process's
        probe = probe_consumer(ctx.kafka)
        try:
            start_offsets = high_watermarks(probe, setup.output_topic, ctx.partitions)
        finally:
            probe.close()
        restarted_at = time.monotonic()
        second = started(_start(ctx, system, setup, "crash-2"))
        first_record_at = wait_for_first_record(
            ctx.kafka, setup.output_topic, start_offsets, lambda: second.poll() is None, ctx.settle_timeout
        )
        report = _finish(ctx, second, system, "crash-2")
    check, expected = _check(ctx, system, setup)
    return {
        "killed": killed,
        "killed_at_output_records": killed_at,
        "restart_to_first_record_seconds": round(first_record_at - restarted_at, 2) if first_record_at else None,
        "expected_ids": expected,
        "output_check": asdict(check),
        "report_after_restart": report,
    }


# --- shared -------------------------------------------------------------------------------------------------


def _kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL a system and every process it started (PySpark's and PyFlink's JVM is a child of their
    Python driver, and would otherwise shut down in order when the driver's pipe closes)."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    process.send_signal(signal.SIGKILL)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.send_signal(signal.SIGKILL)


def _curve(samples: list[Sample]) -> list[list[float]]:
    if not samples:
        return []
    t0 = samples[0].at
    return [
        [round(s.at - t0, 2), round(s.rss_bytes / 2**20, 1), s.produced, round(s.extra_bytes / 2**20, 1)]
        for s in samples
    ]


@contextlib.contextmanager
def _processes() -> Iterator[Callable[[subprocess.Popen], subprocess.Popen]]:
    """Track the processes a run starts; whatever still runs when the run ends (say, on an error) is killed."""
    processes: list[subprocess.Popen] = []

    def track(process: subprocess.Popen) -> subprocess.Popen:
        processes.append(process)
        return process

    try:
        yield track
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


@contextlib.contextmanager
def _redis_for(ctx: Context, system: System, role: str) -> Iterator[RedisServer | None]:
    """A fresh Redis per run (clean state, clean used_memory baseline); it outlives the peer's SIGKILL."""
    if not system.needs_redis:
        yield None
        return
    if ctx.redis_executable is None:
        raise RunFailed("redis-server is not available")
    with RedisServer(ctx.redis_executable, ctx.scratch / f"redis-{role}") as redis:
        yield redis


def _extra(redis: RedisServer | None, baseline: int) -> Callable[[], int] | None:
    return (lambda: redis.used_memory() - baseline) if redis else None


def _log_path(ctx: Context, system: System, role: str) -> Path:
    logs = ctx.scratch / "logs"
    logs.mkdir(exist_ok=True)
    return logs / f"{system.name}-{role}.log"


def _start(ctx: Context, system: System, setup: Setup, role: str) -> subprocess.Popen:
    command = system.command(setup)
    log_path = _log_path(ctx, system, role)
    log_path.write_text(" ".join(command) + "\n")
    with log_path.open("a") as log_file:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=ctx.scratch)


def _communicate(ctx: Context, process: subprocess.Popen, system: System, role: str) -> str:
    try:
        stdout, _ = process.communicate(timeout=ctx.process_timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise RunFailed(f"{system.name} ({role}) ran longer than {ctx.process_timeout:g}s") from None
    log_path = _log_path(ctx, system, role)
    if process.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-15:])
        raise RunFailed(f"{system.name} ({role}) exited {process.returncode}; {log_path}:\n{tail}")
    return stdout


def _finish(ctx: Context, process: subprocess.Popen, system: System, role: str) -> dict[str, Any]:
    stdout = _communicate(ctx, process, system, role)
    report = _parse_report(stdout)
    if report is None:
        raise RunFailed(f"{system.name} ({role}) printed no JSON report; stdout ends {stdout[-500:]!r}")
    return report


def _parse_report(stdout: str) -> dict[str, Any] | None:
    """The JSON object a run prints: all of stdout (dedupectl pretty-prints), or its last JSON line."""
    with contextlib.suppress(ValueError):
        return json.loads(stdout)
    for line in reversed(stdout.splitlines()):
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict):
                return parsed
    return None


def _check(ctx: Context, system: System, setup: Setup) -> tuple[OutputCheck, int]:
    """Read the output back (read_committed) against the ids it should hold: every input id for a system
    that runs to the end, and the ids of the input its group committed for the time-bounded naive loop."""
    # a killed producer's open transaction hides the records after it until the broker aborts it
    wait_until_settled(ctx.kafka, setup.output_topic, ctx.partitions, ctx.settle_timeout)
    if system.finishes:
        expected: frozenset[bytes] | set[bytes] = ctx.expected_ids
    else:
        offsets = committed_offsets(ctx.kafka, setup.group, ctx.input_topic, ctx.partitions)
        expected = _ids_before(ctx.kafka, ctx.input_topic, offsets)
    return check_output(ctx.kafka, setup.output_topic, expected), len(expected)


def _ids_before(kafka: KafkaConfig, topic: str, stop_offsets: list[int]) -> set[bytes]:
    ids: set[bytes] = set()
    with OutputReader(kafka) as reader:
        for partition, stop in enumerate(stop_offsets):
            if stop > 0:
                for batch in reader.scan(topic, partition, -1, stop_offset=stop):
                    ids.update(batch.ids)
    return ids

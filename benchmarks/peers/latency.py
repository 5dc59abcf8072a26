"""The latency run: one system under a fixed offered load, each output record timed from its send to the moment
a read_committed reader could read it.

Per system, on a fresh input topic (the throughput runs' partitions and id distribution): the system starts,
warm-up records (distinct ids, four a second) go in until the first of them comes out (its start-up, group
join and first commit: not part of the figures), then ``benchmarks/peers/paced_producer.py`` sends
``rate * seconds`` sample events paced evenly over ``seconds``, each stamped with its send time. A
read_committed consumer (assigned, not in a group; ``fetch.wait.max.ms`` 10) reads the output meanwhile and
notes for each record the time its poll returned it minus the record's send time. Once the load has ended and
every id is out (or after a grace period), the system is given ``idle_seconds`` to stop by itself, is then
stopped (SIGTERM, then SIGKILL of its process tree), and what its last commits made readable is read too.
The records read are checked as in the other runs: each id once for a dedup stage, every record for a copy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from benchmarks.peers import paced_producer
from benchmarks.peers.paced_producer import sent_us, stamp
from benchmarks.peers.probes import wait_until_settled
from benchmarks.peers.runner import (
    Context,
    RunFailed,
    _kill_tree,
    _log_path,
    _parse_report,
    _processes,
    _redis_for,
    _start,
)
from benchmarks.peers.systems import System
from dedupectl.kafka_clients import create_topics
from dedupectl.sample_events import SampleSpec, generate

WARM_UP_INTERVAL = 0.25
WARM_UP_RECORDS = 4_000  # at WARM_UP_INTERVAL: more than the longest start-up allowed
KEPT_UP_SECONDS = 5.0  # the last record read this long after the last send at most: the system kept up
STOP_SECONDS = 15.0  # from SIGTERM to SIGKILL
WINDOW_US = 10_000_000  # the load's figures are also given per 10 s of send time


@dataclass(frozen=True)
class Load:
    rate: float  # records per second
    seconds: float
    grace_seconds: float = 30.0  # after the load, longest wait for the last ids
    duplicate_ratio: float = 0.006
    id_style: str = "ajs"
    seed: int = 7
    startup_timeout: float = 300.0  # longest wait for the first warm-up record out

    @property
    def spec(self) -> SampleSpec:
        return SampleSpec(round(self.rate * self.seconds), self.duplicate_ratio, id_style=self.id_style, seed=self.seed)


def skip_reason(system: System) -> str | None:
    """Why a system has no latency run, if it has none."""
    if system.kafka_tool:
        return "Kafka's perf tools write no output to time"
    if not system.finishes:
        return "one transaction per record: far below the offered load"
    return None


def latency_run(ctx: Context, system: System, load: Load) -> dict[str, Any]:
    with _redis_for(ctx, system, "latency") as redis:  # the Redis peer's own server, as in its other runs
        return _latency_run(ctx, system, load, redis.port if redis else 0)


def _latency_run(ctx: Context, system: System, load: Load, redis_port: int) -> dict[str, Any]:
    names = f"{ctx.names_prefix}latency-{system.name}-"
    run_ctx = dataclasses.replace(ctx, input_topic=f"{names}in", names_prefix=names)
    setup = dataclasses.replace(run_ctx.setup(system, "latency", redis_port), follow=True)
    create_topics(ctx.kafka, [setup.input_topic, f"{setup.input_topic}.dead-letter", setup.output_topic],
                  ctx.partitions)  # fmt: skip
    input_counts = Counter(record.key for record in generate(load.spec))
    warm_up_spec = SampleSpec(WARM_UP_RECORDS, 0.0, id_style=load.id_style, seed=load.seed + 1)
    warm_up = [(record.key, record.value) for record in generate(warm_up_spec)]
    if input_counts.keys() & {key for key, _ in warm_up}:
        raise RunFailed("the warm-up ids overlap the load's: choose another seed")
    with _processes() as started, _Reader(ctx, setup.output_topic) as reader:
        producer = started(_start_producer(run_ctx, system, setup.input_topic, load))
        process = started(_start(run_ctx, system, setup, "latency"))
        began = time.monotonic()
        warm_up_sent = _warm_up(ctx, setup.input_topic, warm_up, reader, process, load.startup_timeout, system)
        startup_seconds = time.monotonic() - began
        cpu_before, go_us = _tree_cpu_seconds(process.pid), time.time_ns() // 1000
        producer.stdin.write("go\n")
        producer.stdin.flush()
        outcome = _ProducerOutcome(producer)
        while not outcome.done.is_set():
            reader.poll()
            if process.poll() is not None:
                raise RunFailed(f"{system.name} exited {process.returncode} under load; {_tail(run_ctx, system)}")
        cpu_seconds = _tree_cpu_seconds(process.pid) - cpu_before
        sent = outcome.report()
        load_ended = time.monotonic()
        wanted = warm_up_sent + (len(input_counts) if system.dedups else sum(input_counts.values()))
        while time.monotonic() - load_ended < load.grace_seconds and reader.wanted_count(system.dedups) < wanted:
            reader.poll()
        read_by_grace = reader.records
        stopped = _stop(process, ctx.idle_seconds)
        report = _parse_report(process.stdout.read()) if stopped == "exited" else None
        # what a last commit made readable, once no transaction is left open on the output
        settled = wait_until_settled(ctx.kafka, setup.output_topic, ctx.partitions, ctx.settle_timeout)
        reader.drain()
    warm_up_ids = {key for key, _ in warm_up[:warm_up_sent]}
    figures = reader.figures(go_us, sent["last_sent_at"], warm_up_ids)
    check = _check(reader.ids, set(input_counts) | warm_up_ids, input_counts, warm_up_ids)
    return {
        "rate": load.rate,
        "seconds": load.seconds,
        "commit_interval": system.commit_interval,
        "startup_seconds": round(startup_seconds, 2),
        "warm_up_records": warm_up_sent,
        "producer": sent,
        **figures,
        "read_after_grace": reader.records - read_by_grace,
        "cpu_cores": round(cpu_seconds / max(sent["seconds"], 1e-9), 2),
        "stopped": stopped,
        "settle_seconds": settled,
        "output_check": check,
        "report": report,  # the system's own account, when it exited by itself (its commits among others)
        "load_average_at_end": [round(x, 2) for x in psutil.getloadavg()],
    }


class _Reader:
    """A read_committed consumer of the whole output, noting each record's id, send time and the time its
    poll returned it."""

    def __init__(self, ctx: Context, topic: str) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": ctx.kafka.bootstrap_servers,
                "group.id": "bench-latency-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,  # the reader's own share of the figures: at most this, when idle
            }
        )
        partitions = len(self._consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.ids: list[bytes] = []
        self.sent_us: list[int] = []
        self.read_us: list[int] = []
        self._distinct: set[bytes] = set()

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *_: object) -> None:
        self._consumer.close()

    @property
    def records(self) -> int:
        return len(self.ids)

    def wanted_count(self, distinct: bool) -> int:
        return len(self._distinct) if distinct else len(self.ids)

    def poll(self, timeout: float = 0.05) -> int:
        messages = self._consumer.consume(10_000, timeout)
        now_us = time.time_ns() // 1000
        count = 0
        for message in messages:
            if message.error():
                continue
            value = message.value()
            key = message.key() or _message_id(value)
            self.ids.append(key)
            self._distinct.add(key)
            self.sent_us.append(sent_us(value) or 0)
            self.read_us.append(now_us)
            count += 1
        return count

    def drain(self, quiet_seconds: float = 2.0, longest: float = 60.0) -> None:
        """Read until nothing more comes for ``quiet_seconds`` (the system stopped: nothing new is on the way)."""
        deadline, quiet_since = time.monotonic() + longest, time.monotonic()
        while time.monotonic() - quiet_since < quiet_seconds and time.monotonic() < deadline:
            if self.poll(0.2):
                quiet_since = time.monotonic()

    def figures(self, go_us: int, last_sent_at: float, warm_up_ids: set[bytes]) -> dict[str, Any]:
        """Latency percentiles (ms) over the load's records (sent from ``go_us`` on; warm-up excluded)."""
        measured = [
            (read - sent, sent)
            for key, sent, read in zip(self.ids, self.sent_us, self.read_us, strict=True)
            if sent >= go_us and key not in warm_up_ids
        ]
        latencies = sorted(latency for latency, _ in measured)
        last_read = max((read for read, sent in zip(self.read_us, self.sent_us, strict=True) if sent >= go_us),
                        default=None)  # fmt: skip
        windows: dict[int, list[int]] = {}
        for latency, sent in measured:
            windows.setdefault((sent - go_us) // WINDOW_US, []).append(latency)
        return {
            "records_read": len(self.ids),
            "measured_records": len(latencies),
            "latency_ms": _percentiles(latencies),
            # the same past the load's first WINDOW: a JVM's warm-up (class loading, JIT) left out
            "latency_ms_after_first_window": _percentiles(
                sorted(lat for lat, sent in measured if sent >= go_us + WINDOW_US)
            ),
            # per WINDOW of the load (by send time): whether the latency held or grew
            "latency_ms_by_10s": [_percentiles(sorted(window)) for _, window in sorted(windows.items())],
            "last_read_after_last_send_seconds": round(last_read / 1e6 - last_sent_at, 3) if last_read else None,
        }


def _percentiles(sorted_us: list[int]) -> dict[str, float | None]:
    def rank(q: float) -> float | None:
        if not sorted_us:
            return None
        return round(sorted_us[min(len(sorted_us) - 1, max(math.ceil(q * len(sorted_us)) - 1, 0))] / 1000, 1)

    return {
        "p50": rank(0.50),
        "p90": rank(0.90),
        "p99": rank(0.99),
        "p999": rank(0.999),
        "max": round(sorted_us[-1] / 1000, 1) if sorted_us else None,
        "mean": round(sum(sorted_us) / len(sorted_us) / 1000, 1) if sorted_us else None,
        "count": len(sorted_us),
    }


def _check(read: list[bytes], expected: set[bytes], input_counts: Counter, warm_up_ids: set[bytes]) -> dict:
    counts = Counter(read)
    seen = set(counts)
    return {
        "records": len(read),
        "distinct_ids": len(seen),
        "duplicated_ids": sum(1 for n in counts.values() if n > 1),
        "missing_ids": len(expected - seen),
        "unexpected_ids": len(seen - expected),
        # what a copy must read: every record sent, the input's duplicates included
        "records_sent": sum(input_counts.values()) + len(warm_up_ids),
        "ids_repeated_in_input": sum(1 for n in input_counts.values() if n > 1),
    }


def _message_id(value: bytes | None) -> bytes:
    """The messageId of a JSON value (a system whose output is not keyed by it): the sample's first field."""
    if not value:
        return b""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return json.loads(value)["messageId"].encode()
    return b""


def _start_producer(ctx: Context, system: System, topic: str, load: Load) -> subprocess.Popen:
    command = [sys.executable, str(Path(paced_producer.__file__)), ctx.kafka.bootstrap_servers, topic,
               "--rate", str(load.rate), "--seconds", str(load.seconds), "--duplicates", str(load.duplicate_ratio),
               "--id-style", load.id_style, "--seed", str(load.seed)]  # fmt: skip
    log_path = _log_path(ctx, system, "latency-producer")
    with log_path.open("w") as log_file:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, text=True)
    ready = process.stdout.readline().strip()
    if ready != "ready":
        process.kill()
        raise RunFailed(f"the paced producer did not start: {log_path.read_text()[-1000:]}")
    return process


class _ProducerOutcome:
    """The paced producer's JSON report, read on a thread so the reader keeps polling meanwhile."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.done = threading.Event()
        self._process, self._stdout = process, ""
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self._stdout, _ = self._process.communicate()
        self.done.set()

    def report(self) -> dict[str, Any]:
        if self._process.returncode != 0:
            raise RunFailed(f"the paced producer exited {self._process.returncode}")
        return json.loads(self._stdout.strip().splitlines()[-1])


def _warm_up(
    ctx: Context,
    topic: str,
    records: list[tuple[bytes, bytes]],
    reader: _Reader,
    process: subprocess.Popen,
    timeout: float,
    system: System,
) -> int:
    """Send warm-up records until the first comes out; how many were sent."""
    producer = Producer({"bootstrap.servers": ctx.kafka.bootstrap_servers, "linger.ms": 1, "enable.idempotence": True})
    deadline, sent = time.monotonic() + timeout, 0
    try:
        while reader.records == 0:
            if process.poll() is not None:
                raise RunFailed(f"{system.name} exited {process.returncode} before its first output")
            if time.monotonic() > deadline:
                raise RunFailed(f"{system.name} published nothing within {timeout:g}s of its start")
            if sent < len(records):
                key, value = records[sent]
                producer.produce(topic, stamp(value, time.time_ns() // 1000), key)
                sent += 1
                producer.flush(10)
            next_at = time.monotonic() + WARM_UP_INTERVAL
            while reader.records == 0 and time.monotonic() < next_at:
                reader.poll()
    finally:
        producer.flush(10)
    return sent


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (the JVM a Python driver started)."""
    total = 0.0
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        for each in [process, *process.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = each.cpu_times()
                total += times.user + times.system
    return total


def _stop(process: subprocess.Popen, idle_seconds: float) -> str:
    """Let the system stop by itself (it exits when idle), else SIGTERM it, else SIGKILL its tree."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(idle_seconds + 5)
        return "exited"
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_SECONDS)
        return "stopped (SIGTERM)"
    _kill_tree(process)
    process.wait()
    return "killed (SIGKILL)"


def _tail(ctx: Context, system: System) -> str:
    path = _log_path(ctx, system, "latency")
    return f"{path}:\n" + "\n".join(path.read_text().splitlines()[-15:])

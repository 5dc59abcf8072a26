"""A fleet of real ``dedupectl run`` processes on the project's broker, under a stream flowing in at a fixed
rate, taken through what a supervisor and an operator do to it: 4 workers on 16 partitions, a rolling
restart of all four (SIGTERM, wait for the exit, start again, one at a time), two workers added, three
removed (``--leave-group-on-stop``) and, for comparison, one static worker removed. The output read back
holds every id once. For each step the test prints the longest time any output partition went without a
record published, and what recovery read (from the workers' own logs): docs/benchmarks.md, "Rolling restart
and scale out/in", holds the figures. Also: a second SIGTERM, and ``--stop-timeout`` running out, end a
stopping worker at once."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pipeline_support import Pipeline
from waiting import wait_for

from store.worker_status import read_statuses

PARTITIONS = 16
RATE = 320  # records a second over all partitions: 20 a second each, so a stall of 0.2 s already shows
REPEAT_EVERY = 10  # every 10th record repeats an earlier id of its partition: dropped, never published again
SESSION_TIMEOUT_S = 6.0  # the fleet's session.timeout.ms, as spawn_worker sets it
RECOVERED = re.compile(r"partition (\d+) recovered: read output offsets (-?\d+)\.\.(\d+) \((\d+) records\)")


class Feed(threading.Thread):
    """Produces to every input partition in turn at RATE records a second until stopped."""

    def __init__(self, pipeline: Pipeline) -> None:
        super().__init__(daemon=True)
        self.pipeline, self.halt = pipeline, threading.Event()
        self.ids: dict[int, list[str]] = defaultdict(list)

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.pipeline.kafka.bootstrap_servers, "enable.idempotence": True})
        began, sent = time.monotonic(), 0
        while not self.halt.is_set():
            partition = sent % PARTITIONS
            known = self.ids[partition]
            if sent % REPEAT_EVERY == REPEAT_EVERY - 1 and known:
                message_id = known[len(known) // 2]
            else:
                message_id = f"p{partition}-{len(known)}"
                known.append(message_id)
            value = json.dumps({"messageId": message_id}).encode()
            producer.produce(self.pipeline.input_topic, value=value, key=message_id.encode(), partition=partition)
            producer.poll(0)
            sent += 1
            ahead = began + sent / RATE - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        assert producer.flush(30) == 0


class Tap(threading.Thread):
    """Reads the output (read_committed) from the start, noting when each record arrived."""

    def __init__(self, pipeline: Pipeline) -> None:
        super().__init__(daemon=True)
        self.pipeline, self.halt = pipeline, threading.Event()
        self.arrivals: dict[int, list[float]] = defaultdict(list)
        self.ids: Counter[str] = Counter()

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.pipeline.kafka.bootstrap_servers,
                "group.id": "tap",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(self.pipeline.output_topic, p, 0) for p in range(PARTITIONS)])
        while not self.halt.is_set():
            for message in consumer.consume(500, timeout=0.1):
                if message.error() is None:
                    self.arrivals[message.partition()].append(time.monotonic())
                    self.ids[message.key().decode()] += 1
        consumer.close()

    def last_arrivals(self) -> list[float]:
        return [self.arrivals[p][-1] if self.arrivals[p] else 0.0 for p in range(PARTITIONS)]

    def longest_stall(self, began: float, ended: float) -> tuple[float, int]:
        """The longest gap between two records of one partition that overlaps [began, ended], and its partition."""
        worst = (0.0, -1)
        for partition, times in self.arrivals.items():
            for before, after in itertools.pairwise(times):
                if after > began and before < ended:
                    worst = max(worst, (after - before, partition))
        return worst


@dataclass
class Fleet:
    pipeline: Pipeline
    root: Path
    partitions: int = PARTITIONS
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)
    log_read: dict[Path, int] = field(default_factory=dict)

    def start(self, worker_id: str, *extra: str) -> None:
        self.starts[worker_id] += 1
        log_path = self.root / f"{worker_id}-{self.starts[worker_id]}.log"
        env = {**os.environ, "DEDUPECTL_SESSION_TIMEOUT_MS": "6000", "DEDUPECTL_TRANSACTION_TIMEOUT_MS": "10000"}
        args = self.pipeline.cli_args(worker_id, self.root / worker_id, "--log-level", "info", *extra)
        with open(log_path, "w") as log:
            self.processes[worker_id] = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)

    def stop(self, *worker_ids: str) -> None:
        for worker_id in worker_ids:
            self.processes[worker_id].send_signal(signal.SIGTERM)
        for worker_id in worker_ids:
            code = self.processes.pop(worker_id).wait(timeout=60)
            assert code == 0, f"{worker_id} exited {code}: {self.logs_of(worker_id)[-2000:]}"

    def logs_of(self, worker_id: str) -> str:
        return (self.root / f"{worker_id}-{self.starts[worker_id]}.log").read_text()

    def owners(self) -> dict[int, str] | None:
        """Partition -> worker, once the running workers' status files cover every partition exactly once and
        each running worker holds some."""
        owners: dict[int, str] = {}
        for worker_id in self.processes:
            held = [p for status in read_statuses(self.root / worker_id) for p in status.partitions]
            if not held:
                return None
            for partition in held:
                if partition in owners:
                    return None
                owners[partition] = worker_id
        return owners if len(owners) == self.partitions else None

    def recovery_since_last(self) -> tuple[int, int]:
        """(recoveries, output records read by them) in the workers' logs since the previous call."""
        count = scanned = 0
        for path in sorted(self.root.glob("*.log")):
            text = path.read_text()
            for match in RECOVERED.finditer(text, self.log_read.get(path, 0)):
                count += 1
                scanned += int(match.group(4))
            self.log_read[path] = len(text)
        return count, scanned


def _step(fleet: Fleet, tap: Tap, name: str, action, figures: list[str], stalls: dict[str, float]) -> None:
    """Run ``action``, wait for the assignment to settle and for every partition to publish again, then note
    the longest stall and what recovery read meanwhile."""
    began = time.monotonic()
    action()
    wait_for(fleet.owners, 60, f"the partitions settled after {name}")
    settled = time.monotonic()
    wait_for(lambda: min(tap.last_arrivals()) > settled + 0.5, 60, f"every partition publishing after {name}")
    stall, partition = tap.longest_stall(began, time.monotonic())
    recoveries, scanned = fleet.recovery_since_last()
    stalls[name] = stall
    figures.append(
        f"{name:<28} longest stall {stall:5.2f}s (partition {partition:>2}); "
        f"{recoveries:>2} recoveries read {scanned} output records"
    )


@pytest.mark.slow
def test_rolling_restart_and_scale_out_and_in_under_a_steady_stream(make_pipeline, tmp_path) -> None:
    pipeline = make_pipeline(PARTITIONS)
    fleet = Fleet(pipeline, tmp_path)
    leave = "--leave-group-on-stop"
    feed, tap = Feed(pipeline), Tap(pipeline)
    figures: list[str] = []
    stalls: dict[str, float] = {}
    try:
        for worker_id in ("w1", "w2", "w3"):
            fleet.start(worker_id)
        fleet.start("w4", leave)  # to be removed at the end: a dynamic member
        wait_for(fleet.owners, 60, "four workers holding the 16 partitions")
        feed.start()
        tap.start()
        wait_for(lambda: min(tap.last_arrivals()) > 0, 60, "every partition publishing")
        fleet.recovery_since_last()
        for worker_id in ("w1", "w2", "w3", "w4"):
            extra = (leave,) if worker_id == "w4" else ()

            def restart(worker_id=worker_id, extra=extra) -> None:
                fleet.stop(worker_id)
                fleet.start(worker_id, *extra)

            kind = "dynamic" if extra else "static"
            _step(fleet, tap, f"restart {worker_id} ({kind})", restart, figures, stalls)
        _step(fleet, tap, "add w5, w6", lambda: [fleet.start(w, leave) for w in ("w5", "w6")], figures, stalls)
        _step(fleet, tap, "remove w4, w5, w6 (leave)", lambda: fleet.stop("w4", "w5", "w6"), figures, stalls)
        # for comparison: librdkafka sends no LeaveGroup for a static member, its partitions wait for the session
        _step(fleet, tap, "remove w3 (static)", lambda: fleet.stop("w3"), figures, stalls)
        feed.halt.set()
        feed.join(60)
        expected = {message_id for ids in feed.ids.values() for message_id in ids}
        wait_for(lambda: len(tap.ids) >= len(expected), 60, "the output holding every id")
        time.sleep(1)  # a duplicate, should there be one, arrives with or after the last new id
    finally:
        feed.halt.set()
        tap.halt.set()
        for process in fleet.processes.values():
            process.kill()
            process.wait(30)
    tap.join(30)
    print("\n".join(["", *figures]))
    duplicates = {message_id: n for message_id, n in tap.ids.items() if n > 1}
    assert not duplicates, f"published more than once: {sorted(duplicates)[:10]}"
    assert set(tap.ids) == expected, f"lost: {sorted(expected - set(tap.ids))[:10]}"
    # a dynamic member that leaves hands its partitions over at once, without waiting out the session
    assert stalls["remove w4, w5, w6 (leave)"] < SESSION_TIMEOUT_S < stalls["remove w3 (static)"]


@pytest.fixture
def stuck_worker(make_pipeline, tmp_path):
    """``start(*extra)`` -> a worker process stuck in a stop's way: its recovery of partition 0 waits for a
    transaction left open on the output (one the test holds), and stop requests are heard between batches."""
    pipeline = make_pipeline(1)
    fleet = Fleet(pipeline, tmp_path, partitions=1)
    hanging = Producer(
        {
            "bootstrap.servers": pipeline.kafka.bootstrap_servers,
            "transactional.id": f"hanging-{pipeline.input_topic}",
            "transaction.timeout.ms": 60_000,
        }
    )
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(pipeline.output_topic, value=b"{}", key=b"open", partition=0)
    assert hanging.flush(30) == 0
    pipeline.produce([(b"id-1", json.dumps({"messageId": "id-1"}).encode())], partition=0)

    def start(*extra: str) -> subprocess.Popen:
        fleet.start("w1", *extra)
        waiting = "partition 0: waiting for an open transaction on the output to end"
        wait_for(lambda: waiting in fleet.logs_of("w1"), 60, "the worker's recovery waiting")
        return fleet.processes.pop("w1")

    yield start, fleet
    for process in fleet.processes.values():
        process.kill()
    hanging.abort_transaction(30)


def test_a_second_sigterm_ends_a_stopping_worker_at_once(stuck_worker) -> None:
    start, fleet = stuck_worker
    process = start()
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM received" in fleet.logs_of("w1"), 10, "the first SIGTERM handled")
    with pytest.raises(subprocess.TimeoutExpired):  # the first one waits for the batch in hand
        process.wait(timeout=1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=5) == -signal.SIGTERM


def test_the_stop_bound_ends_a_stop_that_takes_longer(stuck_worker) -> None:
    start, fleet = stuck_worker
    process = start("--stop-timeout", "2s")
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    assert 2 <= time.monotonic() - began < 10
    assert "still stopping after --stop-timeout 2s: exiting now" in fleet.logs_of("w1")

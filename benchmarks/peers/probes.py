"""What the harness watches from outside a system's process: its RSS, how far its output has grown, when its
first record after a restart became visible, what its group committed, and its state on disk."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from confluent_kafka import Consumer, KafkaException, TopicPartition

from dedupectl.config import KafkaConfig


def probe_consumer(kafka: KafkaConfig, **extra: object) -> Consumer:
    """A consumer that never joins its group; read_uncommitted unless told (librdkafka's default is
    read_committed, whose "high watermark" is the last stable offset: it would hide open transactions)."""
    settings = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": "bench-peers-probe"}
    return Consumer({**settings, "isolation.level": "read_uncommitted", **extra})


def high_watermarks(consumer: Consumer, topic: str, partitions: int, attempts: int = 50) -> list[int]:
    """End offsets including open transactions (and transaction markers): records produced so far.

    Retried: right after a topic is created its partitions may not have a leader yet."""
    for attempt in range(attempts):
        try:
            return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
        except KafkaException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Sample:
    at: float  # time.time()
    rss_bytes: int
    produced: int  # output records produced so far (high watermarks; for a dedup stage: ids retained)
    extra_bytes: int  # memory kept outside the process (Redis used_memory), 0 otherwise


class Sampler(threading.Thread):
    """Samples a process's RSS and its output topic's growth every ``interval`` seconds until stopped."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        partitions: int,
        interval: float = 0.25,
        extra: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.samples: list[Sample] = []
        self._process: psutil.Process | None = None
        self._topic, self._partitions = topic, partitions
        self._interval, self._extra = interval, extra
        self._halt = threading.Event()
        # connect and learn the partition leaders now, so the first sample is not a second late
        self._consumer = probe_consumer(kafka)
        high_watermarks(self._consumer, topic, partitions)

    def watch(self, pid: int) -> None:
        """Start sampling process ``pid`` (nothing to sample if it is already gone)."""
        try:
            self._process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._consumer.close()
            return
        self.start()

    def run(self) -> None:
        assert self._process is not None, "call watch(pid)"
        consumer = self._consumer
        try:
            while not self._halt.is_set():
                try:
                    rss = self._process.memory_info().rss
                except psutil.Error:
                    break  # the process is gone
                rss += _children_rss(self._process)  # a JVM a Python driver started works for it
                produced = sum(high_watermarks(consumer, self._topic, self._partitions))
                extra = self._extra() if self._extra else 0
                self.samples.append(Sample(time.time(), rss, produced, extra))
                self._halt.wait(self._interval)
        finally:
            consumer.close()

    def produced(self) -> int:
        return self.samples[-1].produced if self.samples else 0

    def stop(self) -> None:
        self._halt.set()
        if self.ident is not None:  # started
            self.join(30)


def _children_rss(process: psutil.Process) -> int:
    total = 0
    with contextlib.suppress(psutil.Error):
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # a child that ended between the listing and the read
                total += child.memory_info().rss
    return total


def memory_per_id(samples: list[Sample], from_ids: int) -> tuple[float | None, int, int]:
    """Bytes of (RSS + outside) memory added per id retained, from ``from_ids`` ids to the end of the run;
    with the two id counts it was measured between (None when there is no span).

    Peak to peak: the highest memory over the first stretch of ids (``from_ids`` up to a ninth of the span
    past it: 1M to 2M ids in a 10M run) against the highest over the last stretch (the same number of ids
    up to the end, and while the process finishes), over the ids between the two stretches' ends. A process
    whose memory only grows (Redis) measures its growth either way; one whose memory is a saw-tooth (RocksDB
    memtables fill and flush) is compared crest to crest, so where one sample falls in the tooth does not
    count as per-id growth (measured against a single sample at 1M ids, dedupectl read 6.5 to 8.2 B per id
    over two runs of the same code, the difference being where that sample fell)."""
    if not samples:
        return None, 0, 0
    end = max(s.produced for s in samples)
    stretch = (end - from_ids) // 9
    first = [s for s in samples if from_ids <= s.produced <= from_ids + stretch]
    if stretch <= 0 or not first:
        return None, from_ids, end
    first_end = max(s.produced for s in first)
    last = [s for s in samples if s.produced >= end - stretch and s.at > first[-1].at]
    span = end - first_end
    if span <= 0 or not last:
        return None, first_end, end
    peak_first = max(s.rss_bytes + s.extra_bytes for s in first)
    peak_last = max(s.rss_bytes + s.extra_bytes for s in last)
    return (peak_last - peak_first) / span, first_end, end


def open_transactions(kafka: KafkaConfig, topic: str, partitions: int) -> bool:
    """Whether some partition's last stable offset is behind its high watermark: an open transaction (say,
    a killed producer's, until its transaction.timeout.ms) hides everything after it from read_committed."""
    committed, uncommitted = probe_consumer(kafka, **{"isolation.level": "read_committed"}), probe_consumer(kafka)
    try:
        return high_watermarks(committed, topic, partitions) != high_watermarks(uncommitted, topic, partitions)
    finally:
        committed.close()
        uncommitted.close()


def wait_until_settled(kafka: KafkaConfig, topic: str, partitions: int, timeout: float) -> float:
    """Wait (up to ``timeout``) until no transaction is open on ``topic``; returns the seconds waited."""
    started = time.monotonic()
    while open_transactions(kafka, topic, partitions) and time.monotonic() - started < timeout:
        time.sleep(0.5)
    return round(time.monotonic() - started, 2)


def wait_for_first_record(
    kafka: KafkaConfig, topic: str, start_offsets: list[int], alive: Callable[[], bool], timeout: float
) -> float | None:
    """``time.monotonic()`` when the first committed record at or past ``start_offsets`` became readable
    (read_committed), even if that is after the process exited (an open transaction left by the killed
    process can hide it); None if none did within ``timeout``, or once the process is gone and nothing is
    left hidden."""
    consumer = probe_consumer(kafka, **{"isolation.level": "read_committed", "fetch.wait.max.ms": 20})
    consumer.assign([TopicPartition(topic, p, offset) for p, offset in enumerate(start_offsets)])
    deadline, next_check = time.monotonic() + timeout, 0.0
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.02)
            if message is not None and not message.error():
                return time.monotonic()
            if not alive() and time.monotonic() > next_check:
                if not open_transactions(kafka, topic, len(start_offsets)):
                    message = consumer.poll(1.0)  # what the last stable offset just uncovered
                    return time.monotonic() if message is not None and not message.error() else None
                next_check = time.monotonic() + 2
        return None
    finally:
        consumer.close()


def committed_offsets(kafka: KafkaConfig, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed next offsets (0 where it committed none)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [max(tp.offset, 0) for tp in found]
    finally:
        consumer.close()


def dir_bytes(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file RocksDB deleted while we walked
                total += (Path(folder) / name).stat().st_size
    return total

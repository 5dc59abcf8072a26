"""Prometheus metrics of the worker, on their own registry (so several workers can live in one process)."""

from __future__ import annotations

import contextlib
import errno
import platform
import resource
import shutil
from collections.abc import Iterable

from confluent_kafka import libversion
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dedupectl import __version__
from store.errors import ConfigError

_LABEL = ("partition",)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.consumed = Counter("dedupectl_messages_consumed", "Input records consumed", _LABEL, registry=r)
        self.published = Counter("dedupectl_messages_published", "New records published", _LABEL, registry=r)
        self.duplicates = Counter("dedupectl_duplicates_dropped", "Repeated ids dropped", _LABEL, registry=r)
        self.dead_letters = Counter(
            "dedupectl_dead_letters", "Records sent to the dead-letter topic", _LABEL, registry=r
        )
        self.recovered = Counter(
            "dedupectl_recovered_ids", "Ids found in the output and recorded by recovery", _LABEL, registry=r
        )
        self.store_keys = Gauge("dedupectl_store_keys", "Live ids in the partition's store", _LABEL, registry=r)
        self.id_filter_bytes = Gauge(
            "dedupectl_id_filter_bytes",
            "Memory of the partition's id filter (0 before its first batch)",
            _LABEL,
            registry=r,
        )
        self.window_seconds = Gauge(
            "dedupectl_effective_window_seconds",
            "Age of the oldest live id: how far back a repeat is still caught (page when under the floor)",
            _LABEL,
            registry=r,
        )
        self.aged = Counter("dedupectl_aged_ids", "Ids aged out of the window by the size bound", _LABEL, registry=r)
        self.empty_stores = Counter(
            "dedupectl_empty_store_starts",
            "Partitions started from an empty store: recovery reads the whole output partition",
            _LABEL,
            registry=r,
        )
        self.recovery_offsets = Gauge(
            "dedupectl_recovery_read_offsets",
            "Output offsets the partition's recovery reads (an empty store's pending one, or the last one)",
            _LABEL,
            registry=r,
        )
        self.transactions = Counter("dedupectl_transactions", "Kafka transactions by outcome", ("outcome",), registry=r)
        self.client_restarts = Counter(
            "dedupectl_client_restarts",
            "Kafka clients and stores restarted in process after a fatal producer error",
            registry=r,
        )
        self.snapshots_published = Counter(
            "dedupectl_snapshots_published", "Scheduled snapshots published (--snapshot-every)", registry=r
        )
        self.snapshot_failures = Counter(
            "dedupectl_snapshot_failures",
            "Failures of scheduled snapshots, by step: checkpoint, publish, round (before any checkpoint), prune",
            ("step",),
            registry=r,
        )
        self.batch_seconds = Histogram(
            "dedupectl_batch_seconds",
            "Time to process one batch, from dedup to store write",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )

        self._add_operations_metrics()

    def _add_operations_metrics(self) -> None:
        """What on-call pages on: lag, latency, the last commit, disk, recovery, refusals, and which build runs."""
        r = self.registry
        self.refused = Gauge(
            "dedupectl_partition_refused",
            "1: the output lost offsets the partition's store needs (reason: retention or truncated); the worker "
            "exits 3 at once",
            ("partition", "reason"),
            registry=r,
        )
        self.lag = Gauge(
            "dedupectl_consumer_lag",
            "Input records behind the partition's end (high watermark - position)",
            _LABEL,
            registry=r,
        )
        self.latency = Histogram(
            "dedupectl_end_to_end_latency_seconds",
            "Per committed batch and partition: age of its oldest published record at commit (input timestamp)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
            registry=r,
        )
        self.last_commit = Gauge(
            "dedupectl_last_commit_timestamp_seconds", "Unix time of the last committed transaction", registry=r
        )
        self.store_bytes = Gauge(
            "dedupectl_store_bytes",
            "Bytes on disk of the partition's store (SST files, log, manifest)",
            _LABEL,
            registry=r,
        )
        self.disk_free = Gauge(
            "dedupectl_data_dir_free_bytes", "Free bytes on the data directory's filesystem", registry=r
        )
        self.disk_size = Gauge("dedupectl_data_dir_size_bytes", "Size of the data directory's filesystem", registry=r)
        self.recovery_seconds = Gauge(
            "dedupectl_recovery_seconds",
            "Duration of the partition's last recovery from the output",
            _LABEL,
            registry=r,
        )
        self.build_info = Gauge(
            "dedupectl_build_info", "The worker's versions (value 1)", ("version", "librdkafka", "python"), registry=r
        )
        self.build_info.labels(__version__, libversion()[0], platform.python_version()).set(1)

    def measure_data_dir(self, data_dir) -> None:
        usage = shutil.disk_usage(data_dir)
        self.disk_free.set(usage.free)
        self.disk_size.set(usage.total)

    def export_snapshot_failures(self, steps: Iterable[str]) -> None:
        """Export every step's failure count from the start, at 0: an alert on its increase needs the series."""
        for step in steps:
            self.snapshot_failures.labels(step)

    def forget_store(self, partition: int) -> None:
        """Drop a revoked partition's store gauges: its new owner exports them, a stale copy would mislead."""
        gauges = (self.window_seconds, self.store_keys, self.recovery_offsets, self.id_filter_bytes, self.lag)
        for gauge in (*gauges, self.store_bytes, self.recovery_seconds):
            with contextlib.suppress(KeyError):  # never exported: nothing to drop
                gauge.remove(str(partition))

    def serve(self, port: int, host: str) -> int:
        """Serve /metrics; returns the bound port (useful with port 0)."""
        try:
            server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            raise _unservable(port, host, error) from error
        return server.server_port


def _unservable(port: int, host: str, error: OSError) -> ConfigError:
    """A port or address the worker cannot bind is the operator's to change, not a bug."""
    where = f"cannot serve metrics on {host}:{port}"
    if error.errno == errno.EADDRINUSE:
        return ConfigError(
            f"{where}: the port is in use by another process",
            "stop it, or give this worker another --metrics-port (0 picks a free one)",
        )
    if error.errno == errno.EACCES:
        return ConfigError(f"{where}: permission denied", "use a port above 1023, or 0 for a free one")
    reason = error.strerror or str(error)
    return ConfigError(f"{where}: {reason}", "give --metrics-host an address of this machine, or 0.0.0.0")


def peak_rss_bytes() -> int:
    """This process's own peak resident set size: VmHWM (ru_maxrss would carry a parent's peak across exec)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

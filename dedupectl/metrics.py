"""Prometheus metrics of the worker, on their own registry (so several workers can live in one process), and the
health endpoints a supervisor probes, served beside them."""

from __future__ import annotations

import contextlib
import errno
import platform
import resource
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from confluent_kafka import libversion
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from dedupectl import __version__
from store.errors import ConfigError

_LABEL = ("partition",)
# the loop beats every few seconds; a minute without one is a stall, not a slow batch (a supervisor's probe
# adds its own tolerance on top)
STALE_AFTER_S = 60.0


class Heartbeat:
    """The worker's loop beating, as the health probes see it."""

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self._started = time.monotonic()
        self._last_beat: float | None = None

    def beat(self) -> None:
        """The worker's loop is alive: /healthz answers 200 for ``stale_after_s`` from now, /readyz from now on."""
        self._last_beat = time.monotonic()

    def liveness(self) -> tuple[bool, str]:
        """Whether the loop beat within ``stale_after_s`` (counted from the start until its first beat)."""
        beaten = self._last_beat is not None
        since = time.monotonic() - (self._last_beat if beaten else self._started)
        what = "the worker's loop last beat" if beaten else "the worker started"
        return since <= self.stale_after_s, f"{what} {since:.1f} s ago (limit {self.stale_after_s:g} s)"

    def readiness(self) -> tuple[bool, str]:
        """Ready once the loop has beaten: the start-up checks passed. It stays so through rebalances and stalls
        (the liveness check's concern), so the held partitions never make it flap."""
        if self._last_beat is None:
            return False, "the worker is starting: its loop has not run yet"
        return True, "the worker's loop is running"


class RoutingCounters:
    """Records the partition check found in the wrong partition, and those it cannot check (no key)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.misrouted = Counter(
            "dedupectl_misrouted_records",
            "Keyed records in another partition than the topic's partitioner gives their key (--partitioner)",
            _LABEL,
            registry=registry,
        )
        self.unkeyed = Counter(
            "dedupectl_unkeyed_records",
            "Records without a key whose id came from the value or a header: not checked for their partition",
            _LABEL,
            registry=registry,
        )


class WorkerMetrics:
    def __init__(self, *, stale_after_s: float = STALE_AFTER_S) -> None:
        self.registry = CollectorRegistry()
        self.heartbeat = Heartbeat(stale_after_s)
        r = self.registry
        self.consumed = Counter("dedupectl_messages_consumed", "Input records consumed", _LABEL, registry=r)
        self.published = Counter("dedupectl_messages_published", "New records published", _LABEL, registry=r)
        self.duplicates = Counter("dedupectl_duplicates_dropped", "Repeated ids dropped", _LABEL, registry=r)
        self.duplicates_produced = Counter(
            "dedupectl_duplicates_produced",
            "Dropped copies produced to the duplicates topic (--duplicates-topic)",
            _LABEL,
            registry=r,
        )
        self.dead_letters = Counter(
            "dedupectl_dead_letters", "Records sent to the dead-letter topic", _LABEL, registry=r
        )
        self.routing = RoutingCounters(r)
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
        self.beat()  # only the worker's loop calls this (its maintenance step, every few seconds)

    @property
    def stale_after_s(self) -> float:
        return self.heartbeat.stale_after_s

    def beat(self) -> None:
        self.heartbeat.beat()

    def liveness(self) -> tuple[bool, str]:
        return self.heartbeat.liveness()

    def readiness(self) -> tuple[bool, str]:
        return self.heartbeat.readiness()

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
        """Serve /metrics, /healthz and /readyz on a thread of their own; returns the bound port (for port 0)."""
        try:
            family, *_, address = socket.getaddrinfo(host, port)[0]  # an IPv6 host needs an IPv6 socket
            server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
            server = make_server(address[0], port, self._app(), server_class, handler_class=_QuietHandler)
        except OSError as error:
            raise _unservable(port, host, error) from error
        threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True).start()
        return server.server_port

    def _app(self) -> Callable:
        metrics = make_wsgi_app(self.registry)
        checks = {"/healthz": self.liveness, "/readyz": self.readiness}

        def app(environ, start_response):
            check = checks.get(environ.get("PATH_INFO", ""))
            if check is None:
                return metrics(environ, start_response)
            ok, reason = check()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")])
            return [f"{'ok' if ok else 'unhealthy'}: {reason}\n".encode()]

        return app


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


class _QuietHandler(WSGIRequestHandler):
    """Probes and scrapes every few seconds: no access log line for each."""

    def log_message(self, format: str, *args: object) -> None:
        pass


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

"""Reading a worker's ``/metrics`` endpoint: the per-partition figures ``dedupectl status`` shows from it.

A worker exports its effective window per held partition from assignment on, so the partitions an endpoint
reports a window for are the partitions that worker holds.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class PartitionFigures:
    window_seconds: float | None = None  # None: the store holds no id (the gauge is NaN)
    store_bytes: int | None = None
    refused: str | None = None  # the reason label of dedupectl_partition_refused
    misrouted: int = 0  # records in another partition than the partitioner's, since the worker started
    unkeyed: int = 0  # records without a key whose id came from the value or a header, likewise


@dataclass(frozen=True)
class Scrape:
    url: str
    error: str | None = None  # why nothing could be read; the other fields are then empty
    partitions: dict[int, PartitionFigures] = field(default_factory=dict)
    last_commit_at: float | None = None  # Unix time; None before the worker's first commit
    version: str | None = None
    refused: bool = False  # nothing listens there: unlike a timeout, the worker's process is gone

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or ""


def metrics_url(target: str) -> str:
    """``host:port`` or a full URL; a bare address gets ``http://`` and ``/metrics``."""
    if "://" in target:
        return target
    return f"http://{target.rstrip('/')}/metrics"


def scrape(target: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> Scrape:
    url = metrics_url(target)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        return Scrape(url, error=str(reason), refused=isinstance(reason, ConnectionRefusedError))
    try:
        return parse_metrics(url, text)
    except ValueError as error:  # not Prometheus text: some other server on that port
        return Scrape(url, error=f"not Prometheus metrics ({error})")


def parse_metrics(url: str, text: str) -> Scrape:
    windows: dict[int, float | None] = {}
    sizes: dict[int, int] = {}
    refused: dict[int, str] = {}
    routing: dict[str, dict[int, int]] = {
        "dedupectl_misrouted_records_total": {},
        "dedupectl_unkeyed_records_total": {},
    }
    last_commit, version = None, None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "dedupectl_effective_window_seconds":
                windows[int(labels["partition"])] = None if math.isnan(value) else value
            elif name == "dedupectl_store_bytes":
                sizes[int(labels["partition"])] = int(value)
            elif name == "dedupectl_partition_refused" and value == 1:
                refused[int(labels["partition"])] = labels.get("reason", "")
            elif name in routing:
                routing[name][int(labels["partition"])] = int(value)
            elif name == "dedupectl_last_commit_timestamp_seconds":
                last_commit = value or None  # 0: never committed
            elif name == "dedupectl_build_info":
                version = labels.get("version")
    if version is None:
        raise ValueError("no dedupectl_build_info series")
    held = set(windows) | set(sizes) | set(refused)
    misrouted, unkeyed = routing.values()
    figures = {
        p: PartitionFigures(windows.get(p), sizes.get(p), refused.get(p), misrouted.get(p, 0), unkeyed.get(p, 0))
        for p in held
    }
    return Scrape(url, partitions=figures, last_commit_at=last_commit, version=version)

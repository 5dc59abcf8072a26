"""What the deploy tests share: the metric names a worker exports, as Prometheus stores them, and promtool."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dedupectl.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_OWN = {"up"}
SAMPLE_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}


def _tool(name: str) -> str:
    cached = Path(os.environ.get("DEDUPECTL_CACHE_DIR", Path.home() / ".cache" / "dedupectl")) / "promtool" / name
    found = shutil.which(name) or (str(cached) if cached.exists() else None)
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/fetch-promtool.sh gets it from Debian's prometheus package)")
    return found


def promtool() -> str:
    return _tool("promtool")


def prometheus() -> str:
    return _tool("prometheus")


def exported_names() -> set[str]:
    """Every series name a worker's /metrics can show: each family, plus its counter or histogram samples."""
    names = set()
    for family in WorkerMetrics().registry.collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES.get(family.type, ()))
    return names

"""Writes dedupectl.json, the Grafana dashboard of the workers' metrics, beside this file.

    python deploy/grafana/dashboard.py          # write dedupectl.json
    python deploy/grafana/dashboard.py --check  # exit 1 when the committed file differs from what this writes

The dashboard is code so that its queries can be checked (tests/deploy/test_dashboard.py): each names only
metrics the worker exports, and each parses as PromQL. Edit this file, not the JSON.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUTPUT = Path(__file__).with_name("dedupectl.json")
FLOOR_SECONDS = 86400  # the effective window's floor: the alert DedupectlEffectiveWindowBelowFloor pages under it
SELECTOR = 'job=~"$job", instance=~"$instance"'
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    width: int = 12
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),)
    line_at_threshold: bool = False
    overrides: tuple[dict, ...] = field(default=())


def _m(name: str, extra: str = "") -> str:
    """A metric selected by the dashboard's job and instance variables."""
    return f"{name}{{{SELECTOR}{', ' + extra if extra else ''}}}"


def _rate(name: str, by: str = "partition") -> str:
    return f"sum by ({by}) (rate({_m(name)}[$__rate_interval]))"


def _quantile(q: float) -> Query:
    buckets = f"sum by (le) (rate({_m('dedupectl_end_to_end_latency_seconds_bucket')}[$__rate_interval]))"
    return Query(f"histogram_quantile({q}, {buckets})", f"p{int(q * 100)}")


SUMMARY = (
    Panel(
        "Workers up",
        "Scrape targets of the job that answer (the alert DedupectlWorkerDown pages after 5 minutes at 0).",
        (Query(f"sum(up{{{SELECTOR}}})", "up"),),
        kind="stat",
        width=4,
        thresholds=((None, "red"), (1, "green")),
    ),
    Panel(
        "Smallest effective window",
        "Age of the oldest live id of the worst partition: repeats older than this are published again.",
        (Query(f"min({_m('dedupectl_effective_window_seconds')})", "window"),),
        unit="s",
        kind="stat",
        width=5,
        thresholds=((None, "red"), (FLOOR_SECONDS, "green")),
    ),
    Panel(
        "Total lag",
        "Input records behind the partitions' ends, all partitions.",
        (Query(f"sum({_m('dedupectl_consumer_lag')})", "lag"),),
        kind="stat",
        width=5,
        thresholds=((None, "green"), (1000, "orange")),
    ),
    Panel(
        "Oldest last commit",
        "Time since the least recent worker committed a transaction (it commits only when input arrives).",
        (Query(f"time() - min({_m('dedupectl_last_commit_timestamp_seconds')})", "age"),),
        unit="s",
        kind="stat",
        width=5,
        thresholds=((None, "green"), (300, "orange")),
    ),
    Panel(
        "Least data-dir free",
        "Free share of the fullest data directory's filesystem (a full disk stops the worker: exit 74).",
        (
            Query(
                f"min({_m('dedupectl_data_dir_free_bytes')} / {_m('dedupectl_data_dir_size_bytes')})",
                "free",
            ),
        ),
        unit="percentunit",
        kind="stat",
        width=5,
        thresholds=((None, "red"), (0.10, "orange"), (0.25, "green")),
    ),
)

TRAFFIC = (
    Panel(
        "Throughput",
        "Input records consumed and new records published, per second and partition.",
        (
            Query(_rate("dedupectl_messages_consumed_total"), "consumed p{{partition}}"),
            Query(_rate("dedupectl_messages_published_total"), "published p{{partition}}"),
        ),
        unit="ops",
    ),
    Panel(
        "Duplicates and dead letters",
        "Repeated ids dropped, and records without a usable messageId sent to the dead-letter topic, per second.",
        (
            Query(_rate("dedupectl_duplicates_dropped_total"), "duplicates p{{partition}}"),
            Query(_rate("dedupectl_dead_letters_total"), "dead letters p{{partition}}"),
        ),
        unit="ops",
    ),
    Panel(
        "Partition check",
        "Keyed records in another partition than the topic's partitioner gives their key (the alert "
        "DedupectlRecordsMisrouted pages on any), and records without a key, which it cannot check, per second.",
        (
            Query(_rate("dedupectl_misrouted_records_total"), "misrouted p{{partition}}"),
            Query(_rate("dedupectl_unkeyed_records_total"), "unkeyed p{{partition}}"),
        ),
        unit="ops",
    ),
    Panel(
        "Consumer lag",
        "Input records behind each partition's end (high watermark minus position).",
        (Query(f"sum by (partition) ({_m('dedupectl_consumer_lag')})", "p{{partition}}"),),
    ),
    Panel(
        "End-to-end latency",
        "Age at commit of each batch's oldest published record, from its input timestamp.",
        (_quantile(0.5), _quantile(0.99)),
        unit="s",
    ),
    Panel(
        "Transactions",
        "Kafka transactions per second by outcome; a steady stream of aborts means the worker cannot commit.",
        (Query(_rate("dedupectl_transactions_total", by="outcome"), "{{outcome}}"),),
        unit="ops",
    ),
    Panel(
        "Time since last commit",
        "Seconds since each worker's last committed transaction.",
        (Query(f"time() - {_m('dedupectl_last_commit_timestamp_seconds')}", "{{instance}}"),),
        unit="s",
        thresholds=((None, "green"), (300, "red")),
        line_at_threshold=True,
    ),
)

STORE = (
    Panel(
        "Effective window vs floor",
        f"Age of each partition's oldest live id; the red line is the floor ({FLOOR_SECONDS // 3600} h).",
        (Query(f"min by (partition) ({_m('dedupectl_effective_window_seconds')})", "p{{partition}}"),),
        unit="s",
        thresholds=((None, "red"), (FLOOR_SECONDS, "green")),
        line_at_threshold=True,
    ),
    Panel(
        "Store size",
        "Bytes on disk of each partition's store, and its live ids on the right axis.",
        (
            Query(f"sum by (partition) ({_m('dedupectl_store_bytes')})", "bytes p{{partition}}"),
            Query(f"sum by (partition) ({_m('dedupectl_store_keys')})", "ids p{{partition}}"),
        ),
        unit="bytes",
        overrides=(
            {
                "matcher": {"id": "byRegexp", "options": "ids .*"},
                "properties": [
                    {"id": "unit", "value": "short"},
                    {"id": "custom.axisPlacement", "value": "right"},
                ],
            },
        ),
    ),
    Panel(
        "Data-dir free",
        "Free bytes on each worker's data-directory filesystem.",
        (Query(_m("dedupectl_data_dir_free_bytes"), "{{instance}}"),),
        unit="bytes",
    ),
    Panel(
        "Recovery duration",
        "How long each partition's last recovery from the output took.",
        (Query(f"max by (partition) ({_m('dedupectl_recovery_seconds')})", "p{{partition}}"),),
        unit="s",
    ),
)


def _thresholds(panel: Panel) -> dict:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for value, color in panel.thresholds]}


def _panel(panel: Panel, number: int, x: int, y: int) -> dict:
    height = 4 if panel.kind == "stat" else 8
    custom = {}
    if panel.kind == "timeseries":
        custom = {"drawStyle": "line", "fillOpacity": 10, "showPoints": "never", "spanNulls": True}
        custom["thresholdsStyle"] = {"mode": "line" if panel.line_at_threshold else "off"}
    return {
        "id": number,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {"unit": panel.unit, "thresholds": _thresholds(panel), "custom": custom},
            "overrides": list(panel.overrides),
        },
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}} if panel.kind == "timeseries" else {},
        "targets": [
            {"refId": chr(ord("A") + at), "datasource": DATASOURCE, "expr": q.expr, "legendFormat": q.legend}
            for at, q in enumerate(panel.queries)
        ],
    }


def _row(title: str, number: int, y: int) -> dict:
    return {
        "id": number,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
    }


def _layout() -> list[dict]:
    panels: list[dict] = []
    y = 0
    for title, group in (("Now", SUMMARY), ("Traffic", TRAFFIC), ("Stores", STORE)):
        panels.append(_row(title, len(panels) + 1, y))
        y += 1
        x = 0
        for panel in group:
            if x + panel.width > 24:
                x, y = 0, y + (4 if panel.kind == "stat" else 8)
            panels.append(_panel(panel, len(panels) + 1, x, y))
            x += panel.width
        y += 4 if group[-1].kind == "stat" else 8
    return panels


def _variable(name: str, label: str, query: str) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": "All", "value": "$__all"},
        "sort": 1,
    }


def dashboard() -> dict:
    return {
        "uid": "dedupectl",
        "title": "dedupectl",
        "description": "dedupectl workers: throughput, duplicates, dead letters, lag, latency, window, stores",
        "tags": ["dedupectl", "kafka"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
                _variable("job", "job", "label_values(dedupectl_build_info, job)"),
                _variable("instance", "worker", 'label_values(dedupectl_build_info{job=~"$job"}, instance)'),
            ]
        },
        "links": [],
        "annotations": {"list": []},
        "panels": _layout(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} differs from what {Path(__file__).name} writes: run python {__file__}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

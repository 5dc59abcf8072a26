"""The shipped Grafana dashboard: the committed JSON is what deploy/grafana/dashboard.py writes, every query
names only metrics the worker exports and parses as PromQL (promtool), and it shows what on-call looks at."""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from promql import PROMETHEUS_OWN, ROOT, exported_names, prometheus, promtool
from waiting import wait_for

from dedupectl.config import KafkaConfig, resolve_worker_config
from dedupectl.kafka_clients import create_topics
from dedupectl.worker import Worker

GENERATOR = ROOT / "deploy" / "grafana" / "dashboard.py"
DASHBOARD = ROOT / "deploy" / "grafana" / "dedupectl.json"
# what Grafana substitutes before Prometheus sees a query
VARIABLES = {"$__rate_interval": "5m", "$job": "dedupectl", "$instance": ".*"}
PROMQL_WORDS = {"sum", "min", "max", "by", "rate", "time", "histogram_quantile", "le", "partition", "outcome"}


def _generator():
    spec = importlib.util.spec_from_file_location("grafana_dashboard", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["expr"]) for panel in panels for target in panel.get("targets", [])]


def _concrete(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    assert DASHBOARD.read_text() == _generator().render(), f"run python {GENERATOR.relative_to(ROOT)}"
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_check_fails_on_a_hand_edited_file(tmp_path: Path, monkeypatch) -> None:
    generator = _generator()
    edited = tmp_path / "dedupectl.json"
    edited.write_text(DASHBOARD.read_text().replace("Throughput", "Thruput"))
    monkeypatch.setattr(generator, "OUTPUT", edited)
    assert generator.main(["--check"]) == 1
    assert generator.main([]) == 0 and generator.main(["--check"]) == 0


def test_every_query_names_only_metrics_the_worker_exports() -> None:
    exported = exported_names()
    queries = _queries()
    assert len(queries) >= 15
    for title, expr in queries:
        without_labels = re.sub(r"\{[^}]*\}", "", re.sub(r'"[^"]*"', "", _concrete(expr)))
        for name in re.findall(r"\b[a-z_][a-z0-9_]*\b", without_labels):
            if name in PROMQL_WORDS or re.fullmatch(r"\d+[smhd]?", name):
                continue
            assert name in exported | PROMETHEUS_OWN, f"panel {title!r} reads {name}, which no worker exports"


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:query_{at}", "expr": _concrete(expr)} for at, (_, expr) in enumerate(_queries())]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_shows_what_on_call_looks_at() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    read = " ".join(expr for _, expr in _queries())
    for metric in (
        "dedupectl_messages_consumed_total",
        "dedupectl_messages_published_total",
        "dedupectl_duplicates_dropped_total",
        "dedupectl_dead_letters_total",
        "dedupectl_consumer_lag",
        "dedupectl_end_to_end_latency_seconds_bucket",
        "dedupectl_effective_window_seconds",
        "dedupectl_store_bytes",
        "dedupectl_data_dir_free_bytes",
        "dedupectl_last_commit_timestamp_seconds",
    ):
        assert metric in read, f"the dashboard does not show {metric}"
    window = next(p for p in dashboard["panels"] if p["title"] == "Effective window vs floor")
    steps = window["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert {"color": "green", "value": 86400} in steps  # the floor is drawn where the alert pages
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:  # no two panels overlap on the grid
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24
    cells = [
        (panel["gridPos"]["x"] + dx, panel["gridPos"]["y"] + dy)
        for panel in dashboard["panels"]
        for dx in range(panel["gridPos"]["w"])
        for dy in range(panel["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells))


# -- against a real Prometheus scraping a real worker --------------------------------------------------------


def _query(base: str, expr: str) -> list[dict]:
    with urllib.request.urlopen(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


@pytest.fixture
def scraped_worker(kafka_broker, tmp_path: Path):
    """A worker that has processed records (a dead letter among them), its /metrics scraped every second by a
    real Prometheus; yields Prometheus's base URL."""
    kafka, name = KafkaConfig(kafka_broker.bootstrap_servers), f"dash-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [name, f"{name}-out", f"{name}.dead-letter"], 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for n in range(200):
        producer.produce(name, key=f"id-{n % 150}", value=json.dumps({"messageId": f"id-{n % 150}"}).encode())
    producer.produce(name, key="bad", value=b"{not json")
    assert producer.flush(30) == 0
    flags = {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": name, "output_topic": f"{name}-out"}
    config = resolve_worker_config(env={}, flags={**flags, "data_dir": tmp_path / "data", "worker_id": "w1"})
    worker, stop = Worker(config), threading.Event()
    port = worker.metrics.serve(0, "127.0.0.1")
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    prom_port = _free_port()
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{"job_name": "dedupectl", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
            }
        )
    )
    server = subprocess.Popen(
        [
            prometheus(),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{prom_port}"
    try:
        # three scrapes after the first batch: enough samples for every rate() over 30s
        wait_for(lambda: _ready(base) and len(_query(base, "dedupectl_transactions_total[30s]")) > 0, 60, "scrapes")
        wait_for(lambda: len(_query(base, "dedupectl_transactions_total[30s]")[0]["values"]) >= 3, 30, "3 scrapes")
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
        stop.set()
        thread.join(timeout=60)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_every_query_returns_series_from_a_real_worker(scraped_worker: str) -> None:
    live = {**VARIABLES, "$__rate_interval": "30s"}
    empty = []
    for title, expr in _queries():
        for name, value in live.items():
            expr = expr.replace(name, value)
        if not _query(scraped_worker, expr):
            empty.append(f"{title}: {expr}")
    assert not empty, "queries with no series against a running worker:\n" + "\n".join(empty)
    # the variables' label_values() read dedupectl_build_info's job and instance
    (series,) = _query(scraped_worker, "dedupectl_build_info")
    assert series["metric"]["job"] == "dedupectl" and series["metric"]["instance"].startswith("127.0.0.1:")

"""The shipped alert rules: valid for Prometheus, unit-tested with promtool (each alert fires on what should
page and not on a healthy worker), naming only metrics the worker exports and runbooks that exist."""

from __future__ import annotations

import re
import subprocess

import yaml
from promql import PROMETHEUS_OWN, ROOT, exported_names, promtool

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules() -> None:
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_alert_fires_when_it_should_and_only_then() -> None:
    result = subprocess.run(
        [promtool(), "test", "rules", str(RULES_TEST)], capture_output=True, text=True, cwd=RULES.parent
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULES_TEST.read_text()))
    assert tested == {rule["alert"] for rule in _rules()}, "every alert has a unit test"


def test_every_metric_an_alert_reads_is_exported_by_the_worker() -> None:
    exported = exported_names()
    for rule in _rules():
        for name in re.findall(r"\b([a-z_]+)\s*[{\[)]", rule["expr"]) + re.findall(r"\bdedupectl_\w+", rule["expr"]):
            if name.startswith("dedupectl_") or name in PROMETHEUS_OWN:
                assert name in exported | PROMETHEUS_OWN, f"{rule['alert']} reads {name}, which no worker exports"


def test_every_alert_links_a_runbook_that_exists() -> None:
    for rule in _rules():
        url = rule["annotations"]["runbook_url"]
        path = url.split("}}", 1)[1].lstrip("/")
        assert (ROOT / path).is_file(), f"{rule['alert']}: {path} does not exist"
        assert rule["labels"]["severity"] in ("page", "ticket")


def test_the_monitoring_page_explains_every_alert() -> None:
    page = (ROOT / "docs" / "monitoring.md").read_text()
    for rule in _rules():
        assert f"`{rule['alert']}`" in page, f"docs/monitoring.md does not explain {rule['alert']}"

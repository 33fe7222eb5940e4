"""The shipped dashboard and alert rules only name metrics the daemon really exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from effectusd.dispatcher.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]


SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def exported_names() -> set[str]:
    """Every series name the daemon's registry exposes, labelled or not."""
    return {
        metric.name + suffix
        for metric in Metrics().registry.collect()
        for suffix in SUFFIXES[metric.type]
    }


def referenced(text: str) -> set[str]:
    return set(re.findall(r"\b(effectusd_[a-z_]+)", text))


def test_dashboard_queries_only_name_exported_metrics() -> None:
    dashboard = json.loads((ROOT / "contrib/grafana/effectusd-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    assert referenced(exprs) and referenced(exprs) <= exported_names()


def test_alert_rules_only_name_exported_metrics() -> None:
    rules = (ROOT / "contrib/prometheus/effectusd-alerts.yml").read_text()
    assert "effectusd_sagas{" in rules
    assert referenced(rules) <= exported_names()

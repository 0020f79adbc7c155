"""The Grafana dashboard and the Prometheus configuration in docs/ query only metrics that the
table (``provetop.recordings.prometheus.families.METRICS``) defines."""

from __future__ import annotations

import json
import re
from pathlib import Path

from provetop.recordings.prometheus.families import METRICS

DOCS = Path(__file__).resolve().parents[2] / "docs"
NAME = re.compile(r"\bprovetop_[a-z0-9_]+")


def _exprs(node) -> list[str]:
    if isinstance(node, dict):
        out = [node["expr"]] if isinstance(node.get("expr"), str) else []
        for value in node.values():
            out += _exprs(value)
        return out
    if isinstance(node, list):
        return [e for item in node for e in _exprs(item)]
    return []


def test_every_metric_the_dashboard_queries_is_in_the_table():
    dashboard = json.loads((DOCS / "grafana" / "provetop.json").read_text())
    known = {name for spec in METRICS.values() for name in spec.series_names()}
    exprs = _exprs(dashboard["panels"])
    assert len(exprs) >= 10
    used = {name for expr in exprs for name in NAME.findall(expr)}
    assert used and used <= known, used - known
    for q in (dashboard.get("templating") or {}).get("list", []):
        for name in NAME.findall(json.dumps(q.get("query", ""))):
            assert name in known, name
    # the pool asymmetry: both pools and the phantom between them, in one panel
    first = " ".join(_exprs(dashboard["panels"][0]))
    assert 'pool="sync"' in first and 'pool="async"' in first and "provetop_phantom_bytes" in first


def test_the_scrape_configuration_scrapes_metrics():
    text = (DOCS / "prometheus.yml").read_text()
    assert "metrics_path: /metrics" in text and "job_name: provetop" in text

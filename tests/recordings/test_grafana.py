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


# What a panel's title must say for each metric it queries (a regex, case-insensitive), and so
# what a title promises: every metric of the table has one, so a new metric needs its words.
TITLE_WORDS = {
    "provetop_info": r"producers",
    "provetop_device_info": r"devices",
    "provetop_events_total": r"events folded",
    "provetop_missed_events_total": r"events folded and missed|missed events",
    "provetop_pool_used_bytes": r"pools.*\bused\b",
    "provetop_pool_reserved_bytes": r"pools.*\breserved\b",
    "provetop_pool_cached_bytes": r"pools.*\bcached\b",
    "provetop_phantom_bytes": r"phantom",
    "provetop_pinned_host_bytes": r"pinned host",
    "provetop_driver_free_bytes": r"driver free",
    "provetop_driver_total_bytes": r"driver free and total|driver total",
    "provetop_nvml_used_bytes": r"nvml used",
    "provetop_nvml_total_bytes": r"nvml used and total|nvml total",
    "provetop_gpu_utilization_ratio": r"utilisation",
    "provetop_gpu_power_watts": r"\bpower\b",
    "provetop_gpu_power_limit_watts": r"power limit",
    "provetop_gpu_temperature_celsius": r"temperature",
    "provetop_gpu_clock_hertz": r"clocks",
    "provetop_gpu_pcie_throughput_bytes_per_second": r"pcie throughput",
    "provetop_gpu_fan_ratio": r"\bfan\b",
    "provetop_gpu_ecc_errors": r"\becc errors",
    "provetop_gpu_retired_pages": r"retired pages",
    "provetop_gpu_xid_errors": r"\bxid errors",
    "provetop_worker_state": r"workers by state",
    "provetop_partitions_total": r"partitions",
    "provetop_retries_total": r"retries",
    "provetop_ooms_total": r"\booms\b",
    "provetop_prestage_decisions_total": r"pre-stage decisions",
    "provetop_mutex_wait_seconds": r"mutex wait",
    "provetop_gpu_region_seconds": r"gpu region",
    "provetop_phase_duration_seconds": r"phase durations",
    "provetop_proofs_total": r"proofs per hour",
    "provetop_seconds_per_proof": r"seconds per proof",
    "provetop_faults_total": r"faults",
    "provetop_telemetry_clients": r"telemetry clients",
    "provetop_telemetry_dropped_clients_total": r"telemetry.*dropped clients",
    "provetop_telemetry_lagged_events_total": r"telemetry.*lagged events",
    "provetop_telemetry_refused_connections_total": r"telemetry connections.*refused",
    "provetop_telemetry_evicted_handshakes_total": r"telemetry connections.*evicted handshakes",
    "provetop_telemetry_auth_failures_total": r"telemetry connections.*auth failures",
    "provetop_telemetry_accept_errors_total": r"telemetry connections.*accept errors",
    "provetop_telemetry_paced_accepts_total": r"telemetry connections.*paced accepts",
    "provetop_telemetry_evicted_idle_total": r"telemetry connections.*evicted idle",
    "provetop_telemetry_paced_commands_total": r"telemetry connections.*paced commands",
    "provetop_telemetry_hung_up_dropped_total": r"telemetry connections.*hung-up dropped",
    "provetop_telemetry_reader_threads": r"reader threads",
}
QUANTILE = re.compile(r"histogram_quantile\(\s*([0-9.]+)\s*,.*?\b(provetop_[a-z0-9_]+)_bucket")


def _family(sample_name: str) -> str:
    """The metric (table name) a sample name in a query belongs to."""
    for spec in METRICS.values():
        if sample_name in spec.series_names():
            return spec.full_name
    return sample_name


def _panels() -> list[dict]:
    return json.loads((DOCS / "grafana" / "provetop.json").read_text())["panels"]


def test_every_metric_has_its_title_words():
    assert set(TITLE_WORDS) == {spec.full_name for spec in METRICS.values()}


def test_every_panel_title_matches_its_queries():
    """Each metric a panel queries is named in its title, and what the title promises is
    queried: each pNN for every histogram of the panel, "per minute" / "per hour" on every
    rate, "mean" as a sum over a count, "by X" as an aggregation by X, "(NVML)" only for the
    NVML figures."""
    for panel in _panels():
        title, exprs = panel["title"], _exprs(panel)
        assert exprs, title
        metrics = {_family(name) for expr in exprs for name in NAME.findall(expr)}
        for metric in metrics:
            assert re.search(TITLE_WORDS[metric], title, re.I), (title, metric)
        for metric, words in TITLE_WORDS.items():  # nothing promised that is not queried
            if re.search(words, title, re.I):
                assert metric in metrics, (title, "promises", metric)
        quantiles = {(float(q), _family(m)) for q, m in QUANTILE.findall(" ".join(exprs))}
        histograms = {m for _, m in quantiles}
        for pct in re.findall(r"\bp(\d{2})\b", title):
            for metric in histograms:
                assert (int(pct) / 100, metric) in quantiles, (title, pct, metric)
        assert {round(q * 100) for q, _ in quantiles} <= {
            int(p) for p in re.findall(r"\bp(\d{2})\b", title)
        }, title
        rates = [e for e in exprs if "rate(" in e and "histogram_quantile" not in e]
        if "per minute" in title:
            assert rates and all(e.endswith("* 60") for e in rates), title
        if "per hour" in title:
            assert rates and all(e.endswith("* 3600") for e in rates), title
        if re.search(r"\bmean\b", title):
            assert any("_sum" in e and "/" in e and "_count" in e for e in exprs), title
        for label in re.findall(r"\bby (outcome|kind|state|phase)\b", title):
            assert any(re.search(rf"by \([^)]*\b{label}\b", e) for e in exprs), (title, label)
        nvml = {m for m in metrics if m.startswith("provetop_gpu_") and "region" not in m}
        assert ("(NVML)" in title) == bool(nvml), title


def _not_charted() -> dict[str, str]:
    """docs/metrics.md's "Not charted on purpose" list: metric -> the reason."""
    text = (DOCS / "metrics.md").read_text()
    section = text.split("### Not charted on purpose", 1)[1].split("\n#", 1)[0]
    return dict(re.findall(r"^- `(provetop_[a-z0-9_]+)`: (.+)$", section, re.M))


def test_every_documented_metric_is_charted_or_documented_as_not_charted():
    charted = {_family(n) for p in _panels() for e in _exprs(p) for n in NAME.findall(e)}
    skipped = _not_charted()
    table = {spec.full_name for spec in METRICS.values()}
    assert not charted & set(skipped), charted & set(skipped)
    assert table == charted | set(skipped), table - charted - set(skipped)

"""Every expression of the Grafana dashboard, evaluated by a real Prometheus over scrapes of
recorded runs, and ``increase()`` of the fault, OOM and retry counters equal to the runs' own
counts.

The runs: the H200 sample with the naive allocator at 16 GiB (NVML samples, OOMs retried on the
fallback path), scraped every 2 s of its run, and a fault-injected cpu engine run (a fault of
each kind the engine injects), scraped 40 times over its run. See ``tests/recordings/promql.py``
for how the scrapes reach Prometheus. Skipped, with the reason, where Prometheus is not
installed (Debian: ``apt-get install prometheus``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provetop.recordings.reader import open_recording
from provetop.recordings.schema import FAULT_KINDS
from provetop.recordings.state import State
from tests.recordings import promql

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "recordings" / "samples" / "h200-porep32g-naive16.pvtrec"
DASHBOARD = ROOT / "docs" / "grafana" / "provetop.json"
# figures these runs lack by design (docs/metrics.md "Absent, not zero"): the H200 has no fan
# of its own, and NVML reports no retired pages on it (its memory remaps rows instead)
ABSENT_ON_EVERY_RUN = ("provetop_gpu_fan_ratio", "provetop_gpu_retired_pages")


def dashboard_exprs() -> list[str]:
    """Every query of the dashboard's panels and variables, ``$instance`` as "every host"."""
    board = json.loads(DASHBOARD.read_text())
    out = [t["expr"] for p in board["panels"] for t in p["targets"]]
    for var in board["templating"]["list"]:
        query = (
            (var.get("query") or {}).get("query", "") if isinstance(var.get("query"), dict) else ""
        )
        if query.startswith("label_values("):
            out.append(query[len("label_values(") :].split(",")[0])  # the metric it reads
    return [e.replace("$instance", ".*") for e in out]


@pytest.fixture(scope="module")
def runs(fault_run: Path) -> Iterator[dict[str, tuple[promql.Prometheus, int, State]]]:
    """name -> (Prometheus over the run's scrapes, the last scrape's time, the run's state)."""
    try:
        promql.require()
    except promql.PrometheusUnavailable as exc:
        pytest.skip(str(exc))
    sample = list(open_recording(SAMPLE).events)
    faults = list(open_recording(fault_run).events)
    span = faults[-1]["t"] - faults[0]["t"]
    with (
        promql.over_recording(sample, 2_000_000_000) as (on_sample, sample_times),
        promql.over_recording(faults, max(1_000_000, span // 40)) as (on_faults, fault_times),
    ):
        yield {
            "h200-naive16": (on_sample, sample_times[-1], State().fold(sample)),
            "cpu-faults": (on_faults, fault_times[-1], State().fold(faults)),
        }


def test_every_dashboard_expression_returns_data(runs):
    exprs = dashboard_exprs()
    assert len(exprs) > 40
    empty = []
    for expr in exprs:
        results = {name: prom.query(expr, at) for name, (prom, at, _) in runs.items()}
        if not any(results.values()):
            empty.append(expr)
    allowed = [e for e in empty if any(m in e for m in ABSENT_ON_EVERY_RUN)]
    assert empty == allowed, empty
    nvml = [e for e in exprs if "provetop_gpu_" in e and "gpu_region" not in e]
    prom, at, _ = runs["cpu-faults"]
    assert all(prom.query(e, at) == [] for e in nvml)  # the cpu backend: absent, not zero


def _by(prom: promql.Prometheus, at: int, expr: str, label: str | None) -> dict[Any, float]:
    return {
        (r["metric"].get(label) if label else None): float(r["value"][1])
        for r in prom.query(expr, at)
    }


@pytest.mark.parametrize("name", ["h200-naive16", "cpu-faults"])
def test_increase_counts_every_fault_oom_and_retry_of_the_run(runs, name):
    prom, at, state = runs[name]
    window = "[1h]"  # the whole run: its first scrape already had every series at 0
    faults = _by(prom, at, f"sum by (kind) (increase(provetop_faults_total{window}))", "kind")
    want = Counter(f["kind"] for f in state.faults)
    assert faults == {kind: float(want.get(kind, 0)) for kind in FAULT_KINDS}
    if name == "cpu-faults":
        assert {"oom", "exception", "injected", "worker_died"} <= set(want)
    totals = state.totals()
    ooms = _by(prom, at, f"sum(increase(provetop_ooms_total{window}))", None)
    assert ooms == {None: float(totals["ooms"])} and totals["ooms"] > 0
    retries = _by(prom, at, f"sum(increase(provetop_retries_total{window}))", None)
    assert retries == {None: float(state.tally["retries"])} and state.tally["retries"] > 0
    outcomes = _by(
        prom, at, f"sum by (outcome) (increase(provetop_partitions_total{window}))", "outcome"
    )
    done = Counter("ok" if r.ok else "failed" for r in state.attempts)
    assert outcomes == {"ok": float(done["ok"]), "failed": float(done["failed"])}

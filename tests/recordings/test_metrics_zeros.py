"""Every counter and histogram whose label values are known is on ``/metrics`` at 0 before its
first increment, so Prometheus's ``increase()`` counts that increment too.

Why: ``increase()`` and ``rate()`` work on the samples of one series. A series that appears
with its first count already in it (a fault counter first served at 1) has no earlier sample,
so Prometheus reads that first count as where the series began, not as an increase: a run
with one fault of a kind showed none. Checked here by scraping after every event of a run and
asking, for each series, that its first sample is 0 and that it never goes away.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from provetop.recordings.prometheus.families import METRICS
from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.schema import FAULT_KINDS, PRESTAGE_STATUSES, make
from tests.recordings.fixtures import hello, make_run

Series = tuple[str, tuple[tuple[str, str], ...]]


def scrape(fold: MetricsFold) -> dict[Series, float]:
    out: dict[Series, float] = {}
    for family in text_string_to_metric_families(fold.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _counted(name: str) -> bool:
    """A sample of a counter or a histogram, the phase histograms left out (the phases a run
    reports are known only as it reports them)."""
    if name.startswith("provetop_phase_duration_seconds"):
        return False
    return any(
        spec.kind in ("counter", "histogram") and name in spec.series_names()
        for spec in METRICS.values()
    )


def test_an_engines_hello_serves_every_known_series_at_zero():
    fold = MetricsFold().fold([hello(0, devices=2, workers_per_device=2)])
    m = scrape(fold)
    for kind in FAULT_KINDS:
        assert m[("provetop_faults_total", (("kind", kind),))] == 0
    for outcome in ("ok", "failed"):
        assert m[("provetop_proofs_total", (("outcome", outcome),))] == 0
    for d in ("0", "1"):
        for w in ("0", "1"):
            where = (("device", d), ("worker", w))
            assert m[("provetop_retries_total", where)] == 0
            assert m[("provetop_ooms_total", where)] == 0
            for outcome in ("ok", "failed"):
                labels = tuple(sorted((*where, ("outcome", outcome))))
                assert m[("provetop_partitions_total", labels)] == 0
            for outcome in PRESTAGE_STATUSES:
                labels = tuple(sorted((*where, ("outcome", outcome))))
                assert m[("provetop_prestage_decisions_total", labels)] == 0
            for hist in ("provetop_mutex_wait_seconds", "provetop_gpu_region_seconds"):
                assert m[(f"{hist}_count", where)] == 0
                assert m[(f"{hist}_bucket", tuple(sorted((*where, ("le", "+Inf")))))] == 0
    for name in ("dropped_clients", "lagged_events", "auth_failures", "paced_accepts"):
        assert m[(f"provetop_telemetry_{name}_total", ())] == 0
    assert ("provetop_telemetry_clients", ()) not in m  # a gauge: absent until reported


def test_a_worker_no_hello_announced_is_at_zero_from_its_first_phase():
    """A cuzk prover's hello names no workers: each appears at its first phase, before it
    has finished anything."""
    cuzk = make(
        "hello", 0, schema=1, engine_id="c", host="h", version="0", source="cuzk",
        backend="cuda", modeled=False, devices=[{"index": 0, "name": "gpu"}], config={},
        wall_ns=0, read_only=True,
    )  # fmt: skip
    fold = MetricsFold().fold([cuzk])
    assert not any(name == "provetop_partitions_total" for name, _ in scrape(fold))
    assert ("provetop_telemetry_dropped_clients_total", ()) not in scrape(fold)  # no listener
    fold.apply(make("phase_begin", 1, proof=0, partition=0, worker=3, device=0, phase="upload"))
    m = scrape(fold)
    assert m[("provetop_retries_total", (("device", "0"), ("worker", "3")))] == 0
    assert m[("provetop_ooms_total", (("device", "0"), ("worker", "3")))] == 0


def test_every_counted_series_starts_at_zero_and_stays():
    """A run with OOMs retried on the fallback path, a fault of every kind and two devices,
    scraped before its first event (an engine's fold exists before its hello) and after
    every event."""
    events = make_run(partitions=3, workers=2, devices=2, proofs=1, seed=20261207)
    events[0] = hello(0, devices=2, workers_per_device=2)
    end = events[-1]["t"]
    for i, kind in enumerate(FAULT_KINDS):
        events.append(make("fault", end + 1 + i, kind=kind, message="test", device=1, worker=1))
    fold = MetricsFold()
    first: dict[Series, float] = {}
    seen: set[Series] = set()
    increments = 0
    last: dict[Series, float] = {}
    for event in [None, *events]:
        if event is not None:
            fold.apply(event)
        m = {key: v for key, v in scrape(fold).items() if _counted(key[0])}
        assert seen <= set(m), sorted(seen - set(m))[:3]
        for key, value in m.items():
            first.setdefault(key, value)
            increments += value > last.get(key, 0)
        seen |= set(m)
        last = m
    assert increments > 30
    nonzero = {key: v for key, v in first.items() if v != 0}
    assert nonzero == {}, sorted(nonzero)[:5]

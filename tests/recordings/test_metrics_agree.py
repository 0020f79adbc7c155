"""``/metrics`` and the state reducer agree on recorded runs: every number the exposition has
that the state also holds is equal, read back from the exposition's text.

The state here is folded apart from the metrics (``State().fold``, untrimmed), so a figure the
metrics fold derived on its own, or trimmed wrongly, would show. The runs: every sample
recording (H200 runs with NVML samples and listener counters), a run recorded and read back in
the test (markers, controls, an OOM retried, a lag), and the cuzk adapter's fixture (synthesis
lanes, pre-stage outcomes of every kind).
"""

from __future__ import annotations

import collections
import random
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.reader import open_recording
from provetop.recordings.schema import make
from provetop.recordings.state import State, Window, async_cached, phantom_bytes
from provetop.recordings.writer import RecordingWriter
from provetop.sources.cuzk.convert import Converter
from provetop.sources.synthetic import generate
from tests.recordings.fixtures import make_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "recordings" / "samples").glob("*.pvtrec"))
CUZK = ROOT / "tests" / "fixtures" / "cuzk"


def scrape(fold: MetricsFold) -> dict[str, dict[tuple, float]]:
    """sample name -> {sorted label items: value}, from the text a scrape returns."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(fold.render().decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by(samples: dict[tuple, float], *names: str) -> Counter:
    """The samples keyed by the values of the labels ``names``, summed over the others (a
    Counter: a series served at 0 before anything was counted equals one never counted)."""
    out: Counter = Counter()
    for labels, value in samples.items():
        key = tuple(dict(labels)[n] for n in names)
        out[key] = out.get(key, 0) + value
    return out


def assert_agree(events: list[dict], fold: MetricsFold | None = None) -> None:
    fold = fold or MetricsFold()
    fold.fold(events)
    state = State().fold(events)
    # a family with no sample is absent from a scrape (a traced program has no workers and no
    # partitions): read as empty
    m = collections.defaultdict(dict, scrape(fold))
    _producer(m, state)
    _memory(m, state)
    _gpu(m, state)
    _workers(m, state)
    _attempts(m, state)
    _run(m, state)


def _producer(m, state: State) -> None:
    hello = state.hello
    (info,) = m["provetop_info"]
    assert dict(info) == {k: str(hello.get(k, "")) for k in
                          ("engine_id", "host", "source", "backend", "version")}  # fmt: skip
    devices = {(d["index"], d["name"]) for d in hello["devices"]}
    assert {(int(dict(k)["device"]), dict(k)["name"]) for k in m["provetop_device_info"]} == devices
    assert m["provetop_events_total"][()] == state.events
    assert m["provetop_missed_events_total"][()] == state.lagged


def _memory(m, state: State) -> None:
    if not state.memory:
        assert "provetop_phantom_bytes" not in m
        return
    used = by(m["provetop_pool_used_bytes"], "device", "pool")
    reserved = by(m["provetop_pool_reserved_bytes"], "device", "pool")
    cached = by(m["provetop_pool_cached_bytes"], "device", "pool")
    phantom = by(m["provetop_phantom_bytes"], "device")
    for device, s in state.memory.items():
        d = str(device)
        assert used[(d, "sync")] == s["sync_used"] and used[(d, "async")] == s["async_used"]
        assert reserved[(d, "sync")] == s["sync_used"] + s["sync_cached"]
        assert reserved[(d, "async")] == s["async_reserved"]
        assert cached[(d, "sync")] == s["sync_cached"] and cached[(d, "async")] == async_cached(s)
        assert phantom[(d,)] == phantom_bytes(s)
        for key in ("pinned_host", "driver_free", "driver_total", "nvml_used", "nvml_total"):
            got = by(m.get(f"provetop_{key}_bytes", {}), "device").get((d,))
            assert got == s.get(key), key
        labels = [dict(k) for k in m["provetop_phantom_bytes"]]
        modeled = {x["modeled"] for x in labels if x["device"] == d}
        assert modeled == {"true" if s["modeled"] else "false"}


def _gpu(m, state: State) -> None:
    gauges = {  # metric, label -> (gpu event field, scale)
        ("provetop_gpu_utilization_ratio", "sm"): ("sm_util_pct", 0.01),
        ("provetop_gpu_utilization_ratio", "memory"): ("mem_util_pct", 0.01),
        ("provetop_gpu_power_watts", None): ("power_mw", 1e-3),
        ("provetop_gpu_power_limit_watts", None): ("power_limit_mw", 1e-3),
        ("provetop_gpu_temperature_celsius", None): ("temp_c", 1),
        ("provetop_gpu_clock_hertz", "sm"): ("sm_clock_mhz", 1e6),
        ("provetop_gpu_clock_hertz", "memory"): ("mem_clock_mhz", 1e6),
        ("provetop_gpu_pcie_throughput_bytes_per_second", "rx"): ("pcie_rx_bytes_s", 1),
        ("provetop_gpu_pcie_throughput_bytes_per_second", "tx"): ("pcie_tx_bytes_s", 1),
        ("provetop_gpu_fan_ratio", None): ("fan_pct", 0.01),
        ("provetop_gpu_ecc_errors", "corrected"): ("ecc_corrected", 1),
        ("provetop_gpu_ecc_errors", "uncorrected"): ("ecc_uncorrected", 1),
        ("provetop_gpu_retired_pages", None): ("retired_pages", 1),
        ("provetop_gpu_xid_errors", None): ("xid_count", 1),
    }
    for (name, which), (field, scale) in gauges.items():
        got = {}
        for labels, value in m.get(name, {}).items():
            labels = dict(labels)
            if which is None or which in labels.values():
                got[int(labels["device"])] = value
        want = {d: g[field] * scale for d, g in state.gpu.items() if g.get(field) is not None}
        assert got == pytest.approx(want), name


def _workers(m, state: State) -> None:
    current = {
        (int(dict(k)["device"]), int(dict(k)["worker"])): dict(k)["state"]
        for k, v in m["provetop_worker_state"].items()
        if v == 1
    }
    busy = state.worker_states()
    assert set(busy) <= set(current)
    assert current == {key: busy.get(key, "idle") for key in current}
    gpu_workers = {(r.device, r.worker) for r in state.attempts}
    assert gpu_workers <= set(current)
    assert all(state.synth_lane(w) is None for _, w in current)


def _attempts(m, state: State) -> None:
    attempts = state.attempts
    per_worker = Counter((str(r.device), str(r.worker)) for r in attempts)
    outcome = Counter((str(r.device), str(r.worker), "ok" if r.ok else "failed") for r in attempts)
    assert by(m["provetop_partitions_total"], "device", "worker", "outcome") == outcome
    retries = Counter((str(r.device), str(r.worker)) for r in attempts if r.attempt > 0)
    assert by(m.get("provetop_retries_total", {}), "device", "worker") == retries
    assert sum(retries.values()) == state.tally["retries"]
    prestage = by(m["provetop_prestage_decisions_total"], "outcome")
    assert prestage == Counter((str(r.prestage),) for r in attempts)
    for outcome_name, tally in (("ok", "prestage_ok"), ("skip", "prestage_skip"),
                                ("fallback", "fallbacks")):  # fmt: skip
        assert prestage.get((outcome_name,), 0) == state.tally[tally]
    waits = by(m["provetop_mutex_wait_seconds_count"], "device", "worker")
    assert waits == per_worker
    wait_sum = sum(m["provetop_mutex_wait_seconds_sum"].values())
    assert wait_sum == pytest.approx(sum(r.mutex_wait_ms for r in attempts) / 1e3)
    region_sum = sum(m["provetop_gpu_region_seconds_sum"].values())
    assert region_sum == pytest.approx(sum(r.gpu_total_ms for r in attempts) / 1e3)
    phases = Counter((p,) for r in attempts for p in r.phases_ms)
    assert by(m["provetop_phase_duration_seconds_count"], "phase") == phases
    oom_where = Counter(
        (str(f.get("device", "")), str(f.get("worker", ""))) for f in state.faults
        if f["kind"] == "oom"
    )  # fmt: skip
    assert by(m.get("provetop_ooms_total", {}), "device", "worker") == oom_where


def _run(m, state: State) -> None:
    totals = state.totals()
    proofs = by(m.get("provetop_proofs_total", {}), "outcome")
    assert proofs.get(("ok",), 0) == totals["proofs_done"]
    assert proofs.get(("failed",), 0) == totals["proofs_failed"]
    assert sum(m.get("provetop_ooms_total", {}).values()) == totals["ooms"]
    faults = by(m.get("provetop_faults_total", {}), "kind")
    assert faults == Counter((f["kind"],) for f in state.faults)
    if state.s_per_proof() is None:
        assert "provetop_seconds_per_proof" not in m
    else:
        assert m["provetop_seconds_per_proof"][()] == state.s_per_proof()
    fields = {
        "clients": "telemetry_clients",
        "dropped_clients": "telemetry_dropped_clients",
        "lagged_events": "telemetry_lagged_events",
        "paced_accepts": "telemetry_paced_accepts",
        "reader_threads": "telemetry_reader_threads",
        "evicted_idle": "telemetry_evicted_idle",
        "paced_commands": "telemetry_paced_commands",
        "hung_up_dropped": "telemetry_hung_up_dropped",
    }
    engine = (state.hello or {}).get("source") == "provetop"
    for field, name in fields.items():
        counter = f"provetop_{name}_total" in m
        sample = m.get(f"provetop_{name}_total", m.get(f"provetop_{name}", {})).get(())
        # an engine's listener counters are 0 until its first report; its gauges absent
        unreported = 0 if engine and counter and not state.counters else None
        assert sample == state.counters.get(field, unreported), name


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_metrics_agree_with_the_state_on_every_sample_recording(path):
    assert_agree(open_recording(path).events)


def test_metrics_agree_with_the_state_on_a_run_recorded_here(tmp_path):
    rng = random.Random(20261204)
    events = make_run(partitions=5, workers=2, devices=2, proofs=3, seed=rng.randrange(1 << 30))
    end = events[-1]["t"]
    events += [
        make("counters", end + 1, events=len(events), clients=2, dropped_clients=1,
             lagged_events=9, paced_accepts=4, reader_threads=3, evicted_idle=2,
             paced_commands=11, hung_up_dropped=1),
        make("lag", end + 2, missed=17),
    ]  # fmt: skip
    path = tmp_path / "run.pvtrec"
    with RecordingWriter(path, snapshot_every_s=0.05) as writer:
        for event in events:
            writer.write(event)
    recorded = open_recording(path).events
    assert len(recorded) == len(events)
    assert_agree(recorded)


def test_metrics_agree_with_the_state_on_the_cuzk_adapters_events():
    conv = Converter(workers_per_device=2, wall_ns=1, host="fixture")
    events = conv.begin()
    for line in (CUZK / "daemon.log").read_text(errors="replace").splitlines():
        events += conv.feed_line(line)
    events += conv.flush()
    assert any(e["k"] == "phase_begin" and e["worker"] >= 100 for e in events)  # synthesis lanes
    assert_agree(events)


def test_a_trimmed_fold_still_agrees_with_the_whole_runs_state():
    """The fold's state keeps a live window (a run of days stays small); the totals it trims
    stay counted, so a small window gives the same numbers as the whole run's state."""
    events = generate(devices=2, workers=2, duration_s=60.0, partitions_per_proof=1, oom_every=7)
    fold = MetricsFold(window=Window(rows=20, history_ns=2 * 10**9, items=10))
    assert_agree(events, fold)
    assert sum(fold.state.trimmed.values()) > 0  # it did trim

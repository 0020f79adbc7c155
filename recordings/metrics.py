"""Prometheus metrics as a fold over telemetry events: one table, one fold, one exposition.

Why a fold here: an operator with many GPU hosts reads Prometheus, not a dashboard per host. The
metrics are the same story the reducer tells (``recordings/state.py``), folded into counters,
gauges and histograms, so any producer of telemetry events gets them: the engine folds its own
bus, the cuzk watcher folds the adapter's events. The module sits in the telemetry-format layer
so both may import it; it needs nothing but the events and ``prometheus_client``.

:data:`METRICS` is the one table. The exposition, ``docs/metrics.md`` (``python -m
recordings.metrics``) and the Grafana dashboard's test all read it, so a metric cannot exist in
one and not the other.

Threading: :meth:`MetricsFold.apply` runs on one thread (a bus subscriber, a source's thread);
:meth:`MetricsFold.render` runs on HTTP threads. Both take one short lock: ``apply`` updates a
few numbers, ``render`` copies them and builds the text outside the lock.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from recordings.schema import PHASES
from recordings.state import phantom_bytes

PREFIX = "provetop_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds. The phases of a partition run from tens of milliseconds (an upload, a mutex handed
# straight over) to tens of seconds (synthesis and the MSMs at 2^27); a bucket per doubling or
# so keeps the quantiles useful across that range without many series.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


@dataclass(frozen=True)
class MetricSpec:
    """One row of the table: a metric family as Prometheus sees it."""

    name: str  # without the provetop_ prefix
    kind: str  # "gauge", "counter" or "histogram"
    labels: tuple[str, ...]
    help: str
    source: str  # which events feed it

    @property
    def full_name(self) -> str:
        return PREFIX + self.name

    def series_names(self) -> tuple[str, ...]:
        """The sample names a query may use (``_total``, ``_bucket``/``_sum``/``_count``)."""
        if self.kind == "histogram":
            return tuple(self.full_name + s for s in ("_bucket", "_sum", "_count"))
        return (self.full_name,)


def _m(name: str, kind: str, labels: tuple[str, ...], help: str, source: str) -> MetricSpec:
    return MetricSpec(name, kind, labels, help, source)


DEV = ("device",)
MEM = ("device", "modeled")
WORKER = ("device", "worker")

METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in (
        _m("info", "gauge", ("engine_id", "host", "source", "backend", "version"),
           "1 for the producer being watched", "hello"),
        _m("device_info", "gauge", ("device", "name", "modeled"),
           "1 per device the producer announced", "hello"),
        _m("events_total", "counter", (), "telemetry events folded into these metrics", "all"),
        _m("missed_events_total", "counter", (),
           "events this fold missed because it read too slowly (lag)", "lag"),
        # -- per device: the two CUDA pools and what lies between them
        _m("pool_used_bytes", "gauge", ("device", "pool", "modeled"),
           "bytes in use from a pool (pool=sync: cudaMalloc caching pool; async: stream-ordered)",
           "memory"),
        _m("pool_reserved_bytes", "gauge", ("device", "pool", "modeled"),
           "bytes a pool holds from the driver (used + cached)", "memory"),
        _m("pool_cached_bytes", "gauge", ("device", "pool", "modeled"),
           "bytes a pool holds but has free: usable by that pool only", "memory"),
        _m("phantom_bytes", "gauge", MEM,
           "free inside one pool, unusable by the other: (async reserved - used) + sync cached",
           "memory"),
        _m("pinned_host_bytes", "gauge", MEM, "host bytes pinned or registered for uploads",
           "memory"),
        _m("driver_free_bytes", "gauge", MEM, "free bytes as cudaMemGetInfo reports them",
           "memory"),
        _m("driver_total_bytes", "gauge", MEM, "total bytes as cudaMemGetInfo reports them",
           "memory"),
        _m("nvml_used_bytes", "gauge", MEM, "used bytes as NVML (nvidia-smi) reports them",
           "memory"),
        _m("nvml_total_bytes", "gauge", MEM, "total bytes as NVML reports them", "memory"),
        # -- per device: NVML's view besides memory (absent where the GPU does not report it)
        _m("gpu_utilization_ratio", "gauge", ("device", "unit"),
           "fraction of the last NVML sample period the unit was busy (unit=sm or memory)",
           "gpu"),
        _m("gpu_power_watts", "gauge", DEV, "power draw", "gpu"),
        _m("gpu_power_limit_watts", "gauge", DEV, "enforced power limit", "gpu"),
        _m("gpu_temperature_celsius", "gauge", DEV, "GPU die temperature", "gpu"),
        _m("gpu_clock_hertz", "gauge", ("device", "clock"), "clock (clock=sm or memory)", "gpu"),
        _m("gpu_pcie_throughput_bytes_per_second", "gauge", ("device", "direction"),
           "PCIe throughput (direction=rx: host to device, tx: device to host)", "gpu"),
        _m("gpu_fan_ratio", "gauge", DEV, "fan speed as a fraction of its maximum", "gpu"),
        _m("gpu_ecc_errors", "gauge", ("device", "severity"),
           "ECC errors since the driver loaded (severity=corrected or uncorrected)", "gpu"),
        _m("gpu_retired_pages", "gauge", DEV, "memory pages retired or pending retirement",
           "gpu"),
        _m("gpu_xid_errors", "gauge", DEV,
           "XID critical errors NVML reported since the engine began watching (absent where "
           "the GPU does not report XID events)", "gpu"),
        # -- per worker
        _m("worker_state", "gauge", ("device", "worker", "state"),
           "1 for the worker's current state (idle, synthesis, prestage, waiting, gpu, "
           "finishing)", "phase_begin, phase_end"),
        _m("partitions_total", "counter", ("device", "worker", "outcome"),
           "partition attempts finished (outcome=ok or failed)", "partition_done"),
        _m("retries_total", "counter", WORKER, "partition attempts that were retries",
           "partition_done"),
        _m("ooms_total", "counter", WORKER, "out-of-memory faults", "fault"),
        _m("prestage_decisions_total", "counter", ("device", "worker", "outcome"),
           "pre-stage outcome of each partition attempt (outcome=ok, skip, fallback or none)",
           "partition_done"),
        _m("mutex_wait_seconds", "histogram", WORKER, "time a partition waited for the device "
           "mutex", "partition_done"),
        _m("gpu_region_seconds", "histogram", WORKER,
           "time a partition held the device mutex (its GPU region)", "partition_done"),
        _m("phase_duration_seconds", "histogram", ("device", "worker", "phase"),
           "duration of one phase of a partition (phase=a key of partition_done.phases_ms)",
           "partition_done"),
        # -- the run
        _m("proofs_total", "counter", ("outcome",), "proofs finished (outcome=ok or failed)",
           "proof_done"),
        _m("seconds_per_proof", "gauge", (),
           "wall span from the first phase to the last completed proof, over proofs completed",
           "phase_begin, proof_done"),
        _m("faults_total", "counter", ("kind",), "faults by kind", "fault"),
        # -- the engine's telemetry bus and listener (absent for a producer that reports none)
        _m("telemetry_clients", "gauge", (), "clients attached to the telemetry stream",
           "counters"),
        _m("telemetry_dropped_clients_total", "counter", (),
           "clients dropped for lagging too far", "counters"),
        _m("telemetry_lagged_events_total", "counter", (),
           "events skipped for slow clients, all clients together", "counters"),
        _m("telemetry_refused_connections_total", "counter", (),
           "connections closed at accept because too many clients were attached", "counters"),
        _m("telemetry_evicted_handshakes_total", "counter", (),
           "unauthenticated connections closed to make room for new ones", "counters"),
        _m("telemetry_auth_failures_total", "counter", (),
           "connections that failed the token handshake", "counters"),
        _m("telemetry_accept_errors_total", "counter", (), "accept() calls that failed",
           "counters"),
        _m("telemetry_paced_accepts_total", "counter", (),
           "accepts that waited for the listener's pace (a connection storm)", "counters"),
        _m("telemetry_reader_threads", "gauge", (), "threads serving telemetry connections",
           "counters"),
    )
}  # fmt: skip
# the counters event's field behind each telemetry_* metric
_COUNTERS = {
    "telemetry_clients": "clients",
    "telemetry_dropped_clients_total": "dropped_clients",
    "telemetry_lagged_events_total": "lagged_events",
    "telemetry_refused_connections_total": "refused_clients",
    "telemetry_evicted_handshakes_total": "evicted_handshakes",
    "telemetry_auth_failures_total": "auth_failures",
    "telemetry_accept_errors_total": "accept_errors",
    "telemetry_paced_accepts_total": "paced_accepts",
    "telemetry_reader_threads": "reader_threads",
}

_STATE_OF_GROUP = {
    "host": "finishing",
    "prestage": "prestage",
    "upload": "prestage",
    "mutex_wait": "waiting",
}
WORKER_STATES = ("idle", "synthesis", "prestage", "waiting", "gpu", "finishing")


def worker_state(phase: str) -> str:
    """The state a worker is in while ``phase`` runs."""
    if phase in ("synthesis", "gpu_prove"):
        return "synthesis" if phase == "synthesis" else "gpu"
    spec = PHASES.get(phase)
    if spec is None:
        return "finishing"
    if spec.gpu:
        return "gpu"
    return _STATE_OF_GROUP.get(spec.group, "finishing")


class _Histogram:
    """Counts per bucket (not cumulative), the sum and the count."""

    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(DURATION_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def copy(self) -> tuple[list[int], float, int]:
        return list(self.counts), self.sum, self.count


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


class MetricsFold:
    """The fold (see the module docstring). ``apply`` every event, ``render`` any time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hello: dict[str, Any] | None = None
        self.events = 0
        self.missed = 0
        self.memory: dict[int, dict[str, Any]] = {}
        self.gpu: dict[int, dict[str, Any]] = {}
        self.workers: set[tuple[int, int]] = set()
        self.open: dict[tuple[int, int], dict[str, int]] = {}  # worker -> phase -> nesting
        self.counters: dict[tuple[str, tuple], float] = {}
        self.hists: dict[tuple[str, tuple], _Histogram] = {}
        self.first_t: int | None = None
        self.listener: dict[str, Any] = {}  # the latest counters event
        self.last_ok_t: int | None = None
        self.proofs_ok = 0
        self._synth_base: int | None = None
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Collector(self))

    # -- folding ------------------------------------------------------------------------------

    def apply(self, event: dict[str, Any]) -> None:
        handler = getattr(self, "_on_" + str(event.get("k")), None)
        with self._lock:
            self.events += 1
            if handler is not None:
                handler(event)

    def fold(self, events: Iterable[dict[str, Any]]) -> MetricsFold:
        for event in events:
            self.apply(event)
        return self

    def _count(self, name: str, labels: tuple, by: float = 1) -> None:
        key = (name, labels)
        self.counters[key] = self.counters.get(key, 0) + by

    def _observe(self, name: str, labels: tuple, seconds: float) -> None:
        key = (name, labels)
        hist = self.hists.get(key)
        if hist is None:
            hist = self.hists[key] = _Histogram()
        hist.observe(max(0.0, seconds))

    def _on_hello(self, e: dict[str, Any]) -> None:
        self.hello = e
        base = (e.get("config") or {}).get("synth_worker_base")
        self._synth_base = base if isinstance(base, int) else None

    def _gpu_worker(self, e: dict[str, Any]) -> tuple[int, int] | None:
        worker = e.get("worker")
        if not isinstance(worker, int) or not isinstance(e.get("device"), int):
            return None
        if self._synth_base is not None and worker >= self._synth_base:
            return None  # a synthesis lane, not a GPU worker
        return (e["device"], worker)

    def _on_phase_begin(self, e: dict[str, Any]) -> None:
        if self.first_t is None:
            self.first_t = e["t"]
        key = self._gpu_worker(e)
        if key is None:
            return
        self.workers.add(key)
        phases = self.open.setdefault(key, {})
        phases[e["phase"]] = phases.get(e["phase"], 0) + 1

    def _on_phase_end(self, e: dict[str, Any]) -> None:
        key = self._gpu_worker(e)
        phases = self.open.get(key) if key is not None else None
        if phases and phases.get(e["phase"]):
            phases[e["phase"]] -= 1
            if not phases[e["phase"]]:
                del phases[e["phase"]]

    def _on_memory(self, e: dict[str, Any]) -> None:
        self.memory[e["device"]] = e

    def _on_gpu(self, e: dict[str, Any]) -> None:
        self.gpu[e["device"]] = e

    def _on_partition_done(self, e: dict[str, Any]) -> None:
        d, w = str(e["device"]), str(e["worker"])
        self.workers.add((e["device"], e["worker"]))
        self._count("partitions_total", (d, w, "ok" if e["ok"] else "failed"))
        if e.get("attempt", 0) > 0:
            self._count("retries_total", (d, w))
        self._count("prestage_decisions_total", (d, w, str(e["prestage"])))
        if _is_num(e.get("mutex_wait_ms")):
            self._observe("mutex_wait_seconds", (d, w), e["mutex_wait_ms"] / 1e3)
        if _is_num(e.get("gpu_total_ms")):
            self._observe("gpu_region_seconds", (d, w), e["gpu_total_ms"] / 1e3)
        for phase, ms in (e.get("phases_ms") or {}).items():
            if _is_num(ms):
                self._observe("phase_duration_seconds", (d, w, str(phase)), ms / 1e3)

    def _on_proof_done(self, e: dict[str, Any]) -> None:
        self._count("proofs_total", ("ok" if e["ok"] else "failed",))
        if e["ok"]:
            self.proofs_ok += 1
            self.last_ok_t = e["t"]

    def _on_fault(self, e: dict[str, Any]) -> None:
        self._count("faults_total", (str(e["kind"]),))
        if e["kind"] == "oom":
            d, w = e.get("device"), e.get("worker")
            self._count(
                "ooms_total", (str(d if d is not None else ""), str(w if w is not None else ""))
            )

    def _on_counters(self, e: dict[str, Any]) -> None:
        self.listener = e  # cumulative figures: the latest event holds them all

    def _on_lag(self, e: dict[str, Any]) -> None:
        self.missed += int(e.get("missed") or 0)

    def _on_snapshot(self, e: dict[str, Any]) -> None:
        """A late start: take the current pictures (memory); counters start from here."""
        state = e.get("state") or {}
        if isinstance(state.get("hello"), dict):
            self._on_hello(state["hello"])
        for m in state.get("memory") or []:
            if isinstance(m, dict) and isinstance(m.get("device"), int):
                self.memory[m["device"]] = m
        if self.first_t is None and isinstance(state.get("first_t"), int):
            self.first_t = state["first_t"]

    # -- reading ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of everything :meth:`render` needs, taken under the lock."""
        with self._lock:
            s_per_proof = None
            if self.proofs_ok and self.first_t is not None and self.last_ok_t is not None:
                s_per_proof = (self.last_ok_t - self.first_t) / 1e9 / self.proofs_ok
            return {
                "hello": self.hello,
                "events": self.events,
                "missed": self.missed,
                "memory": dict(self.memory),
                "gpu": dict(self.gpu),
                "workers": sorted(self.workers),
                "open": {k: tuple(v) for k, v in self.open.items()},
                "counters": dict(self.counters),
                "listener": dict(self.listener),
                "hists": {k: h.copy() for k, h in self.hists.items()},
                "s_per_proof": s_per_proof,
            }

    def families(self) -> list[Metric]:
        """The metric families of a snapshot, in table order; an absent figure gives no
        sample."""
        return build_families(self.snapshot())

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self._registry)


class _Collector(Collector):
    def __init__(self, fold: MetricsFold) -> None:
        self.fold = fold

    def collect(self) -> Iterator[Metric]:
        yield from self.fold.families()


def build_families(snap: dict[str, Any]) -> list[Metric]:
    """Families from :meth:`MetricsFold.snapshot` (no lock held)."""
    fams: dict[str, Metric] = {}
    for spec in METRICS.values():
        if spec.kind == "gauge":
            fams[spec.name] = GaugeMetricFamily(spec.full_name, spec.help, labels=spec.labels)
        elif spec.kind == "counter":
            fams[spec.name] = CounterMetricFamily(spec.full_name, spec.help, labels=spec.labels)
        else:
            fams[spec.name] = HistogramMetricFamily(spec.full_name, spec.help, labels=spec.labels)

    def gauge(name: str, labels: tuple, value: Any, scale: float = 1.0) -> None:
        if _is_num(value):
            fams[name].add_metric(list(labels), float(value) * scale)

    hello = snap["hello"]
    if hello is not None:
        gauge(
            "info",
            tuple(str(hello.get(k, "")) for k in ("engine_id", "host", "source", "backend")) +
            (str(hello.get("version", "")),),
            1,
        )  # fmt: skip
        for dev in hello.get("devices") or []:
            if isinstance(dev, dict):
                modeled = "true" if dev.get("modeled") else "false"
                gauge("device_info", (str(dev.get("index")), str(dev.get("name")), modeled), 1)
    fams["events_total"].add_metric([], snap["events"])
    fams["missed_events_total"].add_metric([], snap["missed"])

    for device, m in sorted(snap["memory"].items()):
        d, modeled = str(device), "true" if m.get("modeled") else "false"
        sync_used, sync_cached = m.get("sync_used"), m.get("sync_cached")
        a_used, a_reserved = m.get("async_used"), m.get("async_reserved")
        gauge("pool_used_bytes", (d, "sync", modeled), sync_used)
        gauge("pool_used_bytes", (d, "async", modeled), a_used)
        if _is_num(sync_used) and _is_num(sync_cached):
            gauge("pool_reserved_bytes", (d, "sync", modeled), sync_used + sync_cached)
        gauge("pool_reserved_bytes", (d, "async", modeled), a_reserved)
        gauge("pool_cached_bytes", (d, "sync", modeled), sync_cached)
        if _is_num(a_used) and _is_num(a_reserved):
            gauge("pool_cached_bytes", (d, "async", modeled), max(0, a_reserved - a_used))
        gauge("phantom_bytes", (d, modeled), phantom_bytes(m))
        for key in ("pinned_host", "driver_free", "driver_total", "nvml_used", "nvml_total"):
            gauge(f"{key}_bytes", (d, modeled), m.get(key))

    for device, g in sorted(snap["gpu"].items()):
        d = str(device)
        gauge("gpu_utilization_ratio", (d, "sm"), g.get("sm_util_pct"), 0.01)
        gauge("gpu_utilization_ratio", (d, "memory"), g.get("mem_util_pct"), 0.01)
        gauge("gpu_power_watts", (d,), g.get("power_mw"), 1e-3)
        gauge("gpu_power_limit_watts", (d,), g.get("power_limit_mw"), 1e-3)
        gauge("gpu_temperature_celsius", (d,), g.get("temp_c"))
        gauge("gpu_clock_hertz", (d, "sm"), g.get("sm_clock_mhz"), 1e6)
        gauge("gpu_clock_hertz", (d, "memory"), g.get("mem_clock_mhz"), 1e6)
        gauge("gpu_pcie_throughput_bytes_per_second", (d, "rx"), g.get("pcie_rx_bytes_s"))
        gauge("gpu_pcie_throughput_bytes_per_second", (d, "tx"), g.get("pcie_tx_bytes_s"))
        gauge("gpu_fan_ratio", (d,), g.get("fan_pct"), 0.01)
        gauge("gpu_ecc_errors", (d, "corrected"), g.get("ecc_corrected"))
        gauge("gpu_ecc_errors", (d, "uncorrected"), g.get("ecc_uncorrected"))
        gauge("gpu_retired_pages", (d,), g.get("retired_pages"))
        gauge("gpu_xid_errors", (d,), g.get("xid_count"))

    for device, worker in snap["workers"]:
        phases = snap["open"].get((device, worker)) or ()
        states = {worker_state(p) for p in phases}
        current = next((s for s in reversed(WORKER_STATES) if s in states), "idle")
        for state in WORKER_STATES:
            gauge("worker_state", (str(device), str(worker), state), 1 if state == current else 0)

    for (name, labels), value in sorted(snap["counters"].items()):
        fams[name].add_metric(list(labels), value)
    cumulative_bounds = [str(b) for b in DURATION_BUCKETS] + ["+Inf"]
    for (name, labels), (counts, total, _count) in sorted(snap["hists"].items()):
        running, buckets = 0, []
        for bound, n in zip(cumulative_bounds, counts, strict=True):
            running += n
            buckets.append((bound, running))
        fams[name].add_metric(list(labels), buckets, total)
    gauge("seconds_per_proof", (), snap["s_per_proof"])
    for name, field in _COUNTERS.items():
        gauge(name, (), snap.get("listener", {}).get(field))
    return [fam for fam in fams.values() if fam.samples]  # an absent figure, no empty family


def markdown_table() -> str:
    """The table of ``docs/metrics.md``, generated from :data:`METRICS` (a test compares)."""
    out = ["| metric | type | labels | meaning | from events |", "| --- | --- | --- | --- | --- |"]
    for spec in METRICS.values():
        name = spec.full_name
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "–"
        out.append(f"| `{name}` | {spec.kind} | {labels} | {spec.help} | {spec.source} |")
    buckets = ", ".join(f"{b:g}" for b in DURATION_BUCKETS)
    out.append("")
    out.append(f"Histogram buckets (seconds): {buckets}, +Inf.")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

"""The fold behind ``/metrics``: the state reducer, and the counts only Prometheus keeps.

Why not a fold of its own: an operator compares ``/metrics`` with the dashboard and with
``summary``, so every figure the reducer derives comes from a
:class:`provetop.recordings.state.State`
folded here: the memory picture and its phantom bytes, the latest NVML sample, s/proof, the
synthesis lanes, what each worker is doing, the proofs completed and failed, the listener's
counters and the missed events. What the reducer does not keep is what Prometheus wants for the
whole run by label (counters per device and worker, the faults by kind) and as histograms
(mutex waits, GPU regions, phase times); :class:`MetricsFold` counts only those, from the same
events. Its state is trimmed to a live window (``Window``) as the engine's is, so a fold that
runs for days stays small; the trimmed totals stay exact.

Zeros from the first scrape: Prometheus's ``increase()`` and ``rate()`` see a counter's first
increment only when a scrape before it saw the series, so every counter and histogram whose
label values are known is served at 0 before anything is counted: the fault kinds and the
proof outcomes from the start, the telemetry listener's counters from an engine's ``hello``
(only an engine reports them), and each GPU worker's counters and histograms from the
``hello`` that announces it (``config.workers_per_device`` on each device) or, for a producer
that announces none (a cuzk prover), from its first phase. Only the phase histograms, whose
phases a run reports depend on its memory plan, appear at their first observation.

Any producer of telemetry events gets the metrics: the engine folds its own bus, the cuzk watcher
folds the adapter's events.

Threading: :meth:`MetricsFold.apply` runs on one thread (a bus subscriber, a source's thread);
:meth:`MetricsFold.render` runs on HTTP threads. Both take one short lock: ``apply`` folds one
event, :meth:`MetricsFold.reading` copies the numbers, and the text is built outside the lock
(:mod:`provetop.recordings.prometheus.exposition`).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from provetop.recordings.prometheus.exposition import (
    HistogramCopy,
    Reading,
    build_families,
    render,
)
from provetop.recordings.prometheus.families import COUNTER_FIELDS, DURATION_BUCKETS
from provetop.recordings.schema import FAULT_KINDS, PRESTAGE_STATUSES, is_number
from provetop.recordings.state import TRIM_EVERY, State, Window

Labels = tuple[str, ...]


class Histogram:
    """Counts per bucket of :data:`DURATION_BUCKETS` (not cumulative), the sum and the count."""

    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(DURATION_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def copy(self) -> HistogramCopy:
        return list(self.counts), self.sum, self.count


class MetricsFold:
    """The fold (see the module docstring). ``apply`` every event, ``render`` any time."""

    def __init__(self, window: Window | None = None) -> None:
        self._lock = threading.Lock()
        self.state = State()
        self.window = window or Window()
        self.events = 0
        self._since_trim = 0
        # what only Prometheus keeps: the GPU workers seen (each keeps its series once shown),
        # counters by (metric, label values) and the duration histograms, for the whole run
        self.workers: set[tuple[int, int]] = set()
        self.counters: dict[tuple[str, Labels], float] = {}
        self.hists: dict[tuple[str, Labels], Histogram] = {}

    # -- folding ------------------------------------------------------------------------------

    def apply(self, event: dict[str, Any]) -> None:
        count = _COUNTS.get(event.get("k", ""))  # no kind: no count (nor a None key)
        with self._lock:
            self.events += 1
            self.state.apply(event)
            if count is not None:
                count(self, event)
            self._since_trim += 1
            if self._since_trim >= TRIM_EVERY:
                self._since_trim = 0
                self.state.trim(self.window)

    def fold(self, events: Iterable[dict[str, Any]]) -> MetricsFold:
        for event in events:
            self.apply(event)
        return self

    def _count(self, name: str, labels: Labels, by: float = 1) -> None:
        key = (name, labels)
        self.counters[key] = self.counters.get(key, 0) + by

    def _observe(self, name: str, labels: Labels, seconds: float) -> None:
        key = (name, labels)
        hist = self.hists.get(key)
        if hist is None:
            hist = self.hists[key] = Histogram()
        hist.observe(max(0.0, seconds))

    def _on_hello(self, e: dict[str, Any]) -> None:
        """The GPU workers the producer announces: ``workers_per_device`` on each device."""
        per_device = (e.get("config") or {}).get("workers_per_device")
        if not isinstance(per_device, int) or isinstance(per_device, bool) or per_device < 1:
            return
        for dev in e.get("devices") or []:
            index = dev.get("index") if isinstance(dev, dict) else None
            if isinstance(index, int) and not isinstance(index, bool):
                self.workers.update((index, w) for w in range(min(per_device, MAX_WORKERS)))

    def _on_phase_begin(self, e: dict[str, Any]) -> None:
        device, worker = e.get("device"), e.get("worker")
        if isinstance(device, int) and isinstance(worker, int):
            if self.state.synth_lane(worker) is None:  # a GPU worker, not a synthesis lane
                self.workers.add((device, worker))

    def _on_partition_done(self, e: dict[str, Any]) -> None:
        d, w = str(e["device"]), str(e["worker"])
        self.workers.add((e["device"], e["worker"]))
        self._count("partitions_total", (d, w, "ok" if e["ok"] else "failed"))
        if e.get("attempt", 0) > 0:
            self._count("retries_total", (d, w))
        self._count("prestage_decisions_total", (d, w, str(e["prestage"])))
        if is_number(e.get("mutex_wait_ms")):
            self._observe("mutex_wait_seconds", (d, w), e["mutex_wait_ms"] / 1e3)
        if is_number(e.get("gpu_total_ms")):
            self._observe("gpu_region_seconds", (d, w), e["gpu_total_ms"] / 1e3)
        for phase, ms in (e.get("phases_ms") or {}).items():
            if is_number(ms):
                self._observe("phase_duration_seconds", (d, w, str(phase)), ms / 1e3)

    def _on_fault(self, e: dict[str, Any]) -> None:
        self._count("faults_total", (str(e["kind"]),))
        if e["kind"] == "oom":
            d, w = e.get("device"), e.get("worker")
            self._count(
                "ooms_total", (str(d if d is not None else ""), str(w if w is not None else ""))
            )

    # -- reading ------------------------------------------------------------------------------

    def reading(self) -> Reading:
        """A consistent copy of everything a scrape formats, taken under the lock."""
        with self._lock:
            state = self.state
            states = state.worker_states()
            counters = dict(self.counters)
            ok, failed = state.proof_counts()
            for outcome, n in (("ok", ok), ("failed", failed)):
                counters[("proofs_total", (outcome,))] = n
            hists = {key: hist.copy() for key, hist in self.hists.items()}
            _zeros(counters, hists, self.workers)
            listener = dict(state.counters)
            if not listener and (state.hello or {}).get("source") == "provetop":
                listener = {field: 0 for name, field in COUNTER_FIELDS.items()
                            if name.endswith("_total")}  # fmt: skip
            return Reading(
                hello=state.hello,
                events=self.events,
                missed=state.lagged,
                memory=dict(state.memory),
                gpu=dict(state.gpu),
                workers=[(d, w, states.get((d, w), "idle")) for d, w in sorted(self.workers)],
                counters=counters,
                hists=hists,
                s_per_proof=state.s_per_proof(),
                listener=listener,
            )

    def families(self) -> list[Metric]:
        """The metric families now, in table order; an absent figure gives no sample."""
        return build_families(self.reading())

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return render(self.families())


MAX_WORKERS = 256  # workers per device a hello may announce (a bad hello stays small)
# the counters and histograms of each GPU worker, with every value of their other labels
WORKER_COUNTERS = (
    ("partitions_total", ("ok", "failed")),
    ("prestage_decisions_total", PRESTAGE_STATUSES),
    ("retries_total", None),
    ("ooms_total", None),
)
WORKER_HISTOGRAMS = ("mutex_wait_seconds", "gpu_region_seconds")
_EMPTY: HistogramCopy = ([0] * (len(DURATION_BUCKETS) + 1), 0.0, 0)


def _zeros(
    counters: dict[tuple[str, Labels], float],
    hists: dict[tuple[str, Labels], HistogramCopy],
    workers: set[tuple[int, int]],
) -> None:
    """Every series of a known label set not yet counted, at 0 (see the module docstring)."""
    for kind in FAULT_KINDS:
        counters.setdefault(("faults_total", (kind,)), 0)
    for device, worker in workers:
        d, w = str(device), str(worker)
        for name, values in WORKER_COUNTERS:
            for labels in [(d, w, v) for v in values] if values else [(d, w)]:
                counters.setdefault((name, labels), 0)
        for name in WORKER_HISTOGRAMS:
            if (name, (d, w)) not in hists:
                hists[(name, (d, w))] = (list(_EMPTY[0]), 0.0, 0)


# the events that feed a count of MetricsFold (every event feeds its state)
_COUNTS: dict[str, Callable[[MetricsFold, dict[str, Any]], None]] = {
    "hello": MetricsFold._on_hello,
    "phase_begin": MetricsFold._on_phase_begin,
    "partition_done": MetricsFold._on_partition_done,
    "fault": MetricsFold._on_fault,
}

"""What a scrape answers: the families of :data:`~provetop.recordings.prometheus.families.METRICS`,
built
from one :class:`Reading` and written in Prometheus's text format.

Why a reading and not the fold itself: a scrape must not hold the fold's lock while it formats
(the fold runs beside the proving run), so the fold copies its numbers into a :class:`Reading`
under the lock and everything here runs on the HTTP thread, outside it. An absent figure gives
no sample, never a zero: a family with no sample is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from provetop.recordings.prometheus.families import COUNTER_FIELDS, DURATION_BUCKETS, METRICS
from provetop.recordings.schema import is_number
from provetop.recordings.state import WORKER_STATES, async_cached, phantom_bytes

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# prometheus-client's number format ("+Inf", "1e+06"), typed here: it ships without hints
_go_float: Callable[[float], str] = floatToGoString

# a histogram as the fold keeps it: counts per bucket (not cumulative, +Inf last), sum, count
HistogramCopy = tuple[list[int], float, int]


@dataclass(frozen=True)
class Reading:
    """The fold's numbers at one instant, copied under its lock."""

    hello: dict[str, Any] | None
    events: int  # events folded
    missed: int  # events missed (lag)
    memory: dict[int, dict[str, Any]]  # the latest memory sample per device
    gpu: dict[int, dict[str, Any]]  # the latest NVML sample per device
    workers: list[tuple[int, int, str]]  # (device, worker, current state), sorted
    counters: dict[tuple[str, tuple[str, ...]], float]  # (metric, label values) -> count
    hists: dict[tuple[str, tuple[str, ...]], HistogramCopy]
    s_per_proof: float | None
    listener: dict[str, Any]  # the latest ``counters`` event's figures


@dataclass
class Families:
    """The families of :data:`METRICS`: in table order, and by name apart by the shape of a
    sample: one value (gauges, counters) or buckets and a sum (histograms)."""

    ordered: list[Metric]
    values: dict[str, GaugeMetricFamily | CounterMetricFamily]
    histograms: dict[str, HistogramMetricFamily]


def build_families(reading: Reading) -> list[Metric]:
    """The families of ``reading`` in table order, those without a sample left out."""
    fams = _empty_families()
    _producer(fams, reading)
    _memory(fams, reading.memory)
    _gpu(fams, reading.gpu)
    _workers(fams, reading.workers)
    _counts(fams, reading)
    _run(fams, reading)
    return [fam for fam in fams.ordered if fam.samples]


def render(families: Iterable[Metric]) -> bytes:
    """The text exposition (format 0.0.4) of ``families``.

    Why not prometheus-client's ``generate_latest``: it validates and escapes every label name
    of every sample on every scrape (about 10,000 sample lines for one GPU's phase histograms),
    2.7 ms of the engine's CPU a scrape against 1.4 ms here. The names come from
    :data:`METRICS` and a test holds them to Prometheus's name rules, so only label values are
    escaped; values are formatted by prometheus-client's own ``floatToGoString`` and labels
    sorted by name, as it writes them, so the bytes are its bytes (a test compares them). What
    it also handles and these families never carry: sample timestamps and ``_created``
    samples.
    """
    out: list[str] = []
    for fam in families:
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        doc = fam.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {fam.type}\n")
        for sample in fam.samples:
            value = _go_float(sample.value)
            if sample.labels:
                pairs = sorted(sample.labels.items())
                labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs)
                out.append(f"{sample.name}{{{labels}}} {value}\n")
            else:
                out.append(f"{sample.name} {value}\n")
    return "".join(out).encode("utf-8")


def _label_value(value: str) -> str:
    """A label value as the text format quotes it: backslash, double quote and newline
    escaped (the fast path: most values have none)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


# -- the steps of build_families, one group of the table each ------------------------------------


def _empty_families() -> Families:
    fams = Families([], {}, {})
    for spec in METRICS.values():
        fam: Metric
        if spec.kind == "gauge":
            fam = GaugeMetricFamily(spec.full_name, spec.help, labels=spec.labels)
            fams.values[spec.name] = fam
        elif spec.kind == "counter":
            fam = CounterMetricFamily(spec.full_name, spec.help, labels=spec.labels)
            fams.values[spec.name] = fam
        else:
            fam = HistogramMetricFamily(spec.full_name, spec.help, labels=spec.labels)
            fams.histograms[spec.name] = fam
        fams.ordered.append(fam)
    return fams


def _gauge(
    fams: Families, name: str, labels: tuple[str, ...], value: Any, scale: float = 1.0
) -> None:
    """One sample, only where ``value`` is a number (absent, not zero)."""
    if is_number(value):
        fams.values[name].add_metric(list(labels), float(value) * scale)


def _producer(fams: Families, reading: Reading) -> None:
    """The producer and its devices (hello), and the events folded and missed."""
    hello = reading.hello
    if hello is not None:
        _gauge(
            fams,
            "info",
            tuple(str(hello.get(k, "")) for k in ("engine_id", "host", "source", "backend")) +
            (str(hello.get("version", "")),),
            1,
        )  # fmt: skip
        for dev in hello.get("devices") or []:
            if isinstance(dev, dict):
                modeled = "true" if dev.get("modeled") else "false"
                labels = (str(dev.get("index")), str(dev.get("name")), modeled)
                _gauge(fams, "device_info", labels, 1)
    fams.values["events_total"].add_metric([], reading.events)
    fams.values["missed_events_total"].add_metric([], reading.missed)


def _memory(fams: Families, memory: dict[int, dict[str, Any]]) -> None:
    """Per device: the two CUDA pools, the phantom bytes between them, the driver's and
    NVML's figures."""
    for device, m in sorted(memory.items()):
        d, modeled = str(device), "true" if m.get("modeled") else "false"
        sync_used, sync_cached = m.get("sync_used"), m.get("sync_cached")
        a_used, a_reserved = m.get("async_used"), m.get("async_reserved")
        _gauge(fams, "pool_used_bytes", (d, "sync", modeled), sync_used)
        _gauge(fams, "pool_used_bytes", (d, "async", modeled), a_used)
        if is_number(sync_used) and is_number(sync_cached):
            _gauge(fams, "pool_reserved_bytes", (d, "sync", modeled), sync_used + sync_cached)
        _gauge(fams, "pool_reserved_bytes", (d, "async", modeled), a_reserved)
        _gauge(fams, "pool_cached_bytes", (d, "sync", modeled), sync_cached)
        if is_number(a_used) and is_number(a_reserved):
            _gauge(fams, "pool_cached_bytes", (d, "async", modeled), async_cached(m))
        _gauge(fams, "phantom_bytes", (d, modeled), phantom_bytes(m))
        for key in ("pinned_host", "driver_free", "driver_total", "nvml_used", "nvml_total"):
            _gauge(fams, f"{key}_bytes", (d, modeled), m.get(key))


def _gpu(fams: Families, gpu: dict[int, dict[str, Any]]) -> None:
    """Per device: NVML's view besides memory, in base units (ratios, watts, hertz)."""
    for device, g in sorted(gpu.items()):
        d = str(device)
        _gauge(fams, "gpu_utilization_ratio", (d, "sm"), g.get("sm_util_pct"), 0.01)
        _gauge(fams, "gpu_utilization_ratio", (d, "memory"), g.get("mem_util_pct"), 0.01)
        _gauge(fams, "gpu_power_watts", (d,), g.get("power_mw"), 1e-3)
        _gauge(fams, "gpu_power_limit_watts", (d,), g.get("power_limit_mw"), 1e-3)
        _gauge(fams, "gpu_temperature_celsius", (d,), g.get("temp_c"))
        _gauge(fams, "gpu_clock_hertz", (d, "sm"), g.get("sm_clock_mhz"), 1e6)
        _gauge(fams, "gpu_clock_hertz", (d, "memory"), g.get("mem_clock_mhz"), 1e6)
        _gauge(fams, "gpu_pcie_throughput_bytes_per_second", (d, "rx"), g.get("pcie_rx_bytes_s"))
        _gauge(fams, "gpu_pcie_throughput_bytes_per_second", (d, "tx"), g.get("pcie_tx_bytes_s"))
        _gauge(fams, "gpu_fan_ratio", (d,), g.get("fan_pct"), 0.01)
        _gauge(fams, "gpu_ecc_errors", (d, "corrected"), g.get("ecc_corrected"))
        _gauge(fams, "gpu_ecc_errors", (d, "uncorrected"), g.get("ecc_uncorrected"))
        _gauge(fams, "gpu_retired_pages", (d,), g.get("retired_pages"))
        _gauge(fams, "gpu_xid_errors", (d,), g.get("xid_count"))


def _workers(fams: Families, workers: list[tuple[int, int, str]]) -> None:
    """One 0/1 sample per worker and state: 1 for the state it is in."""
    for device, worker, current in workers:
        for state in WORKER_STATES:
            labels = (str(device), str(worker), state)
            _gauge(fams, "worker_state", labels, 1 if state == current else 0)


def _counts(fams: Families, reading: Reading) -> None:
    """The counters and the histograms (buckets made cumulative, as Prometheus reads them)."""
    for (name, labels), value in sorted(reading.counters.items()):
        fams.values[name].add_metric(list(labels), value)
    bounds = [str(b) for b in DURATION_BUCKETS] + ["+Inf"]
    for (name, labels), (counts, total, _count) in sorted(reading.hists.items()):
        running, buckets = 0, []
        for bound, n in zip(bounds, counts, strict=True):
            running += n
            buckets.append((bound, running))
        fams.histograms[name].add_metric(list(labels), buckets, total)


def _run(fams: Families, reading: Reading) -> None:
    """The run's s/proof and the telemetry listener's figures."""
    _gauge(fams, "seconds_per_proof", (), reading.s_per_proof)
    for name, field in COUNTER_FIELDS.items():
        _gauge(fams, name, (), reading.listener.get(field))

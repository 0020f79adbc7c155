"""The metric families ``/metrics`` serves: one table, read by everything that names a metric.

The exposition (:mod:`provetop.recordings.prometheus.exposition`), ``docs/metrics.md`` (``python -m
provetop.recordings.prometheus.families`` prints its table) and the Grafana dashboard's test all
read
:data:`METRICS`, so a metric cannot exist in one and not the other.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "provetop_"

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

# The telemetry bus's and listener's figures, one row each: metric, kind, the ``counters``
# event's field it is read from, help.
LISTENER: tuple[tuple[str, str, str, str], ...] = (
    ("telemetry_clients", "gauge", "clients", "clients attached to the telemetry stream"),
    ("telemetry_dropped_clients_total", "counter", "dropped_clients",
     "clients dropped for lagging too far"),
    ("telemetry_lagged_events_total", "counter", "lagged_events",
     "events skipped for slow clients, all clients together"),
    ("telemetry_refused_connections_total", "counter", "refused_clients",
     "connections closed at accept because too many clients were attached"),
    ("telemetry_evicted_handshakes_total", "counter", "evicted_handshakes",
     "unauthenticated connections closed to make room for new ones"),
    ("telemetry_auth_failures_total", "counter", "auth_failures",
     "connections that failed the token handshake"),
    ("telemetry_accept_errors_total", "counter", "accept_errors", "accept() calls that failed"),
    ("telemetry_paced_accepts_total", "counter", "paced_accepts",
     "accepts that waited for the listener's pace (a connection storm)"),
    ("telemetry_evicted_idle_total", "counter", "evicted_idle",
     "idle connections closed to make room at the connection cap"),
    ("telemetry_paced_commands_total", "counter", "paced_commands",
     "commands that waited for their turn in the shared command budget"),
    ("telemetry_hung_up_dropped_total", "counter", "hung_up_dropped",
     "connections dropped while a command waited: the sender had hung up"),
    ("telemetry_reader_threads", "gauge", "reader_threads",
     "threads serving telemetry connections"),
)  # fmt: skip

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
        *(_m(name, kind, (), help, "counters") for name, kind, _, help in LISTENER),
    )
}  # fmt: skip
# the counters event's field behind each telemetry_* metric
COUNTER_FIELDS = {name: field for name, _, field, _ in LISTENER}


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

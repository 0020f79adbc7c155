"""Recording -> Chrome trace JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open.

Built from the reducer (:class:`provetop.recordings.state.State`), so the trace shows exactly the
lanes and series the dashboard draws:

- one process per device (``pid`` = device index + 1) and one for the engine
  (:data:`ENGINE_PID`);
- one thread per lane: each worker, the GPU lane (any phase holding the device mutex) and the
  upload lane, named with ``thread_name`` metadata and ordered with ``thread_sort_index``; a
  phase overlapping the previous one on its worker lane goes to an overflow thread;
- every thread id (``tid``) a fixed function of its device, lane and overflow level
  (:func:`lane_tid`), never 0 and never the same for two lanes of the file: Perfetto reads
  ``tid`` 0 as the process itself and keys threads by ``tid`` alone, so a worker 0 lane on
  ``tid`` 0, or worker 1 of two devices on one ``tid``, lands on another lane's track, where
  its overlapping slices are dropped;
- ``X`` complete slices for phases (named after the phase; args: proof, partition, ok), for
  GPU-lane and upload-lane busy spans ("gpu busy", "upload busy"), and for phases still open
  when the recording ends (args: unfinished);
- ``C`` counter tracks for the memory series per device (sync pool used/cached, stream-ordered
  pool used/reserved, driver free, NVML used), in bytes, labelled "modeled" when they are;
- ``C`` counter tracks for NVML's ``gpu`` samples per device (utilisation, power, temperature,
  clocks, PCIe throughput), each from every sample of the recording, a field the GPU did not
  report left out;
- ``i`` instants for faults (on the worker's thread when known, else the device's "events"
  thread), markers and control actions (on the engine's "events" thread).

Timestamps are microseconds since the engine's t = 0.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from provetop.recordings.gpu_series import MISSING, GpuSeries
from provetop.recordings.reader import Recording
from provetop.recordings.schema import PHASES
from provetop.recordings.state import Lane, Segment, State
from provetop.recordings.summary import fold_with_gpu, json_safe

# Ids. A thread's tid is DEVICE_TIDS * (device + 1) (0 for the engine's process) + OVERFLOW_TIDS
# * its overflow level + the lane's offset: worker w at 1 + w, the GPU, upload and events lanes
# at the offsets below. Stable: the same (device, worker) has the same tid in every export.
ENGINE_PID = 1_000_000_000  # above any device's pid (device index + 1)
DEVICE_TIDS = 1_000_000  # tids per device
OVERFLOW_TIDS = 10_000  # tids per overflow level (at most 99 levels)
MAX_WORKER = 8_999  # workers 0..MAX_WORKER have a lane of their own
GPU_LANE = 9_001
UPLOAD_LANE = 9_002
EVENTS_LANE = 9_003  # instants of a process that name no worker (faults, markers, controls)
OTHER_WORKERS_LANE = 9_004  # a worker number outside 0..MAX_WORKER
ENGINE_TID = EVENTS_LANE
COUNTERS = (  # track name, {series label: MemorySeries column}
    ("sync pool", {"used": "sync_used", "cached": "sync_cached"}),
    ("stream-ordered pool", {"used": "async_used", "reserved": "async_reserved"}),
    ("driver free", {"free": "driver_free"}),
    ("NVML used", {"used": "nvml_used"}),
)
GPU_COUNTERS = (  # track name, {series label: (GpuSeries field, divisor)}
    ("utilisation (%)", {"sm": ("sm_util_pct", 1), "memory": ("mem_util_pct", 1)}),
    ("power (W)", {"draw": ("power_mw", 1000), "limit": ("power_limit_mw", 1000)}),
    ("temperature (°C)", {"gpu": ("temp_c", 1)}),
    ("clocks (MHz)", {"sm": ("sm_clock_mhz", 1), "memory": ("mem_clock_mhz", 1)}),
    ("PCIe (bytes/s)", {"rx": ("pcie_rx_bytes_s", 1), "tx": ("pcie_tx_bytes_s", 1)}),
)


def export_perfetto(source: str | os.PathLike[str] | Recording) -> dict[str, Any]:
    """The Chrome trace (a JSON-able dict) of a recording."""
    rec, state, gpu = fold_with_gpu(source)
    trace = trace_from_state(state, gpu)
    trace["otherData"].update(
        {
            "recording": str(rec.path),
            "complete": rec.complete,
            "truncation": str(rec.truncation) if rec.truncation else None,
        }
    )
    return trace


def trace_from_state(state: State, gpu: GpuSeries | None = None) -> dict[str, Any]:
    """The Chrome trace of a folded state (history included); without ``gpu`` the NVML
    counters cover the reducer's bounded history of samples."""
    if gpu is None:
        gpu = GpuSeries.of(e for samples in state.gpu_history.values() for e in samples)
    hello = state.hello or {}
    modeled = bool(hello.get("modeled"))
    trace = _Trace(state, modeled)
    trace.lane_threads()
    trace.phase_slices()
    trace.memory_counters()
    for device in gpu.devices():
        trace.devices.add(device)
        trace.events.extend(_gpu_counters(gpu, device))
    trace.fault_instants()
    trace.engine_instants()
    trace.processes(hello)
    return {
        "traceEvents": json_safe(trace.events),
        "displayTimeUnit": "ms",
        "otherData": json_safe(
            {
                "producer": "provetop export --format perfetto",
                "engine_id": hello.get("engine_id"),
                "backend": hello.get("backend"),
                "modeled": modeled,
            }
        ),
    }


class _Trace:
    """The trace events of one state as they are built, in the order the steps add them, with
    the threads and devices named so far."""

    def __init__(self, state: State, modeled: bool) -> None:
        self.state = state
        self.suffix = " (modeled)" if modeled else ""
        self.events: list[dict[str, Any]] = []
        self.threads: set[tuple[int, int]] = set()
        self.devices: set[int] = set()

    def meta(self, pid: int, tid: int | None, name: str, args: dict[str, Any]) -> None:
        e: dict[str, Any] = {"ph": "M", "name": name, "pid": pid, "args": args}
        if tid is not None:
            e["tid"] = tid
        self.events.append(e)

    def lane_threads(self) -> None:
        """A named, ordered thread per lane of the timeline."""
        for lane in self.state.lanes():
            pid, tid, label = _lane_ids(lane, self.state)
            if pid != ENGINE_PID:
                self.devices.add(pid - 1)
            self.thread(pid, tid, label)

    def thread(self, pid: int, tid: int, label: str) -> None:
        """Name and order thread ``tid`` of ``pid`` once; overflow lanes sort after their
        lane."""
        if (pid, tid) in self.threads:
            return
        self.threads.add((pid, tid))
        lane, level = tid % OVERFLOW_TIDS, tid % DEVICE_TIDS // OVERFLOW_TIDS
        self.meta(pid, tid, "thread_name", {"name": label})
        self.meta(pid, tid, "thread_sort_index", {"sort_index": lane * 100 + level})

    def phase_slices(self) -> None:
        """A slice per finished or still open segment of every lane."""
        state, end = self.state, self.state.t
        spans: dict[tuple[int, int], list[tuple[Segment, int, bool]]] = {}
        labels: dict[tuple[int, int], str] = {}
        segments = [
            (seg, seg.end if seg.end is not None else end, False)
            for lane_segments in state.segments.values()
            for seg in lane_segments
        ]
        segments += [(seg, max(end, seg.start), True) for seg in state.open.values()]
        for item in segments:
            pid, tid, label = _lane_ids(item[0].lane, state)
            spans.setdefault((pid, tid), []).append(item)
            labels[(pid, tid)] = label
        for (pid, tid), items in spans.items():
            self._thread_slices(pid, tid, labels[(pid, tid)], items)

    def _thread_slices(
        self, pid: int, tid: int, label: str, items: list[tuple[Segment, int, bool]]
    ) -> None:
        # Slices of one thread must not overlap partially (Perfetto drops such a slice); a
        # phase that overlaps the previous one on its lane goes to an overflow thread.
        free_at: list[int] = []  # per overflow level: when its last slice ends
        for seg, stop, unfinished in sorted(items, key=lambda x: (x[0].start, x[1])):
            level = next((i for i, f in enumerate(free_at) if seg.start >= f), len(free_at))
            if level == len(free_at):
                free_at.append(stop)
            free_at[level] = max(free_at[level], stop)
            where = tid + OVERFLOW_TIDS * level
            if level:
                self.thread(pid, where, f"{label} (overlap {level})")
            _slice(self.events, pid, seg, stop, unfinished, where)

    def memory_counters(self) -> None:
        """The memory series of each device, one counter track per COUNTERS entry."""
        for device, series in self.state.series.items():
            if not isinstance(device, int):
                continue
            pid = _pid(device)
            if pid != ENGINE_PID:
                self.devices.add(device)
            for track, columns in COUNTERS:
                cols = {label: series.columns[name] for label, name in columns.items()}
                for i, t in enumerate(series.t):
                    args = {label: col[i] for label, col in cols.items() if col[i] >= 0}
                    if args:
                        self.events.append(
                            {
                                "ph": "C",
                                "name": f"{track} (bytes){self.suffix}",
                                "pid": pid,
                                "tid": events_tid(device),
                                "ts": _us(t),
                                "args": args,
                            }
                        )

    def fault_instants(self) -> None:
        """An instant per fault, on its worker's thread where the fault names one."""
        for fault in self.state.faults:
            device = fault.get("device")
            worker = fault.get("worker")
            if isinstance(device, int) and device >= 0:
                self.devices.add(device)
            if isinstance(worker, int) and not isinstance(worker, bool):
                pid, tid, label = _lane_ids(("worker", device, worker), self.state)
            else:
                pid, tid, label = _pid(device), events_tid(device), "events"
            self.thread(pid, tid, label)
            args = {k: v for k, v in fault.items() if k not in ("k", "t")}
            name = f"fault: {fault.get('kind')}"
            self.events.append(_instant(name, fault.get("t", 0), pid, tid, "t", args))

    def engine_instants(self) -> None:
        """Markers, control actions and completed proofs, on the engine's process."""
        state, events = self.state, self.events
        for t, name in state.markers:
            events.append(
                _instant(f"marker: {name}", t, ENGINE_PID, ENGINE_TID, "g", {"name": name})
            )
        for c in state.controls:
            outcome = "ok" if c.get("ok") else f"refused: {c.get('error')}"
            args = {"id": c.get("id"), "args": c.get("args"), "outcome": outcome}
            if c.get("client"):
                args["client"] = c["client"]
            name = f"control: {c.get('cmd')}"
            events.append(_instant(name, c.get("t", 0), ENGINE_PID, ENGINE_TID, "p", args))
        for t, proof, ok, wall_ms in state.proofs_done:
            args = {"proof": proof, "ok": ok, "wall_ms": wall_ms}
            done = f"proof {proof} done"
            events.append(_instant(done, t, ENGINE_PID, ENGINE_TID, "p", args))

    def processes(self, hello: dict[str, Any]) -> None:
        """The engine's process and one per device, named and ordered."""
        names: dict[int, str] = {}
        for d in hello.get("devices") or []:
            if isinstance(d, dict) and isinstance(d.get("index"), int):
                names[d["index"]] = str(d.get("name") or "")
        self.meta(
            ENGINE_PID, None, "process_name", {"name": f"engine {hello.get('engine_id', '?')}"}
        )
        self.thread(ENGINE_PID, ENGINE_TID, "events")
        self.meta(ENGINE_PID, None, "process_sort_index", {"sort_index": 0})
        for d in sorted(self.devices):
            label = f"gpu{d}" + (f" {names[d]}" if names.get(d) else "") + self.suffix
            self.meta(d + 1, None, "process_name", {"name": label})
            self.meta(d + 1, None, "process_sort_index", {"sort_index": d + 1})


def _gpu_counters(gpu: GpuSeries, device: int) -> list[dict[str, Any]]:
    """The ``C`` events of one device's NVML samples, one track per GPU_COUNTERS entry."""
    out: list[dict[str, Any]] = []
    columns = gpu.columns[device]
    for track, series in GPU_COUNTERS:
        for i, t in enumerate(gpu.t[device]):
            args = {
                label: columns[name][i] / per if per != 1 else columns[name][i]
                for label, (name, per) in series.items()
                if columns[name][i] != MISSING
            }
            if args:
                out.append(
                    {
                        "ph": "C",
                        "name": track,
                        "pid": device + 1,
                        "tid": events_tid(device),
                        "ts": _us(t),
                        "args": args,
                    }
                )
    return out


def _pid(device: Any) -> int:
    """The process of a device: index + 1; the engine's for no device (or a negative one)."""
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device + 1
    return ENGINE_PID


def _tid_base(device: Any) -> int:
    pid = _pid(device)
    return 0 if pid == ENGINE_PID else DEVICE_TIDS * pid


def lane_tid(device: Any, lane: int, level: int = 0) -> int:
    """The tid of ``lane`` (1 + worker, or a ``*_LANE`` offset) of ``device`` at overflow
    ``level``: never 0, and the same lane of the same device has the same tid in every
    export."""
    return _tid_base(device) + OVERFLOW_TIDS * level + lane


def events_tid(device: Any) -> int:
    """The thread of a device's instants that name no worker (the engine's for no device)."""
    return lane_tid(device, EVENTS_LANE)


def _lane_ids(lane: Lane, state: State | None = None) -> tuple[int, int, str]:
    """(pid, tid, thread name) of a lane; ``state`` names the synthesis lanes. Every lane has
    one: a lane of no device (or a negative one) lies on the engine's process, a worker
    number outside 0..MAX_WORKER on its device's "other workers" lane."""
    kind = lane[0] if lane else None
    device = lane[1] if len(lane) > 1 else None
    pid = _pid(device)
    if kind == "gpu":
        return pid, lane_tid(device, GPU_LANE), "GPU (mutex held)"
    if kind == "upload":
        return pid, lane_tid(device, UPLOAD_LANE), "upload"
    worker = lane[2] if len(lane) > 2 else None
    if isinstance(worker, int) and not isinstance(worker, bool) and 0 <= worker <= MAX_WORKER:
        n = state.synth_lane(worker) if state is not None else None
        label = f"synth {n}" if n is not None else f"worker {worker}"
        return pid, lane_tid(device, 1 + worker), label
    return pid, lane_tid(device, OTHER_WORKERS_LANE), "other workers"


def _slice(
    events: list[dict[str, Any]],
    pid: int,
    seg: Segment,
    end: int,
    unfinished: bool,
    tid: int,
) -> None:
    lane = seg.lane
    if lane[0] == "worker":
        spec = PHASES.get(seg.phase)
        name, cat = seg.phase, spec.group if spec else "phase"
        args: dict[str, Any] = {"proof": seg.proof, "partition": seg.partition, "ok": seg.ok}
    else:
        name, cat, args = f"{lane[0]} busy", lane[0], {}
    if unfinished:
        args["unfinished"] = True
    events.append(
        {
            "ph": "X",
            "name": str(name),
            "cat": str(cat),
            "pid": pid,
            "tid": tid,
            "ts": _us(seg.start),
            "dur": max(0, end - seg.start) / 1000.0,
            "args": args,
        }
    )


def _instant(
    name: str, t: Any, pid: int, tid: int, scope: str, args: dict[str, Any]
) -> dict[str, Any]:
    ts = _us(t) if isinstance(t, int) else 0.0
    return {"ph": "i", "name": name, "pid": pid, "tid": tid, "ts": ts, "s": scope, "args": args}


def _us(t: int) -> float:
    return t / 1000.0


def write_perfetto(source: str | os.PathLike[str] | Recording, out: str | os.PathLike[str]) -> int:
    """Export to ``out`` atomically (a temporary file renamed into place); returns the number
    of trace events. ``OSError`` when ``out`` cannot be written."""
    trace = export_perfetto(source)
    target = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        os.fchmod(fd, 0o600)  # private, as every file the product creates (docs/security.md)
        with os.fdopen(fd, "w") as f:
            json.dump(trace, f, separators=(",", ":"), allow_nan=False)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return len(trace["traceEvents"])

"""Recording -> Chrome trace JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open.

Built from the reducer (:class:`provetop.recordings.state.State`), so the trace shows exactly the
lanes
and series the dashboard draws:

- one process per device (``pid`` = device index + 1) and one for the engine (``pid`` 0);
- one thread per lane: each worker, the GPU lane (any phase holding the device mutex) and the
  upload lane, named with ``thread_name`` metadata and ordered with ``thread_sort_index``; a
  phase overlapping the previous one on its worker lane goes to an overflow thread;
- ``X`` complete slices for phases (named after the phase; args: proof, partition, ok), for
  GPU-lane and upload-lane busy spans ("gpu busy", "upload busy"), and for phases still open
  when the recording ends (args: unfinished);
- ``C`` counter tracks for the memory series per device (sync pool used/cached, stream-ordered
  pool used/reserved, driver free, NVML used), in bytes, labelled "modeled" when they are;
- ``C`` counter tracks for NVML's ``gpu`` samples per device (utilisation, power, temperature,
  clocks, PCIe throughput), each from every sample of the recording, a field the GPU did not
  report left out;
- ``i`` instants for faults (on the worker's thread when known), markers and control actions.

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

ENGINE_PID = 0
GPU_TID = 1000
UPLOAD_TID = 1001
OVERFLOW_TID = 2000  # + 100 * level + lane tid: overflow threads for overlapping phases
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
            if pid is None:
                continue
            self.devices.add(pid - 1)
            self.threads.add((pid, tid))
            self.meta(pid, tid, "thread_name", {"name": label})
            self.meta(pid, tid, "thread_sort_index", {"sort_index": tid})

    def phase_slices(self) -> None:
        """A slice per finished or still open segment of every lane."""
        state, end = self.state, self.state.t
        spans: dict[Lane, list[tuple[Segment, int, bool]]] = {}
        for lane, segments in state.segments.items():
            for seg in segments:
                stop = seg.end if seg.end is not None else end
                spans.setdefault(lane, []).append((seg, stop, False))
        for seg in state.open.values():
            spans.setdefault(seg.lane, []).append((seg, max(end, seg.start), True))
        for lane, items in spans.items():
            self._lane_slices(lane, items)

    def _lane_slices(self, lane: Lane, items: list[tuple[Segment, int, bool]]) -> None:
        # Slices of one thread must not overlap partially (Perfetto would mis-nest them); a
        # phase that overlaps the previous one on its lane goes to an overflow thread.
        pid, tid, label = _lane_ids(lane, self.state)
        if pid is None:
            return
        free_at: list[int] = []  # per overflow level: when its last slice ends
        for seg, stop, unfinished in sorted(items, key=lambda x: (x[0].start, x[1])):
            level = next((i for i, f in enumerate(free_at) if seg.start >= f), len(free_at))
            if level == len(free_at):
                free_at.append(stop)
                if level:
                    extra = OVERFLOW_TID + 100 * level + tid
                    self.threads.add((pid, extra))
                    self.meta(pid, extra, "thread_name", {"name": f"{label} (overlap {level})"})
                    self.meta(pid, extra, "thread_sort_index", {"sort_index": extra})
            free_at[level] = max(free_at[level], stop)
            where = tid if level == 0 else OVERFLOW_TID + 100 * level + tid
            _slice(self.events, lane, seg, stop, unfinished, where)

    def memory_counters(self) -> None:
        """The memory series of each device, one counter track per COUNTERS entry."""
        for device, series in self.state.series.items():
            if not isinstance(device, int):
                continue
            self.devices.add(device)
            pid = device + 1
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
                                "tid": 0,
                                "ts": _us(t),
                                "args": args,
                            }
                        )

    def fault_instants(self) -> None:
        """An instant per fault, on its worker's thread where the fault names one."""
        for fault in self.state.faults:
            device = fault.get("device")
            worker = fault.get("worker")
            pid = device + 1 if isinstance(device, int) and device >= 0 else ENGINE_PID
            tid = worker if pid != ENGINE_PID and isinstance(worker, int) else 0
            if pid != ENGINE_PID:
                self.devices.add(pid - 1)
                if (pid, tid) not in self.threads and isinstance(worker, int):
                    self.threads.add((pid, tid))
                    self.meta(pid, tid, "thread_name", {"name": f"worker {worker}"})
            args = {k: v for k, v in fault.items() if k not in ("k", "t")}
            name = f"fault: {fault.get('kind')}"
            self.events.append(_instant(name, fault.get("t", 0), pid, tid, "t", args))

    def engine_instants(self) -> None:
        """Markers, control actions and completed proofs, on the engine's process."""
        state, events = self.state, self.events
        for t, name in state.markers:
            events.append(_instant(f"marker: {name}", t, ENGINE_PID, 0, "g", {"name": name}))
        for c in state.controls:
            outcome = "ok" if c.get("ok") else f"refused: {c.get('error')}"
            args = {"id": c.get("id"), "args": c.get("args"), "outcome": outcome}
            if c.get("client"):
                args["client"] = c["client"]
            name = f"control: {c.get('cmd')}"
            events.append(_instant(name, c.get("t", 0), ENGINE_PID, 0, "p", args))
        for t, proof, ok, wall_ms in state.proofs_done:
            args = {"proof": proof, "ok": ok, "wall_ms": wall_ms}
            events.append(_instant(f"proof {proof} done", t, ENGINE_PID, 0, "p", args))

    def processes(self, hello: dict[str, Any]) -> None:
        """The engine's process and one per device, named and ordered."""
        names: dict[int, str] = {}
        for d in hello.get("devices") or []:
            if isinstance(d, dict) and isinstance(d.get("index"), int):
                names[d["index"]] = str(d.get("name") or "")
        self.meta(
            ENGINE_PID, None, "process_name", {"name": f"engine {hello.get('engine_id', '?')}"}
        )
        self.meta(ENGINE_PID, 0, "thread_name", {"name": "events"})
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
                        "tid": 0,
                        "ts": _us(t),
                        "args": args,
                    }
                )
    return out


def _lane_ids(lane: Lane, state: State | None = None) -> tuple[int | None, int, str]:
    """(pid, tid, thread name) of a lane; ``state`` names the synthesis lanes."""
    kind = lane[0] if lane else None
    device = lane[1] if len(lane) > 1 else None
    if not isinstance(device, int) or device < 0:
        return None, 0, ""
    if kind == "worker" and len(lane) > 2 and isinstance(lane[2], int) and lane[2] >= 0:
        n = state.synth_lane(lane[2]) if state is not None else None
        if n is not None:
            return device + 1, lane[2], f"synth {n}"
        return device + 1, lane[2], f"worker {lane[2]}"
    if kind == "gpu":
        return device + 1, GPU_TID, "GPU (mutex held)"
    if kind == "upload":
        return device + 1, UPLOAD_TID, "upload"
    return None, 0, ""


def _slice(
    events: list[dict[str, Any]], lane: Lane, seg: Segment, end: int, unfinished: bool, tid: int
) -> None:
    pid = _lane_ids(lane)[0]
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

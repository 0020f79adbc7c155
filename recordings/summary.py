"""The per-partition summary of a recording, as data and as a table.

Every number is read from :class:`provetop.recordings.state.State` (the reducer the dashboard
draws), so
``provetop summary`` and the screen cannot disagree: per-attempt rows come from
``State.attempts`` (plus partitions still in flight when the recording stops), run totals from
``State.totals()``, ``State.s_per_proof()`` and ``State.busy_fraction()``. The NVML samples'
medians (a line per GPU) come from every ``gpu`` event of the recording (``GpuSeries``), since
the reducer keeps only the last hour of them.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from typing import Any

from provetop.base.units import fmt_bytes
from provetop.recordings.gpu_series import GpuSeries
from provetop.recordings.reader import Recording, fold_recording
from provetop.recordings.schema import PHASES
from provetop.recordings.state import PartitionRow, State

ROW_FIELDS = (
    "proof",
    "partition",
    "attempt",
    "worker",
    "device",
    "ok",
    "prestage",
    "prestage_reason",
    "forced",
    "mutex_wait_ms",
    "phases_ms",
    "gpu_total_ms",
    "verified",
    "failure",
)


def fold_with_gpu(
    source: str | os.PathLike[str] | Recording,
) -> tuple[Recording, State, GpuSeries | None]:
    """A recording, its folded state and every ``gpu`` sample in it (None where an opened
    recording kept no events). Why the samples apart: the state keeps only the last hour of
    them, and a summary or a trace covers the whole run."""
    if isinstance(source, Recording):
        gpu = GpuSeries.of(source.events) if source.events_kept else None
        return source, source.state(), gpu
    series = GpuSeries()
    rec, state = fold_recording(source, also=series)  # streamed: the events are not kept
    return rec, state, series


def build_summary(source: str | os.PathLike[str] | Recording) -> dict[str, Any]:
    """The summary of a recording as plain JSON-able data (what ``--json`` prints)."""
    rec, state, gpu = fold_with_gpu(source)
    return summarize_state(state, rec, gpu)


def summarize_state(
    state: State, rec: Recording | None = None, gpu: GpuSeries | None = None
) -> dict[str, Any]:
    """The summary of an already folded state (a live engine's, for example); without
    ``gpu`` the NVML medians cover the reducer's bounded history."""
    if gpu is None:
        gpu = GpuSeries.of(e for samples in state.gpu_history.values() for e in samples)
    rows = [_row(a, "done" if a.ok else "failed") for a in state.attempts]
    rows += [_row(r, "unfinished") for r in state.partitions.values() if r.ok is None]
    rows.sort(key=_order)
    hello = state.hello or {}
    devices = sorted(
        {int(d["index"]) for d in hello.get("devices") or [] if _is_device(d)}
        | {k[1] for k in state.lanes() if isinstance(k[1], int)}
    )
    start, end = state.first_t, state.t
    busy: dict[str, float | None] = {}
    for d in devices:
        busy[str(d)] = state.busy_fraction(d, start, end) if start is not None else None
    known = [b for b in busy.values() if b is not None]
    totals = dict(state.totals())
    totals["gpu_busy_fraction"] = sum(known) / len(known) if known else None
    totals["gpu_busy_fraction_by_device"] = busy
    totals["rolling_s_per_proof"] = state.rolling_s_per_proof()
    totals["unfinished"] = sum(1 for r in state.partitions.values() if r.ok is None)
    totals["wall_s"] = (end - start) / 1e9 if start is not None else None
    out: dict[str, Any] = {
        "file": str(rec.path) if rec else None,
        "complete": rec.complete if rec else None,
        "truncated": rec.truncated if rec else False,
        "truncation": str(rec.truncation) if rec and rec.truncation else None,
        "modeled": bool(hello.get("modeled")),
        "engine": {
            k: hello.get(k)
            for k in ("engine_id", "host", "source", "backend", "version", "devices", "config")
        }
        if hello
        else None,
        "engine_state": state.engine_state,
        "events": state.events,
        "attempts": rows,
        "memory": _memory_rows(state),
        "totals": totals,
        "gpu": gpu.medians(),
    }
    return {key: json_safe(value) for key, value in out.items()}


def _memory_rows(state: State) -> list[dict[str, Any]]:
    """Per device (a traced process's lane, with its pid): the peaks of both pools and the
    least free memory over the samples the reducer kept, and the out-of-memory refusals by the
    trace's case (``sources/trace/heal.py``; engine OOMs have none)."""
    out = []
    stride = ((state.hello or {}).get("config") or {}).get("lane_stride")
    for device, series in sorted(state.series.items()):
        cols = series.columns
        last = state.memory.get(device) or {}
        ooms = [f for f in state.faults if f.get("kind") == "oom" and f.get("device") == device]
        cases: dict[str, int] = {}
        for f in ooms:
            case = str(f.get("case") or "-")
            cases[case] = cases.get(case, 0) + 1
        free = [v for v in cols["driver_free"] if v >= 0]
        out.append({
            "device": device,
            # a traced process's lane is its GPU's index plus a multiple of the lane stride
            # (provetop.trace.lanes): the GPU as nvidia-smi numbers it, as the dashboard says
            "gpu": device % stride if isinstance(stride, int) and stride > 0 else device,
            "pid": last.get("pid"),
            "samples": len(series),
            "async_reserved_peak": max(cols["async_reserved"], default=0),
            "async_used_peak": max(cols["async_used"], default=0),
            "sync_used_peak": max(cols["sync_used"], default=0),
            "driver_free_min": min(free) if free else None,
            "ooms": len(ooms),
            "oom_cases": cases,
        })  # fmt: skip
    return out


def _order(row: dict[str, Any]) -> tuple[int, ...]:
    return tuple(v if isinstance(v, int) else -1 for v in (row["proof"], row["partition"]))


def _is_device(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("index"), int)


def _row(row: PartitionRow, status: str) -> dict[str, Any]:
    data = asdict(row)
    out = {name: data[name] for name in ROW_FIELDS}
    out["status"] = status
    return out


def json_safe(obj: Any) -> Any:
    """JSON has no NaN/inf: such values (possible in a damaged or odd recording) become None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    return obj


# -- text -----------------------------------------------------------------------------------------

_SHORT = {
    "synthesis": "synth",
    "prestage": "prestg",
    "upload": "upload",
    "mutex_wait": "mwait",
    "fallback_upload": "fb_upl",
    "check_inputs": "chk_in",
    "h_step": "h_step",
    "msm_h": "msm_h",
    "msm_l": "msm_l",
    "msm_a": "msm_a",
    "msm_b_g1": "msm_bg1",
    "msm_interleaved": "msm_il",
    "check_sums": "chk_sum",
    "copy_back": "copy",
    "verify": "verify",
    "release": "rel",
}


def format_summary(summary: dict[str, Any]) -> str:
    """A readable report: header, one line per partition attempt, totals."""
    lines = _header_lines(summary)
    lines.extend(_attempt_lines(summary.get("attempts") or []))
    gpu = summary.get("gpu") or {}
    if (summary.get("engine") or {}).get("source") == "trace":  # a traced program: its pools
        memory = summary.get("memory") or []
        lines.extend(_memory_lines(memory))
        # the NVML view of a GPU is repeated on each further lane on it: once per GPU here
        repeats = {str(r["device"]) for r in memory if r.get("gpu", r["device"]) != r["device"]}
        gpu = {d: row for d, row in gpu.items() if str(d) not in repeats}
    lines.append("")
    lines.extend(_totals_lines(summary.get("totals") or {}, bool(summary.get("modeled"))))
    lines.extend(_gpu_lines(gpu))
    return "\n".join(lines) + "\n"


def _header_lines(summary: dict[str, Any]) -> list[str]:
    """The recording (and whether it is whole), the engine and its devices."""
    lines = [f"recording: {summary.get('file')}"]
    if summary.get("truncated"):
        lines.append(f"  TRUNCATED: {summary.get('truncation')} (read up to the last whole frame)")
    elif summary.get("complete") is False:
        lines.append("  incomplete: no index/footer")
    engine = summary.get("engine")
    if not engine:
        lines.append("no hello event: the recording holds no engine run")
        return lines
    modeled = ", device memory modeled" if summary.get("modeled") else ""
    lines.append(
        f"engine {engine.get('engine_id')} on {engine.get('host')}: "
        f"{engine.get('source')} {engine.get('version')}, backend {engine.get('backend')}"
        f"{modeled}; state {summary.get('engine_state')}"
    )
    for d in engine.get("devices") or []:
        if isinstance(d, dict):
            cap = d.get("capacity")
            size = fmt_bytes(cap) if isinstance(cap, (int, float)) else "?"
            tag = " (modeled)" if d.get("modeled") else ""
            lines.append(f"  device {d.get('index')}: {d.get('name')}, {size}{tag}")
    return lines


def _memory_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per device's memory: what a traced program's summary is mostly about."""
    if not rows:
        return []
    lines = ["", "memory (peaks over the samples; reserved and used of the stream-ordered pools):"]
    for r in rows:
        who = f" pid {r['pid']}" if r.get("pid") is not None else ""
        free = r.get("driver_free_min")
        cases = ", ".join(f"{k} {v}" for k, v in sorted((r.get("oom_cases") or {}).items()))
        gpu = r.get("gpu", r["device"])
        lines.append(
            f"  gpu{gpu}{who}: async reserved {fmt_bytes(r['async_reserved_peak'])}, "
            f"used {fmt_bytes(r['async_used_peak'])}; plain {fmt_bytes(r['sync_used_peak'])}; "
            f"least free {fmt_bytes(free) if free is not None else '-'}; OOMs {r['ooms']}"
            + (f" ({cases})" if cases else "")
        )
    return lines


def _attempt_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The table of partition attempts: a column per phase any attempt ran (the schema's
    phases in pipeline order, then unknown ones by name), aligned."""
    # mutex_wait is the mwait_ms column already
    phases = [
        p
        for p in PHASES
        if p != "mutex_wait" and any(p in (r.get("phases_ms") or {}) for r in rows)
    ]
    extra = sorted(
        {p for r in rows for p in (r.get("phases_ms") or {}) if p not in PHASES}, key=str
    )
    phases += extra
    head = ["proof", "part", "try", "dev", "wkr", "status", "prestage", "mwait_ms"]
    head += [_SHORT.get(p, str(p)[:8]) for p in phases] + ["gpu_ms", "verified", "note"]
    table = [head] + [_attempt_cells(r, phases) for r in rows]
    if len(table) == 1:
        return ["no partition attempts recorded"]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [""]
    for row in table:
        cells = [
            c.rjust(w) if i < len(head) - 1 else c
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    if any(r.get("forced") for r in rows):
        lines.append("  * fallback forced by the operator")
    return lines


def _attempt_cells(r: dict[str, Any], phases: list[str]) -> list[str]:
    ms = r.get("phases_ms") or {}
    prestage = str(r.get("prestage") or "-")
    if r.get("forced"):
        prestage += "*"
    note = r.get("failure") or ""
    reason = r.get("prestage_reason")
    if reason and r.get("prestage") != "ok":
        if str(reason).startswith("memory plan "):  # one line per device below, not per row
            reason = f"gpu{r.get('device')} memory plan (below)"
        note = f"{note}; {reason}" if note else str(reason)
    return [
        _s(r.get("proof")),
        _s(r.get("partition")),
        _s(r.get("attempt")),
        _s(r.get("device")),
        _s(r.get("worker")),
        str(r.get("status")),
        prestage,
        _ms(r.get("mutex_wait_ms")),
        *(_ms(ms.get(p)) for p in phases),
        _ms(r.get("gpu_total_ms")),
        {True: "yes", False: "NO", None: "-"}.get(r.get("verified"), "?"),
        note,
    ]


def _gpu_lines(gpu: dict[str, Any]) -> list[str]:
    """One line per GPU with NVML samples: the medians it reported (none are invented)."""
    lines = []
    for d, row in gpu.items():
        parts = []
        if isinstance(row.get("sm_util_pct"), int | float):
            parts.append(f"SM utilisation {row['sm_util_pct']:.0f} %")
        if isinstance(row.get("mem_util_pct"), int | float):
            parts.append(f"memory controller {row['mem_util_pct']:.0f} %")
        if isinstance(row.get("power_w"), int | float):
            limit = row.get("power_limit_w")
            of = f" of {limit:.0f} W" if isinstance(limit, int | float) else ""
            parts.append(f"power {row['power_w']:.0f} W{of}")
        if isinstance(row.get("temp_c"), int | float):
            parts.append(f"temperature {row['temp_c']:.0f} °C")
        figures = ", ".join(parts) if parts else "no figures reported"
        lines.append(f"gpu{d} NVML, medians of {row.get('samples', 0)} samples: {figures}")
    return lines


def _totals_lines(t: dict[str, Any], modeled: bool) -> list[str]:
    spp = t.get("s_per_proof")
    busy = t.get("gpu_busy_fraction")
    by_device = t.get("gpu_busy_fraction_by_device") or {}
    per = ", ".join(f"gpu{d} {b:.0%}" for d, b in by_device.items() if isinstance(b, (int, float)))
    oom = f"{t.get('ooms', 0)}" + (" (modeled memory)" if modeled else "")
    return [
        f"proofs: {t.get('proofs_done', 0)} done, {t.get('proofs_failed', 0)} failed; "
        f"s/proof: {f'{spp:.3f}' if isinstance(spp, (int, float)) else '-'}",
        f"partitions: {t.get('partitions', 0)} ({t.get('partitions_ok', 0)} ok, "
        f"{t.get('partitions_failed', 0)} failed, {t.get('unfinished', 0)} unfinished), "
        f"{t.get('partitions_verified', 0)} verified; attempts {t.get('attempts', 0)}, "
        f"retries {t.get('retries', 0)}",
        f"pre-stage: {t.get('prestage_ok', 0)} ok, {t.get('prestage_skip', 0)} skipped, "
        f"{t.get('fallbacks', 0)} fallbacks"
        + (f" ({t['handovers']} started with a handed over)" if t.get("handovers") else "")
        + "; "
        f"OOMs: {oom}; faults: {t.get('faults', 0)}",
        f"GPU busy: {f'{busy:.1%}' if isinstance(busy, (int, float)) else '-'}"
        + (f" ({per})" if per else ""),
        *(f"gpu{d} {reason}" for d, reason in (t.get("memory_plans") or {}).items()),
    ]


def _s(v: Any) -> str:
    return "-" if v is None else str(v)


def _ms(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "-"
    return f"{v:.1f}"

"""``provetop bench pipeline --device-counts 1,2,4,8``: the pipeline bench on the first N
devices of the host, once per N, in sequence, as one table, one JSON and an optional SVG plot.

Why: operators run one prover per host across every card, and the engine's claim is that
proofs per hour grow with the cards: at least 0.95 x N times the one-device rate on N devices
(docs/performance.md). One command measures every count from the same build with the same
flags, and puts beside each what could bound it: GPU busy per device, the slowest device,
the host's memory and CPU the engine used.

Each point runs as the device-memory sweep's do (``provetop.engine.bench.sweep``): a fresh
spawned child per point, a row for a point that is refused, crashes or runs past
``--point-timeout``. A point on N devices runs N times ``--proofs`` proofs with N times
``--concurrency`` proofs in flight, so every device gets the same work at every point, the
start-up's share of the wall time stays the same, and no device's workers wait for a proof
to start (with one proof of 10 partitions in flight, 16 workers on 8 devices would leave 6
idle).
A point that asks for more devices than the host shows becomes a row saying so, and runs
nothing; the host's count is taken once, before the first point, in a child of its own on
the cuda backend (the parent never opens CUDA), and is the engine's bound on modeled devices
on the cpu backend.

Figures are those of ``provetop.engine.bench.pipeline`` (its result dicts), except the ones
that only a sweep has: proofs per hour (3600 / s_per_proof), the scaling efficiency
(proofs per hour over N times the 1-device point's) and the target (0.95 x N times the
1-device point's proofs per hour), which need the 1-device point in the same sweep.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provetop.base.errors import UsageError
from provetop.base.units import fmt_bytes
from provetop.engine.bench.plot import Series, line_chart
from provetop.engine.bench.sweep import (
    PointRunner,
    check_paths,
    labelled_path,
    lift_meta,
    run_into_row,
    write_whole,
)
from provetop.engine.settings.config import MAX_DEVICES, ConfigError, EngineConfig, with_changes
from provetop.engine.settings.tuning import Tuning

COUNT_EXAMPLE = "1,2,4,8"
EFFICIENCY_TARGET = 0.95  # proofs per hour on N devices against N times one device's
NOT_VISIBLE = "not visible"  # a point's status when the host has fewer devices

# backend -> (devices the host shows, what they are)
VisibleCount = Callable[[str], tuple[int, str]]


def parse_count_list(text: str) -> list[int]:
    """The points of ``--device-counts``: distinct positive device counts, comma-separated.
    A bad list raises UsageError with one line naming the bad item."""
    counts: list[int] = []
    items = str(text).split(",")
    for i, item in enumerate(items, 1):
        raw = item.strip()
        where = f"--device-counts {text!r}: item {i}" if len(items) > 1 else "--device-counts"
        if not raw:
            raise UsageError(f"{where} is empty (a list looks like {COUNT_EXAMPLE})")
        try:
            n = int(raw)
        except ValueError:
            raise UsageError(f"{where}: not a device count: {raw!r}") from None
        if n < 1:
            raise UsageError(f"{where}: a device count is at least 1, got {n}")
        if n in counts:
            raise UsageError(f"{where} ({n}) repeats an earlier point")
        counts.append(n)
    return counts


def label(n: int) -> str:
    """A point's name in its files: ``run-2gpu.pvtrec``."""
    return f"{n}gpu"


def visible_devices(backend: str) -> tuple[int, str]:
    """(how many devices this host shows the engine, what they are)."""
    if backend != "cuda":
        return MAX_DEVICES, "modeled devices of the cpu backend (the engine's bound)"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:  # a child of its own: the parent never opens CUDA
        count, why = pool.apply(_cuda_count)
    return count, why


def _cuda_count() -> tuple[int, str]:
    """In a child: the CUDA devices visible (CUDA_VISIBLE_DEVICES applies)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()), "CUDA devices visible"
    except Exception as exc:  # no CuPy, no driver: no device, and why
        return 0, f"CUDA devices visible ({type(exc).__name__}: {exc})"


def run_count_sweep(
    counts: list[int],
    base: EngineConfig,
    tuning: Tuning,
    runner: PointRunner,
    *,
    visible: VisibleCount = visible_devices,
    record: str | None = None,
    out: str | None = None,
    plot: str | None = None,
    point_timeout: float | None = None,
    as_json: bool = False,
    command: str = "",
) -> int:
    """Run every count (see the module docstring), print the table (or the JSON), write the
    files asked for. 0 when every point the host has devices for ran and lost no partition,
    and at least one did; else 1."""
    check_paths(record, out, plot, [label(n) for n in counts])
    shown, what = visible(base.backend)
    work = Path(tempfile.mkdtemp(prefix="provetop-devcount-"))
    sweep: dict[str, Any] = {
        "sweep": "device_count",
        "complete": False,  # until the last point's row is in
        "visible_devices": shown,
        "visible_what": what,
        "efficiency_target": EFFICIENCY_TARGET,
        "points": [],
        "config": base.to_dict(),
        "meta": {"command": command, "tuning": tuning.as_dict()},
        "plot": plot,
    }
    for i, n in enumerate(counts, 1):
        print(f"sweep {i}/{len(counts)}: {n} devices ...", file=sys.stderr, flush=True)
        row = _run_point(n, shown, what, base, tuning, runner, work, record, point_timeout)
        if out is not None and row["result"] is not None:
            row["json"] = str(labelled_path(out, label(n)))
            write_whole(row["json"], json.dumps(row["result"], indent=1, default=str) + "\n")
        print(
            f"sweep {i}/{len(counts)}: {n} devices {row['status']} in {row['wall_s']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        sweep["points"].append(row)
        sweep["complete"] = i == len(counts)
        derive(sweep)
        lift_meta(sweep["meta"], row["result"])
        # after every point, so a sweep stopped from outside (a time limit) keeps what ran
        if plot is not None:
            write_whole(plot, count_plot(sweep))
        if out is not None:
            write_whole(out, json.dumps(sweep, indent=1, default=str) + "\n")
    print(json.dumps(sweep, indent=1, default=str) if as_json else format_count_table(sweep))
    ran = [r for r in sweep["points"] if r["status"] != NOT_VISIBLE]
    clean = all(
        r["status"] == "done"
        and r["result"].get("partitions_lost") == 0
        and r["result"].get("engine_error") is None
        for r in ran
    )
    return 0 if ran and clean else 1


def _run_point(
    n: int,
    shown: int,
    what: str,
    base: EngineConfig,
    tuning: Tuning,
    runner: PointRunner,
    work: Path,
    record: str | None,
    timeout: float | None,
) -> dict[str, Any]:
    """One count in a spawned child, or the row saying why it could not run."""
    row: dict[str, Any] = {
        "devices": n,
        "device_indices": list(range(n)),
        "workers_per_device": base.workers_per_device,
        "proofs": base.proofs * n,
        "concurrency": base.concurrency * n,
        "status": "refused",
        "error": None,
        "wall_s": 0.0,
        "recording": None,
        "json": None,
        "result": None,
        "figures": {},
    }
    if n > shown:
        row.update(status=NOT_VISIBLE, error=f"asks for {n} devices; {shown} {what}")
        return row
    try:
        config = with_changes(
            base,
            devices=tuple(range(n)),
            proofs=base.proofs * n,
            concurrency=base.concurrency * n,
        )
    except ConfigError as exc:
        row["error"] = str(exc)
        return row
    rec = str(labelled_path(record, label(n))) if record else str(work / f"run-{label(n)}.pvtrec")
    return run_into_row(row, runner, config, tuning, rec, work / f"point-{label(n)}.json", timeout)


# -- the sweep's own figures ---------------------------------------------------------------


def derive(sweep: dict[str, Any]) -> None:
    """Each row's ``figures``: from its own result, and against the 1-device point (wherever
    it stands in the list; recomputed after every point)."""
    for row in sweep["points"]:
        row["figures"] = point_figures(row.get("result"))
    one = next((r for r in sweep["points"] if r["devices"] == 1), None)
    base_pph = (one or {}).get("figures", {}).get("proofs_per_hour")
    for row in sweep["points"]:
        f = row["figures"]
        n = row["devices"]
        ran = row.get("result") is not None  # no target drawn over a point that never ran
        f["target_proofs_per_hour"] = EFFICIENCY_TARGET * n * base_pph if base_pph and ran else None
        pph = f.get("proofs_per_hour")
        f["scaling_efficiency"] = pph / (n * base_pph) if pph and base_pph else None
        f["meets_target"] = (
            f["scaling_efficiency"] >= EFFICIENCY_TARGET
            if f["scaling_efficiency"] is not None
            else None
        )


def point_figures(res: dict[str, Any] | None) -> dict[str, Any]:
    """One point's figures from its result: proofs per hour, the slowest device (the one with
    the largest median gpu_total; its lead over the fastest), the host's share."""
    if res is None:
        return {}
    spp = res.get("s_per_proof")
    by_device = res.get("by_device") or {}
    timed = {d: f["gpu_total_ms_median"] for d, f in by_device.items() if f["gpu_total_ms_median"]}
    idle = [d for d, f in by_device.items() if not f["partitions_ok"]]
    slowest = idle[0] if idle else max(timed, key=lambda d: timed[d]) if timed else None
    fastest = min(timed.values()) if timed else None
    host = res.get("host_usage") or {}
    return {
        "proofs_per_hour": 3600.0 / spp if spp else None,
        "gpu_total_ms_median": res.get("gpu_total_ms_median"),
        "gpu_busy_by_device": {d: f["gpu_busy_fraction"] for d, f in by_device.items()},
        "gpu_busy_steady_by_device": {d: f["gpu_busy_steady"] for d, f in by_device.items()},
        "partitions_by_device": {d: f["partitions_ok"] for d, f in by_device.items()},
        "slowest_device": int(slowest) if slowest is not None else None,
        "idle_devices": [int(d) for d in idle],
        "slowest_gpu_total_ms_median": timed.get(slowest) if slowest is not None else None,
        "slowest_over_fastest": (
            timed[slowest] / fastest - 1 if slowest in timed and fastest else None
        ),
        "host_peak_rss_bytes": host.get("peak_rss_bytes"),
        "host_memory_bytes": host.get("host_memory_bytes"),
        "cpu_cores_used": host.get("cpu_cores_used"),
        "host_cpus": host.get("host_cpus"),
    }


# -- table and plot --------------------------------------------------------------------------


def _fmt(v: object, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _busy_cell(f: dict[str, Any]) -> str:
    """GPU busy per device in index order, whole-run percents: ``96/95/94``."""
    busy = f.get("gpu_busy_by_device") or {}
    return "/".join(_fmt(None if b is None else b * 100, ".0f") for b in busy.values()) or "-"


def _slowest_cell(f: dict[str, Any]) -> str:
    if f.get("slowest_device") is None:
        return "-"
    if f.get("idle_devices"):
        return f"gpu{f['slowest_device']} idle ({len(f['idle_devices'])} ran nothing)"
    lead = f.get("slowest_over_fastest")
    return f"gpu{f['slowest_device']} {f['slowest_gpu_total_ms_median']:.1f}" + (
        f" (+{lead:.1%})" if lead is not None else ""
    )


def format_count_table(sweep: dict[str, Any]) -> str:
    """One row per device count; a point that did not run says why."""
    head = [
        "devices",
        "proofs",
        "proofs/h",
        "target",
        "efficiency",
        "gpu_total",
        "busy per device %",
        "slowest device",
        "host memory",
        "CPU cores",
        "lost",
    ]
    table = [head]
    notes: dict[int, str] = {}
    for row in sweep["points"]:
        res = row.get("result")
        f = row.get("figures") or {}
        if res is None:
            notes[len(table)] = f"{row['status']}: {row.get('error')}"
            table.append([str(row["devices"])])
            continue
        eff = f.get("scaling_efficiency")
        mark = "" if f.get("meets_target") is None else (" ok" if f["meets_target"] else " low")
        table.append(
            [
                str(row["devices"]),
                str(row["proofs"]),
                _fmt(f.get("proofs_per_hour"), ".1f"),
                _fmt(f.get("target_proofs_per_hour"), ".1f"),
                _fmt(eff, ".1%") + mark,
                _fmt(f.get("gpu_total_ms_median"), ".1f"),
                _busy_cell(f),
                _slowest_cell(f),
                "-"
                if f.get("host_peak_rss_bytes") is None
                else fmt_bytes(f["host_peak_rss_bytes"]),
                _fmt(f.get("cpu_cores_used"), ".2f"),
                f"{res.get('partitions_lost')}/{res.get('partitions')}",
            ]
        )
        if res.get("engine_error"):
            notes[len(table) - 1] = f"engine error: {res['engine_error']}"
    widths = [max(len(r[i]) for r in table if i < len(r)) for i in range(len(head))]
    lines = []
    for n, r in enumerate(table):
        cells = [c.rjust(w) for c, w in zip(r, widths, strict=False)]
        line = "  ".join(cells)
        if n in notes and len(r) == 1:  # no figures: the reason takes the row
            line = f"{cells[0]}  {notes[n]}"
        elif n in notes:
            line += f"  ({notes[n]})"
        lines.append(line.rstrip())
    cfg = sweep.get("config") or {}
    lines.append(
        f"the first N devices, {cfg.get('workers_per_device')} workers each, "
        f"{cfg.get('proofs')} proofs and {cfg.get('concurrency')} in flight per device"
    )
    lines.append(f"host: {sweep['visible_devices']} {sweep['visible_what']}")
    lines += [
        f"target: {EFFICIENCY_TARGET:g} x N x the 1-device proofs/h; efficiency: proofs/h",
        "  over N x the 1-device proofs/h (none without a 1-device point)",
        "gpu_total: median ms per partition; busy: each device's GPU busy, whole run",
        "slowest: the device with the largest median gpu_total (its lead over the fastest),",
        "  or one that ran no partition",
        "host memory: the engine's peak resident memory; CPU cores: its CPU time / wall",
    ]
    if any((r.get("result") or {}).get("modeled") for r in sweep["points"]):
        lines.append("modeled devices (cpu backend): memory and timings are a model, not a GPU")
    if sweep.get("plot"):
        lines.append(f"plot: {sweep['plot']}")
    return "\n".join(lines)


def count_plot(sweep: dict[str, Any]) -> str:
    """The SVG: proofs per hour and the efficiency, each with its 0.95 x N target dashed;
    median gpu_total; the least busy device's GPU busy; the host's memory and CPU."""
    points = sweep["points"]
    figs = [p.get("figures") or {} for p in points]

    def values(key: str, scale: float = 1.0) -> list[float | None]:
        return [None if f.get(key) is None else f[key] * scale for f in figs]

    def least_busy(f: dict[str, Any]) -> float | None:
        known = [b for b in (f.get("gpu_busy_by_device") or {}).values() if b is not None]
        return min(known) * 100 if known else None

    def missing(p: dict[str, Any]) -> str:
        res = p.get("result")
        if res is None:
            return str(p["status"])
        return f"{res.get('partitions_lost')}/{res.get('partitions')} lost"

    cfg = sweep.get("config") or {}
    modeled = any((p.get("result") or {}).get("modeled") for p in points)
    what = (
        f"preset {cfg.get('preset')}, allocator {cfg.get('allocator')}, backend "
        f"{cfg.get('backend')}{' (modeled devices)' if modeled else ''}, "
        f"{cfg.get('workers_per_device')} workers and {cfg.get('proofs')} proofs per device"
    )
    target = f"target {EFFICIENCY_TARGET:g} x N x 1 device"
    return line_chart(
        "provetop bench pipeline: device-count sweep",
        what,
        "devices (--device-counts: the first N)",
        [str(p["devices"]) for p in points],
        [
            Series(
                "proofs per hour",
                "proofs/h",
                values("proofs_per_hour"),
                values("target_proofs_per_hour"),
                target,
            ),
            Series(
                "scaling efficiency",
                "%",
                values("scaling_efficiency", 100),
                [EFFICIENCY_TARGET * 100 if p.get("result") else None for p in points],
                f"target {EFFICIENCY_TARGET:.0%}",
            ),
            Series("median gpu_total per partition", "ms", values("gpu_total_ms_median")),
            Series("GPU busy, least busy device", "%", [least_busy(f) for f in figs]),
            Series("host peak memory", "GiB", values("host_peak_rss_bytes", 1 / (1 << 30))),
            Series("host CPU used", "cores", values("cpu_cores_used")),
        ],
        [missing(p) for p in points],
    )

"""``provetop bench pipeline --device-memory 8GiB,16GiB,...,uncapped``: the pipeline bench once
per device-memory point, in sequence, as one table, one JSON and an optional SVG plot.

Why a sweep: the engine's open work is the curve of GPU time against the card's memory (the
SRS streamed from host memory below 40 GiB, the pre-stage reservation below 80 GiB,
docs/performance.md); one command gives every point of that curve from the same build with the
same flags.

Why a child process per point: each point must start as a fresh engine would on its own card
size. In one process, a point would inherit the CUDA context, its cached tables and compiled
kernels and whatever memory a previous point left behind; a CUDA error that poisons the
context would end every later point. A spawned child (never forked: CUDA does not survive a
fork) runs one engine and writes its result to a file; the parent only reads files. A point
that is refused (its engine cannot start: a ballast that does not fit, a size the engine
refuses), that crashes, or that runs past ``--point-timeout`` becomes a row saying so, and the
sweep goes on with the next point.

The per-point figures are those of ``provetop.engine.bench.pipeline`` (its ``reduce_recording``);
this
module reads them from the result dicts and does not recompute any.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provetop.base.errors import UsageError
from provetop.base.units import fmt_bytes, parse_size
from provetop.engine.bench.plot import Series, line_chart
from provetop.engine.settings.config import ConfigError, EngineConfig, with_changes
from provetop.engine.settings.tuning import Tuning

UNCAPPED = "uncapped"  # the list item for "no cap": the whole card (the model's default on cpu)
# the phases the sweep's table shows, medians per point (B in G2 is not a GPU phase here)
SWEEP_PHASES = ("h_step", "msm_h", "msm_l", "msm_a", "msm_b_g1", "msm_interleaved")
EXAMPLE = "8GiB,16GiB,uncapped"


@dataclass(frozen=True)
class Point:
    """One point of the sweep: ``label`` as typed (spaces removed; it names the point's files),
    ``size`` in bytes, None for uncapped."""

    label: str
    size: int | None


def parse_memory_list(text: str) -> list[Point]:
    """The points of ``--device-memory`` (one size, ``uncapped``, or a comma-separated list of
    them). A bad list raises UsageError with one line naming the bad item."""
    points: list[Point] = []
    items = str(text).split(",")
    for i, item in enumerate(items, 1):
        raw = item.strip()
        where = f"--device-memory {text!r}: item {i}" if len(items) > 1 else "--device-memory"
        if not raw:
            raise UsageError(f"{where} is empty (a list looks like {EXAMPLE})")
        if raw.lower() == UNCAPPED:
            size = None
        else:
            try:
                size = parse_size(raw)
            except ValueError as exc:
                raise UsageError(f"{where}: {exc} or {UNCAPPED}") from None
        label = UNCAPPED if size is None else "".join(raw.split())
        if any(p.size == size for p in points):
            raise UsageError(f"{where} ({label}) repeats an earlier point")
        points.append(Point(label, size))
    return points


def point_path(path: str | Path, point: Point) -> Path:
    """``run.pvtrec`` -> ``run-8GiB.pvtrec``: each point's own file beside the one asked for."""
    return labelled_path(path, point.label)


def labelled_path(path: str | Path, label: str) -> Path:
    """``run.pvtrec`` and ``2gpu`` -> ``run-2gpu.pvtrec``."""
    p = Path(path)
    return p.with_name(f"{p.stem}-{label}{p.suffix}")


# (config, tuning, recording path, result path): runs one point in the child, writes a JSON
# document {"status": "done", "result": {...}} or {"status": "refused"|"failed", "error": ...}
PointRunner = Callable[[EngineConfig, Tuning, str, str], None]


def run_sweep(
    points: list[Point],
    base: EngineConfig,
    tuning: Tuning,
    runner: PointRunner,
    *,
    record: str | None = None,
    out: str | None = None,
    plot: str | None = None,
    point_timeout: float | None = None,
    as_json: bool = False,
    command: str = "",
) -> int:
    """Run every point (see the module docstring), print the table (or the JSON), write the
    files asked for. 0 when every point ran and lost no partition, else 1."""
    check_paths(record, out, plot, [p.label for p in points])
    work = Path(tempfile.mkdtemp(prefix="provetop-sweep-"))
    sweep: dict[str, Any] = {
        "sweep": "device_memory",
        "complete": False,  # until the last point's row is in
        "points": [],
        "config": base.to_dict(),
        "meta": {"command": command, "tuning": tuning.as_dict()},
        "plot": plot,
    }
    for i, point in enumerate(points, 1):
        print(f"sweep {i}/{len(points)}: {point.label} ...", file=sys.stderr, flush=True)
        row = _run_point(point, base, tuning, runner, work, record, point_timeout)
        if out is not None and row["result"] is not None:
            row["json"] = str(point_path(out, point))
            write_whole(row["json"], json.dumps(row["result"], indent=1, default=str) + "\n")
        print(
            f"sweep {i}/{len(points)}: {point.label} {row['status']} in {row['wall_s']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        sweep["points"].append(row)
        sweep["complete"] = i == len(points)
        lift_meta(sweep["meta"], row["result"])
        # after every point, so a sweep stopped from outside (a time limit) keeps what ran
        if plot is not None:
            write_whole(plot, sweep_plot(sweep))
        if out is not None:
            write_whole(out, json.dumps(sweep, indent=1, default=str) + "\n")
    print(json.dumps(sweep, indent=1, default=str) if as_json else format_sweep_table(sweep))
    clean = all(
        r["status"] == "done"
        and r["result"].get("partitions_lost") == 0
        and r["result"].get("engine_error") is None
        for r in sweep["points"]
    )
    return 0 if clean else 1


def check_paths(record: str | None, out: str | None, plot: str | None, labels: list[str]) -> None:
    """Refuse, before any point runs, an output path in a missing directory or that is a
    directory, and a point's recording (``run-LABEL.pvtrec``) that exists already."""
    for path, flag in ((record, "--record"), (out, "--out"), (plot, "--plot")):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"{flag} {path}: no such directory")
        if path is not None and Path(path).is_dir():
            raise UsageError(f"{flag} {path} is a directory; it needs a file name")
    if record is not None:
        for label in labels:
            if labelled_path(record, label).exists():
                raise UsageError(
                    f"--record: {labelled_path(record, label)} exists; the engine never overwrites"
                )


def lift_meta(meta: dict[str, Any], result: dict[str, Any] | None) -> None:
    """Copy the first finished point's environment (GPU, driver, versions, commit, date) into
    the sweep's own ``meta``, beside its command and tuning: the sweep's JSON then says where
    and at which commit it ran without a reader opening a point."""
    if result is None or "commit" in meta:
        return
    for key, value in (result.get("meta") or {}).items():
        meta.setdefault(key, value)


def write_whole(path: str | Path, text: str) -> None:
    """Replace ``path`` whole (a reader never sees half a file)."""
    tmp = Path(f"{path}.part")
    tmp.write_text(text)
    tmp.replace(path)


def _run_point(
    point: Point,
    base: EngineConfig,
    tuning: Tuning,
    runner: PointRunner,
    work: Path,
    record: str | None,
    timeout: float | None,
) -> dict[str, Any]:
    """One point in a spawned child; the row the sweep keeps for it."""
    row: dict[str, Any] = {
        "device_memory": point.label,
        "device_memory_bytes": point.size,
        "status": "refused",
        "error": None,
        "wall_s": 0.0,
        "recording": None,
        "json": None,
        "result": None,
    }
    try:
        config = with_changes(base, device_memory=point.size)
    except ConfigError as exc:  # a size the engine refuses at start-up
        row["error"] = str(exc)
        return row
    rec = str(point_path(record, point)) if record else str(work / f"run-{point.label}.pvtrec")
    return run_into_row(row, runner, config, tuning, rec, work / f"point-{point.label}.json",
                        timeout)  # fmt: skip


def run_into_row(
    row: dict[str, Any],
    runner: PointRunner,
    config: EngineConfig,
    tuning: Tuning,
    record: str,
    result: Path,
    timeout: float | None,
) -> dict[str, Any]:
    """Run one point (:func:`run_child`) and put what it left into its ``row``: status, error,
    wall time, result, and the recording where the engine got as far as opening one."""
    row.update(run_child(runner, config, tuning, record, result, timeout))
    row["recording"] = record if Path(record).exists() else None
    return row


def run_child(
    runner: PointRunner,
    config: EngineConfig,
    tuning: Tuning,
    record: str,
    result: Path,
    timeout: float | None,
) -> dict[str, Any]:
    """Run ``runner`` in a spawned child (never forked: CUDA does not survive a fork) and read
    back what it wrote: the row's ``status``, ``error``, ``wall_s`` and ``result``. Shared by
    every sweep (device memory, device count), so each point starts as a fresh engine."""
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(
        target=runner, args=(config, tuning, record, str(result)), name=f"sweep-{result.stem}"
    )
    t0 = time.perf_counter()
    child.start()
    child.join(timeout)
    out: dict[str, Any] = {"status": "refused", "error": None, "result": None}
    if child.is_alive():
        child.terminate()
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
        out.update(status="timed out", error=f"ran past --point-timeout {timeout:g} s")
    out["wall_s"] = time.perf_counter() - t0
    if out["status"] == "timed out":
        return out
    try:
        doc = json.loads(result.read_text())
    except (OSError, ValueError):
        out.update(status="failed", error=f"the point's process exited with code {child.exitcode}")
        return out
    out.update(status=doc.get("status", "failed"), error=doc.get("error"))
    out["result"] = doc.get("result")
    return out


# -- table and plot --------------------------------------------------------------------------


def _fmt(v: object, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _capacity(res: dict[str, Any]) -> str:
    caps = res.get("device_capacity") or []
    if not caps:
        return "-"
    return fmt_bytes(caps[0]) + ("*" if res.get("modeled") else "")


def format_sweep_table(sweep: dict[str, Any]) -> str:
    """One row per point: what ``bench pipeline`` prints for a run, reduced to the curve's
    figures (medians in ms); a point that did not run says why."""
    head = [
        "device memory",
        "capacity",
        "gpu_total",
        "s/proof",
        "busy",
        "lost",
        "OOMs",
        "pre-stage ok/skip/fb",
        *SWEEP_PHASES,
    ]
    table = [head]
    notes = []
    for row in sweep["points"]:
        res = row.get("result")
        if res is None:
            notes.append((len(table), f"{row['status']}: {row.get('error')}"))
            table.append([row["device_memory"]])
            continue
        pre = res.get("prestage") or {}
        ph = res.get("phase_ms_median") or {}
        busy = res.get("gpu_busy_steady")
        if busy is None:
            busy = res.get("gpu_busy_fraction")
        table.append(
            [
                row["device_memory"],
                _capacity(res),
                _fmt(res.get("gpu_total_ms_median"), ".1f"),
                _fmt(res.get("s_per_proof"), ".2f"),
                _fmt(busy, ".1%"),
                f"{res.get('partitions_lost')}/{res.get('partitions')}",
                _fmt(res.get("ooms"), "d"),
                f"{pre.get('ok', 0)}/{pre.get('skip', 0)}/{pre.get('fallback', 0)}",
                *(_fmt(ph.get(p), ".1f") for p in SWEEP_PHASES),
            ]
        )
        if res.get("engine_error"):
            notes.append((len(table) - 1, f"engine error: {res['engine_error']}"))
    widths = [max(len(r[i]) for r in table if i < len(r)) for i in range(len(head))]
    lines = []
    why = dict(notes)
    for n, r in enumerate(table):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=False))
        ]
        line = "  ".join(cells)
        if n in why and len(r) == 1:  # no figures: the reason takes the row
            line = f"{cells[0]}  {why[n]}"
        elif n in why:
            line += f"  ({why[n]})"
        lines.append(line.rstrip())
    lines.append("medians in ms; busy: GPU busy in steady state (the whole run where none);")
    lines.append("lost: partitions lost of those seen; pre-stage: every attempt, failed ones too")
    if any((r.get("result") or {}).get("modeled") for r in sweep["points"]):
        lines.append(
            "* modeled device (cpu backend): memory and timings are a model, not a GPU; "
            f"{UNCAPPED} is the model's default card"
        )
    if sweep.get("plot"):
        lines.append(f"plot: {sweep['plot']}")
    return "\n".join(lines)


def sweep_plot(sweep: dict[str, Any]) -> str:
    """The SVG of median gpu_total and s/proof against the device memory asked for."""
    points = sweep["points"]
    labels = [p["device_memory"] for p in points]

    def values(key: str) -> list[float | None]:
        return [(p.get("result") or {}).get(key) for p in points]

    def missing(p: dict[str, Any]) -> str:
        res = p.get("result")
        if res is None:
            return str(p["status"])
        return f"{res.get('partitions_lost')}/{res.get('partitions')} lost"

    cfg = sweep.get("config") or {}
    modeled = any((p.get("result") or {}).get("modeled") for p in points)
    proofs = cfg.get("proofs")
    what = (
        f"preset {cfg.get('preset')}, allocator {cfg.get('allocator')}, backend "
        f"{cfg.get('backend')}{' (modeled device)' if modeled else ''}, {proofs} "
        f"proof{'' if proofs == 1 else 's'} per point"
    )
    return line_chart(
        "provetop bench pipeline: device-memory sweep",
        what,
        "device memory (--device-memory)",
        labels,
        [
            Series("median gpu_total per partition", "ms", values("gpu_total_ms_median")),
            Series("seconds per proof", "s", values("s_per_proof")),
        ],
        [missing(p) for p in points],
    )

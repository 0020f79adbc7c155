"""``provetop bench pipeline``: the whole engine on a preset, reduced to the figures the
acceptance targets name (docs/performance.md).

Why through a real run and its recording: the targets are properties of the pipeline (mutex
hand-over, pre-stage overlap, the allocator's decisions), not of one kernel. The engine runs
in-process with a recording; the recording is folded by the same reducer the dashboard and
``provetop summary`` use, so the table can be re-derived from the file at any time.

Figures: per-partition medians of gpu_total_ms (the GPU region: from taking the device mutex
to giving it back; each kernel phase ends by waiting for its CUDA stop event, so the region
covers the device work), of the H step and each MSM, and of the mutex wait; the host cycle
outside the mutex (synthesis per worker, the pre-stage upload's host time and its copy time
from upload-stream events): with two workers the GPU idles whenever one worker's host cycle
outlasts the other's GPU region; pre-stage ok/skip/fallback counts; partitions lost (failed
after the retry); s/proof;
and the GPU busy fraction (time in which any GPU-region phase of any worker was running, over
wall time) over the whole run and in steady state: per device, from the end of the first
partition's GPU region to the start of the last one's, so the SRS set-up, the first
synthesis and the last partition's drain are left out. The busy fraction counts phase spans,
so launch gaps inside a phase count as busy (an upper bound on kernel time).

With a list of sizes, ``--device-memory 8GiB,16GiB,uncapped``, the bench runs once per point,
each in a fresh process (``provetop.engine.bench.sweep``: the table, the JSON and the ``--plot``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from provetop.base.errors import UsageError
from provetop.engine.bench.sweep import EXAMPLE, parse_memory_list, run_sweep
from provetop.engine.run.options import config_from_args, tuning_from_env
from provetop.engine.run.runner import Engine, EngineError
from provetop.engine.settings.config import ConfigError, EngineConfig, with_changes
from provetop.engine.settings.tuning import Tuning
from provetop.kernels.bench_meta import bench_command, gpu_bench_meta, host_bench_meta
from provetop.recordings.reader import fold_recording
from provetop.recordings.schema import PHASES
from provetop.recordings.state import State
from provetop.recordings.summary import summarize_state

GPU_MS_PHASES = (
    "h_step",
    "msm_h",
    "msm_l",
    "msm_a",
    "msm_b_g1",
    "msm_interleaved",
    "copy_back",
)
HOST_PHASES = ("synthesis", "prestage", "upload", "fallback_upload", "verify")
# a checked partition's device sums, inside its own region (CUDA runner)
CHECK_PHASES = ("check_inputs", "check_sums")
# the phases on the upload lane; their phase_end carries the copies' gpu_ms
COPY_PHASES = tuple(p.name for p in PHASES.values() if p.upload)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="porep-32g", help="engine preset (porep-32g)")
    parser.add_argument("--backend", choices=("cpu", "cuda"), help="default: cuda if usable")
    parser.add_argument("--domain-log", type=int, metavar="K", help="override the domain")
    parser.add_argument("--partitions", type=int, help="partitions per proof")
    parser.add_argument("--proofs", type=int, default=2, help="proofs to run (2)")
    parser.add_argument("--workers-per-device", type=int, help="workers per device")
    parser.add_argument("--devices", metavar="LIST", help="device indices, e.g. 0,1")
    parser.add_argument(
        "--device-memory",
        metavar="SIZE[,SIZE...]",
        help="cap each device, e.g. 16GiB; a list (8GiB,16GiB,uncapped) runs one bench per "
        "point, each in a fresh process, and prints one table (engine/bench/sweep.py)",
    )
    parser.add_argument("--allocator", choices=("naive", "aware"), help="allocation policy")
    parser.add_argument("--witness-profile", metavar="Z,O,D", help="aux scalar mix")
    parser.add_argument("--verify", choices=("always", "sampled", "never"), help="exact checks")
    parser.add_argument(
        "--synthesis-ahead",
        action="store_true",
        default=None,
        help="each worker synthesises its next partition while its current one runs",
    )
    parser.add_argument("--seed", type=int, help="seed for the witnesses and the SRS")
    parser.add_argument("--record", metavar="PATH", help="keep the recording here")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", metavar="FILE", help="also write the JSON result to FILE")
    parser.add_argument(
        "--plot",
        metavar="FILE.svg",
        help="with a --device-memory list: an SVG of median gpu_total and s/proof per point",
    )
    parser.add_argument(
        "--point-timeout",
        type=float,
        metavar="SECONDS",
        help="with a --device-memory list: stop a point that runs longer (a row says so)",
    )


def steady_busy(state: State, device: int) -> tuple[float | None, float | None]:
    """(busy fraction in steady state, window seconds) for ``device``; None with fewer than
    three partitions' GPU regions (no steady state between a first and a last)."""

    segs = [
        (s, s.end)  # (the end beside it: finished, so not None)
        for lane, spans in state.segments.items()
        if lane[0] == "worker" and lane[1] == device
        for s in spans
        if s.end is not None and s.phase in PHASES and PHASES[s.phase].gpu
    ]
    regions: dict[tuple[int | None, int | None], list[int]] = {}
    for s, end in segs:
        key = (s.proof, s.partition)
        lo, hi = regions.get(key, [s.start, end])
        regions[key] = [min(lo, s.start), max(hi, end)]
    if len(regions) < 3:
        return None, None
    ordered = sorted(regions.values())
    start, end = ordered[0][1], ordered[-1][0]
    if end <= start:
        return None, None
    return state.busy_fraction(device, start, end), (end - start) / 1e9


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def reduce_recording(path: str | Path) -> dict[str, Any]:
    """The figures of the module docstring from a recording file."""
    copies: dict[str, list[float]] = {p: [] for p in COPY_PHASES}

    def copy_time(e: dict[str, Any]) -> None:
        if e.get("k") == "phase_end" and e.get("phase") in copies and "gpu_ms" in e:
            copies[e["phase"]].append(float(e["gpu_ms"]))

    rec, state = fold_recording(path, also=copy_time)
    summary = summarize_state(state, rec)
    ok_rows = [a for a in state.attempts if a.ok]
    return {
        **_outcomes(state, summary["totals"]),
        **_medians(ok_rows, copies),
        **_run_figures(state, summary),
        "rows": [_row(a) for a in state.attempts],
    }


def _outcomes(state: Any, totals: dict[str, Any]) -> dict[str, Any]:
    """How the partitions ended (each one's last attempt), the faults, the pre-stages."""
    final = {(a.proof, a.partition): a for a in state.attempts}
    prestage: dict[str, int] = {}
    for a in state.attempts:
        prestage[a.prestage or "-"] = prestage.get(a.prestage or "-", 0) + 1
    return {
        "partitions": len(final),
        "partitions_ok": sum(1 for a in final.values() if a.ok),
        "partitions_lost": sum(1 for a in final.values() if not a.ok),
        "partitions_verified": sum(1 for a in final.values() if a.verified),
        "attempts_failed": sum(1 for a in state.attempts if not a.ok),
        "ooms": totals.get("ooms"),
        "faults": totals.get("faults"),
        "prestage": prestage,
    }


def _medians(ok_rows: list[Any], copies: dict[str, list[float]]) -> dict[str, Any]:
    """The medians over the attempts that completed: the GPU region, its phases, the host
    cycle, each worker's synthesis, the copies, the mutex wait."""

    def phase(p: str, rows: list[Any]) -> float | None:
        return _median([a.phases_ms[p] for a in rows if p in a.phases_ms])

    workers = sorted({a.worker for a in ok_rows if isinstance(a.worker, int)})
    checked = [a for a in ok_rows if a.verified is not None]
    return {
        "gpu_total_ms_median": _median([a.gpu_total_ms for a in ok_rows if a.gpu_total_ms]),
        # the region without a check's sums in it (they add to the checked partitions' own)
        "gpu_total_ms_median_unchecked": _median(
            [a.gpu_total_ms for a in ok_rows if a.gpu_total_ms and a.verified is None]
        ),
        "check_ms_median": {p: phase(p, ok_rows) for p in CHECK_PHASES},
        "phase_ms_median": {p: phase(p, ok_rows) for p in GPU_MS_PHASES},
        # verify: over the partitions that were checked (with --verify sampled most are not)
        "host_phase_ms_median": {
            p: phase(p, checked if p == "verify" else ok_rows) for p in HOST_PHASES
        },
        "synthesis_ms_median_by_worker": {
            str(w): phase("synthesis", [a for a in ok_rows if a.worker == w]) for w in workers
        },
        "copy_ms_median": {p: _median(v) for p, v in copies.items()},
        "mutex_wait_ms_median": _median(
            [a.mutex_wait_ms for a in ok_rows if a.mutex_wait_ms is not None]
        ),
    }


def _run_figures(state: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """The run's throughput, how busy each device was (in steady state too), and what each
    device had to work with (a --device-memory cap, the card or the model)."""
    totals = summary["totals"]
    devices = sorted({a.device for a in state.attempts if isinstance(a.device, int)})
    steady = {str(d): steady_busy(state, d) for d in devices}
    known = [b for b, _ in steady.values() if b is not None]
    return {
        "s_per_proof": totals.get("s_per_proof"),
        "rolling_s_per_proof": totals.get("rolling_s_per_proof"),
        "gpu_busy_fraction": totals.get("gpu_busy_fraction"),
        "gpu_busy_steady": sum(known) / len(known) if known else None,
        "gpu_busy_steady_by_device": {d: b for d, (b, _) in steady.items()},
        "steady_window_s": {d: w for d, (_, w) in steady.items()},
        "wall_s": totals.get("wall_s"),
        "modeled": summary.get("modeled"),
        "device_capacity": [
            d.get("capacity")
            for d in (summary.get("engine") or {}).get("devices") or []
            if isinstance(d, dict)
        ],
    }


def _row(a: Any) -> dict[str, Any]:
    """One attempt, as the JSON's ``rows`` list it."""
    return {
        "proof": a.proof,
        "partition": a.partition,
        "attempt": a.attempt,
        "worker": a.worker,
        "device": a.device,
        "ok": a.ok,
        "prestage": a.prestage,
        "gpu_total_ms": a.gpu_total_ms,
        "mutex_wait_ms": a.mutex_wait_ms,
        "verified": a.verified,
        "phases_ms": a.phases_ms,
        "failure": a.failure,
    }


def _fmt(v: object, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _host_line(res: dict[str, Any]) -> str:
    """The host cycle outside the mutex, medians; results of older versions lack it."""
    host = res.get("host_phase_ms_median") or {}
    by_worker = res.get("synthesis_ms_median_by_worker") or {}
    copy = (res.get("copy_ms_median") or {}).get("upload")
    workers = ", ".join(f"w{w} {_fmt(v, '.0f')}" for w, v in by_worker.items())
    return (
        f"host cycle median ms: synthesis {_fmt(host.get('synthesis'), '.0f')}"
        + (f" ({workers})" if workers else "")
        + f", upload {_fmt(host.get('upload'), '.0f')} (copy {_fmt(copy, '.0f')}), "
        f"verify {_fmt(host.get('verify'), '.0f')} (checked partitions)"
    )


def _check_line(res: dict[str, Any]) -> list[str]:
    """The checks' share of the GPU region, when the sums ran inside it (CUDA runs)."""
    check = res.get("check_ms_median") or {}
    if check.get("check_inputs") is None and check.get("check_sums") is None:
        return []
    return [
        f"checks in the region, median ms: inputs {_fmt(check.get('check_inputs'), '.0f')}, "
        f"sums {_fmt(check.get('check_sums'), '.0f')}; gpu_total of unchecked partitions "
        f"{_fmt(res.get('gpu_total_ms_median_unchecked'), '.1f')}"
    ]


def format_table(res: dict[str, Any]) -> str:
    ph = res["phase_ms_median"]
    lines = [
        f"partitions {res['partitions_ok']}/{res['partitions']} ok, "
        f"{res['partitions_verified']} verified, {res['partitions_lost']} lost, "
        f"{res['attempts_failed']} failed attempts, {res['ooms']} OOMs",
        "pre-stage: " + ", ".join(f"{k} {v}" for k, v in sorted(res["prestage"].items())),
        f"{'median ms':<22}" + "".join(f"{p:>10}" for p in ("gpu_total", *GPU_MS_PHASES)),
        f"{'':<22}"
        + f"{_fmt(res['gpu_total_ms_median']):>10}"
        + "".join(f"{_fmt(ph[p]):>10}" for p in GPU_MS_PHASES),
        _host_line(res),
        *_check_line(res),
        f"mutex wait median {_fmt(res['mutex_wait_ms_median'])} ms; "
        f"s/proof {_fmt(res['s_per_proof'], '.2f')} (rolling "
        f"{_fmt(res['rolling_s_per_proof'], '.2f')})",
        f"GPU busy: whole run {_fmt(res['gpu_busy_fraction'], '.1%')}, steady state "
        f"{_fmt(res['gpu_busy_steady'], '.1%')}",
    ]
    cfg = res.get("config") or {}
    if cfg.get("witness_profile_label"):
        zeros, ones, dense = cfg["witness_profile"]
        lines.append(
            f"witness: {cfg['witness_profile_label']} "
            f"({zeros:.0%} zeros, {ones:.0%} ones, {dense:.0%} dense aux scalars)"
        )
    if cfg.get("synthesis_ahead"):
        lines.append(
            "synthesis ahead: each worker made its next witness during its current partition"
        )
    if res.get("modeled"):
        lines.append("(modeled device: memory and timings of the cpu backend, not a GPU)")
    return "\n".join(lines)


def run_point(config: EngineConfig, tuning: Tuning, record: str) -> dict[str, Any]:
    """One engine run on ``config``, recorded at ``record``, reduced to the figures (plus the
    run's configuration and the benchmark's meta). EngineError when the engine cannot
    start."""
    engine = Engine(config, listen=False, record=record, tuning=tuning)
    t0 = time.perf_counter()
    with engine:  # starts the engine; closing writes the recording's footer
        engine.wait()
    wall = time.perf_counter() - t0
    res = reduce_recording(record)
    res["recording"] = record
    res["engine_wall_s"] = wall
    res["engine_error"] = engine.error
    res["config"] = config.to_dict()

    if config.backend == "cuda":
        import cupy

        meta = gpu_bench_meta(cupy, bench_command(), tuning.kernels)
    else:
        meta = host_bench_meta(bench_command(), tuning.kernels)
    meta["tuning"] = tuning.as_dict()  # the engine's settings with the kernels' (hello too)
    res["meta"] = meta
    return res


def sweep_point(config: EngineConfig, tuning: Tuning, record: str, result: str) -> None:
    """A sweep's point, in its own process (``provetop.engine.bench.sweep``): :func:`run_point`, its
    outcome written to ``result`` as JSON, since nothing else crosses back to the parent."""
    try:
        doc: dict[str, Any] = {"status": "done", "result": run_point(config, tuning, record)}
    except EngineError as exc:
        doc = {"status": "refused", "error": str(exc)}
    except Exception as exc:  # the parent reports it as the point's row and goes on
        doc = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    Path(result).write_text(json.dumps(doc, default=str))


def run(args: argparse.Namespace) -> int:
    tuning = tuning_from_env()
    points = parse_memory_list(args.device_memory) if args.device_memory is not None else []
    if len(points) <= 1 and (args.plot is not None or args.point_timeout is not None):
        flag = "--plot" if args.plot is not None else "--point-timeout"
        raise UsageError(f"{flag} needs a --device-memory list, e.g. {EXAMPLE}")
    if args.point_timeout is not None and not args.point_timeout > 0:
        raise UsageError(f"--point-timeout must be above 0 seconds, got {args.point_timeout:g}")
    # the flags without the memory; each point's size goes on top (a single one too, so
    # "uncapped" means no cap)
    config = config_from_args(argparse.Namespace(**{**vars(args), "device_memory": None}))
    if len(points) > 1:
        return run_sweep(
            points,
            config,
            tuning,
            sweep_point,
            record=args.record,
            out=args.out,
            plot=args.plot,
            point_timeout=args.point_timeout,
            as_json=args.json,
            command=" ".join(bench_command()),
        )
    if points:
        try:
            config = with_changes(config, device_memory=points[0].size)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    record = args.record
    if record is None:
        record = str(Path(tempfile.mkdtemp(prefix="provetop-bench-")) / "run.pvtrec")
    elif Path(record).exists():
        raise UsageError(f"--record {record}: the path exists; the engine never overwrites")
    try:
        res = run_point(config, tuning, record)
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    text = json.dumps(res, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text if args.json else format_table(res))
    return 0 if res["partitions_lost"] == 0 and res["engine_error"] is None else 1

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
each in a fresh process (``provetop.engine.bench.sweep``: the table, the JSON and the ``--plot``);
with ``--device-counts 1,2,4,8``, once per count on the first N devices
(``provetop.engine.bench.devcount``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from provetop.base.errors import UsageError
from provetop.base.units import fmt_bytes
from provetop.engine.bench.devcount import COUNT_EXAMPLE, parse_count_list, run_count_sweep
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
    parser.add_argument(
        "--device-counts",
        metavar="N[,N...]",
        help="a device-count sweep: one bench per count on the first N devices, each in a "
        "fresh process, --proofs per device; one table with proofs/h, scaling efficiency "
        "against the 1-device point and its 0.95 x N target (engine/bench/devcount.py)",
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
        help="with a --device-memory or --device-counts list: an SVG of the sweep's figures",
    )
    parser.add_argument(
        "--point-timeout",
        type=float,
        metavar="SECONDS",
        help="with a --device-memory or --device-counts list: stop a point that runs longer "
        "(a row says so)",
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
    devices = sorted(
        {a.device for a in state.attempts if isinstance(a.device, int)}
        | {int(d) for d in totals.get("gpu_busy_fraction_by_device") or {}}
    )  # a device that ran no partition too: it is in the hello
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
        "by_device": _by_device(state, devices, totals, steady),
        "modeled": summary.get("modeled"),
        "device_capacity": [
            d.get("capacity")
            for d in (summary.get("engine") or {}).get("devices") or []
            if isinstance(d, dict)
        ],
    }


def _by_device(
    state: Any,
    devices: list[int],
    totals: dict[str, Any],
    steady: dict[str, tuple[float | None, float | None]],
) -> dict[str, dict[str, Any]]:
    """Per device: the partitions it completed, their median gpu_total, and its busy
    fraction over the whole run and in steady state. A device-count sweep names the slowest
    device from these (``provetop.engine.bench.devcount``)."""
    whole = totals.get("gpu_busy_fraction_by_device") or {}
    out: dict[str, dict[str, Any]] = {}
    for d in devices:
        done = [a for a in state.attempts if a.ok and a.device == d]
        out[str(d)] = {
            "partitions_ok": len(done),
            "gpu_total_ms_median": _median([a.gpu_total_ms for a in done if a.gpu_total_ms]),
            "gpu_busy_fraction": whole.get(str(d)),
            "gpu_busy_steady": steady[str(d)][0],
        }
    return out


def host_usage(cpu_s: float, wall_s: float) -> dict[str, Any]:
    """What the engine took of the host: its CPU time (user and system, every thread) over
    the run's wall time in cores, and the process's peak resident memory (pinned buffers and
    the witnesses' host arrays are in it), beside what the host has. Peak memory is the
    process's since it started: a sweep's point, a fresh process, has only its own run in it."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    try:
        memory: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = None
    return {
        "cpu_s": cpu_s,
        "cpu_cores_used": cpu_s / wall_s if wall_s > 0 else None,
        "peak_rss_bytes": peak,
        "host_cpus": os.cpu_count(),
        "host_memory_bytes": memory,
    }


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


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


def _device_lines(res: dict[str, Any]) -> list[str]:
    """Each device's own figures when there are several, and the host's share (results of
    older versions lack both)."""
    lines = []
    by_device = res.get("by_device") or {}
    if len(by_device) > 1:
        for d, f in by_device.items():
            lines.append(
                f"  gpu{d}: {f['partitions_ok']} partitions, gpu_total median "
                f"{_fmt(f['gpu_total_ms_median'])} ms, busy {_fmt(f['gpu_busy_fraction'], '.1%')}"
                f" (steady {_fmt(f['gpu_busy_steady'], '.1%')})"
            )
    host = res.get("host_usage")
    if host:
        lines.append(
            f"host: {_fmt(host['cpu_cores_used'], '.2f')} CPU cores of {host['host_cpus']}, "
            f"peak memory {fmt_bytes(host['peak_rss_bytes'])}"
            + (f" of {fmt_bytes(host['host_memory_bytes'])}" if host["host_memory_bytes"] else "")
        )
    return lines


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
        *_device_lines(res),
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
    t0, cpu0 = time.perf_counter(), _cpu_s()
    with engine:  # starts the engine; closing writes the recording's footer
        engine.wait()
    wall = time.perf_counter() - t0
    host = host_usage(_cpu_s() - cpu0, wall)
    res = reduce_recording(record)
    res["host_usage"] = host
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
    counts = parse_count_list(args.device_counts) if args.device_counts is not None else None
    if counts is not None and len(points) > 1:
        raise UsageError("--device-counts takes one --device-memory size (or none), not a list")
    if counts is not None and args.devices is not None:
        raise UsageError("--device-counts runs on the first N devices; leave out --devices")
    if (
        counts is None
        and len(points) <= 1
        and (args.plot is not None or args.point_timeout is not None)
    ):
        flag = "--plot" if args.plot is not None else "--point-timeout"
        raise UsageError(
            f"{flag} needs a --device-memory list, e.g. {EXAMPLE}, or --device-counts, "
            f"e.g. {COUNT_EXAMPLE}"
        )
    if args.point_timeout is not None and not args.point_timeout > 0:
        raise UsageError(f"--point-timeout must be above 0 seconds, got {args.point_timeout:g}")
    # the flags without the memory; each point's size goes on top (a single one too, so
    # "uncapped" means no cap)
    config = config_from_args(argparse.Namespace(**{**vars(args), "device_memory": None}))
    if counts is not None:
        if points:
            try:
                config = with_changes(config, device_memory=points[0].size)
            except ConfigError as exc:
                raise UsageError(str(exc)) from None
        return run_count_sweep(
            counts,
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

"""``provetop bench ntt``: GPU NTT and H-step medians against the device's own ceilings.

Why these numbers: a time alone says nothing about how far from the limit a kernel is. In the
same run this measures the two ceilings that bound an NTT (a large device-to-device copy for
bandwidth, a chain of Fr Montgomery multiplications for integer throughput), then reports for
each size the medians (CUDA events, after warm-up, inputs rotated so L2 cannot serve them),
the bytes per second and multiplications per second implied by the plan's cost model
(``provetop.kernels.cuda.ntt_plan.plan_cost``), and which ceiling is closer: that is what bounds
the size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Required, TypedDict

import numpy as np

from provetop.base.errors import UsageError
from provetop.kernels.bench_meta import bench_command, gpu_bench_meta
from provetop.kernels.cuda import ntt as cn
from provetop.kernels.cuda import ntt_plan as npl
from provetop.kernels.cuda.fr import elementwise, random_fr
from provetop.kernels.cuda.runtime import CudaUnavailable, require_cupy
from provetop.kernels.tuning import KernelTuning, SettingError

DEFAULT_SIZES = "16,20,24,26,27"
RESULTS_DIR = Path(__file__).resolve().parent.parent / "bench" / "results"
L2_BYTES = 64 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-sizes", default=DEFAULT_SIZES, help="comma-separated k (2^k)")
    parser.add_argument("--json", action="store_true", help="also write JSON to --results-dir")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR), help="where --json writes")
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    parser.add_argument(
        "--warmup-ms",
        type=float,
        default=WARMUP_MS,
        help="and untimed runs until this much time has passed (the clocks come up); 0: none",
    )
    parser.add_argument(
        "--max-levels",
        type=int,
        default=0,
        help="levels per shared-memory pass, 1..11; below 10 the tiles are that small too "
        "(finer grids); 0: the measured rule per size (2^9 tiles; 2^10 for the H step at 2^19 "
        "and 2^20)",
    )
    parser.add_argument(
        "--lowest-levels",
        type=int,
        default=None,
        help="levels of the transforms' pass over the lowest levels, 1..10 (the others split "
        "as --max-levels says; the H step keeps its plans); 0: as the others; default: a whole "
        "2^9 tile, or as the others when --max-levels is given",
    )
    parser.add_argument("--no-h-step", action="store_true", help="skip the H-step timing")


def _parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(t) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        raise UsageError(f"--log-sizes must be comma-separated integers, got {text!r}") from exc
    if not sizes or any(not 1 <= k <= 27 for k in sizes):
        raise UsageError(f"--log-sizes must lie in 1..27, got {text!r}")
    return sizes


def _check_max_levels(value: int) -> int:
    """0 (the planner's rule) or 1 .. SMALL_TILE_LOG levels per pass: more would need a tile
    beyond the shared memory the passes are planned for."""
    if value != 0 and not 1 <= value <= npl.SMALL_TILE_LOG:
        raise UsageError(f"--max-levels must be 0 or lie in 1..{npl.SMALL_TILE_LOG}, got {value}")
    return value


# Untimed runs go on until --warmup-ms has passed as well as for --warmup runs: two runs of a
# 0.04-0.3 ms transform left the first sizes of a call 3-9 % slower in its first round than in
# its second (2026-12-03, every size up to 2^21, both plans), i.e. the clocks were still coming
# up. Profilers that count launches (bench/*ncu*.sh) pass --warmup-ms 0.
WARMUP_MS = 100.0


def _time(
    cp: Any, fn: Any, repeats: int, warmup: int, rotate: int = 1, warmup_ms: float = 0.0
) -> float:
    """Median milliseconds of fn(i) (i = run index, for rotating inputs), CUDA events."""
    t0 = time.perf_counter()
    i = 0
    while i < warmup or (time.perf_counter() - t0) * 1e3 < warmup_ms:
        fn(i % rotate)
        i += 1
        if i % 16 == 0:  # keep the queue short, so the wall time is the GPU's
            cp.cuda.get_current_stream().synchronize()
    cp.cuda.get_current_stream().synchronize()
    times: list[float] = []
    for i in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn(i % rotate)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def _ceilings(cp: Any, repeats: int, tuning: KernelTuning) -> dict[str, float]:
    """Device-to-device copy bandwidth (read + write bytes / s) and Fr Montgomery mults / s."""
    mod = cn.module(tuning)
    nbytes = 2 << 30
    src = cp.ones(nbytes // 8, dtype=cp.uint64)
    dst = cp.empty_like(src)
    ms = _time(cp, lambda i: cp.copyto(dst, src), repeats, 2)
    copy_bw = 2 * nbytes / (ms * 1e-3)
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    n = sms * 2048 * 2
    iters = 256
    x = random_fr((n,), tuning=tuning)
    rates = {}
    for name, chains in (("fr_mul_chain", 2), ("fr_mul_chain4", 4)):
        fn = mod.get_function(name)
        ms_mul = _time(
            cp,
            lambda i, fn=fn: fn(((n + 255) // 256,), (256,), (x, np.int32(iters), np.uint64(n))),
            max(3, repeats // 3),
            1,
        )
        rates[f"fr_mul_per_s_ilp{chains}"] = chains * n * iters / (ms_mul * 1e-3)
    # every multiplication variant of fr_mul.cuh in the same run (0 mont.cuh generic CIOS,
    # 1 fr_mul_r, 2 fr_mul_r2; the NTT uses FR_MUL_VARIANT): not part of the ceiling
    variants = {}
    for v in range(3):
        fn = mod.get_function(f"fr_mul_chain_v{v}")
        ms_mul = _time(
            cp,
            lambda i, fn=fn: fn(((n + 255) // 256,), (256,), (x, np.int32(iters), np.uint64(n))),
            max(3, repeats // 3),
            1,
        )
        variants[f"fr_mul_per_s_variant{v}"] = 2 * n * iters / (ms_mul * 1e-3)
    return {
        "copy_bytes_per_s": copy_bw,
        "copy_ms_2GiB": ms,
        "fr_mul_per_s": max(rates.values()),
        **rates,
        **variants,
    }


def _bound(ms: float, nbytes: int, mults: int, ceil: dict[str, float]) -> dict[str, Any]:
    t_mem = nbytes / ceil["copy_bytes_per_s"] * 1e3
    t_mul = mults / ceil["fr_mul_per_s"] * 1e3
    floor = max(t_mem, t_mul)
    eff = floor / ms if ms > 0 else 0.0
    if eff < 0.3:
        bound = "latency/launch (below both ceilings)"
    else:
        bound = "memory bandwidth" if t_mem >= t_mul else "Fr multiply throughput"
    return {
        "ms": ms,
        "bytes": nbytes,
        "mont_mults": mults,
        "bytes_per_s": nbytes / (ms * 1e-3),
        "mults_per_s": mults / (ms * 1e-3),
        "floor_ms_memory": t_mem,
        "floor_ms_mults": t_mul,
        "fraction_of_floor": eff,
        "bound": bound,
    }


class _Variant(TypedDict, total=False):
    """One timed transform: its keyword arguments to
    :meth:`provetop.kernels.cuda.ntt.CudaNtt.ntt`."""

    inverse: Required[bool]
    coset: Required[bool]
    output_order: str


def _bench_size(
    cp: Any, eng: cn.CudaNtt, k: int, args: argparse.Namespace, ceil: dict[str, float]
) -> dict[str, Any]:
    n = 1 << k
    size_bytes = n * npl.ELEM_BYTES
    rotate = max(3, -(-3 * L2_BYTES // size_bytes)) if size_bytes < L2_BYTES else 3
    xs = [random_fr((n,), tuning=eng.tuning) for _ in range(rotate)]
    out = cp.empty((n, 4), dtype=cp.uint64)
    eng.ntt(xs[0], out=out)  # builds the twiddle table outside the timing
    row: dict[str, Any] = {"log_size": k, "n": n, "rotating_inputs": rotate}
    row["max_levels"] = eng.levels_for(k)
    row["lowest_levels"] = eng.lowest_for(k)
    row["h_step_max_levels"] = eng.levels_for(k, h_step=True)
    variants = {
        "forward": _Variant(inverse=False, coset=False),
        "forward_nat_to_bitrev": _Variant(inverse=False, coset=False, output_order="bitrev"),
        "inverse": _Variant(inverse=True, coset=False),
        "coset_forward": _Variant(inverse=False, coset=True),
        "coset_inverse": _Variant(inverse=True, coset=True),
    }
    for name, kw in variants.items():
        ms = _time(
            cp,
            lambda i, kw=kw: eng.ntt(xs[i], out=out, **kw),
            args.repeats,
            args.warmup,
            rotate,
            args.warmup_ms,
        )
        plans = eng.plan(
            k,
            inverse=kw["inverse"],
            coset=kw["coset"],
            input_order="natural",
            output_order=kw.get("output_order", "natural"),
        )
        row[name] = _bound(ms, *npl.plan_cost(plans), ceil)
    if not args.no_h_step:
        a, b = xs[0], xs[1 % rotate]
        c = elementwise("mul", a, b, tuning=eng.tuning)
        hout = cp.empty((n, 4), dtype=cp.uint64)
        reps = max(3, args.repeats // 3) if k >= 26 else args.repeats
        ms = _time(
            cp, lambda i: eng.h_step(a, b, c, out=hout), reps, args.warmup, 1, args.warmup_ms
        )
        row["h_step"] = _bound(ms, *npl.plan_cost(eng.h_plan(k)), ceil)
    # device-to-device copy of the same size, for scale
    ms = _time(cp, lambda i: cp.copyto(out, xs[i]), args.repeats, args.warmup, rotate)
    row["copy_same_size_ms"] = ms
    return row


TARGETS_MS = {("forward", 24): 3.0, ("forward", 27): 30.0, ("h_step", 27): 250.0}


def _table(rows: list[dict[str, Any]], ceil: dict[str, float]) -> str:
    lines = [
        f"copy ceiling {ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s (2 GiB D2D), "
        f"Fr mult ceiling {ceil['fr_mul_per_s'] / 1e9:.1f} G/s "
        f"(ILP2 {ceil['fr_mul_per_s_ilp2'] / 1e9:.1f}, "
        f"ILP4 {ceil['fr_mul_per_s_ilp4'] / 1e9:.1f}); variants 0/1/2 "
        + "/".join(f"{ceil[f'fr_mul_per_s_variant{v}'] / 1e9:.1f}" for v in range(3))
        + " G/s",
        "| 2^k | forward ms | inverse ms | coset fwd ms | H step ms | fwd TB/s | fwd Gmul/s | "
        "fwd bound |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        f = r["forward"]
        h = r.get("h_step", {}).get("ms")
        lines.append(
            f"| {r['log_size']} | {f['ms']:.3f} | {r['inverse']['ms']:.3f} | "
            f"{r['coset_forward']['ms']:.3f} | {'-' if h is None else f'{h:.2f}'} | "
            f"{f['bytes_per_s'] / 1e12:.2f} | {f['mults_per_s'] / 1e9:.1f} | {f['bound']} |"
        )
    for (what, k), target in TARGETS_MS.items():
        for r in rows:
            if r["log_size"] == k and what in r:
                ms = r[what]["ms"]
                verdict = "MET" if ms <= target else "MISSED"
                lines.append(f"target {what} 2^{k} <= {target} ms: {ms:.2f} ms {verdict}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        tuning = KernelTuning.from_env()  # once: the record every call below is given
    except SettingError as exc:
        raise UsageError(str(exc)) from exc
    sizes = _parse_sizes(args.log_sizes)
    max_levels = _check_max_levels(args.max_levels)
    if args.lowest_levels is not None and not 0 <= args.lowest_levels <= npl.TILE_LOG:
        raise UsageError(f"--lowest-levels must lie in 0..{npl.TILE_LOG}, got {args.lowest_levels}")
    if not 0.0 <= args.warmup_ms <= 60_000.0:  # also rejects nan
        raise UsageError(f"--warmup-ms must lie in 0..60000, got {args.warmup_ms}")
    try:
        cp = require_cupy()
    except CudaUnavailable as exc:
        raise UsageError(f"bench ntt needs a GPU: {exc}") from exc
    eng = cn.CudaNtt(max_levels=max_levels or None, tuning=tuning, lowest_levels=args.lowest_levels)
    meta = gpu_bench_meta(cp, bench_command(), tuning)
    meta["warmup_ms"] = args.warmup_ms
    # "auto": each size's plans follow npl.default_lowest_levels (the row's "lowest_levels")
    meta["lowest_levels"] = eng.lowest_levels if eng.lowest_levels is not None else "auto"
    # "auto": each size's plans follow npl.default_max_levels (the row's "max_levels" says which)
    meta["max_levels"] = eng.max_levels if eng.max_levels is not None else "auto"
    meta["compile_defines"] = cn.ntt_defines(tuning)
    ceil = _ceilings(cp, args.repeats, tuning)
    cp.get_default_memory_pool().free_all_blocks()
    rows = []
    for k in sizes:
        rows.append(_bench_size(cp, eng, k, args, ceil))
        cp.get_default_memory_pool().free_all_blocks()
        r = rows[-1]
        print(
            f"2^{k}: forward {r['forward']['ms']:.3f} ms, inverse {r['inverse']['ms']:.3f} ms, "
            f"coset {r['coset_forward']['ms']:.3f} ms"
            + (f", H step {r['h_step']['ms']:.2f} ms" if "h_step" in r else ""),
            flush=True,
        )
    result = {"meta": meta, "ceilings": ceil, "sizes": rows}
    print(_table(rows, ceil))
    if args.json:
        out_dir = Path(args.results_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        gpu = "".join(ch if ch.isalnum() else "-" for ch in meta["gpu"]).strip("-").lower()
        stamp = meta["date_utc"].replace(":", "").replace("-", "")[:13]
        path = out_dir / f"ntt-{gpu}-{stamp}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")
    return 0

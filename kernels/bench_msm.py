"""``provetop bench msm``: GPU MSM (and SRS generation) medians on BLS12-381 G1.

Why these numbers: the MSM targets are medians on one H200 for dense scalars with points on
the device (2^20 <= 10 ms, 2^24 <= 80 ms, 2^27 <= 600 ms), host-streamed points within 1.3x of
that, and a 2^27 SRS in <= 10 s. For each size this reports the median of whole calls (digits,
sort, accumulation, reduction, the host window combination: what a caller waits for), points
per second, the measured peak of the scratch pool next to ``scratch_bytes``' model, a per-stage
breakdown of one call (CUDA events), and optionally a window sweep around the rule's choice
(the evidence for ``choose_window_bits``).

Inputs: points are [s_i]G from the GPU SRS generator with random secrets, so ``--check`` can
verify a result exactly with the known-secret identity (one dot product in Fr on the host).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from provetop.base.errors import UsageError
from provetop.kernels.bench_meta import bench_command, gpu_bench_meta
from provetop.kernels.cpu import g1
from provetop.kernels.cpu.srs import R
from provetop.kernels.cuda import msm as cm
from provetop.kernels.cuda import msm_fixed as mf
from provetop.kernels.cuda import msm_plan as mp
from provetop.kernels.cuda import msm_stages
from provetop.kernels.cuda import srs as cs
from provetop.kernels.cuda.host_pinned import pinned_empty
from provetop.kernels.cuda.runtime import CudaUnavailable, require_cupy
from provetop.kernels.layout import fr_from_limbs, g1_from_limbs
from provetop.kernels.tuning import KernelTuning, SettingError

DEFAULT_SIZES = "16,20,24,26,27"
RESULTS_DIR = Path(__file__).resolve().parent.parent / "bench" / "results"
TARGETS_MS = {20: 10.0, 24: 80.0, 27: 600.0}
R_TOP = 0x73EDA753299D7D48  # the top 64-bit limb of r: a top limb below it keeps k < r


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-sizes", default=DEFAULT_SIZES, help="comma-separated k (2^k)")
    parser.add_argument("--scalars", choices=("dense", "ones-heavy"), default="dense")
    parser.add_argument(
        "--points",
        choices=("device", "host", "fixed"),
        default="device",
        help="device: points in GPU memory; host: streamed from pinned host memory; fixed: "
        "device points with their window shifts precomputed (fixed-base table, built once, "
        "outside the timing; its build time and size are reported)",
    )
    parser.add_argument("--json", action="store_true", help="also write JSON to --results-dir")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR), help="where --json writes")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per size")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    parser.add_argument("--window", type=int, default=0, help="window bits (0: the rule)")
    parser.add_argument(
        "--sweep", default="", help="window offsets around the rule to time, e.g. -2,-1,0,1,2"
    )
    parser.add_argument("--sweep-max-log", type=int, default=24, help="sweep sizes up to 2^k")
    parser.add_argument("--chunk-log", type=int, default=25, help="host points: 2^k per upload")
    parser.add_argument(
        "--chunk", type=int, default=0, help="host points per upload (0: 2^--chunk-log)"
    )
    parser.add_argument("--srs", action="store_true", help="also time SRS generation")
    parser.add_argument("--check", action="store_true", help="verify results up to 2^22")
    parser.add_argument("--tag", default="", help="suffix of the JSON file name")


def _parse_ints(text: str, what: str, lo: int, hi: int) -> list[int]:
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from exc
    if any(not lo <= v <= hi for v in vals):
        raise UsageError(f"{what} must lie in {lo}..{hi}, got {text!r}")
    return vals


def random_scalars(cp: Any, n: int, kind: str = "dense") -> Any:
    """(n, 4) canonical scalars on the device: dense ~255-bit values below r, or a real-witness
    mix (48% zeros, 48% ones, 4% dense)."""
    words = cp.random.randint(0, 1 << 32, size=(n, 8), dtype=cp.int64).astype(cp.uint32)
    k = words.view(cp.uint64).reshape(n, 4)
    k[:, 3] %= cp.uint64(R_TOP)
    if kind == "ones-heavy":
        u = cp.random.random(n)
        k[u < 0.48] = 0
        ones = (u >= 0.48) & (u < 0.96)
        k[ones] = 0
        k[:, 0] = cp.where(ones, cp.uint64(1), k[:, 0])
    return cp.ascontiguousarray(k)


class PeakTracker:
    """An allocator (nbytes -> MemoryPointer) over a private CuPy pool that tracks live bytes:
    each block is handed out wrapped in an UnownedMemory whose owner decrements the count when
    CuPy drops the block. ``peak`` is the true high-water mark of live scratch; the pool's own
    ``total_bytes`` also counts what fragmentation keeps cached."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        self.pool = cp.cuda.MemoryPool()
        self.live = 0
        self.peak = 0
        self.broken = False

    class _Holder:
        def __init__(self, tracker: PeakTracker, mem: Any, nbytes: int) -> None:
            self.tracker, self.mem, self.nbytes = tracker, mem, nbytes
            tracker.live += nbytes
            tracker.peak = max(tracker.peak, tracker.live)

        def __del__(self) -> None:
            self.tracker.live -= self.nbytes

    def __call__(self, nbytes: int) -> Any:
        mem = self.pool.malloc(nbytes)
        if self.broken or nbytes == 0:
            return mem
        try:
            holder = PeakTracker._Holder(self, mem, nbytes)
            dev = self.cp.cuda.Device().id
            um = self.cp.cuda.memory.UnownedMemory(mem.ptr, nbytes, holder, dev)
            return self.cp.cuda.memory.MemoryPointer(um, 0)
        except Exception:  # an API change: fall back to plain blocks, report no peak
            self.broken = True
            return mem

    def reset_peak(self) -> None:
        self.peak = self.live


def _median_ms(cp: Any, fn: Any, repeats: int, warmup: int) -> tuple[float, list[float]]:
    """Median wall milliseconds of whole synchronous calls (msm returns a host array)."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def _breakdown(cp: Any, fn: Any) -> dict[str, float]:
    marks: msm_stages.StageMarks = []
    fn(marks)
    out: dict[str, float] = {}
    for (_, e0), (name, e1) in zip(marks, marks[1:], strict=False):
        out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(e0, e1)
    return out


def _check(cp: Any, secrets: Any, scalars: Any, result: Any) -> bool:
    ks = fr_from_limbs(scalars.get(), montgomery=False)
    ss = fr_from_limbs(secrets.get(), montgomery=False)
    e = sum(k * s for k, s in zip(ks, ss, strict=True)) % R
    return g1_from_limbs(result)[0] == g1.scalar_mul(g1.GENERATOR, e)


@dataclass
class _Size:
    """One size's inputs, shared by its timed call and its window sweep."""

    cp: Any
    pts: Any  # device points (None once they are streamed from host memory)
    scalars: Any
    n_tail: int
    args: argparse.Namespace
    tuning: KernelTuning
    tracker: PeakTracker


def _bench_size(
    cp: Any, k: int, args: argparse.Namespace, sweep: list[int], tuning: KernelTuning
) -> dict[str, Any] | None:
    """One size's row: the SRS that makes its points, then the MSM where ``--points`` puts
    them (None: the size was skipped, with the reason on stderr)."""
    n = 1 << k
    row: dict[str, Any] = {"log_size": k, "n": n, "scalars": args.scalars, "points": args.points}
    secrets, pts = _srs_points(cp, n, tuning, row)
    scalars = random_scalars(cp, n, args.scalars)
    n_tail = msm_stages.tail_count(scalars)
    c = args.window or mp.choose_window_bits(n_tail)  # what msm() itself picks
    row.update(window_bits=c, n_tail=n_tail)
    size = _Size(cp, pts, scalars, n_tail, args, tuning, PeakTracker(cp))
    del pts
    if args.points == "host":
        call = _host_call(size, row)
    elif args.points == "fixed":
        c = args.window or mf.choose_fixed_window_bits(n_tail)
        call = _fixed_call(size, c, row)
        if call is None:
            return None
    else:
        call = _device_call(size, c, row)
    reps = args.repeats if k < 27 else max(3, args.repeats - 2)
    ms, times = _median_ms(cp, call, reps, args.warmup)
    row.update(median_ms=ms, times_ms=times, points_per_s=n / (ms * 1e-3))
    tracker = size.tracker
    row["peak_scratch_bytes_measured"] = None if tracker.broken else tracker.peak
    row["scratch_pool_total_bytes"] = tracker.pool.total_bytes()
    if args.points in ("device", "fixed"):
        row["breakdown_ms"] = _breakdown(cp, call)
    if args.check and k <= 22:
        row["check"] = _check(cp, secrets, scalars, call())
    if sweep and args.points != "host" and k <= args.sweep_max_log:
        del call  # (the fixed-base table it holds: each window of the sweep builds its own)
        if args.points == "fixed":
            row["sweep"] = _sweep_fixed(size, c, sweep)  # around the window timed
        else:
            row["sweep"] = _sweep_device(size, mp.choose_window_bits(n_tail), sweep)
    tracker.pool.free_all_blocks()
    return row


def _srs_points(cp: Any, n: int, tuning: KernelTuning, row: dict[str, Any]) -> tuple[Any, Any]:
    """(secrets, points [s_i]G) for ``n`` random secrets, the SRS's time and rate in ``row``."""
    secrets = random_scalars(cp, n, "dense")
    cs.srs(secrets[:1024], tuning=tuning)  # the table, outside the timing
    cp.cuda.Device().synchronize()
    t0, t1 = cp.cuda.Event(), cp.cuda.Event()
    t0.record()
    pts = cs.srs(secrets, tuning=tuning)
    t1.record()
    t1.synchronize()
    row["srs_ms"] = cp.cuda.get_elapsed_time(t0, t1)
    row["srs_points_per_s"] = n / (row["srs_ms"] * 1e-3)
    return secrets, pts


def _host_call(size: _Size, row: dict[str, Any]) -> Any:
    """The timed call with the points copied into pinned host memory (their device copy
    dropped) and streamed from there, at the window msm_host_points itself picks (one bucket
    array for the query)."""
    n, tuning, tracker, scalars = int(size.pts.shape[0]), size.tuning, size.tracker, size.scalars
    host = pinned_empty((n, 12), method=tuning.pin_method)
    size.pts.get(out=host)
    size.pts = None
    chunk = size.args.chunk or 1 << size.args.chunk_log
    row["chunk"] = chunk
    c = size.args.window or mp.stream_window_bits(size.n_tail, None, -(-n // chunk))
    row["window_bits"] = c
    row["scratch_bytes_model"] = mp.host_scratch_bytes(n, chunk, c, tuning=tuning)

    def call(marks: msm_stages.StageMarks | None = None) -> np.ndarray:
        return cm.msm_host_points(
            host, scalars, chunk=chunk, allocator=tracker, window_bits=c, tuning=tuning
        )

    return call


def _fixed_call(size: _Size, c: int, row: dict[str, Any]) -> Any:
    """The timed call of the fixed-base MSM, its table built first (outside the timing), or
    None where the table does not fit (the reason on stderr)."""
    n = int(size.pts.shape[0])
    too_big = _fixed_table_too_big(size.cp, n, c)
    if too_big:
        print(f"bench msm: 2^{n.bit_length() - 1} skipped: {too_big}", file=sys.stderr)
        return None
    table, build_ms = _fixed_table(size.cp, size.pts, c, size.tuning)
    row.update(window_bits=c, table_bytes=table.nbytes, table_build_ms=build_ms)
    row["scratch_bytes_model"] = None
    scalars, tracker, tuning = size.scalars, size.tracker, size.tuning

    def call(marks: msm_stages.StageMarks | None = None) -> np.ndarray:
        return mf.msm_fixed(table, scalars, allocator=tracker, marks=marks, tuning=tuning)

    return call


def _device_call(size: _Size, c: int, row: dict[str, Any]) -> Any:
    """The timed call of the general MSM on device points."""
    pts, scalars, tracker, tuning = size.pts, size.scalars, size.tracker, size.tuning
    row["scratch_bytes_model"] = mp.scratch_bytes(int(pts.shape[0]), c, tuning=tuning)

    def call(marks: msm_stages.StageMarks | None = None) -> np.ndarray:
        return cm.msm(pts, scalars, allocator=tracker, window_bits=c, marks=marks, tuning=tuning)

    return call


def _sweep_fixed(size: _Size, base: int, sweep: list[int]) -> dict[int, dict[str, Any]]:
    """The fixed-base MSM at windows ``base + d`` for d in ``sweep``, a table built for each."""
    cp, pts, scalars, tuning, pool = size.cp, size.pts, size.scalars, size.tuning, size.tracker.pool
    n = int(pts.shape[0])
    out: dict[int, dict[str, Any]] = {}
    for d in sweep:
        cw = base + d
        if not mp.MIN_WINDOW <= cw <= mp.MAX_WINDOW or n * mp.num_windows(cw) >= mf.MAX_ROWS:
            continue
        tab, bms = _fixed_table(cp, pts, cw, tuning)
        f = lambda tab=tab: mf.msm_fixed(tab, scalars, allocator=pool.malloc, tuning=tuning)  # noqa: E731
        sms, _ = _median_ms(cp, f, max(3, size.args.repeats // 2), 1)
        out[cw] = {
            "median_ms": sms,
            "model_cost": mf.fixed_window_cost(size.n_tail, cw),
            "table_bytes": tab.nbytes,
            "table_build_ms": bms,
        }
        del tab, f
        pool.free_all_blocks()
    return out


def _sweep_device(size: _Size, base: int, sweep: list[int]) -> dict[int, dict[str, Any]]:
    """The general MSM at windows ``base + d`` for d in ``sweep``."""
    cp, pts, scalars, tuning, pool = size.cp, size.pts, size.scalars, size.tuning, size.tracker.pool
    n = int(pts.shape[0])
    out: dict[int, dict[str, Any]] = {}
    for d in sweep:
        cw = base + d
        if not mp.MIN_WINDOW <= cw <= mp.MAX_WINDOW or n * mp.num_windows(cw) >= 1 << 32:
            continue
        f = lambda cw=cw: cm.msm(  # noqa: E731
            pts, scalars, allocator=pool.malloc, window_bits=cw, tuning=tuning
        )
        sms, _ = _median_ms(cp, f, max(3, size.args.repeats // 2), 1)
        out[cw] = {"median_ms": sms, "model_cost": mp.window_cost(size.n_tail, cw)}
    return out


def _fixed_table_too_big(cp: Any, n: int, c: int) -> str:
    """Why the fixed-base table of ``n`` points for window ``c`` cannot be built on this device
    ('' if it can): with the points and scalars already there, the table must fit the free
    memory with a quarter to spare for the call's scratch (at 2^27 it alone is 144 GiB)."""
    if n * mp.num_windows(c) >= mf.MAX_ROWS:
        return f"{mp.num_windows(c)} windows of {n} points exceed {mf.MAX_ROWS - 1} table rows"
    need = mf.table_bytes(n, c)
    free = cp.cuda.runtime.memGetInfo()[0]
    if need > 0.75 * free:
        return (
            f"the fixed-base table (c = {c}) and its inputs need {_fmt_bytes(need)}, "
            f"the device has {_fmt_bytes(free)} free"
        )
    return ""


def _fixed_table(cp: Any, pts: Any, c: int, tuning: KernelTuning) -> tuple[Any, float]:
    """The fixed-base table of ``pts`` for window ``c`` and its build time (CUDA events), in
    the default pool: it belongs to the point set, not to a call's scratch."""
    t0, t1 = cp.cuda.Event(), cp.cuda.Event()
    t0.record()
    table = mf.build_table(pts, c, tuning=tuning)
    t1.record()
    t1.synchronize()
    return table, cp.cuda.get_elapsed_time(t0, t1)


def _fmt_bytes(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def run(args: argparse.Namespace) -> int:
    try:
        tuning = KernelTuning.from_env()  # once: the record every call below is given
    except SettingError as exc:
        raise UsageError(str(exc)) from exc
    sizes = _parse_ints(args.log_sizes, "--log-sizes", 1, 27)
    sweep = _parse_ints(args.sweep, "--sweep", -8, 8) if args.sweep else []
    if args.window and not mp.MIN_WINDOW <= args.window <= mp.MAX_WINDOW:
        raise UsageError(
            f"--window must be 0 (the rule) or lie in [{mp.MIN_WINDOW}, {mp.MAX_WINDOW}], "
            f"got {args.window}"
        )
    if args.chunk < 0 or not 0 <= args.chunk_log <= 31:
        raise UsageError(
            f"--chunk must be >= 0 and --chunk-log in 0..31, got {args.chunk}, {args.chunk_log}"
        )
    try:
        cp = require_cupy()
    except CudaUnavailable as exc:
        print(f"bench msm: {exc}", file=sys.stderr)
        return 1
    meta = gpu_bench_meta(cp, bench_command(), tuning)
    rows = []
    for k in sizes:
        row = _bench_size(cp, k, args, sweep, tuning)
        if row is None:  # skipped, with the reason on stderr
            continue
        rows.append(row)
        cp.get_default_memory_pool().free_all_blocks()
        print(json.dumps({key: v for key, v in row.items() if key != "times_ms"}), flush=True)
    print()
    print(f"MSM on {meta['gpu']} ({args.scalars} scalars, points on {args.points}), medians:")
    print(f"{'n':>6} {'c':>3} {'median ms':>10} {'target':>7} {'Mpts/s':>8} {'scratch':>10}")
    for r in rows:
        tgt = TARGETS_MS.get(r["log_size"])
        tgt_s = f"{tgt:.0f}" if tgt and args.scalars == "dense" else "-"
        print(
            f"2^{r['log_size']:<4} {r['window_bits']:>3} {r['median_ms']:>10.2f} {tgt_s:>7} "
            f"{r['points_per_s'] / 1e6:>8.1f} "
            f"{_fmt_bytes(r['peak_scratch_bytes_measured'] or r['scratch_pool_total_bytes']):>10}"
            + (f"  srs {r['srs_ms']:.1f} ms" if args.srs else "")
            + (f"  check={r['check']}" if "check" in r else "")
            + (
                f"  table {_fmt_bytes(r['table_bytes'])} built in {r['table_build_ms']:.0f} ms"
                if "table_bytes" in r
                else ""
            )
        )
    if args.json:
        out_dir = Path(args.results_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = meta["date_utc"].replace(":", "").replace("-", "")[:15]
        name = f"msm-{args.scalars}-{args.points}{'-' + args.tag if args.tag else ''}-{stamp}.json"
        (out_dir / name).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"wrote {out_dir / name}")
    return 0


def main() -> int:
    """``python -m provetop.kernels.bench_msm ...`` (the GPU machine has no provetop entry
    point)."""
    parser = argparse.ArgumentParser(prog="provetop bench msm")
    add_arguments(parser)
    try:
        return run(parser.parse_args())
    except UsageError as exc:
        print(f"provetop bench msm: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

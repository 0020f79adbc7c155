"""Fixed-base MSM: the points' window shifts computed once, one bucket set for every window.

Why: a prover multiplies the same points (a parameter file's queries) by new scalars in every
proof. With ``table[w n + i] = 2^(c w) P_i`` built once (W n affine points, 96 bytes each),
each window's digits fall into ONE set of 2^(c-1) buckets (msm.cu, the FIXED sort kernels):
the bucket reduction runs once instead of W times, the window sums need no doublings between
them, and the window rule trades differently (:func:`fixed_window_cost`: the reduction no
longer scales with W, so wider windows and fewer additions pay). The price is the table's
memory, W n 96 bytes (1.4 GiB at n = 2^20), and its build, c (W - 1) doublings per point,
paid once per point set. The accumulation, the bucket reduction and the final affine step
are the general MSM's (kernels/cuda/msm_stages.py) with one window.

Where it is used: ``provetop bench msm --points fixed``. The engine's queries have 2^27 points
(a table of ~150 GB), so the engine keeps the general MSM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from provetop.kernels.cuda import msm_plan as mp
from provetop.kernels.cuda import msm_stages
from provetop.kernels.cuda import srs as cs
from provetop.kernels.cuda.runtime import on_stream, require_cupy, to_device
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

AFFINE_BYTES = 96  # one affine point: two Fp coordinates of 48 bytes
# Table rows are sort entries with the sign in bit 31 (msm.cu): at most 2^31 rows.
MAX_ROWS = 1 << 31
# The bucket reduction's first launch aims at this many threads, each 2 S serial additions
# over S consecutive buckets (S a power of two in [2, 32]). With one set of buckets every
# level of the tree above it is a launch over ONE window's partial sums, so fewer, longer
# leaves pay sooner than in the general MSM (~2^17 threads over W windows): at 2^20, c = 20
# (2^19 buckets) S = 16 (2^15 threads) took 9.61 ms against 9.92 with the general rule's S = 4
# and 10.18 with S = 32 (H200, 2026-12-03, a6c01f7's bench/fixed_reduce_probe.py; bench/notes/
# msm.md; fan-in 16 was slower at every S).
REDUCE_THREADS = 1 << 15
# Buckets per reduction thread for A/B runs (0: the rule above).
REDUCE_GROUP = 0


def table_bytes(n: int, c: int) -> int:
    """Device bytes of the table for ``n`` points and window ``c``: W n affine points."""
    return mp.num_windows(c) * n * AFFINE_BYTES


def fixed_window_cost(n: int, c: int) -> int:
    """Modelled work of one fixed-base MSM in field multiplications: n W mixed additions
    (every digit non-zero) and ONE bucket set's running-sum reduction (2^(c-1) buckets, 28
    multiplications each), against :func:`provetop.kernels.cuda.msm_plan.window_cost`'s W sets."""
    return mp.MADD_MULS * n * mp.num_windows(c) + mp.BUCKET_MULS * (1 << (c - 1))


def choose_fixed_window_bits(n: int, max_table_bytes: int | None = None) -> int:
    """The c in [MIN_WINDOW, MAX_WINDOW] minimising :func:`fixed_window_cost` among those
    whose table fits ``max_table_bytes`` (None: any) and 2^31 rows; ties to the smaller table.
    Raises ValueError when no window's table fits."""
    fits = [
        c
        for c in range(mp.MIN_WINDOW, mp.MAX_WINDOW + 1)
        if mp.num_windows(c) * max(n, 1) < MAX_ROWS
        and (max_table_bytes is None or table_bytes(n, c) <= max_table_bytes)
    ]
    if not fits:
        smallest = table_bytes(n, mp.MAX_WINDOW)
        raise ValueError(
            f"no fixed-base table for {n} points fits: the smallest (c = {mp.MAX_WINDOW}) "
            f"needs {smallest} bytes and {mp.num_windows(mp.MAX_WINDOW) * n} rows "
            f"(limits: {max_table_bytes} bytes, {MAX_ROWS - 1} rows)"
        )
    return min(fits, key=lambda c: (fixed_window_cost(n, c), table_bytes(n, c)))


@dataclass(frozen=True)
class FixedBaseTable:
    """The shifted copies of ``n`` points for window ``c``: ``rows`` is a device ``(W n, 12)``
    affine array, row w n + i = 2^(c w) P_i (window 0: the points themselves)."""

    rows: Any
    n: int
    c: int

    @property
    def windows(self) -> int:
        return mp.num_windows(self.c)

    @property
    def nbytes(self) -> int:
        return table_bytes(self.n, self.c)


def build_table(
    points: Any,
    c: int | None = None,
    *,
    stream: Any = None,
    allocator: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> FixedBaseTable:
    """The fixed-base table of ``points`` ((n, 12) affine, device or host) for window ``c``
    (:func:`choose_fixed_window_bits` when None). Each window's rows come from the last one's
    by c doublings of a running XYZZ copy (srs.cu, ``affine_double_k`` / ``xyzz_double_k``),
    made affine with one inversion per ``srs.BATCH_INV`` points; scratch besides the table:
    n (192 + 48) bytes."""
    cupy = require_cupy()
    if points.ndim != 2 or points.shape[1] != 12 or points.dtype != np.uint64:
        raise ValueError(f"points must be a uint64 (n, 12) array, got {points.shape}")
    n = int(points.shape[0])
    c = c or choose_fixed_window_bits(n)
    if not mp.MIN_WINDOW <= c <= mp.MAX_WINDOW:
        raise ValueError(f"window bits must lie in [{mp.MIN_WINDOW}, {mp.MAX_WINDOW}], got {c}")
    W = mp.num_windows(c)
    if W * n >= MAX_ROWS:
        raise ValueError(f"{n} points x {W} windows exceed {MAX_ROWS - 1} table rows")
    mod = cs.module(tuning)
    with on_stream(stream, allocator) as s:
        if isinstance(points, np.ndarray):
            points = to_device(cupy, points)
        rows = cupy.empty((W * n, 12), dtype=np.uint64)
        rows[:n] = points
        if n and W > 1:
            run = cupy.empty((n, mp.XYZZ_WORDS), dtype=np.uint64)
            prefix = cupy.empty((n, 6), dtype=np.uint64)
            u32 = np.uint32
            cs.launch(mod, "affine_double_k", n, (points, u32(n), u32(c), run), s)
            for w in range(1, W):
                if w > 1:
                    cs.launch(mod, "xyzz_double_k", n, (run, u32(n), u32(c)), s)
                args = (run, u32(n), u32(cs.BATCH_INV), prefix, rows[w * n : (w + 1) * n])
                cs.launch(mod, "xyzz_to_affine_batch", -(-n // cs.BATCH_INV), args, s)
            del run, prefix
    return FixedBaseTable(rows, n, c)


def fixed_plan(n: int, c: int) -> mp.Plan:
    """The general MSM's plan with one window of buckets (the bucket reduction's shape) and
    the ones bucket after them (key B)."""
    B = 1 << (c - 1)
    if REDUCE_GROUP:
        S = min(B, REDUCE_GROUP)
    else:
        s = max(2, min(32, B // REDUCE_THREADS))
        S = min(B, 1 << (s.bit_length() - 1))
    return mp.Plan(n=n, c=c, W=1, B=B, K=B + 1, S=S, G=-(-B // S))


def msm_fixed(
    table: FixedBaseTable,
    scalars: Any,
    *,
    stream: Any = None,
    allocator: Any = None,
    marks: msm_stages.StageMarks | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> np.ndarray:
    """sum_i scalars[i] P_i for the points of ``table`` and ``scalars`` ((n, 4) canonical Fr,
    device or host); the affine result as a numpy ``(12,)`` array (infinity = zeros), exactly
    what :func:`provetop.kernels.cuda.msm.msm` returns for the same points. ``marks``: a list that
    receives (stage, event) pairs for a time breakdown."""
    cupy = require_cupy()
    if scalars.ndim != 2 or scalars.shape[1] != 4 or scalars.dtype != np.uint64:
        raise ValueError(f"scalars must be a uint64 (n, 4) array, got {scalars.shape}")
    n = int(scalars.shape[0])
    if n != table.n:
        raise ValueError(f"{n} scalars for a table of {table.n} points")
    mod = msm_stages.kernels(tuning)
    c, W = table.c, table.windows
    p = fixed_plan(n, c)
    u32 = np.uint32
    with on_stream(stream, allocator) as s:
        if isinstance(scalars, np.ndarray):
            scalars = to_device(cupy, scalars)
        mark = msm_stages.stage_marker(cupy, s, marks)
        mark("start")
        if n == 0:
            return np.zeros(12, dtype=np.uint64)
        # stages 1-3 over all W windows in one launch each: the counters are one set of B + 1
        counts = cupy.zeros(p.K + 1, dtype=np.uint32)
        head = (scalars, u32(n), u32(c), u32(W), u32(0), u32(W))
        mod.launch("msm_count_fixed", n, (*head, counts), s)
        offs = cupy.empty(p.K + 1, dtype=np.uint32)
        offs[0] = 0
        offs[1:] = cupy.cumsum(counts[: p.K], dtype=np.uint32)
        del counts
        tail = cupy.concatenate([offs[p.K :], msm_stages.largest_bucket(offs)])
        m, largest = (int(v) for v in tail.get(stream=s))
        # (one host sync: it sizes everything after)
        mark("count+scan")
        if m == 0:
            return np.zeros(12, dtype=np.uint64)
        cursor = offs[: p.K].copy()
        entries = cupy.empty(m, dtype=np.uint32)
        mod.launch("msm_scatter_fixed", n, (*head, cursor, entries), s)
        del cursor
        mark("scatter")
        # stages 4-7 as in the general MSM, with K = B + 1 keys and one window
        buckets = cupy.zeros((p.K, mp.XYZZ_WORDS), dtype=np.uint64)
        msm_stages.accumulate(
            mod, table.rows, entries, offs, p.K, m, n * W, buckets, s, mark, largest=largest
        )
        del entries
        sums = msm_stages.reduce_buckets(mod, buckets, p, s, mark).get(stream=s)
    return msm_stages.combine_windows(sums, c)

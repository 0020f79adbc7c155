"""The MSM's stages on the GPU, one launcher each: loading src/msm/msm.cu, the sort (stages
1-3), the accumulation and the bucket reduction (4-7), and the host's window combination (8).

Why apart from the entry points (:mod:`provetop.kernels.cuda.msm`): the general MSM, its streamed
form
and the fixed-base MSM (:mod:`provetop.kernels.cuda.msm_fixed`) run the same stages in different
orders; each stage is here once, with the sizes of its launches from
:mod:`provetop.kernels.cuda.msm_plan` (pure Python, which the engine's memory plan reads too).

The pipeline (details in ``src/msm/msm.cu`` and ``bench/notes/msm.md``):
signed window digits, a counting sort of (point, sign) entries by bucket on the GPU (or the
radix partition of :func:`provetop.kernels.cuda.msm_plan.radix_plan`), a bucket accumulation cut
into
equal chunks of entries (so very uneven buckets cost no more than uniform ones), a multi-level
segmented reduction of the partial sums, a parallel running-sum bucket reduction per window,
and the window combination (c doublings per window) on the host. Scalars equal to 0 are
skipped; scalars equal to 1 go to one extra bucket, which the balanced accumulation sums like
any other (half of a real witness lands there). Affine pairing passes with a batched inversion
over the ones (or the dense buckets) cost what the XYZZ additions they replace cost, at 3-8x
the scratch (H200, 2026-11-29, ae63d49; bench/notes/msm.md), so the kernels' affine
pass is not launched.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from provetop.kernels.cpu import g1

# Read through the module, not copied: tests change its constants (the radix sort's shapes,
# HEADS_MAX_CHUNKS) for one run, and the launches here must see what its planners see.
from provetop.kernels.cuda import msm_plan as mp
from provetop.kernels.cuda.runtime import Event, KernelArgs, KernelModule, load, require_cupy
from provetop.kernels.layout import fast_int, g1_to_limbs, g1_xyzz_from_limbs
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

SOURCE = "msm/msm.cu"
# Threads per block of the MSM's point and sort kernels, built with the compiler's choice of
# registers (255 in the accumulation: one block per SM). Capped at 168 registers for a third
# block per SM (blocks of 128), the MSM was 6-8 % slower: the spills cost more than the warps
# gained (H200, 2026-11-29, 289fd6e and 2026-12-02, 99482d4; bench/notes/msm.md).
BLOCK = 256

_lock = threading.Lock()
_l2_cache: dict[int, int] = {}

StageMarks = list[tuple[str, Event]]  # (stage, an event recorded after it), in stage order


# --- module loading --------------------------------------------------------------------------


@dataclass(frozen=True)
class MsmKernels:
    """The MSM source loaded on the current device."""

    module: KernelModule

    def launch(self, name: str, threads: int, args: KernelArgs, stream: Any) -> None:
        """Kernel ``name`` over ``threads`` threads (none: nothing) on ``stream``."""
        if threads <= 0:
            return
        fn = self.module.get_function(name)
        fn((-(-threads // BLOCK),), (BLOCK,), args, stream=stream)

    def launch_blocks(
        self, name: str, blocks: int, threads: int, args: KernelArgs, shared: int, stream: Any
    ) -> None:
        """Kernel ``name`` on ``blocks`` blocks of ``threads`` with ``shared`` bytes of dynamic
        shared memory (the radix kernels, whose blocks each own a tile or a bin)."""
        if blocks <= 0:
            return
        fn = self.module.get_function(name)
        fn((blocks,), (threads,), args, shared_mem=shared, stream=stream)


def kernels(tuning: KernelTuning = DEFAULT_TUNING) -> MsmKernels:
    """The MSM kernels with ``tuning``'s defines, on the current device (through
    :func:`provetop.kernels.cuda.runtime.load`: a prebuilt cubin when one matches, else NVRTC)."""
    return MsmKernels(load(SOURCE, defines=tuning.msm_defines, cubin_dir=tuning.cubin_dir))


def _l2_bytes() -> int:
    """The current device's L2 size (CUDA's attribute, read once per device)."""
    cupy = require_cupy()
    dev = cupy.cuda.Device()
    with _lock:
        if dev.id not in _l2_cache:
            _l2_cache[dev.id] = int(dev.attributes["L2CacheSize"])
        return _l2_cache[dev.id]


# --- helpers ---------------------------------------------------------------------------------


def _u32(x: int) -> np.uint32:
    return np.uint32(x)


def check_inputs(points: Any, scalars: Any) -> int:
    """n, once ``points`` (n, 12) and ``scalars`` (n, 4) are the uint64 arrays an MSM takes
    (else ValueError)."""
    if points.ndim != 2 or points.shape[1] != 12:
        raise ValueError(f"points must have shape (n, 12), got {points.shape}")
    if scalars.ndim != 2 or scalars.shape[1] != 4:
        raise ValueError(f"scalars must have shape (n, 4), got {scalars.shape}")
    if points.shape[0] != scalars.shape[0]:
        raise ValueError("points and scalars differ in length")
    if points.dtype != np.uint64 or scalars.dtype != np.uint64:
        raise ValueError("points and scalars must be uint64 arrays")
    n = int(points.shape[0])
    if n >= 1 << 31:
        raise ValueError("at most 2^31 - 1 points per call")
    return n


def tail_count(scalars: Any) -> int:
    """How many scalars are neither 0 nor 1 (one reduction over the scalars, one sync)."""
    cupy = require_cupy()
    small = (scalars[:, 1] == 0) & (scalars[:, 2] == 0) & (scalars[:, 3] == 0)
    small &= scalars[:, 0] <= 1
    return int(scalars.shape[0] - int(cupy.count_nonzero(small)))


def stage_marker(cupy: Any, stream: Any, marks: StageMarks | None) -> Any:
    """The stage marker: records an event per stage into ``marks`` (None: marks nothing)."""
    if marks is None:
        return no_mark

    def mark(stage: str) -> None:
        ev = cupy.cuda.Event()
        ev.record(stream)
        marks.append((stage, ev))

    return mark


def no_mark(stage: str) -> None:
    """The stage marker of a call that keeps no breakdown."""


# --- stages 1-3: the sort --------------------------------------------------------------------


@dataclass
class Counted:
    """A chunk's count stage (stages 1-2): the bucket offsets on the device, and each
    window's first offset plus the total on their way to the host (``ends``, page-locked,
    valid once ``done`` has completed). Why apart from the scatter: a streamed MSM queues the
    next chunk's count stage before the current chunk's accumulation, so that reading these
    few numbers back never leaves the GPU idle while the host waits."""

    offs: Any
    ends: Any
    done: Any  # None: ``ends`` was read back at once
    source: Any = None  # the device copy being read back, kept alive until ``done``

    def sizes(self, p: mp.Plan) -> tuple[list[int], int, int]:
        """(each window's first entry, the entries before the ones bucket, all entries),
        waiting for the read-back if it is still under way."""
        if self.done is not None:
            self.done.synchronize()
            self.source = None
        starts = [int(v) for v in self.ends[: p.W + 1]]
        return starts, starts[p.W], int(self.ends[p.W + 1])

    def largest(self, p: mp.Plan) -> int:
        """Entries of the largest bucket, the ones bucket included (after :meth:`sizes`)."""
        return int(self.ends[p.W + 2])


def count_stage(
    mod: MsmKernels, scalars: Any, n: int, p: mp.Plan, stream: Any, done: Any = None
) -> Counted:
    """Stages 1-2 (msm.cu): the digits counted per bucket and their offsets (K + 1, device),
    with each window's first offset (offs[W B] is the ones bucket's: the entries before it) and
    the total copied to the host: into page-locked memory on ``stream``, not waited for, when
    ``done`` (a CUDA event, recorded after the copy) is given; else at once (one sync)."""
    cupy = require_cupy()
    counts = cupy.zeros(p.K + 1, dtype=np.uint32)
    g_count, _ = mp.sort_groups(p.W, p.B, _l2_bytes())
    for w_lo, w_hi in mp.window_ranges(p.W, g_count):
        args = (scalars, _u32(n), _u32(p.c), _u32(p.W), _u32(w_lo), _u32(w_hi), counts)
        mod.launch("msm_count", n, args, stream)
    offs = cupy.empty(p.K + 1, dtype=np.uint32)
    offs[0] = 0
    offs[1:] = cupy.cumsum(counts[: p.K], dtype=np.uint32)
    del counts
    largest = largest_bucket(offs)
    ends_dev = cupy.concatenate([offs[: p.W * p.B + 1 : p.B], offs[p.K :], largest])
    if done is None:
        return Counted(offs, ends_dev.get(stream=stream), None)
    ends = _pinned_u32(p.W + 3)
    cupy.cuda.runtime.memcpyAsync(
        ends.ctypes.data,
        ends_dev.data.ptr,
        ends.nbytes,
        cupy.cuda.runtime.memcpyDeviceToHost,
        stream.ptr,
    )
    done.record(stream)
    return Counted(offs, ends, done, ends_dev)


def largest_bucket(offs: Any) -> Any:
    """The entries of the largest bucket, as a device array of one element (so it can ride on
    a copy the caller makes anyway): what :func:`accumulate` needs to choose the heads."""
    cupy = require_cupy()
    return cupy.max(offs[1:] - offs[:-1]).reshape(1)


def _pinned_u32(count: int) -> np.ndarray:
    """A page-locked uint32 array from CuPy's pinned pool (cached: cheap after the first)."""
    cupy = require_cupy()
    mem = cupy.cuda.alloc_pinned_memory(4 * count)
    return np.frombuffer(mem, np.uint32, count)


def bucket_sort(
    mod: MsmKernels,
    scalars: Any,
    n: int,
    p: mp.Plan,
    stream: Any,
    tuning: KernelTuning,
    mark: Any,
    counted: Counted | None = None,
) -> tuple[Any, Any, int, int]:
    """Stages 1-3 (msm.cu): the digits counted per bucket, their offsets (K + 1, device), and
    the entries (point index | sign << 31) grouped by bucket, by the sort
    :func:`provetop.kernels.cuda.msm_plan.sort_kind` picks for ``tuning``; with the entries in all
    and
    in the largest bucket (None, 0, 0 when there are none).
    The one host sync of the MSM is here: it sizes everything after. ``counted``: stages 1-2
    already queued (:func:`count_stage`), so only the read-back is waited for."""
    cupy = require_cupy()
    if counted is None:
        counted = count_stage(mod, scalars, n, p, stream)
    offs = counted.offs
    starts, m_dense, m = counted.sizes(p)
    mark("count+scan")
    if m == 0:
        return offs, None, 0, 0
    cursor = offs[: p.K].copy()
    sorted_e = cupy.empty(m, dtype=np.uint32)
    if mp.sort_kind(tuning, n, p, m_dense) == "radix":
        _radix_sort(mod, scalars, n, p, offs, starts, cursor, sorted_e, stream, mark, m)
    else:
        _, g_scatter = mp.sort_groups(p.W, p.B, _l2_bytes())
        for w_lo, w_hi in mp.window_ranges(p.W, g_scatter):
            args = (scalars, _u32(n), _u32(p.c), _u32(p.W), _u32(w_lo), _u32(w_hi))
            mod.launch("msm_scatter", n, (*args, cursor, sorted_e), stream)
        mark("scatter")
    return offs, sorted_e, m, counted.largest(p)


def _radix_sort(
    mod: MsmKernels,
    scalars: Any,
    n: int,
    p: mp.Plan,
    offs: Any,
    starts: list[int],
    cursor: Any,
    sorted_e: Any,
    stream: Any,
    mark: Any,
    n_entries: int,
    xp: Any = None,
) -> None:
    """The radix sort's stages 3a-3c (msm.cu) per group of windows, into ``sorted_e``;
    ``starts[w]`` = offs[w B] on the host; ``n_entries`` in all, the ones included. Marks
    "partition" (3a, 3b and the scan between) and "bucket-sort" (3c) once per group; the
    breakdown sums them. ``xp``: the array module (CuPy; numpy with the host build of the
    kernels in tests/kernels/test_cuda_msm_radix_host.py)."""
    xp = xp if xp is not None else require_cupy()
    budget = mp.accumulation_bytes(n, p, n_entries)
    rp = mp.radix_plan(n, p.c, budget=budget)
    ranges = mp.window_ranges(p.W, rp.group)
    sizes = [starts[hi] - starts[lo] for lo, hi in ranges]  # entries of each launch (no ones)
    most = max(max(sizes), 1)
    kbuf, a_ent, a_lo, a1_e, a1_k = _carve(
        xp,
        [(rp.group * n, np.uint32), (most, np.uint32), (most, np.uint16)]
        + [(most, np.uint32), (most, np.uint32)],
    )
    bufs = (a1_e, a1_k, a_ent, a_lo, sorted_e)
    chunk = mp.RADIX_CHUNK
    for (w_lo, w_hi), size in zip(ranges, sizes, strict=True):
        nbin = (w_hi - w_lo) * rp.bins
        nsb = -(-nbin // (1 << rp.t))  # regular superbins; hist has the ones' row last
        hist = xp.empty((nsb + 1, rp.tiles), dtype=np.uint32)
        head = (_u32(n), _u32(p.c), _u32(p.W), _u32(w_lo), _u32(w_hi), _u32(rp.tile))
        args: KernelArgs = (scalars, *head, _u32(rp.s), _u32(rp.t), kbuf, hist)
        shared = 4 * (nsb + 1)
        mod.launch_blocks("msm_radix_hist", rp.tiles, mp.RADIX_THREADS, args, shared, stream)
        # bin j of the launch starts at offs[w_lo B + j 2^s] (relative to the launch's first
        # entry, in a_ent); the ones bin (last) at offs[W B], its final place in sorted_e
        first = w_lo * p.B + (xp.arange(nbin + 1, dtype=np.int64) << rp.s)
        edges = offs[first]
        bin_start = xp.concatenate([edges[:-1] - edges[0], offs[p.K - 1 : p.K]])
        g = w_hi - w_lo
        _radix_partition(mod, kbuf, n, p, rp, g, hist, bin_start, size, bufs, stream, xp=xp)
        del hist
        mark("partition")
        if size:
            bin_sizes = (edges[1:] - edges[:-1]).astype(np.int64)
            pre = xp.zeros(nbin + 1, dtype=np.uint32)
            pre[1:] = xp.cumsum((bin_sizes + (chunk - 1)) // chunk, dtype=np.uint32)
            blocks = nbin + size // chunk  # >= sum of ceil(bin size / chunk)
            args = (a_ent, a_lo, offs, _u32(w_lo * p.B), _u32(nbin), _u32(rp.s), _u32(chunk))
            args = (*args, pre, cursor, sorted_e)
            shared_b = 4 << rp.s
            mod.launch_blocks("msm_radix_bucket", blocks, mp.RADIX_THREADS, args, shared_b, stream)
        mark("bucket-sort")


def _carve(xp: Any, shapes: list[tuple[int, Any]]) -> list[Any]:
    """1-D arrays of the given (length, dtype) as views into one new allocation
    (:func:`provetop.kernels.cuda.msm_plan.carve_layout`). Why one: the radix sort's buffers are
    freed
    before the bucket array and the accumulation's levels are made, and a pool such as CuPy's
    reuses a freed block only for requests that fit inside it; five separate buffers (the
    largest 2.1 GB at 2^27) left the bucket array (4.8 GB) to a new allocation, and the pool
    held 26.1 GB against the modelled 18.8 (2026-12-03, 65334a9). One block of their sum takes
    the next phase's arrays instead."""
    offsets, total = mp.carve_layout(shapes)
    arena = xp.empty(max(total, 1), dtype=np.uint8)
    return [
        arena[o : o + length * np.dtype(dtype).itemsize].view(dtype)
        for o, (length, dtype) in zip(offsets, shapes, strict=True)
    ]


def _radix_partition(
    mod: MsmKernels,
    kbuf: Any,
    n: int,
    p: mp.Plan,
    rp: mp.RadixPlan,
    g: int,
    hist: Any,
    bin_start: Any,
    size: int,
    bufs: tuple[Any, ...],
    stream: Any,
    xp: Any = None,
) -> None:
    """Stage 3b of the radix sort in its two staged levels (msm.cu): the group's ``size``
    entries from the keys in ``kbuf`` to (a_ent, a_lo) grouped by coarse bin, the ones to their
    final slots in sorted. ``hist``: the (superbin, tile) counts of msm_radix_hist, the ones'
    row last; ``bin_start``: each bin's first slot (in a_ent; the ones' in sorted)."""
    xp = xp if xp is not None else require_cupy()
    a1_e, a1_k, a_ent, a_lo, sorted_e = bufs
    nreg = g * rp.bins  # the plan's superbins cover the last group's fewer windows too
    t = rp.t
    span = 1 << t
    nsb = -(-nreg // span)
    stage = mp.RADIX_STAGE
    # level a: superbin sb of tile i starts at the superbin's first slot plus its counts in the
    # tiles before i
    sb_first = xp.ascontiguousarray(bin_start[0:nreg:span])
    starts_a = xp.concatenate([sb_first, bin_start[nreg : nreg + 1]])
    base = xp.cumsum(hist, axis=1, dtype=np.uint32)
    base -= hist
    base += starts_a[:, None]
    head = (kbuf, _u32(n), _u32(p.B), _u32(g), _u32(rp.tile), _u32(rp.s), _u32(t))
    args: KernelArgs = (*head, _u32(stage), base, a1_e, a1_k, sorted_e)
    shared = 4 * (3 * (nsb + 1) + 32 + 2 * stage)
    mod.launch_blocks("msm_radix_part_a", rp.tiles, mp.RADIX_THREADS, args, shared, stream)
    del base
    if not size:
        return
    # level b: superbin sb holds a1[sb_start[sb], sb_start[sb + 1]), one block per chunk
    sb_start = xp.concatenate([sb_first, xp.asarray([size], dtype=np.uint32)])
    sb_sizes = (sb_start[1:] - sb_start[:-1]).astype(np.int64)
    pre_b = xp.zeros(nsb + 1, dtype=np.uint32)
    pre_b[1:] = xp.cumsum((sb_sizes + (stage - 1)) // stage, dtype=np.uint32)
    cursor = bin_start[:nreg].astype(np.uint32)  # a copy: level b advances it
    blocks = nsb + size // stage  # >= sum of ceil(superbin size / stage)
    args = (a1_e, a1_k, _u32(rp.s), _u32(t), _u32(nsb), _u32(stage), sb_start, pre_b, cursor)
    shared = 4 * (3 * span + 32 + 2 * stage)
    mod.launch_blocks(
        "msm_radix_part_b", blocks, mp.RADIX_THREADS, (*args, a_ent, a_lo), shared, stream
    )


# --- stages 4-7: the sums --------------------------------------------------------------------


def accumulate(
    mod: MsmKernels,
    points: Any,
    idx: Any,
    offs: Any,
    K: int,
    m: int,
    m_max: int,
    buckets: Any,
    stream: Any,
    mark: Any,
    kept: bool = False,
    largest: int | None = None,
) -> None:
    """Stages 4-5 (msm.cu): the balanced accumulation of m entries (``idx``: point index |
    sign << 31) in K buckets into ``buckets`` (K rows), then the segmented levels until one
    chunk remains; the first chunk length follows ``m_max`` so that scratch is known in
    advance. ``kept``: ``buckets`` holds sums already, which the entries are added to
    (``msm_accumulate0_kept``); otherwise it must be all infinity. ``largest``: the entries of
    the largest bucket when known; where :func:`provetop.kernels.cuda.msm_plan.takes_heads` says so,
    one launch adds each cut bucket's partial sums (``msm_accumulate_heads``) in place of the
    levels."""
    cupy = require_cupy()
    vals = keys = None
    args: KernelArgs  # the first level's launch and the later levels' differ in shape
    heads = mp.takes_heads(largest, m_max)
    for depth, (size, L, T) in enumerate(mp.level_sizes(m, m_max)):
        if depth == 1 and heads:
            mod.launch("msm_accumulate_heads", size, (vals, keys, _u32(size), buckets), stream)
            if mark is not None:
                mark("heads")
            return
        pv = cupy.empty((2 * T, mp.XYZZ_WORDS), dtype=np.uint64)
        pk = cupy.empty(2 * T, dtype=np.uint32)
        if depth == 0:
            args = (points, idx, offs, _u32(K), _u32(m), _u32(L), _u32(T), buckets, pv, pk)
            mod.launch("msm_accumulate0_kept" if kept else "msm_accumulate0", T, args, stream)
        else:
            args = (vals, keys, _u32(size), _u32(L), _u32(T), buckets, pv, pk)
            mod.launch("msm_accumulate_n", T, args, stream)
        vals, keys = pv, pk
        if mark is not None:
            mark("accumulate" if depth == 0 else f"level{depth}")


def accumulate_buckets(
    mod: MsmKernels,
    points: Any,
    scalars: Any,
    p: mp.Plan,
    buckets: Any,
    stream: Any,
    tuning: KernelTuning,
    mark: Any = None,
    counted: Counted | None = None,
    kept: bool = False,
) -> Any:
    """Stages 1-5 for device ``points`` and ``scalars`` (n rows each, window ``p.c``; stages
    1-2 already queued when ``counted`` is given, :func:`count_stage`): their
    bucket sums written into ``buckets`` ``(K, 24)``, which must be all infinity (zeros) unless
    ``kept`` (then the sums are added to what it holds), or, when ``buckets`` is None, into a
    new zeroed array made after the sort (so the sort's own buffers and the buckets are never
    alive together). Returns the bucket array: None when none was given and every scalar is 0
    (nothing to add). Why ``buckets`` may be given: a streamed MSM sums every chunk into the
    one array it keeps for the whole query (:func:`provetop.kernels.cuda.msm.msm_host_points`). The
    ones (key K - 1) are one more bucket of the balanced accumulation."""
    cupy = require_cupy()
    mark = mark or no_mark
    n = int(points.shape[0])
    if n * p.W >= 1 << 32:
        raise ValueError(
            f"n * W = {n * p.W} entries do not fit 32-bit offsets: use a larger window"
        )
    if n == 0:
        return buckets
    offs, sorted_e, m, largest = bucket_sort(mod, scalars, n, p, stream, tuning, mark, counted)
    if m == 0:
        return buckets
    if buckets is None:
        buckets = cupy.zeros((p.K, mp.XYZZ_WORDS), dtype=np.uint64)
    accumulate(mod, points, sorted_e, offs, p.K, m, n * p.W, buckets, stream, mark, kept, largest)
    return buckets


def reduce_buckets(mod: MsmKernels, buckets: Any, p: mp.Plan, stream: Any, mark: Any = None) -> Any:
    """Stages 6-7: the ``(W + 1, 24)`` device array of window sums sum_b (b+1) bucket[w][b]
    followed by the ones bucket, through the tree of
    :func:`provetop.kernels.cuda.msm_plan.reduce_tree`
    (msm.cuh, xyzz_sum_weighted_thread: where its doublings go, and why)."""
    cupy = require_cupy()
    leaf, levels = mp.reduce_tree(p)
    out = cupy.empty((p.W + 1, mp.XYZZ_WORDS), dtype=np.uint64)
    red_a = cupy.empty((p.W * p.G, mp.XYZZ_WORDS), dtype=np.uint64)
    red_r = cupy.empty((p.W * p.G, mp.XYZZ_WORDS), dtype=np.uint64)
    args: KernelArgs = (buckets, _u32(p.W), _u32(p.B), _u32(p.S), _u32(p.G), _u32(leaf))
    mod.launch("msm_bucket_reduce", p.W * p.G, (*args, red_a, red_r), stream)
    for lv in levels:
        na = cupy.empty((p.W * lv.out_len, mp.XYZZ_WORDS), dtype=np.uint64)
        nr = cupy.empty((p.W * lv.out_len, mp.XYZZ_WORDS), dtype=np.uint64)
        args = (red_a, red_r, _u32(p.W), _u32(lv.length), _u32(mp.REDUCE_FANIN))
        args = (*args, _u32(lv.out_len), _u32(lv.dbl_t), _u32(lv.dbl_r), na, nr)
        mod.launch("xyzz_sum_weighted", p.W * lv.out_len, args, stream)
        red_a, red_r = na, nr
    out[: p.W] = red_a
    out[p.W] = buckets[p.K - 1]
    (mark or no_mark)("bucket-reduce")
    return out


def combine_windows(sums: np.ndarray, c: int) -> np.ndarray:
    """sum_w 2^(c w) S_w + ones-bucket on the host (Horner, c doublings per window), as an affine
    ``(12,)`` array. Host-side because it is one serial chain of ~256 doublings: a single GPU
    thread would take milliseconds for it, Python ints about one. The window sums go to affine
    with one batched inversion, so each window is a mixed Jacobian + affine addition, and the
    doublings (dbl-2009-l, 2M + 5S, against 6M + 3S for XYZZ) are inlined: ~20% less time than
    the XYZZ chain through provetop.kernels.cpu.g1 (2.31 -> 1.87 ms at c = 16 on the build
    machine's CPU,
    min of 75 calls). On gmpy2's integers (a dependency of the package; the GPU image used for
    the benchmarks lacks it unless carried) the whole call takes 0.60 ms instead of 1.35 at c =
    16 on the build machine's CPU (min of 30 calls, 2026-12-02)."""
    P = fast_int(g1.P)
    pts = [p if p[2] else g1.XYZZ_INFINITY for p in g1_xyzz_from_limbs(sums)]
    aff = [
        None if a is None else (fast_int(a[0]), fast_int(a[1]))
        for a in g1.batch_xyzz_to_affine(pts)
    ]
    X, Y, Z = g1.JAC_INFINITY
    for w in range(len(aff) - 2, -1, -1):
        if Z:
            for _ in range(c):
                A = X * X % P
                B = Y * Y % P
                C = B * B % P
                D = 2 * ((X + B) * (X + B) - A - C) % P
                E = 3 * A % P
                X = (E * E - 2 * D) % P
                Z = 2 * Y * Z % P
                Y = (E * (D - X) - 8 * C) % P
                if not Z:  # a point of order 2 doubled (not in G1): infinity
                    break
        X, Y, Z = g1.jac_add_mixed((X, Y, Z), aff[w])
    X, Y, Z = g1.jac_add_mixed((X, Y, Z), aff[-1])
    out = g1.jac_to_affine((X, Y, Z))
    limbs: np.ndarray = g1_to_limbs([None if out is None else (int(out[0]), int(out[1]))])[0]
    return limbs

"""GPU multi-scalar multiplication on BLS12-381 G1: host-side orchestration of src/msm/msm.cu.

Why Python here: every step that is not arithmetic (choosing the window, sizing scratch,
launching the counting sort, the reduction levels and the chunked uploads) is a handful of
launches whose order is easier to read and test in Python; the arithmetic is in CUDA C.

The pipeline (details in ``src/msm/msm.cu`` and ``bench/notes/msm.md``):
signed window digits, a counting sort of (point, sign) entries by bucket on the GPU, a bucket
accumulation cut into equal chunks of entries (so very uneven buckets cost no more than uniform
ones), a multi-level segmented reduction of the partial sums, a parallel running-sum bucket
reduction per window, and the window combination (c doublings per window) on the host. Scalars equal
to 0 are skipped; scalars equal to 1 go to one extra bucket, which the balanced accumulation sums
like any other (half of a real witness lands there), or, when enabled (``msm_affine_min_pairs`` of
the tuning record), which affine pairing passes with one batched inversion per thread batch halve
first (the batch-addition path; measured no faster on the H200, so off by default:
bench/notes/msm.md, 2026-11-29, ae63d49).

Layout (``kernels/backend.py``): points ``(n, 12)`` uint64 affine Montgomery, scalars ``(n, 4)``
uint64 canonical; the result is one affine point as a numpy ``(12,)`` array.

Scratch memory is drawn from ``allocator`` (a callable ``nbytes -> cupy.cuda.MemoryPointer``, as
``cupy.cuda.set_allocator`` takes) when given, else CuPy's current allocator;
:func:`scratch_bytes` says how much one call needs at most, so the engine can budget.

Tuning (:class:`kernels.tuning.KernelTuning`, passed down by the caller; the defaults are what
the published figures use): which source (``msm_source``), the affine pairing threshold and
dense passes, the counting sort's windows per launch, and which sort orders the entries by
bucket (``msm_sort``: the counting sort's scatter, or the radix partition of :func:`radix_plan`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kernels.cpu import g1
from kernels.cuda.runtime import KernelModule, load, on_stream, require_cupy, to_device
from kernels.layout import fast_int, g1_to_limbs, g1_xyzz_from_limbs
from kernels.tuning import DEFAULT_TUNING, NEVER_AFFINE, KernelTuning

# Threads per block of each kernel source (``KernelTuning.msm_source``): msm.cu (compiler's
# choice of registers) or msm_lb.cu (capped at 168 for occupancy, blocks of at most 128
# threads); bench/notes/msm.md has the A/B (msm.cu won).
BLOCKS = {"msm.cu": 256, "msm_lb.cu": 128}
BLOCK = BLOCKS["msm.cu"]  # the default source's
XYZZ_WORDS = 24  # uint64 words of one XYZZ point (4 coordinates x 6 limbs)
LEVEL_L = 8  # chunk length of the reduction levels past the first (latency ~ L serial adds)
# The levels give way to one thread per cut bucket (msm_accumulate_heads) when no bucket holds
# more than this many first chunks of entries: a run of partial sums is then at most
# 2 (HEADS_MAX_CHUNKS + 1) = 10 slots, one thread's serial additions (msm.cuh). Why 4, not 2:
# the top window's digits are small (k < r < 2^255), so its few low buckets hold ~2^(c - 15)
# times the others' entries; at 2 first chunks only the general MSM at 2^20 took this path
# (H200, 2026-12-03, bench/notes/msm.md). 0: always the levels (A/B runs and tests).
HEADS_MAX_CHUNKS = 4
MIN_WINDOW, MAX_WINDOW = 4, 23
# The bucket reduction's launches below this many threads are latency-bound: fewer than two
# waves of one 256-thread block per SM on the H200's 132 SMs (the point kernels take 255
# registers, so one block is what an SM holds); tuning msm_reduce "auto" switches there.
REDUCE_LATENCY_THREADS = 1 << 16
# Relative cost of one mixed addition (8M + 2S) and of one bucket in the reduction (two full
# additions, 2 x (12M + 2S)), in field multiplications: the window rule below weighs them.
MADD_MULS, BUCKET_MULS = 10, 28
# A streamed MSM's later chunk adds to every kept bucket it reaches: in the merge kernel
# (``msm_host_buckets = "query-merge"``) one XYZZ + XYZZ addition (12M + 2S); summed straight
# into the kept array (``"query"``) one mixed addition more (the bucket's first point, free in a
# fresh bucket, is added to the kept sum).
MERGE_MULS = 14
KEPT_MULS = MADD_MULS
# The smallest window a streamed MSM takes. Its chunk's scratch is sized for dense scalars (W
# entries per point, W = ceil(256 / c)) at every window the scalars may pick, and below c = 12
# that worst case grows past what the larger windows need (2^22 points: 0.72 GiB at c = 12,
# 0.96 at 18, 2.0 at 4); a query with few non-trivial scalars loses nothing measurable at 12
# (21 windows of 2^11 buckets to reduce once).
STREAM_MIN_WINDOW = 12
# The window cap of the copy-bound queries streamed together with H (msm_host_points_many):
# their bucket arrays are alive beside H's, so they are kept small. A 4 %-dense witness query
# (5.2 M non-trivial scalars of 130 M in 31 chunks) picks c = 14 by the model anyway; a dense
# one would lose ~19 % of its (copy-hidden) sums at 16 against its best window (19), and its
# two arrays take 192 MiB at 16 against 720 at 18.
COMPANION_WINDOW_MAX = 16
# Chunk buffers of a joint streamed MSM: H's chunk (~40 ms of sums at 2^22 points) is followed
# by about two copy-bound chunks (~7 ms of copy each, 3 ms of sums), so the copy stream must run
# three chunks ahead of the sums to stay busy under H's: four buffers (the engine's default,
# ``KernelTuning.msm_host_buffers``; at chunks of 11 Mi and more a copy-bound chunk's copy
# outlasts its sums by ~15 ms and three ahead no longer hide them: bench/notes/memory.md,
# 2026-12-02, 3b8b310).
INTERLEAVE_BUFFERS = DEFAULT_TUNING.msm_host_buffers


def companion_window_cap(window_max: int | None) -> int:
    """The window cap of a query streamed beside H: H's cap, at most COMPANION_WINDOW_MAX."""
    return min(window_max or COMPANION_WINDOW_MAX, COMPANION_WINDOW_MAX)


# H's chunks a joint pass takes before any other query's (``interleave_order``'s lead), by
# where the aux scalars come from (``pass_lead``). Copied up whole (4.2 GB at 2^27, ~76 ms at
# the link's 55 GB/s) on the pass's copy stream right after H's first chunks, the other
# queries' first count stage (queued one chunk ahead) waits for them, so H's sums must cover
# those ~76 ms plus a chunk: at least three chunks of ~37 ms (2^22 points, c = 19). Measured
# with bench/stream_probe.py on the H200 (2026-12-02, f1f88a5; bench/notes/memory.md):
# the pass took 1,633 ms at lead 0, 1,575 at 3, 1,555 at 5. Read from host memory chunk by
# chunk there is no such copy, and a lead leaves fewer of H's chunks to hide the other
# queries' copies under: at 11 Mi chunks (4 buffers) the pass took 1,250 ms at lead 0 and
# 1,302 at lead 5 (H200, 2026-12-02, d635964).
INTERLEAVE_LEAD = 5  # z copied up whole by the pass
HOST_SCALARS_LEAD = 0  # z read from host memory chunk by chunk


def pass_lead(tuning: KernelTuning, host_scalars: bool) -> int:
    """The one pass's lead: ``tuning.msm_host_lead`` where set, else by the scalars' source."""
    if tuning.msm_host_lead is not None:
        return tuning.msm_host_lead
    return HOST_SCALARS_LEAD if host_scalars else INTERLEAVE_LEAD


# Affine pairing passes (msm.cuh, 4a): each output costs ~6M + (one inversion) / NB, and one Fermat
# inversion is ~575M (384 squarings, ~190 products), so NB = 512 elements per batch leave ~1.1M per
# addition against 10M for an XYZZ mixed addition. A pass can pay only with enough pairs to give
# every thread of a full GPU (2^16 threads: 132 SMs x 2 blocks of 256 at 122 registers) long
# batches: 2^16 threads x 128 = 2^23 pairs (inversion <= 4.5M per addition). Measured on the H200
# (bench/notes/msm.md, 2026-11-29, ae63d49) a pass costs what the XYZZ
# additions it replaces cost (0.41-0.46 ns per addition either way) and needs 96 bytes per output
# point, so the ones take the affine path only when a tuning record asks (``msm_affine_min_pairs``,
# e.g. 8388608); the default (2^40, NEVER_AFFINE) never starts a pass.
AFFINE_THREADS = 1 << 16
AFFINE_NB_MAX = 512
# The radix sort (``msm_sort = "radix"``; msm.cu, "2-3, radix setting"): block size of its
# kernels; level-1 tiles aimed at (enough blocks for 132 SMs, few enough that the (superbin,
# tile) counts stay small); entries per coarse bin aimed at for dense scalars, and the most one
# bucket-step block takes (twice the aim, so that a dense bin is one chunk and needs no global
# atomic); at most 2^12 buckets per bin; and the buffers of one launch (18 bytes per scalar and
# window: the keys, the first partition level's entries and keys, the second's entries and low
# key bits), which sets the windows per launch with :func:`radix_plan`'s budget. The key pass
# counts, and the partition's first level places, per superbin of 2^t coarse bins (msm.cu,
# msm_radix_hist, msm_radix_part_a/b): at most RADIX_SUPERBINS of them per launch (3 shared
# words each), of at most RADIX_MAX_SPAN bins (level b's shared counters), so a launch holds
# at most (RADIX_SUPERBINS - 1) RADIX_MAX_SPAN bins; and chunks of RADIX_STAGE entries, =
# RADIX_THREADS x MSM_RADIX_STAGE (16) of msm.cu, staged in 32 KiB of shared memory.
RADIX_THREADS = 256
RADIX_TILES = 1024
RADIX_BIN_ENTRIES = 1 << 14
RADIX_CHUNK = 1 << 15
RADIX_MAX_LOW = 12
RADIX_GROUP_BYTES = 1 << 30
RADIX_SUPERBINS = 512
RADIX_MAX_SPAN = 1 << 10  # bins per superbin at most: level b's 3 shared words each, 12 KiB
RADIX_STAGE = RADIX_THREADS * 16
# ``msm_sort = "auto"``: the radix sort for an MSM of at least 2^RADIX_AUTO_MIN_LOG scalars
# whose dense entries (those of the windows, not the ones bucket) number at least
# n W / RADIX_AUTO_MIN_FILL, the counting sort otherwise. Why, measured on the H200
# (2026-12-03, 65334a9; bench/notes/msm.md): dense radix against counting 16.5 / 14.3 ms
# at 2^20, 126.4 / 133.6 at 2^24, 854.2 / 892.9 at 2^27; but a witness of 48 % zeros and 48 %
# ones (4 % of n W dense entries) 133.7 / 98.7 at 2^27: the partition's cost per launch is
# mostly fixed per chunk of scalars, and mostly empty chunks waste it. The entries are known
# after the count, before either sort runs, so the choice costs nothing.
RADIX_AUTO_MIN_LOG = 22
RADIX_AUTO_MIN_FILL = 2
# ``msm_sort_group``: windows per launch of both counting-sort kernels, overriding
# :func:`sort_groups`' rule (0: the rule; for A/B runs). Fewer windows per launch keep the counters
# they hit (B per window) in L2, at the price of reading the scalars once per launch
# (bench/notes/msm.md, 2026-11-30, a30e5a8).
# ``msm_affine_dense``: passes over the dense buckets too (not only the ones): every pass
# materialises the halved entry list as affine points (96 bytes each), so at 2^27 the first would
# need ~77 GB; off by default, bench/notes/msm.md (ae63d49) has the measurement that
# decides it.

_lock = threading.Lock()
_l2_cache: dict[int, int] = {}


# --- parameters ------------------------------------------------------------------------------


def num_windows(c: int) -> int:
    """ceil(256 / c): a 255-bit scalar plus the signed-digit carry (see kernels/cpu/msm.py)."""
    return -(-256 // c)


def window_cost(n: int, c: int) -> int:
    """Modelled work of one MSM with window c, in field multiplications: every non-zero digit
    is one mixed addition into a bucket (n W of them), every bucket costs two additions in the
    running-sum reduction (W 2^(c-1) of them)."""
    return num_windows(c) * (MADD_MULS * n + BUCKET_MULS * (1 << (c - 1)))


def choose_window_bits(n: int) -> int:
    """The window size for ``n`` scalars that are neither 0 nor 1: the c in [4, 23] minimising
    :func:`window_cost` (ties to the smaller window, which needs less scratch). The sweeps in
    bench/notes/msm.md check this rule against measured times around its choice."""
    if n <= 1:
        return MIN_WINDOW
    return min(range(MIN_WINDOW, MAX_WINDOW + 1), key=lambda c: (window_cost(n, c), c))


def first_chunk(m: int) -> int:
    """Entries per thread in the first accumulation level: enough threads to fill the GPU
    (~2^18), at most 128 entries each (longer chunks leave fewer partial sums, shorter ones more
    threads), a power of two in [8, 128]."""
    target = max(8, min(128, m >> 18))
    return 1 << (target.bit_length() - 1)


def reduce_group(W: int, B: int) -> int:
    """Buckets per thread in the bucket reduction (a power of two, which the weighted tree
    needs): aim for ~2^17 threads, 2..32 buckets each (2 S serial additions per thread)."""
    s = max(2, min(32, (W * B) >> 17))
    return min(B, 1 << (s.bit_length() - 1))


@dataclass(frozen=True)
class Plan:
    """Sizes of one MSM launch sequence (all derived from n, the tail count and c)."""

    n: int
    c: int
    W: int
    B: int
    K: int  # buckets, including the ones bucket (key W * B)
    S: int  # buckets per bucket-reduction thread
    G: int  # bucket-reduction threads per window


def make_plan(n: int, c: int) -> Plan:
    W, B = num_windows(c), 1 << (c - 1)
    S = reduce_group(W, B)
    return Plan(n=n, c=c, W=W, B=B, K=W * B + 1, S=S, G=-(-B // S))


@dataclass(frozen=True)
class RadixPlan:
    """Shape of the radix sort for one (n, c): coarse bins of 2^s consecutive buckets
    (``bins`` per window), ``group`` windows per launch, level-1 tiles of ``tile`` scalars, and
    superbins of 2^t coarse bins for the first partition level (:func:`superbin_log`)."""

    s: int
    bins: int
    group: int
    tile: int
    tiles: int
    t: int = 0


def radix_max_bins() -> int:
    """Coarse bins one launch of the radix sort can hold: RADIX_SUPERBINS - 1 regular
    superbins (the last is the ones') of RADIX_MAX_SPAN bins each."""
    return (RADIX_SUPERBINS - 1) * RADIX_MAX_SPAN


def superbin_log(nbins: int) -> int:
    """The t whose superbins of 2^t coarse bins number at most RADIX_SUPERBINS with the ones'
    superbin, for a launch of ``nbins`` regular bins: the first partition level's destinations
    stay few enough for its runs to fill sectors, the second's 2^t bins per superbin too."""
    t = 0
    while -(-nbins // (1 << t)) + 1 > RADIX_SUPERBINS:
        t += 1
    if 1 << t > RADIX_MAX_SPAN:  # never for a radix_plan's launch (at most radix_max_bins())
        raise ValueError(
            f"{nbins} bins need superbins of 2^{t} bins, over RADIX_MAX_SPAN ({RADIX_MAX_SPAN})"
        )
    return t


def radix_plan(n: int, c: int, group: int = 0, budget: int = 0) -> RadixPlan:
    """The radix sort's shape for n scalars and window c. Why these numbers: a bin of dense
    scalars holds about n 2^s / B entries, and RADIX_BIN_ENTRIES of them keep it one level-2
    chunk; s is capped so that a bin's counters fit a block (2^12) and a window's bins a
    launch (:func:`radix_max_bins`). ``group`` (``msm_sort_group``) > 0 fixes the windows per
    launch (capped by the same); 0 takes as many as RADIX_GROUP_BYTES of buffers allow, or
    ``budget`` bytes when that is more.

    Why a budget: every launch's key pass reads all n scalars again, 12 times at 2^27 with one
    window per launch (about 17 of the partition's 72 ms, 2026-12-03). The sort's buffers are
    freed before the bucket array and the accumulation's levels exist, so up to the
    accumulation phase's bytes (:func:`scratch_bytes` passes them) they cost no peak memory."""
    if group < 0:
        raise ValueError(f"msm_sort_group={group}: expected 0 (the rule) or more")
    W, B = num_windows(c), 1 << (c - 1)
    max_bins = radix_max_bins()
    want = (RADIX_BIN_ENTRIES * B) // max(n, 1)
    s = min(max(want.bit_length() - 1, 0), c - 1, RADIX_MAX_LOW)
    s = max(s, c - 1 - (max_bins.bit_length() - 1))
    bins = B >> s
    g = group or max(1, RADIX_GROUP_BYTES // (18 * max(n, 1)))
    cap = max(1, min(W, max_bins // bins))
    g = min(g, cap)
    if not group and budget > RADIX_GROUP_BYTES:
        while g < cap and radix_scratch_bytes(n, c, group=g + 1) <= budget:
            g += 1
    per_thread = -(-max(n, 1) // (RADIX_TILES * RADIX_THREADS))
    tile = RADIX_THREADS * per_thread
    tiles = -(-max(n, 1) // tile)
    return RadixPlan(s=s, bins=bins, group=g, tile=tile, tiles=tiles, t=superbin_log(g * bins))


def radix_scratch_bytes(
    n: int, c: int, n_entries: int | None = None, group: int = 0, budget: int = 0
) -> int:
    """Peak bytes of the radix sort's own buffers (beside the counting sort's counters and the
    sorted entries): the keys of one launch's windows (4 g n), the first partition level's
    entries and keys and the second's entries and low key bits of the largest launch (8 + 6 per
    entry, at most g n of them), the (superbin, tile) counts with the scan's output and
    temporary (3 x 4 bytes each), and per bin its first index, edges, start, cursor and chunk
    start (6 x 4 bytes). Its cursor per bucket is the counting sort's, which :func:`scratch_bytes`
    counts already. ``group`` and ``budget`` as :func:`radix_plan` takes them."""
    rp = radix_plan(n, c, group, budget)
    m_g = rp.group * n if n_entries is None else min(n_entries, rp.group * n)
    rows = -(-(rp.group * rp.bins) // (1 << rp.t)) + 1  # superbins, the ones' included
    hist = 3 * 4 * rows * rp.tiles
    return 4 * rp.group * n + 14 * m_g + hist + 6 * 4 * (rp.group * rp.bins + 1)


# The scatter's counters take at most this fraction of the L2 per launch (sort_groups).
SCATTER_L2_SHARE = 6


def sort_groups(W: int, B: int, l2_bytes: int, group: int = 0) -> tuple[int, int]:
    """Windows per launch of the count and of the scatter kernel, for W windows of B buckets on
    a GPU with ``l2_bytes`` of L2; ``group`` (``msm_sort_group``) > 0 fixes both instead. Each
    window has B 4-byte counters; when they do not stay in L2 the kernels' atomics go to DRAM.
    Measured on the H200 (50 MiB L2) at 2^27, c = 22 (8 MiB of counters per window;
    bench/notes/msm.md, 2026-11-30, a30e5a8): the count is fastest with ~half
    the L2 in counters (3 windows: 28.8 ms, against 62.4 in one launch), the scatter with one window
    (108.7 ms against 181.8), since its writes of the sorted entries share the L2 too: hence L2 / 2
    and L2 / 6 per launch. (At 2^24, c = 20, one window per scatter launch with the count as
    the rule has it measured the same as L2 / 6's four: 18.7 against 18.5 ms, 2026-12-02; the
    11.2 ms of the 2026-11-30 table came with the count per window too, unexplained.) When
    every window's counters fit in half the L2 (small c, as for the sparse L and A queries), one
    launch each: re-reading the scalars would only cost."""
    if group < 0:  # no window would be sorted, and the sums would be silently wrong
        raise ValueError(f"msm_sort_group={group}: expected 0 (the rule) or more")
    if group:
        return min(group, W), min(group, W)
    per_window = 4 * B
    if W * per_window <= l2_bytes // 2:
        return W, W
    count = max(1, min(W, (l2_bytes // 2) // per_window))
    scatter = max(1, min(W, (l2_bytes // SCATTER_L2_SHARE) // per_window))
    return count, scatter


def _l2_bytes() -> int:
    """The current device's L2 size (CUDA's attribute, read once per device)."""
    cupy = require_cupy()
    dev = cupy.cuda.Device()
    with _lock:
        if dev.id not in _l2_cache:
            _l2_cache[dev.id] = int(dev.attributes["L2CacheSize"])
        return _l2_cache[dev.id]


def _window_ranges(W: int, g: int) -> list[tuple[int, int]]:
    return [(w, min(w + g, W)) for w in range(0, W, g)]


def _level_sizes(m: int, m_max: int) -> list[tuple[int, int, int]]:
    """(entries in, chunk length, threads) for each accumulation level, given m sorted entries
    of at most m_max (the first chunk length follows m_max, so scratch is known in advance)."""
    out = []
    L = first_chunk(m_max)
    size = m
    while True:
        T = -(-size // L)
        out.append((size, L, T))
        if T == 1:
            return out
        size, L = 2 * T, LEVEL_L


def scratch_bytes(
    n: int,
    c: int | None = None,
    n_entries: int | None = None,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> int:
    """Peak device scratch bytes of :func:`msm` for ``n`` points with window ``c`` (default:
    :func:`choose_window_bits` (n)), not counting the inputs. ``n_entries`` is the number of
    (point, bucket) entries; by default the worst case n * W (every digit non-zero).

    Terms: counts, offsets, cursors and the scan's output (4 x 4 (K + 1)); the sorted entries
    (4 per entry); the bucket array (192 K); the partial sums of every accumulation level (196
    per slot, two slots per thread, all levels counted although only two are alive at once), or
    the affine passes over the ones if larger (:func:`affine_scratch_bytes`, after the levels);
    the bucket-reduction (A, R) pairs and their tree (384 per thread, about 1.07 x W G); the
    window sums (192 (W + 1)); plus the scalar classification (n bytes) and 512-byte rounding
    of each block. ``tuning``'s affine settings change the terms of the affine passes. With
    ``msm_sort = "radix"`` (or ``"auto"`` at a size where it may pick the radix sort) the
    sort's own buffers (:func:`radix_scratch_bytes`) are alive only before the bucket array
    exists, so the larger of the two phases counts."""
    c = c or choose_window_bits(n)
    p = make_plan(n, c)
    m = n * p.W if n_entries is None else n_entries
    sort = 4 * 4 * (p.K + 1) + 4 * max(m, 1)
    total = accumulation_bytes(n, p, m, tuning)
    radix = 0
    if radix_possible(tuning, n):
        radix = radix_scratch_bytes(n, c, m, tuning.msm_sort_group, budget=total)
    return sort + max(total, radix) + n + 16 * 512


def radix_possible(tuning: KernelTuning, n: int) -> bool:
    """Whether an MSM of ``n`` scalars with ``tuning`` may run the radix sort (the memory
    models count its buffers then)."""
    if tuning.msm_sort == "auto":
        return n >= 1 << RADIX_AUTO_MIN_LOG
    return tuning.msm_sort == "radix"


def sort_kind(tuning: KernelTuning, n: int, p: Plan, m_dense: int) -> str:
    """The sort an MSM of ``n`` scalars with ``m_dense`` entries in its windows (the ones
    bucket's not counted) runs: ``tuning.msm_sort``, with ``"auto"`` decided by the rule at
    RADIX_AUTO_MIN_LOG."""
    if tuning.msm_sort != "auto":
        return tuning.msm_sort
    dense = radix_possible(tuning, n) and m_dense * RADIX_AUTO_MIN_FILL >= n * p.W
    return "radix" if dense else "counting"


def streamed_tuning(tuning: KernelTuning) -> KernelTuning:
    """The record a streamed MSM (points in host memory) runs and is modelled with: ``auto``
    resolved to the counting sort. Why: a streamed chunk's sort runs while its query keeps a
    bucket array, so the radix buffers would sit beside it, and streaming is what a card too
    small for the whole MSM does; at 2^22, the chunk size, the radix sort gained 2 % (39.4
    against 40.1 ms, 2026-12-03). An explicit ``radix`` is kept (A/B runs)."""
    if tuning.msm_sort == "auto":
        return replace(tuning, msm_sort="counting")
    return tuning


def accumulation_bytes(n: int, p: Plan, m: int, tuning: KernelTuning = DEFAULT_TUNING) -> int:
    """The device bytes of an MSM's phase after the sort, for ``m`` entries (the terms of
    :func:`scratch_bytes` from the bucket array on): what the radix sort's buffers may take
    before it without raising the peak."""
    dense_passes = tuning.msm_affine_dense
    total = 192 * p.K
    levels = 0
    if m:
        m_acc = affine_worst(m, p.K, dense_passes)
        for _size, _L, T in _level_sizes(m_acc, affine_worst(n * p.W, p.K, dense_passes)):
            if T > 1:
                levels += 2 * T * (192 + 4)
    # The accumulation phase: the dense buckets' affine passes (when enabled; their last output
    # stays alive through the levels) and levels, or later, once those are freed, the affine
    # passes over the ones (at most n of them).
    dense = affine_scratch_bytes(m, p.K, dense_passes) + levels
    ones_passes = affine_pass_count(n, 1, tuning.msm_affine_min_pairs)
    total += max(dense, affine_scratch_bytes(n, 1, ones_passes))
    red = p.W * p.G
    while True:
        total += 2 * 192 * red
        if red <= p.W:
            break
        red = p.W * -(-(red // p.W) // tuning.msm_reduce_fanin)
    return total + 192 * (p.W + 1)


# --- module loading --------------------------------------------------------------------------


def source(tuning: KernelTuning = DEFAULT_TUNING) -> str:
    """The kernel source ``tuning`` asks for, as the loader names it (``"msm/msm.cu"``)."""
    return f"msm/{tuning.msm_source}"


@dataclass(frozen=True)
class MsmKernels:
    """The MSM source loaded on the current device, with the block size its kernels were built
    for (msm_lb.cu's launch bounds allow at most 128 threads)."""

    module: KernelModule
    block: int

    def launch(self, name: str, threads: int, args: tuple, stream: Any) -> None:
        """Kernel ``name`` over ``threads`` threads (none: nothing) on ``stream``."""
        if threads <= 0:
            return
        fn = self.module.get_function(name)
        fn((-(-threads // self.block),), (self.block,), args, stream=stream)

    def launch_blocks(
        self, name: str, blocks: int, threads: int, args: tuple, shared: int, stream: Any
    ) -> None:
        """Kernel ``name`` on ``blocks`` blocks of ``threads`` with ``shared`` bytes of dynamic
        shared memory (the radix kernels, whose blocks each own a tile or a bin)."""
        if blocks <= 0:
            return
        fn = self.module.get_function(name)
        fn((blocks,), (threads,), args, shared_mem=shared, stream=stream)


def kernels(tuning: KernelTuning = DEFAULT_TUNING) -> MsmKernels:
    """The MSM kernels ``tuning`` selects, on the current device (through
    :func:`kernels.cuda.runtime.load`: a prebuilt cubin when one matches, else NVRTC)."""
    module = load(source(tuning), defines=tuning.msm_defines, cubin_dir=tuning.cubin_dir)
    return MsmKernels(module, BLOCKS[tuning.msm_source])


# --- helpers ---------------------------------------------------------------------------------


def _u32(x: int) -> np.uint32:
    return np.uint32(x)


def _check_inputs(points: Any, scalars: Any) -> int:
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


# --- the MSM ---------------------------------------------------------------------------------


_NULL = np.uint64(0)  # a null pointer kernel argument


def affine_pass_count(m: int, buckets: int, min_pairs: int = NEVER_AFFINE) -> int:
    """How many affine pairing passes pay for ``m`` entries in ``buckets`` buckets: passes while
    a pass would still add at least ``min_pairs`` (``msm_affine_min_pairs``) pairs; a pass of
    uniform buckets adds about (m - buckets) / 2 of them."""
    passes = 0
    while m >= 2 * buckets and (m - buckets) // 2 >= max(1, min_pairs):
        m = (m + buckets) // 2
        passes += 1
    return passes


def affine_worst(m: int, K: int, passes: int) -> int:
    """At most how many entries are left after ``passes`` pairing passes over m entries in K
    buckets (each bucket of c entries keeps ceil(c / 2): at most (m + K) / 2 in all)."""
    for _ in range(passes):
        m = min(m, (m + K) // 2)
    return m


def affine_scratch_bytes(m: int, K: int, passes: int) -> int:
    """Peak scratch of ``passes`` affine passes over m entries in K buckets: a pass's input
    (from the second pass on) and output points (96 bytes each), its batch buffers (48-byte
    prefix products and 4-byte sources, NB per thread) and the new offsets."""
    peak, prev = 0, 0
    for _ in range(passes):
        m2 = affine_worst(m, K, 1)
        T, _Lc, NB = affine_batch(m2)
        peak = max(peak, 96 * (prev + m2) + 52 * T * NB + 8 * (K + 1) + 3 * 512)
        m, prev = m2, m2
    return peak


def affine_batch(m2: int) -> tuple[int, int, int]:
    """(threads T, outputs per thread Lc, batch NB) of an affine pass with ``m2`` outputs:
    up to AFFINE_THREADS threads, NB = min(Lc, AFFINE_NB_MAX) per inversion."""
    T = max(1, min(AFFINE_THREADS, m2))
    Lc = -(-m2 // T)
    T = -(-m2 // Lc)
    return T, Lc, min(Lc, AFFINE_NB_MAX)


def affine_passes(
    mod: MsmKernels, points: Any, idx: Any, offs: Any, K: int, m: int, passes: int, stream: Any
) -> tuple[Any, None, Any, int]:
    """``passes`` affine pairing passes (msm.cuh, 4a) over the m entries of K buckets (bucket
    b: entries offs[b]..offs[b+1] of ``idx``, point index | sign << 31, or of ``points`` itself
    when ``idx`` is None). Returns (affine points in bucket order, None, their offsets, count)."""
    cupy = require_cupy()
    if m >= 1 << 31:
        raise ValueError("affine passes index entries with 31 bits")
    for _ in range(passes):
        cnt = offs[1:] - offs[:-1]
        off2 = cupy.empty(K + 1, dtype=np.uint32)
        off2[0] = 0
        off2[1:] = cupy.cumsum((cnt + 1) >> 1, dtype=np.uint32)
        del cnt
        m2 = int(off2[K].get(stream=stream))
        T, Lc, NB = affine_batch(m2)
        prefix = cupy.empty((NB * T, 6), dtype=np.uint64)  # one Fp element (48 bytes) each
        srcs = cupy.empty(NB * T, dtype=np.uint32)
        out = cupy.empty((m2, 12), dtype=np.uint64)
        ix = _NULL if idx is None else idx
        args = (points, ix, offs, off2, _u32(K), _u32(Lc), _u32(NB), _u32(T), prefix, srcs, out)
        mod.launch("msm_affine_pass", T, args, stream)
        del prefix, srcs
        points, idx, offs, m = out, None, off2, m2
    return points, None, offs, m


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
    """Stages 4-5 (msm.cu): the balanced accumulation of m entries in K buckets into
    ``buckets`` (K rows), then the segmented levels until one chunk remains; the first chunk
    length follows ``m_max`` so that scratch is known in advance. ``kept``: ``buckets`` holds
    sums already, which the entries are added to (``msm_accumulate0_kept``); otherwise it must
    be all infinity. ``largest``: the entries of the largest bucket when known; if it is at
    most :data:`HEADS_MAX_CHUNKS` first chunks, one launch adds each cut bucket's partial sums
    (``msm_accumulate_heads``) in place of the levels."""
    cupy = require_cupy()
    vals = keys = None
    heads = largest is not None and largest <= HEADS_MAX_CHUNKS * first_chunk(m_max)
    for depth, (size, L, T) in enumerate(_level_sizes(m, m_max)):
        if depth == 1 and heads:
            mod.launch("msm_accumulate_heads", size, (vals, keys, _u32(size), buckets), stream)
            if mark is not None:
                mark("heads")
            return
        pv = cupy.empty((2 * T, XYZZ_WORDS), dtype=np.uint64)
        pk = cupy.empty(2 * T, dtype=np.uint32)
        if depth == 0:
            ix = _NULL if idx is None else idx
            args = (points, ix, offs, _u32(K), _u32(m), _u32(L), _u32(T), buckets, pv, pk)
            mod.launch("msm_accumulate0_kept" if kept else "msm_accumulate0", T, args, stream)
        else:
            args = (vals, keys, _u32(size), _u32(L), _u32(T), buckets, pv, pk)
            mod.launch("msm_accumulate_n", T, args, stream)
        vals, keys = pv, pk
        if mark is not None:
            mark("accumulate" if depth == 0 else f"level{depth}")


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

    def sizes(self, p: Plan) -> tuple[list[int], int, int]:
        """(each window's first entry, the entries before the ones bucket, all entries),
        waiting for the read-back if it is still under way."""
        if self.done is not None:
            self.done.synchronize()
            self.source = None
        starts = [int(v) for v in self.ends[: p.W + 1]]
        return starts, starts[p.W], int(self.ends[p.W + 1])

    def largest(self, p: Plan) -> int:
        """Entries of the largest bucket, the ones bucket included (after :meth:`sizes`)."""
        return int(self.ends[p.W + 2])


def count_stage(
    mod: MsmKernels,
    scalars: Any,
    n: int,
    p: Plan,
    stream: Any,
    tuning: KernelTuning,
    done: Any = None,
) -> Counted:
    """Stages 1-2 (msm.cu): the digits counted per bucket and their offsets (K + 1, device),
    with each window's first offset (offs[W B] is the ones bucket's: the entries before it) and
    the total copied to the host: into page-locked memory on ``stream``, not waited for, when
    ``done`` (a CUDA event, recorded after the copy) is given; else at once (one sync)."""
    cupy = require_cupy()
    counts = cupy.zeros(p.K + 1, dtype=np.uint32)
    g_count, _ = sort_groups(p.W, p.B, _l2_bytes(), tuning.msm_sort_group)
    for w_lo, w_hi in _window_ranges(p.W, g_count):
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


def _bucket_sort(
    mod: MsmKernels,
    scalars: Any,
    n: int,
    p: Plan,
    stream: Any,
    tuning: KernelTuning,
    mark: Any,
    counted: Counted | None = None,
) -> tuple[Any, Any, int, int, int]:
    """Stages 1-3 (msm.cu): the digits counted per bucket, their offsets (K + 1, device), and
    the entries (point index | sign << 31) grouped by bucket, by the sort ``tuning.msm_sort``
    names; with the entries before the ones bucket, in all, and in the largest bucket (None, 0,
    0, 0 when there are none).
    The one host sync of the MSM is here: it sizes everything after. ``counted``: stages 1-2
    already queued (:func:`count_stage`), so only the read-back is waited for."""
    cupy = require_cupy()
    if counted is None:
        counted = count_stage(mod, scalars, n, p, stream, tuning)
    offs = counted.offs
    starts, m_dense, m = counted.sizes(p)
    mark("count+scan")
    if m == 0:
        return offs, None, 0, 0, 0
    cursor = offs[: p.K].copy()
    sorted_e = cupy.empty(m, dtype=np.uint32)
    if sort_kind(tuning, n, p, m_dense) == "radix":
        _radix_sort(mod, scalars, n, p, offs, starts, cursor, sorted_e, stream, tuning, mark, m)
    else:
        _, g_scatter = sort_groups(p.W, p.B, _l2_bytes(), tuning.msm_sort_group)
        for w_lo, w_hi in _window_ranges(p.W, g_scatter):
            args = (scalars, _u32(n), _u32(p.c), _u32(p.W), _u32(w_lo), _u32(w_hi))
            mod.launch("msm_scatter", n, (*args, cursor, sorted_e), stream)
        mark("scatter")
    return offs, sorted_e, m_dense, m, counted.largest(p)


def _radix_sort(
    mod: MsmKernels,
    scalars: Any,
    n: int,
    p: Plan,
    offs: Any,
    starts: list[int],
    cursor: Any,
    sorted_e: Any,
    stream: Any,
    tuning: KernelTuning,
    mark: Any,
    n_entries: int,
    xp: Any = None,
) -> None:
    """The radix setting's stages 3a-3c (msm.cu) per group of windows, into ``sorted_e``;
    ``starts[w]`` = offs[w B] on the host; ``n_entries`` in all, the ones included. Marks
    "partition" (3a, 3b and the scan between) and "bucket-sort" (3c) once per group; the
    breakdown sums them. ``xp``: the array module (CuPy; numpy with the host build of the
    kernels in tests/kernels/test_cuda_msm_radix_host.py)."""
    xp = xp if xp is not None else require_cupy()
    budget = accumulation_bytes(n, p, n_entries, tuning)
    rp = radix_plan(n, p.c, tuning.msm_sort_group, budget)
    ranges = _window_ranges(p.W, rp.group)
    sizes = [starts[hi] - starts[lo] for lo, hi in ranges]  # entries of each launch (no ones)
    most = max(max(sizes), 1)
    kbuf, a_ent, a_lo, a1_e, a1_k = _carve(
        xp,
        [(rp.group * n, np.uint32), (most, np.uint32), (most, np.uint16)]
        + [(most, np.uint32), (most, np.uint32)],
    )
    bufs = (a1_e, a1_k, a_ent, a_lo, sorted_e)
    chunk = RADIX_CHUNK
    for (w_lo, w_hi), size in zip(ranges, sizes, strict=True):
        nbin = (w_hi - w_lo) * rp.bins
        nsb = -(-nbin // (1 << rp.t))  # regular superbins; hist has the ones' row last
        hist = xp.empty((nsb + 1, rp.tiles), dtype=np.uint32)
        head = (_u32(n), _u32(p.c), _u32(p.W), _u32(w_lo), _u32(w_hi), _u32(rp.tile))
        args = (scalars, *head, _u32(rp.s), _u32(rp.t), kbuf, hist)
        shared = 4 * (nsb + 1)
        mod.launch_blocks("msm_radix_hist", rp.tiles, RADIX_THREADS, args, shared, stream)
        # bin j of the launch starts at offs[w_lo B + j 2^s] (relative to the launch's first
        # entry, in a_ent); the ones bin (last) at offs[W B], its final place in sorted_e
        first = w_lo * p.B + (xp.arange(nbin + 1, dtype=np.int64) << rp.s)
        edges = offs[first]
        bin_start = xp.concatenate([edges[:-1] - edges[0], offs[p.K - 1 : p.K]])
        args = (mod, kbuf, n, p, rp, w_hi - w_lo, hist, bin_start, size, bufs, stream)
        _radix_partition(*args, xp=xp)
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
            mod.launch_blocks("msm_radix_bucket", blocks, RADIX_THREADS, args, shared_b, stream)
        mark("bucket-sort")


# Byte alignment of the views _carve cuts: CuPy's pool rounds every block to 512 bytes, and
# the kernels' 4-byte loads want at least that.
CARVE_ALIGN = 512


def _carve(xp: Any, shapes: list[tuple[int, Any]]) -> list[Any]:
    """1-D arrays of the given (length, dtype) as views into one new allocation. Why one: the
    radix sort's buffers are freed before the bucket array and the accumulation's levels are
    made, and a pool such as CuPy's reuses a freed block only for requests that fit inside
    it; five separate buffers (the largest 2.1 GB at 2^27) left the bucket array (4.8 GB) to
    a new allocation, and the pool held 26.1 GB against the modelled 18.8 (2026-12-03,
    65334a9). One block of their sum takes the next phase's arrays instead."""
    offsets, total = [], 0
    for length, dtype in shapes:
        offsets.append(total)
        nbytes = length * np.dtype(dtype).itemsize
        total += -(-nbytes // CARVE_ALIGN) * CARVE_ALIGN
    arena = xp.empty(max(total, 1), dtype=np.uint8)
    return [
        arena[o : o + length * np.dtype(dtype).itemsize].view(dtype)
        for o, (length, dtype) in zip(offsets, shapes, strict=True)
    ]


def _radix_partition(
    mod: MsmKernels,
    kbuf: Any,
    n: int,
    p: Plan,
    rp: RadixPlan,
    g: int,
    hist: Any,
    bin_start: Any,
    size: int,
    bufs: tuple[Any, ...],
    stream: Any,
    xp: Any = None,
) -> None:
    """Stage 3b of the radix setting in its two staged levels (msm.cu): the group's ``size``
    entries from the keys in ``kbuf`` to (a_ent, a_lo) grouped by coarse bin, the ones to their
    final slots in sorted. ``hist``: the (superbin, tile) counts of msm_radix_hist, the ones'
    row last; ``bin_start``: each bin's first slot (in a_ent; the ones' in sorted)."""
    xp = xp if xp is not None else require_cupy()
    a1_e, a1_k, a_ent, a_lo, sorted_e = bufs
    nreg = g * rp.bins  # the plan's superbins cover the last group's fewer windows too
    t = rp.t
    span = 1 << t
    nsb = -(-nreg // span)
    stage = RADIX_STAGE
    # level a: superbin sb of tile i starts at the superbin's first slot plus its counts in the
    # tiles before i
    sb_first = xp.ascontiguousarray(bin_start[0:nreg:span])
    starts_a = xp.concatenate([sb_first, bin_start[nreg : nreg + 1]])
    base = xp.cumsum(hist, axis=1, dtype=np.uint32)
    base -= hist
    base += starts_a[:, None]
    head = (kbuf, _u32(n), _u32(p.B), _u32(g), _u32(rp.tile), _u32(rp.s), _u32(t))
    args = (*head, _u32(stage), base, a1_e, a1_k, sorted_e)
    shared = 4 * (3 * (nsb + 1) + 32 + 2 * stage)
    mod.launch_blocks("msm_radix_part_a", rp.tiles, RADIX_THREADS, args, shared, stream)
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
        "msm_radix_part_b", blocks, RADIX_THREADS, (*args, a_ent, a_lo), shared, stream
    )


def window_sums(
    points: Any,
    scalars: Any,
    c: int,
    stream: Any,
    marks: list | None = None,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> Any:
    """The device array ``(W + 1, 24)`` of XYZZ window sums sum_b (b+1) bucket[w][b] followed
    by the ones bucket, for device ``points`` and ``scalars`` (current allocator and stream).
    ``marks``, when a list, receives (stage, recorded cupy Event) pairs for a time breakdown."""
    cupy = require_cupy()
    mod = kernels(tuning)
    n = int(points.shape[0])
    p = make_plan(n, c)
    mark = stage_marker(cupy, stream, marks)
    mark("start")
    buckets = accumulate_buckets(mod, points, scalars, p, None, stream, tuning, mark)
    if buckets is None:
        return cupy.zeros((p.W + 1, XYZZ_WORDS), dtype=np.uint64)
    return reduce_buckets(mod, buckets, p, stream, mark, tuning)


def stage_marker(cupy: Any, stream: Any, marks: list | None) -> Any:
    """The stage marker: records an event per stage into ``marks`` (None: marks nothing)."""
    if marks is None:
        return _no_mark

    def mark(stage: str) -> None:
        ev = cupy.cuda.Event()
        ev.record(stream)
        marks.append((stage, ev))

    return mark


def accumulate_buckets(
    mod: MsmKernels,
    points: Any,
    scalars: Any,
    p: Plan,
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
    one array it keeps for the whole query (:func:`msm_host_points`)."""
    cupy = require_cupy()
    mark = mark or _no_mark
    n = int(points.shape[0])
    if n * p.W >= 1 << 32:
        raise ValueError(
            f"n * W = {n * p.W} entries do not fit 32-bit offsets: use a larger window"
        )
    if n == 0:
        return buckets
    offs, sorted_e, m_dense, m, largest = _bucket_sort(
        mod, scalars, n, p, stream, tuning, mark, counted
    )
    if m == 0:
        return buckets
    if buckets is None:
        buckets = cupy.zeros((p.K, XYZZ_WORDS), dtype=np.uint64)
    # the ones (key K - 1) go through affine pairing passes when there are enough of them: the
    # batch-addition path; otherwise they are one more bucket of the balanced accumulation
    ones_passes = affine_pass_count(m - m_dense, 1, tuning.msm_affine_min_pairs)
    dense_passes = tuning.msm_affine_dense
    k_main = p.K - 1 if ones_passes else p.K
    m_main = m_dense if ones_passes else m
    if m_main:
        pts, idx, o, mm = points, sorted_e, offs, m_main
        if dense_passes:
            pts, idx, o, mm = affine_passes(
                mod, pts, idx, offs[: k_main + 1], k_main, mm, dense_passes, stream
            )
            mark("affine-dense")
        m_max = affine_worst(n * p.W, k_main, dense_passes)
        big = None if dense_passes else largest  # the passes' output has buckets of its own
        accumulate(mod, pts, idx, o, k_main, mm, m_max, buckets, stream, mark, kept, big)
    if ones_passes:
        one_offs = offs[p.K - 1 :] - offs[p.K - 1]  # [0, ones], on this stream (no H2D copy)
        pts, idx, o, mm = affine_passes(
            mod, points, sorted_e[m_dense:], one_offs, 1, m - m_dense, ones_passes, stream
        )
        mark("affine-ones")
        m_max = affine_worst(n, 1, ones_passes)
        accumulate(mod, pts, idx, o, 1, mm, m_max, buckets[p.K - 1 :], stream, None, kept)
        mark("ones")
    return buckets


def reduce_buckets(
    mod: MsmKernels,
    buckets: Any,
    p: Plan,
    stream: Any,
    mark: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> Any:
    """Stages 6-7: the ``(W + 1, 24)`` device array of window sums sum_b (b+1) bucket[w][b]
    followed by the ones bucket. ``tuning.msm_reduce`` says where the tree's doublings go
    (msm.cuh, xyzz_sum_weighted_thread), ``tuning.msm_reduce_fanin`` its fan-in:

    - ``span``: every node doubles its weighted sum by its children's whole span;
    - ``scaled``: sums are carried pre-multiplied by their span from the leaves on, so every
      level doubles log2 F times (more doublings in all at the leaves, fewer in a row);
    - ``auto``: ``span`` while a launch has at least :data:`REDUCE_LATENCY_THREADS` threads
      (the doublings are throughput there), ``scaled`` from the first launch with fewer (a
      few threads per window: each level waits on one thread's chain). The switching node
      doubles its weighted sum by the span and its own sum by its span for its parent."""
    cupy = require_cupy()
    fanin = tuning.msm_reduce_fanin
    log_f = fanin.bit_length() - 1
    mode = tuning.msm_reduce

    def switch(threads: int) -> bool:
        return mode == "scaled" or (mode == "auto" and threads < REDUCE_LATENCY_THREADS)

    out = cupy.empty((p.W + 1, XYZZ_WORDS), dtype=np.uint64)
    red_a = cupy.empty((p.W * p.G, XYZZ_WORDS), dtype=np.uint64)
    red_r = cupy.empty((p.W * p.G, XYZZ_WORDS), dtype=np.uint64)
    log_s = p.S.bit_length() - 1
    scaled = switch(p.W * p.G) and p.G > 1  # a lone leaf per window: its R is never read
    args = (buckets, _u32(p.W), _u32(p.B), _u32(p.S), _u32(p.G), _u32(log_s if scaled else 0))
    mod.launch("msm_bucket_reduce", p.W * p.G, (*args, red_a, red_r), stream)
    length, log_span = p.G, log_s
    while length > 1:
        out_len = -(-length // fanin)
        root = out_len == 1  # the root's R is never read: no doublings for it
        na = cupy.empty((p.W * out_len, XYZZ_WORDS), dtype=np.uint64)
        nr = cupy.empty((p.W * out_len, XYZZ_WORDS), dtype=np.uint64)
        if scaled:
            dbl_t, dbl_r = 0, 0 if root else log_f
        elif switch(p.W * out_len):
            dbl_t, dbl_r = log_span, 0 if root else log_span + log_f
            scaled = True
        else:
            dbl_t, dbl_r = log_span, 0
        args = (red_a, red_r, _u32(p.W), _u32(length), _u32(fanin), _u32(out_len))
        args = (*args, _u32(dbl_t), _u32(dbl_r), na, nr)
        mod.launch("xyzz_sum_weighted", p.W * out_len, args, stream)
        red_a, red_r, length = na, nr, out_len
        log_span += log_f
    out[: p.W] = red_a
    out[p.W] = buckets[p.K - 1]
    (mark or _no_mark)("bucket-reduce")
    return out


def sort_entries(
    scalars: Any,
    c: int,
    *,
    stream: Any = None,
    allocator: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> tuple[Any, Any]:
    """Stages 1-3 alone, for device ``scalars`` (n, 4) and window ``c``: the bucket offsets
    (K + 1) and the entries (point index | sign << 31) grouped by bucket, both device uint32
    arrays. Why public: the two sort settings must give the same buckets, and a test can say
    so without the point arithmetic after them."""
    cupy = require_cupy()
    n = int(scalars.shape[0])
    p = make_plan(n, c)
    with on_stream(stream, allocator) as s:
        offs, sorted_e, *_ = _bucket_sort(kernels(tuning), scalars, n, p, s, tuning, _no_mark)
        if sorted_e is None:
            sorted_e = cupy.empty(0, dtype=np.uint32)
    return offs, sorted_e


def _no_mark(stage: str) -> None:
    """The stage marker of a call that keeps no breakdown."""


def combine_windows(sums: np.ndarray, c: int) -> np.ndarray:
    """sum_w 2^(c w) S_w + ones-bucket on the host (Horner, c doublings per window), as an affine
    ``(12,)`` array. Host-side because it is one serial chain of ~256 doublings: a single GPU
    thread would take milliseconds for it, Python ints about one. The window sums go to affine
    with one batched inversion, so each window is a mixed Jacobian + affine addition, and the
    doublings (dbl-2009-l, 2M + 5S, against 6M + 3S for XYZZ) are inlined: ~20% less time than
    the XYZZ chain through kernels.cpu.g1 (2.31 -> 1.87 ms at c = 16 on the build machine's CPU,
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
    return g1_to_limbs([None if out is None else (int(out[0]), int(out[1]))])[0]


def msm(
    points: Any,
    scalars: Any,
    *,
    stream: Any = None,
    allocator: Any = None,
    window_bits: int | None = None,
    marks: list | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> np.ndarray:
    """sum_i scalars[i] * points[i] for ``points`` (n, 12) and ``scalars`` (n, 4); returns the
    affine result as a numpy ``(12,)`` array (infinity = zeros). The window is
    :func:`choose_window_bits` of the number of scalars other than 0 and 1 unless given.
    Device ``points`` are read in place; host (numpy) ``points`` go through
    :func:`msm_host_points` (chunked uploads, pinned memory for the overlap). ``tuning``
    selects the kernel source and the sort and affine settings."""
    cupy = require_cupy()
    if isinstance(scalars, np.ndarray):
        with on_stream(stream, allocator):  # the upload is ordered on the caller's stream
            scalars = to_device(cupy, scalars)
    if isinstance(points, np.ndarray):
        return msm_host_points(
            points,
            scalars,
            stream=stream,
            allocator=allocator,
            window_bits=window_bits,
            tuning=tuning,
        )
    n = _check_inputs(points, scalars)
    with on_stream(stream, allocator) as s:
        c = window_bits or choose_window_bits(tail_count(scalars) if n else 0)
        sums = window_sums(points, scalars, c, s, marks, tuning=tuning).get(stream=s)
    return combine_windows(sums, c)


def stream_cost(n: int, c: int, chunks: int = 1, *, tuning: KernelTuning = DEFAULT_TUNING) -> float:
    """Modelled work of a streamed MSM over ``n`` non-trivial scalars in ``chunks`` chunks
    that keeps one bucket array for the whole query, in field multiplications: the
    :func:`window_cost` terms, plus, from the second chunk on, the price of adding to a kept
    sum (MERGE_MULS in the merge kernel, KEPT_MULS summed straight into the kept array) per
    bucket that the chunk's entries reach (a bucket of B receives about n / (chunks B) of them,
    so it is reached with probability 1 - exp(-that))."""
    W, B = num_windows(c), 1 << (c - 1)
    merges = 0.0
    if chunks > 1:
        merges = (chunks - 1) * W * B * -math.expm1(-n / (chunks * B))
    per = MERGE_MULS if tuning.msm_host_buckets == "query-merge" else KEPT_MULS
    return W * (MADD_MULS * n + BUCKET_MULS * B) + per * merges


def stream_window_bits(
    n: int,
    window_max: int | None = None,
    chunks: int = 1,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> int:
    """The window of a streamed MSM over ``n`` scalars that are neither 0 nor 1, cut into
    ``chunks`` chunks: the c in [STREAM_MIN_WINDOW, window_max] minimising
    :func:`stream_cost` (ties to the smaller; a cap below STREAM_MIN_WINDOW is the window).
    Why not the window of the whole query (:func:`choose_window_bits`): every chunk adds its
    sums into buckets that already hold the earlier chunks', and with many buckets
    per chunk those additions cost more than the windows saved (2^27 dense points in chunks
    of 2^22 summed straight into the kept buckets, per the model: c = 20 is 17.5 % over a
    resident MSM at c = 22, and c = 22 would be 40 % over it). ``tuning`` says how the chunks
    are added (``msm_host_buckets``); ``window_max`` is the engine's cap from its memory plan."""
    top = max(min(MAX_WINDOW, window_max or MAX_WINDOW), MIN_WINDOW)
    rng = range(min(STREAM_MIN_WINDOW, top), top + 1)
    return min(rng, key=lambda c: (stream_cost(n, c, chunks, tuning=tuning), c))


def stream_window_floor(chunk: int, tuning: KernelTuning = DEFAULT_TUNING) -> int:
    """The largest window at which a streamed MSM with buckets kept per query needs no more
    device memory (:func:`host_scratch_bytes`) than a chunk summed as an MSM of its own at the
    chunk's window: the engine's cap never goes below it, so keeping the buckets never makes
    a plan need more memory than streaming per chunk did (2^22-point chunks: c = 17 against
    the chunk's own 18, since the kept array spans the whole query's windows beside the
    chunk's sort). Where no window does (chunks of a few thousand points), the chunk's own
    window."""
    own = choose_window_bits(chunk)
    if tuning.msm_host_buckets == "chunk":
        return own
    per_chunk = host_scratch_bytes(
        chunk, chunk, own, tuning=replace(tuning, msm_host_buckets="chunk")
    )
    for c in range(own, MIN_WINDOW - 1, -1):
        if host_scratch_bytes(2 * chunk, chunk, c, tuning=tuning) <= per_chunk:
            return c
    return own  # none (chunks of a few thousand points, a few MB either way): the chunk's own


def host_scratch_bytes(
    n: int,
    chunk: int = 1 << 25,
    c: int | None = None,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> int:
    """Peak device bytes of :func:`msm_host_points` with window at most ``c`` (default: the
    window of ``n`` dense scalars, :func:`stream_window_bits`): two point buffers of ``chunk``
    rows, and the largest over the windows it may take (fewer non-trivial scalars choose a
    smaller one). With buckets kept for the whole query (``msm_host_buckets = "query"``): the
    query's bucket array, alive throughout, beside one chunk's :func:`scratch_bytes` (whose
    bucket array is the chunk's own); per chunk: a chunk's :func:`scratch_bytes` and the
    accumulated window sums."""
    tuning = streamed_tuning(tuning)
    m = max(1, min(n, chunk))
    if tuning.msm_host_buckets == "chunk":
        c = c or choose_window_bits(m)
        return 2 * m * 96 + 2 * 192 * (num_windows(c) + 1) + scratch_bytes(m, c, tuning=tuning)
    chunks = -(-max(n, 1) // m)
    c = c or stream_window_bits(n, None, chunks, tuning=tuning)
    # whatever window the scalars pick (at least STREAM_MIN_WINDOW, at most c), with every
    # scalar of the chunk dense (W entries each)
    lo = min(STREAM_MIN_WINDOW, c)
    peak = max(_query_scratch(m, w, tuning) for w in range(lo, c + 1))
    return 2 * m * 96 + peak


def _query_scratch(m: int, c: int, tuning: KernelTuning) -> int:
    """Device bytes of one chunk of ``m`` points of a streamed MSM that keeps the whole
    query's buckets, with the next chunk's offsets (its count stage runs one chunk ahead).
    :func:`scratch_bytes` counts one bucket array: the kept one when the chunks are summed
    straight into it (``query``); with ``query-merge`` the chunk's second array is one more.
    With the radix sort the bucket arrays are alive during the sort too (its buffers come
    before the buckets in a one-shot MSM, beside them here)."""
    K = make_plan(m, c).K
    buckets = 192 * K
    arrays = 2 if tuning.msm_host_buckets == "query-merge" else 1
    total = scratch_bytes(m, c, tuning=tuning) + (arrays - 1) * buckets + 4 * (K + 1)
    if radix_possible(tuning, m):
        total += buckets
    return total


class _StreamingKit:
    """The copy stream and events of :func:`msm_host_points`, made once per thread and
    device and reused by every call. On the H200 creating CUDA events waited for the running
    kernel (2026-11-29, db942e6; bench/notes/pipeline.md), and the 16 GiB engine streams four MSMs
    per partition. Reuse is safe: a call returns only after its compute stream has waited for
    every copy, so no wait on these events is pending when the next call records them."""

    def __init__(self, cupy: Any) -> None:
        def event() -> Any:
            return cupy.cuda.Event(disable_timing=True)

        self._event = event
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.allocated, self.drained = event(), event()
        self.uploaded: list[Any] = []  # one per chunk buffer
        self.consumed: list[Any] = []
        self.scalars_up: list[Any] = []  # one per scalar buffer of a pass (ScalarFeed)
        self.scalars_read: list[Any] = []
        self.buffers(2)
        # a joint pass: the prelude's copies done; the count stages' read-backs, in turn
        self.prelude = event()
        self.counted = [event(), event()]

    def buffers(self, count: int, scalar_slots: int = 0) -> None:
        """Make sure there are events for ``count`` chunk buffers and ``scalar_slots`` scalar
        buffers (made once, then kept)."""
        while len(self.uploaded) < count:
            self.uploaded.append(self._event())
            self.consumed.append(self._event())
        while len(self.scalars_up) < scalar_slots:
            self.scalars_up.append(self._event())
            self.scalars_read.append(self._event())


_kits = threading.local()


def _streaming_kit(cupy: Any) -> _StreamingKit:
    kits = getattr(_kits, "by_device", None)
    if kits is None:
        kits = _kits.by_device = {}
    device = cupy.cuda.Device().id
    kit = kits.get(device)
    if kit is None:
        kit = kits[device] = _StreamingKit(cupy)
    return kit


def msm_host_points(
    points: np.ndarray,
    scalars: Any,
    *,
    chunk: int = 1 << 25,
    stream: Any = None,
    allocator: Any = None,
    window_bits: int | None = None,
    window_max: int | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> np.ndarray:
    """The same sum with ``points`` in host memory (pinned, see
    :func:`kernels.cuda.host_pinned.pinned_empty`, for the overlap) and ``scalars`` on the
    device: for a card smaller than the SRS. Points go up in chunks through two device buffers
    on a copy stream; chunk k+1 uploads while chunk k is summed.

    How the chunks are summed (``tuning.msm_host_buckets``): ``"query"`` (default) keeps one
    bucket array for the whole query (window: :func:`stream_window_bits` of the query's
    non-trivial scalars, at most ``window_max``), every chunk is summed straight into it (a
    bucket begun in a chunk starts from its kept sum), and the buckets are reduced once at the
    end; ``"query-merge"`` sums each later chunk into a second array that a merge kernel adds
    in (and zeroes again), the way before ``"query"``, kept for A/B runs; ``"chunk"`` sums
    each chunk as an MSM of its own (window of the chunk, a bucket reduction per chunk) and
    adds the window sums: what streamed MSMs did before either, kept for A/B runs. Device
    memory: :func:`host_scratch_bytes`."""
    tuning = streamed_tuning(tuning)
    if tuning.msm_host_buckets == "chunk":
        return _msm_host_points_per_chunk(
            points, scalars, chunk, stream, allocator, window_bits, tuning
        )
    job = StreamedQuery(points, scalars, window_bits=window_bits, window_max=window_max)
    return msm_host_points_many(
        [job], chunk=chunk, stream=stream, allocator=allocator, buffers=2, tuning=tuning
    )[0]


@dataclass
class StreamedQuery:
    """One MSM of :func:`msm_host_points_many`: host ``points``, ``scalars`` on the device or
    in host memory (sent up per chunk), its window (``window_bits``) or the cap on it
    (``window_max``), and ``ready``: a CUDA event its scalars' upload records (the compute
    stream waits for it before the query's first chunk, not before the whole call)."""

    points: np.ndarray
    scalars: Any
    window_bits: int | None = None
    window_max: int | None = None
    ready: Any = None


def interleave_order(
    chunks: list[int], lead: int = 0, grouped: bool = False
) -> list[tuple[int, int]]:
    """(query, chunk) in the order a joint streamed MSM takes them: each query's chunks spread
    evenly over the run (chunk k of a query of K chunks at (k + 1/2) / K; ties in query order),
    the queries after the first starting only after its first ``lead`` chunks. Why: the dense
    H query is compute-bound (~40 ms of sums per 2^22-point chunk against ~7 ms of copy) and
    the ones-heavy L, A, B-G1 are copy-bound (~3 ms of sums), so putting the copy-bound chunks
    between H's lets their copies run under H's sums; and a lead lets H's first chunks run
    while the others' scalars are still going up (in the engine, 4.2 GB of them).

    ``grouped``: chunk k of every query after the first at one place (that of the longest
    one's chunk k), so that queries reading prefixes of one host scalar array (the engine's
    L, A, B-G1 read z) take their chunk k one after the other and one upload of those rows
    serves them all (:func:`plan_scalar_feed`)."""
    first = chunks[0] if chunks else 1
    lead_at = min(lead, first) / first
    longest = max(chunks[1:], default=1) or 1

    def at(q: int, k: int, n: int) -> float:
        if q == 0:
            return (k + 0.5) / n
        x = (k + 0.5) / (longest if grouped else n)
        return lead_at + x * (1 - lead_at)

    keys = [(at(q, k, n), q, k) for q, n in enumerate(chunks) for k in range(n)]
    return [(q, k) for _, q, k in sorted(keys)]


@dataclass(frozen=True)
class ScalarFeed:
    """How a joint pass sends up the scalars that live in host memory, chunk by chunk: one
    upload per distinct row range of one host array (queries over prefixes of one array share
    chunk k's upload), into ``slots`` device buffers used in turn.

    ``use``: per entry of the order, the upload whose buffer its scalars are (None: the query's
    scalars are on the device); ``uploads``: (query read, first row, end row) in the order they
    go up; ``first``/``last``: per upload, the order entries that read it first and last."""

    use: list[int | None]
    uploads: list[tuple[int, int, int]]
    first: list[int]
    last: list[int]
    slots: int


def plan_scalar_feed(
    order: list[tuple[int, int]],
    sizes: list[int],
    chunk: int,
    keys: list[Any],
    buffers: int,
) -> ScalarFeed:
    """The :class:`ScalarFeed` of a pass taking ``order`` (:func:`interleave_order`) with
    ``buffers`` point buffers. ``keys``: per query, where its host scalars begin (queries of
    one key read prefixes of one array), or None for scalars on the device.

    Why ``slots`` is computed, not fixed: the upload of a chunk's rows is queued when its
    points are (``buffers`` - 1 chunks ahead of the sums), and a buffer may be refilled only
    once the sums of the last chunk reading its previous rows have been queued (the copy
    stream waits for an event they record, which must have been recorded by then). The
    smallest count that meets this for every upload is taken, two at least (the next rows go
    up while the current are read): 2 for the engine's orders with four buffers and chunks
    up to 11 Mi, 3 at 16 Mi."""
    use: list[int | None] = []
    uploads: list[tuple[int, int, int]] = []
    first: list[int] = []
    last: list[int] = []
    by_rows: dict[tuple[Any, int], int] = {}
    for i, (q, k) in enumerate(order):
        if keys[q] is None:
            use.append(None)
            continue
        lo, hi = k * chunk, min(k * chunk + chunk, sizes[q])
        u = by_rows.get((keys[q], lo))
        if u is None:
            u = by_rows[(keys[q], lo)] = len(uploads)
            uploads.append((q, lo, hi))
            first.append(i)
            last.append(i)
        else:
            if hi > uploads[u][2]:
                uploads[u] = (q, lo, hi)
            last[u] = i
        use.append(u)
    # the copy stream runs buffers - 1 chunks ahead of the sums; with one point buffer a
    # chunk's scalars still go up one chunk ahead, when its count stage is queued
    lag = max(1, buffers - 1)
    slots = min(2, len(uploads))  # two at least: the next rows go up while these are read
    while slots < len(uploads) and any(
        last[u - slots] > first[u] - lag - 1 for u in range(slots, len(uploads))
    ):
        slots += 1
    return ScalarFeed(use, uploads, first, last, slots)


def pass_scalar_slots(
    sizes: list[int], chunk: int, shared: list[bool], buffers: int, lead: int = 0
) -> int:
    """Scalar buffers (``chunk`` rows of 32 bytes each) that a joint pass over queries of
    ``sizes`` points needs when those marked ``shared`` read prefixes of one host array and the
    rest have their scalars on the device: the memory model's side of :func:`plan_scalar_feed`,
    on the same order."""
    chunk = max(1, min(chunk, max(sizes, default=1) or 1))
    chunks = [-(-n // chunk) for n in sizes]
    order = interleave_order(chunks, lead, grouped=any(shared))
    keys = ["host" if sh else None for sh in shared]
    return plan_scalar_feed(order, sizes, chunk, keys, buffers).slots


def many_scratch_bytes(
    sizes: list[int],
    chunk: int,
    windows: list[int],
    buffers: int = 2,
    *,
    scalar_slots: int = 0,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> int:
    """Peak device bytes of :func:`msm_host_points_many` for queries of ``sizes`` points at
    windows of at most ``windows``: ``buffers`` point buffers of ``chunk`` rows (and
    ``scalar_slots`` scalar buffers of as many rows, 32 bytes each, where the scalars are
    sent up per chunk: :func:`pass_scalar_slots`), each query's
    bucket arrays (the kept one, and with ``query-merge`` the one its later chunks are summed
    into), one chunk's :func:`scratch_bytes` at the largest window any query may take, and the
    next chunk's offsets (its count stage runs one chunk ahead). A chunk's sums go into a
    query's array, never into one of their own, so with ``query`` the chunk's bucket array is
    taken out of :func:`scratch_bytes`; ``query-merge`` keeps the bound it always had (one
    array more than needed). The reduction tree that :func:`scratch_bytes` counts runs after
    the point buffers are freed."""
    tuning = streamed_tuning(tuning)
    m = max(1, min(max(sizes, default=1), chunk))
    lo = min(STREAM_MIN_WINDOW, *windows) if windows else STREAM_MIN_WINDOW
    top = max(windows, default=lo)
    merge = tuning.msm_host_buckets == "query-merge"
    arrays = sum(
        192 * make_plan(m, w).K * (2 if merge and n > chunk else 1)
        for n, w in zip(sizes, windows, strict=True)
    )
    sort = max(
        scratch_bytes(m, w, tuning=tuning) - (0 if merge else 192 * make_plan(m, w).K)
        for w in range(lo, top + 1)
    )
    ahead = 4 * (make_plan(m, top).K + 1)  # the next chunk's offsets, counted one chunk ahead
    return buffers * m * 96 + scalar_slots * m * 32 + arrays + sort + ahead


def _host_key(scalars: Any) -> int | None:
    """Where a query's scalars begin in host memory (None: they are on the device)."""
    if not isinstance(scalars, np.ndarray) or hasattr(scalars, "__cuda_array_interface__"):
        return None
    return int(scalars.__array_interface__["data"][0])


def msm_host_points_many(
    jobs: list[StreamedQuery],
    *,
    chunk: int = 1 << 22,
    stream: Any = None,
    allocator: Any = None,
    buffers: int = 2,
    lead: int = 0,
    prelude: list[tuple[np.ndarray, Any]] | None = None,
    chunk_events: list | None = None,
    rows_read: Callable[[int, int, int, Any], None] | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> list[np.ndarray]:
    """Several streamed MSMs in one pass (the results in ``jobs`` order): every query keeps its
    bucket arrays (:func:`msm_host_points`, ``"query"``), and their chunks go up through
    ``buffers`` device buffers on one copy stream in :func:`interleave_order` (``lead``), the
    copy stream running up to ``buffers`` - 1 chunks ahead of the sums. With one query and two
    buffers this is :func:`msm_host_points`. Device memory: :func:`many_scratch_bytes`.

    A query's scalars may be on the device or in (pinned) host memory. Host scalars go up
    chunk by chunk beside the points, through a few scalar buffers (:func:`plan_scalar_feed`):
    queries whose host scalars begin at one address (prefixes of one array, as the engine's
    L, A and B-G1 of z) take their chunk k together (the order is then ``grouped``) and share
    one upload of those rows. Why: the engine's aux scalars (4.2 GB at 2^27) need not sit on
    the device through the whole pass. The window of a query with host scalars is chosen from
    its row count (counting its non-trivial scalars would read them all on the host): at the
    engine's companion cap it is the same window for any witness with a million of them.

    ``prelude``: (host, device) copies the queries after the first need (the engine's aux
    scalars when they are on the device), made on the copy stream just before the first of
    their chunks, so that they do not share the link with the first query's first chunks;
    those queries' sums wait for them. Each chunk's count stage (:func:`count_stage`) is queued
    before the previous chunk's accumulation, so the host reads its sizes back while the GPU
    still has work. A query's window (from its scalars: one host sync) and buckets are made at
    its first chunk.

    ``chunk_events``: for a probe, (start, end) CUDA event pairs made beforehand (making an
    event can wait for the running kernel), one per chunk in the order taken; each chunk's
    sums are recorded between them, after its waits, and the list gets (query, chunk, start,
    end) rows in their place.

    ``rows_read(q, lo, hi, stream)``: called once the last kernel reading rows lo..hi of query
    q's device scalars is queued on ``stream`` (after that chunk's accumulation); the caller
    records an event there to reuse those rows (the engine copies the next partition's a
    into H's block that way, ``engine.memory.handover``)."""
    tuning = streamed_tuning(tuning)
    cupy = require_cupy()
    ns = [_check_inputs(j.points, j.scalars) for j in jobs]
    mod = kernels(tuning)
    merge = tuning.msm_host_buckets == "query-merge"
    chunk = max(1, min(chunk, max(ns, default=1) or 1))
    keys = [_host_key(j.scalars) for j in jobs]
    with on_stream(stream, allocator) as s:
        nq = len(jobs)
        windows: list[int] = [0] * nq
        plans: list[Any] = [None] * nq
        kept: list[Any] = [None] * nq
        parts: list[Any] = [None] * nq
        grouped = any(k is not None for k in keys[1:])
        order = interleave_order([-(-n // chunk) for n in ns], lead, grouped)
        pairs = list(chunk_events) if chunk_events is not None else None
        if pairs is not None:
            chunk_events.clear()
        kit = _streaming_kit(cupy)
        nb = max(1, min(buffers, len(order)))
        feed = plan_scalar_feed(order, ns, chunk, keys, nb)
        kit.buffers(nb, feed.slots)
        copy_stream = kit.copy_stream
        bufs = [cupy.empty((chunk, 12), dtype=np.uint64) for _ in range(nb)]
        sbufs = [cupy.empty((chunk, 4), dtype=np.uint64) for _ in range(feed.slots)]
        # The buffers come from the allocator in the order of the compute stream; with a
        # stream-ordered pool they may be memory a kernel still queued there has just freed.
        # The copy stream must not write them before that work is done.
        kit.allocated.record(s)
        copy_stream.wait_event(kit.allocated)
        uploaded, consumed = kit.uploaded, kit.consumed
        prelude_sent = not prelude
        sent = [False] * len(feed.uploads)

        def send_prelude() -> None:
            nonlocal prelude_sent
            if prelude_sent:
                return
            prelude_sent = True
            for host, dev in prelude or []:
                dev.set(host, stream=copy_stream)
            kit.prelude.record(copy_stream)

        def send_scalars(i: int) -> None:
            """The host scalars chunk i reads, if no earlier chunk has sent them up."""
            u = feed.use[i]
            if u is None or sent[u]:
                return
            sent[u] = True
            q, lo, hi = feed.uploads[u]
            slot = u % feed.slots
            if u >= feed.slots:  # the last chunk reading the slot's previous rows is done
                copy_stream.wait_event(kit.scalars_read[slot])
            sbufs[slot][: hi - lo].set(jobs[q].scalars[lo:hi], stream=copy_stream)
            kit.scalars_up[slot].record(copy_stream)

        def scalars_of(i: int) -> Any:
            """Chunk i's scalars on the device (for host scalars: in their buffer)."""
            q, k = order[i]
            lo, hi = k * chunk, min(k * chunk + chunk, ns[q])
            u = feed.use[i]
            if u is None:
                return jobs[q].scalars[lo:hi]
            return sbufs[u % feed.slots][: hi - lo]

        def upload(i: int) -> None:
            q, k = order[i]
            if q > 0:
                send_prelude()
            send_scalars(i)  # first: the chunk's count stage (queued earlier) waits for them
            lo, hi = k * chunk, min(k * chunk + chunk, ns[q])
            b = i % nb
            if i >= nb:
                copy_stream.wait_event(consumed[b])  # the sums of chunk i - nb are done with it
            bufs[b][: hi - lo].set(jobs[q].points[lo:hi], stream=copy_stream)
            uploaded[b].record(copy_stream)

        def begin(q: int) -> None:
            """A query's first chunk: its inputs' waits, its window, its bucket arrays."""
            j, n = jobs[q], ns[q]
            if j.ready is not None:
                s.wait_event(j.ready)
            if q > 0 and prelude:
                send_prelude()
                s.wait_event(kit.prelude)
            nontrivial = n if keys[q] is not None else (tail_count(j.scalars) if n else 0)
            c = j.window_bits or stream_window_bits(
                nontrivial, j.window_max, -(-n // chunk) if n else 1, tuning=tuning
            )
            p = make_plan(chunk, c)
            windows[q], plans[q] = c, p
            kept[q] = cupy.zeros((p.K, XYZZ_WORDS), dtype=np.uint64)
            if merge and n > chunk:
                parts[q] = cupy.zeros((p.K, XYZZ_WORDS), dtype=np.uint64)

        def count(i: int) -> Counted:
            """Chunk i's count stage, queued now (every chunk holds at least one point)."""
            q, k = order[i]
            if plans[q] is None:
                begin(q)
            lo, hi = k * chunk, min(k * chunk + chunk, ns[q])
            u = feed.use[i]
            if u is not None:
                if not sent[u]:  # (one buffer: its points are queued after this count)
                    send_scalars(i)
                s.wait_event(kit.scalars_up[u % feed.slots])
            done = kit.counted[i % 2]
            return count_stage(mod, scalars_of(i), hi - lo, plans[q], s, tuning, done)

        try:
            for i in range(min(nb - 1, len(order))):
                upload(i)
            counted = count(0) if order else None  # (no chunk at all: the loop never runs)
            for i, (q, k) in enumerate(order):
                if i + nb - 1 < len(order):
                    upload(i + nb - 1)
                # the next chunk's count stage goes ahead of this chunk's accumulation: its
                # read-back is then complete (or nearly) when the host needs it
                following = count(i + 1) if i + 1 < len(order) else None
                b = i % nb
                s.wait_event(uploaded[b])
                lo, hi = k * chunk, min(k * chunk + chunk, ns[q])
                pts, sc = bufs[b][: hi - lo], scalars_of(i)
                p = plans[q]
                if pairs is not None:
                    pairs[i][0].record(s)
                if merge and k > 0:  # into the second array, then merged
                    accumulate_buckets(mod, pts, sc, p, parts[q], s, tuning, counted=counted)
                    consumed[b].record(s)
                    mod.launch("xyzz_merge", p.K, (kept[q], parts[q], _u32(p.K)), s)
                else:  # straight into the kept sums (the first chunk: into zeros)
                    accumulate_buckets(
                        mod, pts, sc, p, kept[q], s, tuning, counted=counted, kept=k > 0
                    )
                    consumed[b].record(s)
                if feed.use[i] is not None:
                    kit.scalars_read[feed.use[i] % feed.slots].record(s)
                elif rows_read is not None:
                    rows_read(q, lo, hi, s)
                if pairs is not None:
                    pairs[i][1].record(s)
                    chunk_events.append((q, k, *pairs[i]))
                counted = following
        finally:
            # The buffers are freed in the compute stream's order as this block ends. After an
            # error part-way, a copy may still be queued into one of them on the copy stream,
            # which nothing else waits for: the compute stream waits for it here.
            send_prelude()  # (its device arrays must not be read before it lands)
            kit.drained.record(copy_stream)
            s.wait_event(kit.drained)
        bufs.clear()  # the chunk buffers go back before the reductions allocate
        sbufs.clear()
        parts[:] = [None] * nq
        sums = []
        for q in range(nq):
            if plans[q] is None:  # a query of no points (never begun): the zero sums
                begin(q)
            sums.append(reduce_buckets(mod, kept[q], plans[q], s, tuning=tuning))
            kept[q] = None
        host = [x.get(stream=s) for x in sums]
    return [combine_windows(h, c) for h, c in zip(host, windows, strict=True)]


def _msm_host_points_per_chunk(
    points: np.ndarray,
    scalars: Any,
    chunk: int,
    stream: Any,
    allocator: Any,
    window_bits: int | None,
    tuning: KernelTuning,
) -> np.ndarray:
    """:func:`msm_host_points` with ``msm_host_buckets = "chunk"``: each chunk an MSM of its
    own at the chunk's window, the window sums added up."""
    cupy = require_cupy()
    n = _check_inputs(points, scalars)
    mod = kernels(tuning)
    chunk = max(1, min(chunk, n or 1))
    with on_stream(stream, allocator) as s:
        c = window_bits or choose_window_bits(chunk)
        W = num_windows(c)
        kit = _streaming_kit(cupy)
        copy_stream = kit.copy_stream
        bufs = [cupy.empty((chunk, 12), dtype=np.uint64) for _ in range(min(2, -(-n // chunk)))]
        kit.allocated.record(s)  # see msm_host_points_many
        copy_stream.wait_event(kit.allocated)
        uploaded, consumed = kit.uploaded, kit.consumed
        acc = cupy.zeros((W + 1, XYZZ_WORDS), dtype=np.uint64)
        starts = list(range(0, n, chunk))

        def upload(k: int) -> None:
            lo, hi = starts[k], min(starts[k] + chunk, n)
            j = k % len(bufs)
            if k >= len(bufs):
                copy_stream.wait_event(consumed[j])  # the compute of chunk k-2 is done with it
            bufs[j][: hi - lo].set(points[lo:hi], stream=copy_stream)
            uploaded[j].record(copy_stream)

        try:
            if starts:
                upload(0)
            for k, lo in enumerate(starts):
                if k + 1 < len(starts):
                    upload(k + 1)
                hi = min(lo + chunk, n)
                j = k % len(bufs)
                s.wait_event(uploaded[j])
                part = window_sums(bufs[j][: hi - lo], scalars[lo:hi], c, s, tuning=tuning)
                consumed[j].record(s)
                both = cupy.stack([acc, part], axis=1)  # (W+1, 2, 24): [acc_w, part_w]
                args = (both, _u32(W + 1), _u32(2), _u32(2), _u32(1), acc)
                mod.launch("xyzz_sum_groups", W + 1, args, s)
        finally:
            kit.drained.record(copy_stream)
            s.wait_event(kit.drained)
        sums = acc.get(stream=s)
    return combine_windows(sums, c)


__all__ = [
    "MsmKernels",
    "choose_window_bits",
    "host_scratch_bytes",
    "kernels",
    "make_plan",
    "msm",
    "COMPANION_WINDOW_MAX",
    "companion_window_cap",
    "INTERLEAVE_BUFFERS",
    "INTERLEAVE_LEAD",
    "HOST_SCALARS_LEAD",
    "pass_lead",
    "ScalarFeed",
    "StreamedQuery",
    "interleave_order",
    "pass_scalar_slots",
    "plan_scalar_feed",
    "many_scratch_bytes",
    "msm_host_points",
    "msm_host_points_many",
    "num_windows",
    "scratch_bytes",
    "sort_entries",
    "source",
    "stream_cost",
    "stream_window_floor",
    "stream_window_bits",
    "window_cost",
]

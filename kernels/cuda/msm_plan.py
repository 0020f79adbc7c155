"""The GPU MSM's planning: window rules, launch shapes, chunk orders and memory models.

Why apart from the launches (:mod:`provetop.kernels.cuda.msm`): everything here is arithmetic on
sizes,
with no CuPy and no device, so the engine's memory plan, the bench's models and the tests
reason with exactly the numbers the launches use, on any machine. What a launch sequence
looks like is documented with it (``src/msm/msm.cu`` and bench/notes/msm.md); this module
says how big each piece is, in which order the chunks of a streamed MSM go, and how much
device memory that takes at most.

The window rule (:func:`choose_window_bits`) and its costs, the sort's shapes (the counting
sort's windows per launch, :func:`sort_groups`; the radix sort's bins and groups,
:func:`radix_plan`; which of the two runs, :func:`sort_kind`), the accumulation's levels
(:func:`level_sizes`, :func:`takes_heads`), the bucket reduction's tree (:func:`reduce_tree`),
the one-shot MSM's peak scratch (:func:`scratch_bytes`); for streamed MSMs (points in host
memory) the window that weighs the chunks' additions into kept buckets
(:func:`stream_window_bits`), the order of a joint pass's chunks (:func:`interleave_order`),
how its host scalars go up (:func:`plan_scalar_feed`) and its memory
(:func:`host_scratch_bytes`, :func:`many_scratch_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

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
# registers, so one block is what an SM holds); the tree switches to pre-scaled sums there
# (:func:`reduce_tree`).
REDUCE_LATENCY_THREADS = 1 << 16
# Children per node of the bucket reduction's tree. Why 4: with the switch above, fan-in 4 was
# the fastest or tied at every size measured on the H200 (2026-12-02, 5cca21b: the stage 2.58
# ms at 2^20 with fan-in 8 against 2.10 with 4; 2^27 32.0 / 32.4; bench/notes/msm.md),
# and the fixed-base MSM's one bucket set agrees (fan-in 16 slower at every leaf size,
# 2026-12-03, a6c01f7).
REDUCE_FANIN = 4
# Relative cost of one mixed addition (8M + 2S) and of one bucket in the reduction (two full
# additions, 2 x (12M + 2S)), in field multiplications: the window rule below weighs them.
MADD_MULS, BUCKET_MULS = 10, 28
# A streamed MSM's later chunk adds to every kept bucket it reaches one mixed addition more
# (the bucket's first point, free in a fresh bucket, is added to the kept sum).
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
# outlasts its sums by ~15 ms and three ahead no longer hide them: bench/notes/msm.md,
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
# with bench/stream_probe.py on the H200 (2026-12-02, f1f88a5; bench/notes/msm.md):
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
# The scatter's counters take at most this fraction of the L2 per launch (sort_groups).
SCATTER_L2_SHARE = 6
# Byte alignment of the views the radix sort carves out of one block (:func:`carve_layout`):
# CuPy's pool rounds every block to 512 bytes, and the kernels' 4-byte loads want at least that.
CARVE_ALIGN = 512


# --- windows and launch shapes ---------------------------------------------------------------


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
    :func:`window_cost` (ties to the smaller window, which needs less scratch). The sweep in
    bench/notes/msm.md checks this rule against measured times around its choice."""
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


def window_ranges(W: int, g: int) -> list[tuple[int, int]]:
    """The windows [lo, hi) of each launch that takes ``g`` of the ``W`` windows at a time."""
    return [(w, min(w + g, W)) for w in range(0, W, g)]


def level_sizes(m: int, m_max: int) -> list[tuple[int, int, int]]:
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


def takes_heads(largest: int | None, m_max: int) -> bool:
    """Whether the accumulation's partial sums go to one thread per cut bucket
    (``msm_accumulate_heads``) instead of the levels: when the largest bucket (``largest``
    entries; None: not known) holds at most HEADS_MAX_CHUNKS first chunks."""
    return largest is not None and largest <= HEADS_MAX_CHUNKS * first_chunk(m_max)


@dataclass(frozen=True)
class ReduceLevel:
    """One launch of the bucket reduction's tree above its leaves (``xyzz_sum_weighted``):
    ``length`` sums per window in, ``out_len`` out; each node doubles its children's weighted
    sum ``dbl_t`` times and its own sum, for its parent, ``dbl_r`` times."""

    length: int
    out_len: int
    dbl_t: int
    dbl_r: int


def reduce_tree(p: Plan) -> tuple[int, list[ReduceLevel]]:
    """The doublings of the leaf launch (``msm_bucket_reduce``: log2 S when its sums are
    carried pre-scaled, else 0) and the tree's levels of fan-in REDUCE_FANIN above it.

    Why two modes in one tree: doubling at every node by the node's whole span keeps the
    doublings where the threads are many (a launch that fills the GPU: throughput); carried
    pre-multiplied by their span, each level doubles log2 F times (a launch of a few threads
    per window: each level waits on one thread's chain). The tree takes the first while a
    launch has at least REDUCE_LATENCY_THREADS threads and the second from the first launch
    with fewer; the switching node doubles its weighted sum by the span and its own sum by its
    span for its parent. Measured on the H200 (2026-12-02, 5cca21b): the stage 2.80 -> 2.10
    ms at 2^20, 10.2 -> 9.9 at 2^24, 32.3 -> 32.4 at 2^27 against the span mode throughout."""
    log_f = REDUCE_FANIN.bit_length() - 1
    log_s = p.S.bit_length() - 1
    # a lone leaf per window: its R is never read
    scaled = p.W * p.G < REDUCE_LATENCY_THREADS and p.G > 1
    leaf = log_s if scaled else 0
    levels = []
    length, log_span = p.G, log_s
    while length > 1:
        out_len = -(-length // REDUCE_FANIN)
        root = out_len == 1  # the root's R is never read: no doublings for it
        if scaled:
            dbl_t, dbl_r = 0, 0 if root else log_f
        elif p.W * out_len < REDUCE_LATENCY_THREADS:
            dbl_t, dbl_r = log_span, 0 if root else log_span + log_f
            scaled = True
        else:
            dbl_t, dbl_r = log_span, 0
        levels.append(ReduceLevel(length, out_len, dbl_t, dbl_r))
        length = out_len
        log_span += log_f
    return leaf, levels


# --- the sorts -------------------------------------------------------------------------------


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
    launch (:func:`radix_max_bins`). ``group`` > 0 fixes the windows per launch (capped by the
    same; tests take it to run several launches at sizes where the rule takes one); 0 takes as
    many as RADIX_GROUP_BYTES of buffers allow, or ``budget`` bytes when that is more.

    Why a budget: every launch's key pass reads all n scalars again, 12 times at 2^27 with one
    window per launch (about 17 of the partition's 72 ms, 2026-12-03). The sort's buffers are
    freed before the bucket array and the accumulation's levels exist, so up to the
    accumulation phase's bytes (:func:`scratch_bytes` passes them) they cost no peak memory."""
    if group < 0:
        raise ValueError(f"group={group}: expected 0 (the rule) or more windows per launch")
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


def carve_layout(shapes: list[tuple[int, Any]]) -> tuple[list[int], int]:
    """(the byte offset of each (length, dtype) view, the block's bytes) when the radix sort's
    buffers are cut from one block, each start aligned to CARVE_ALIGN."""
    offsets, total = [], 0
    for length, dtype in shapes:
        offsets.append(total)
        nbytes = length * np.dtype(dtype).itemsize
        total += -(-nbytes // CARVE_ALIGN) * CARVE_ALIGN
    return offsets, total


def sort_groups(W: int, B: int, l2_bytes: int) -> tuple[int, int]:
    """Windows per launch of the count and of the scatter kernel, for W windows of B buckets on
    a GPU with ``l2_bytes`` of L2. Each window has B 4-byte counters; when they do not stay in
    L2 the kernels' atomics go to DRAM. Measured on the H200 (50 MiB L2) at 2^27, c = 22 (8 MiB
    of counters per window; bench/notes/msm.md, 2026-11-30, a30e5a8): the
    count is fastest with ~half the L2 in counters (3 windows: 28.8 ms, against 62.4 in one
    launch), the scatter with one window (108.7 ms against 181.8), since its writes of the
    sorted entries share the L2 too: hence L2 / 2 and L2 / 6 per launch. (At 2^24, c = 20, one
    window per scatter launch with the count as the rule has it measured the same as L2 / 6's
    four: 18.7 against 18.5 ms, 2026-12-02; the 11.2 ms of the 2026-11-30 table came with the
    count per window too, unexplained.) When every window's counters fit in half the L2 (small
    c, as for the sparse L and A queries), one launch each: re-reading the scalars would only
    cost (a fixed group slowed the engine's L and A MSMs 104 -> 177 ms, 2026-11-30, b703cbe)."""
    per_window = 4 * B
    if W * per_window <= l2_bytes // 2:
        return W, W
    count = max(1, min(W, (l2_bytes // 2) // per_window))
    scatter = max(1, min(W, (l2_bytes // SCATTER_L2_SHARE) // per_window))
    return count, scatter


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


# --- device memory of one MSM ----------------------------------------------------------------


def scratch_bytes(
    n: int,
    c: int | None = None,
    n_entries: int | None = None,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> int:
    """Peak device scratch bytes of :func:`provetop.kernels.cuda.msm.msm` for ``n`` points with
    window
    ``c`` (default: :func:`choose_window_bits` (n)), not counting the inputs. ``n_entries`` is
    the number of (point, bucket) entries; by default the worst case n * W (every digit
    non-zero).

    Terms: counts, offsets, cursors and the scan's output (4 x 4 (K + 1)); the sorted entries
    (4 per entry); the bucket array (192 K); the partial sums of every accumulation level (196
    per slot, two slots per thread, all levels counted although only two are alive at once);
    the bucket-reduction (A, R) pairs and their tree (384 per thread, about 1.07 x W G); the
    window sums (192 (W + 1)); plus the scalar classification (n bytes) and 512-byte rounding
    of each block. With ``msm_sort = "radix"`` (or ``"auto"`` at a size where it may pick the
    radix sort) the sort's own buffers (:func:`radix_scratch_bytes`) are alive only before the
    bucket array exists, so the larger of the two phases counts."""
    c = c or choose_window_bits(n)
    p = make_plan(n, c)
    m = n * p.W if n_entries is None else n_entries
    sort = 4 * 4 * (p.K + 1) + 4 * max(m, 1)
    total = accumulation_bytes(n, p, m)
    radix = 0
    if radix_possible(tuning, n):
        radix = radix_scratch_bytes(n, c, m, budget=total)
    return sort + max(total, radix) + n + 16 * 512


def accumulation_bytes(n: int, p: Plan, m: int) -> int:
    """The device bytes of an MSM's phase after the sort, for ``m`` entries (the terms of
    :func:`scratch_bytes` from the bucket array on): what the radix sort's buffers may take
    before it without raising the peak."""
    total = 192 * p.K
    if m:
        for _size, _L, T in level_sizes(m, n * p.W):
            if T > 1:
                total += 2 * T * (192 + 4)
    red = p.W * p.G
    while True:
        total += 2 * 192 * red
        if red <= p.W:
            break
        red = p.W * -(-(red // p.W) // REDUCE_FANIN)
    return total + 192 * (p.W + 1)


# --- streamed MSMs (points in host memory) ---------------------------------------------------


def stream_cost(n: int, c: int, chunks: int = 1) -> float:
    """Modelled work of a streamed MSM over ``n`` non-trivial scalars in ``chunks`` chunks
    that keeps one bucket array for the whole query, in field multiplications: the
    :func:`window_cost` terms, plus, from the second chunk on, KEPT_MULS per bucket that the
    chunk's entries reach (a bucket of B receives about n / (chunks B) of them, so it is
    reached with probability 1 - exp(-that))."""
    W, B = num_windows(c), 1 << (c - 1)
    kept_adds = 0.0
    if chunks > 1:
        kept_adds = (chunks - 1) * W * B * -math.expm1(-n / (chunks * B))
    return W * (MADD_MULS * n + BUCKET_MULS * B) + KEPT_MULS * kept_adds


def stream_window_bits(n: int, window_max: int | None = None, chunks: int = 1) -> int:
    """The window of a streamed MSM over ``n`` scalars that are neither 0 nor 1, cut into
    ``chunks`` chunks: the c in [STREAM_MIN_WINDOW, window_max] minimising
    :func:`stream_cost` (ties to the smaller; a cap below STREAM_MIN_WINDOW is the window).
    Why not the window of the whole query (:func:`choose_window_bits`): every chunk adds its
    sums into buckets that already hold the earlier chunks', and with many buckets
    per chunk those additions cost more than the windows saved (2^27 dense points in chunks
    of 2^22 summed straight into the kept buckets, per the model: c = 20 is 17.5 % over a
    resident MSM at c = 22, and c = 22 would be 40 % over it). ``window_max`` is the engine's
    cap from its memory plan."""
    top = max(min(MAX_WINDOW, window_max or MAX_WINDOW), MIN_WINDOW)
    rng = range(min(STREAM_MIN_WINDOW, top), top + 1)
    return min(rng, key=lambda c: (stream_cost(n, c, chunks), c))


def stream_window_floor(chunk: int, tuning: KernelTuning = DEFAULT_TUNING) -> int:
    """The largest window at which a streamed MSM with buckets kept per query needs no more
    device memory (:func:`host_scratch_bytes`) than a chunk summed as an MSM of its own at the
    chunk's window (:func:`per_chunk_scratch_bytes`): the engine's cap never goes below it, so
    keeping the buckets never makes a plan need more memory than streaming per chunk did
    (2^22-point chunks: c = 17 against the chunk's own 18, since the kept array spans the
    whole query's windows beside the chunk's sort). Where no window does (chunks of a few
    thousand points), the chunk's own window."""
    own = choose_window_bits(chunk)
    per_chunk = per_chunk_scratch_bytes(chunk, own, tuning)
    for c in range(own, MIN_WINDOW - 1, -1):
        if host_scratch_bytes(2 * chunk, chunk, c, tuning=tuning) <= per_chunk:
            return c
    return own  # none (chunks of a few thousand points, a few MB either way): the chunk's own


def per_chunk_scratch_bytes(chunk: int, c: int, tuning: KernelTuning = DEFAULT_TUNING) -> int:
    """Device bytes of a streamed MSM that sums each chunk of ``chunk`` points as an MSM of its
    own at window ``c`` and adds the window sums up: two point buffers, a chunk's
    :func:`scratch_bytes` and the accumulated window sums. How streamed MSMs ran before their
    buckets were kept per query (measured 7-8 % slower at 2^27, 2026-12-02, 465a624); what
    :func:`stream_window_floor` keeps the memory of the kept buckets to."""
    m = max(1, chunk)
    windows = 2 * 192 * (num_windows(c) + 1)
    return 2 * m * 96 + windows + scratch_bytes(m, c, tuning=streamed_tuning(tuning))


def host_scratch_bytes(
    n: int,
    chunk: int = 1 << 25,
    c: int | None = None,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> int:
    """Peak device bytes of :func:`provetop.kernels.cuda.msm.msm_host_points` with window at most
    ``c``
    (default: the window of ``n`` dense scalars, :func:`stream_window_bits`): two point buffers
    of ``chunk`` rows, and the largest over the windows it may take (fewer non-trivial scalars
    choose a smaller one) of the query's bucket array, alive throughout, beside one chunk's
    :func:`scratch_bytes` (whose bucket array is that kept one)."""
    tuning = streamed_tuning(tuning)
    m = max(1, min(n, chunk))
    chunks = -(-max(n, 1) // m)
    c = c or stream_window_bits(n, None, chunks)
    # whatever window the scalars pick (at least STREAM_MIN_WINDOW, at most c), with every
    # scalar of the chunk dense (W entries each)
    lo = min(STREAM_MIN_WINDOW, c)
    peak = max(_query_scratch(m, w, tuning) for w in range(lo, c + 1))
    return 2 * m * 96 + peak


def _query_scratch(m: int, c: int, tuning: KernelTuning) -> int:
    """Device bytes of one chunk of ``m`` points of a streamed MSM that keeps the whole
    query's buckets, with the next chunk's offsets (its count stage runs one chunk ahead).
    :func:`scratch_bytes` counts one bucket array: the kept one, which the chunks are summed
    straight into. With the radix sort the bucket array is alive during the sort too (its
    buffers come before the buckets in a one-shot MSM, beside them here)."""
    K = make_plan(m, c).K
    total = scratch_bytes(m, c, tuning=tuning) + 4 * (K + 1)
    if radix_possible(tuning, m):
        total += 192 * K
    return total


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
    """Peak device bytes of :func:`provetop.kernels.cuda.msm.msm_host_points_many` for queries of
    ``sizes`` points at windows of at most ``windows``: ``buffers`` point buffers of ``chunk``
    rows (and ``scalar_slots`` scalar buffers of as many rows, 32 bytes each, where the scalars
    are sent up per chunk: :func:`pass_scalar_slots`), each query's kept bucket array, one
    chunk's :func:`scratch_bytes` at the largest window any query may take, and the next
    chunk's offsets (its count stage runs one chunk ahead). A chunk's sums go into a query's
    array, never into one of their own, so the chunk's bucket array is taken out of
    :func:`scratch_bytes`. The reduction tree that :func:`scratch_bytes` counts runs after the
    point buffers are freed."""
    tuning = streamed_tuning(tuning)
    m = max(1, min(max(sizes, default=1), chunk))
    lo = min(STREAM_MIN_WINDOW, *windows) if windows else STREAM_MIN_WINDOW
    top = max(windows, default=lo)
    arrays = sum(192 * make_plan(m, w).K for w in windows)
    sort = max(
        scratch_bytes(m, w, tuning=tuning) - 192 * make_plan(m, w).K for w in range(lo, top + 1)
    )
    ahead = 4 * (make_plan(m, top).K + 1)  # the next chunk's offsets, counted one chunk ahead
    return buffers * m * 96 + scalar_slots * m * 32 + arrays + sort + ahead

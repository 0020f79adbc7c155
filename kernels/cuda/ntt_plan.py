"""The NTT's planning and host-side tables (pure Python: no CuPy, no device).

Why apart from the launches (:mod:`provetop.kernels.cuda.ntt`): the planner turns one request into a
list of :class:`Pass` launches over named buffers and named tables, and the executor maps the
names to CuPy arrays and launches. The CPU tests run the very same plans through a host build
of ``src/ntt/ntt.cuh`` (``tests/kernels/test_cuda_ntt_host.py``), so the index algebra is proven
in CI without a GPU, and the GPU tests only have to prove the device build. The values of the
twiddle and factor tables are computed here too (Python ints to limb rows), as is what they
cost in device memory (:func:`twiddle_bytes`), which the engine's memory plan reads.

Conventions are those of ``kernels/cpu/ntt.py`` (domain root ``w_k``, coset generator g = 7,
"bitrev" order = position i holds natural index bitrev_k(i)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from provetop.kernels.constants import (
    FR_COSET_GENERATOR,
    FR_MODULUS,
    FR_MONT_R,
    FR_ROOT_OF_UNITY,
    FR_TWO_ADICITY,
)

R = FR_MODULUS
TILE_LOG = 10  # a tile holds at most 2^10 elements (32 KiB of shared memory) by default
# The "small" plans (the ones CudaNtt runs): passes of up to 2^11-element tiles (64 KiB; three
# blocks of 256 threads still fit an SM's 228 KiB), a whole transform of up to 2^12 in one block
# (128 KiB), and full factor tables (one multiplication per element instead of two) up to 2^22.
SMALL_TILE_LOG = 11
WHOLE_TILE_LOG = 12
# What CudaNtt plans with when it is given no max_levels: passes of at most 9 levels on 2^9-element
# tiles, measured faster than 2^10 tiles at every size from 2^13 to 2^27 on the H200
# (2026-12-03: 2^20 0.281 -> 0.274 ms, 2^22 1.120 -> 1.027, 2^24 4.48 -> 4.28, 2^25 9.26 ->
# 8.84; bench/notes/ntt.md), except the H step at 2^19 and
# 2^20, where its three passes per transform instead of two cost 6-10 % (default_max_levels).
# Why finer grids pay: a pass of 2^10-element tiles at 2^20 is 1,024 blocks over the H200's 396
# three-block slots, 2.6 rounds with the last one 59 % full, where 2^7-element tiles give 8,192
# blocks and a last round under 4 % of the pass; at 2^20 the whole vector (32 MiB) stays in L2,
# so the extra pass costs little memory time. sppark runs 2^20 as three steps of 6-7 levels.
FINE_TILE_LOG = 9
COARSE_H_STEP_LOGS = (19, 20)
FULL_TABLE_MAX_LOG = 22
BLOCK = 256  # = NTT_BLOCK in ntt.cu
MAX_LOG_SIZE = 27
ELEM_BYTES = 32

F_GATHER = 1
F_PRE_TABLE = 2
F_POST_CONST = 4
F_POST_TABLE = 8
F_QUOTIENT = 16
F_PRE_FULL = 32
F_POST_FULL = 64
# (ntt.cuh's NTT_F_TW_SHARED = 128, a pass's twiddles loaded into shared memory beside its tile,
# is not planned: it measured slower than the table's loads on the H200, +10 us at 2^20 and
# +0.3-0.8 % forward at 2^24 and 2^27, twice: 2026-12-03, 3c90f38 and 501d527,
# bench/notes/ntt.md. The kernels keep the branch so that their build stays as it is.)

ORDERS = ("natural", "bitrev")


# --- passes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """One launch of ``ntt_pass_dif`` / ``ntt_pass_dit`` over named buffers and tables."""

    dit: bool
    src: str
    dst: str
    k: int
    s: int
    L: int
    log_c: int
    inverse: bool
    flags: int = 0
    pre: str | None = None  # factor-table kind (see factor_table_values)
    post: str | None = None
    qa: str | None = None
    qb: str | None = None

    @property
    def tile_log(self) -> int:
        return self.L + self.log_c

    def grid(self, batch: int) -> tuple[int, int]:
        return (1 << (self.k - self.tile_log), batch)

    @property
    def block(self) -> int:
        """One thread per radix-4 group (4 elements) of the tile."""
        return min(BLOCK, max(1, 1 << max(0, self.tile_log - 2)))

    @property
    def lowbits(self) -> int:
        """Levels of the transform done below this pass (0: it holds the lowest levels)."""
        return self.s - self.L

    @property
    def shared_bytes(self) -> int:
        """The tile's dynamic shared memory."""
        return ELEM_BYTES << self.tile_log


def split_levels(k: int, max_levels: int = TILE_LOG, whole: int = 0) -> list[int]:
    """k levels in as few passes of at most ``max_levels`` as possible, as even as possible
    (27 -> [9, 9, 9], 20 -> [10, 10], 11 -> [6, 5]); one pass when k <= ``whole``."""
    if k < 1:
        return []
    if k <= whole:
        return [k]
    npass = math.ceil(k / max_levels)
    base, extra = divmod(k, npass)
    return [base + 1] * extra + [base] * (npass - extra)


def default_max_levels(k: int, *, h_step: bool = False) -> int:
    """The ``max_levels`` a :class:`provetop.kernels.cuda.ntt.CudaNtt` without one plans 2^k with:
    2^9
    tiles, except the H step at the sizes where the finer tiles' extra pass per transform was
    measured to cost more than they gain (COARSE_H_STEP_LOGS)."""
    if h_step and k in COARSE_H_STEP_LOGS:
        return TILE_LOG
    return FINE_TILE_LOG


def default_lowest_levels(k: int) -> int:
    """The levels a :class:`provetop.kernels.cuda.ntt.CudaNtt` without ``lowest_levels`` gives the
    transforms' pass over the lowest levels at 2^k: a whole 2^9 tile (FINE_TILE_LOG). That
    pass has no lower levels to take columns from, so its tile is 2^L elements whatever the
    tile size, and with fewer levels it runs in blocks smaller than a tile (with 2^9 tiles at
    2^20, 7 levels in blocks of one warp: the slowest of the three passes, its IMAD pipe 55 %
    busy against 65 %, Nsight Compute, 2026-12-03). Measured on the H200 (2026-12-03,
    65334a9, medians of three rounds): forward 2^16 0.0443 -> 0.0415 ms (8 + 8 -> 9 + 7
    levels), 2^20 0.288 -> 0.272 (7 + 7 + 6 -> 9 + 6 + 5), 2^22 1.039 -> 1.024, 2^24 equal
    (4.296 / 4.291). At 2^17 .. 2^18 and from 2^25 the plans are the same either way (2^18
    still measured 0.0861 / 0.0801: the spread of those sizes). ``k`` is taken so a
    size-dependent rule can replace this one without changing callers."""
    del k
    return FINE_TILE_LOG


def plan_transform(
    k: int,
    *,
    inverse: bool,
    input_order: str,
    output_order: str,
    src: str,
    dst: str,
    pre: str | None = None,
    post: str | None = None,
    post_const: bool = False,
    quotient: tuple[str, str] | None = None,
    max_levels: int = TILE_LOG,
    small: bool = False,
    lowest_levels: int = 0,
) -> list[Pass]:
    """The passes of one transform of size 2^k from buffer ``src`` into ``dst``.

    DIT (Cooley-Tukey) when the output is natural, DIF (Gentleman-Sande) when it is
    bit-reversed; the first pass gathers through bitrev_k when the input order is not the one
    the algorithm wants. ``pre`` multiplies the input by a factor table indexed by coefficient
    index (first pass), ``post``/``post_const``/``quotient`` act on the output (last pass).
    The first pass always writes ``dst`` (out of place unless src == dst), later ones in place.

    ``small``: the plans :class:`provetop.kernels.cuda.ntt.CudaNtt` runs (faster or equal at every
    size
    than the plans without it, H200, 2026-12-02, 378b076): passes of up to SMALL_TILE_LOG
    levels (fewer passes at 2^11 and 2^21 .. 2^22), one pass up to WHOLE_TILE_LOG, and full
    factor tables up to FULL_TABLE_MAX_LOG; a pass of at most TILE_LOG levels keeps its
    2^TILE_LOG tile, so the grids of 2^13 .. 2^20 are the same either way. Without it (the
    streamed H step's plans, :mod:`provetop.kernels.cuda.h_streamed`): passes of at most
    ``max_levels``
    and split factor tables.

    ``max_levels`` below TILE_LOG (``provetop bench ntt --max-levels``) also makes the tiles
    that small, 2^max_levels elements, with the small plans too: more passes with finer grids
    (why they pay: FINE_TILE_LOG). ``lowest_levels`` (1 .. TILE_LOG; 0: off; ``provetop bench
    ntt --lowest-levels``) gives the pass over the lowest levels exactly that many, the others
    split as above (why: :func:`default_lowest_levels`).
    """
    if not 0 <= lowest_levels <= TILE_LOG:
        raise ValueError(f"lowest_levels must lie in 0..{TILE_LOG}, got {lowest_levels}")
    if input_order not in ORDERS or output_order not in ORDERS:
        raise ValueError(f"orders must be in {ORDERS}, got {input_order!r}, {output_order!r}")
    dit = output_order == "natural"
    gather = (input_order == "natural") if dit else (input_order == "bitrev")
    tile = min(TILE_LOG, max_levels)
    levels = _pass_levels(k, dit, max_levels, small, lowest_levels)
    full = small and k <= FULL_TABLE_MAX_LOG
    passes = []
    done = 0
    for i, L in enumerate(levels):
        s = done + L if dit else k - done
        first, last = i == 0, i == len(levels) - 1
        passes.append(
            Pass(
                dit=dit,
                src=src if first else dst,
                dst=dst,
                k=k,
                s=s,
                L=L,
                log_c=min(max(tile, L) - L, s - L),
                inverse=inverse,
                flags=_pass_flags(
                    gather=first and gather,
                    pre=first and bool(pre),
                    post_const=last and post_const,
                    post=last and bool(post),
                    quotient=last and bool(quotient),
                    full=full,
                ),
                pre=pre if first else None,
                post=post if last else None,
                qa=quotient[0] if (last and quotient) else None,
                qb=quotient[1] if (last and quotient) else None,
            )
        )
        done += L
    return passes


def _pass_levels(k: int, dit: bool, max_levels: int, small: bool, lowest_levels: int) -> list[int]:
    """The levels of each pass of a transform of 2^k, in the order the passes run
    (:func:`plan_transform` says what ``small`` and ``lowest_levels`` change)."""
    if small and max_levels >= TILE_LOG:
        levels = split_levels(k, max(max_levels, SMALL_TILE_LOG), whole=WHOLE_TILE_LOG)
    elif small:
        levels = split_levels(k, max_levels, whole=WHOLE_TILE_LOG)
    else:
        levels = split_levels(k, max_levels)
    if lowest_levels and len(levels) > 1 and k > lowest_levels:
        rest = split_levels(k - lowest_levels, max_levels)
        # the lowest levels are the first pass's in DIT order, the last one's in DIF
        levels = [lowest_levels, *rest] if dit else [*rest, lowest_levels]
    return levels


def _pass_flags(
    *, gather: bool, pre: bool, post_const: bool, post: bool, quotient: bool, full: bool
) -> int:
    """A pass's flags (ntt.cuh's NTT_F_*): what its load and store phases do besides the
    butterflies; ``full``: its factor tables are the whole 2^k entries, not split."""
    flags = 0
    if gather:
        flags |= F_GATHER
    if pre:
        flags |= F_PRE_TABLE | (F_PRE_FULL if full else 0)
    if post_const:
        flags |= F_POST_CONST
    if post:
        flags |= F_POST_TABLE | (F_POST_FULL if full else 0)
    if quotient:
        flags |= F_QUOTIENT
    return flags


def plan_ntt(
    k: int,
    *,
    inverse: bool,
    coset: bool,
    input_order: str,
    output_order: str,
    max_levels: int = TILE_LOG,
    small: bool = False,
    lowest_levels: int = 0,
) -> list[Pass]:
    """Passes for :meth:`provetop.kernels.cuda.ntt.CudaNtt.ntt`: buffer "x" (input, never written)
    into
    "out". The constants array (post_const) is always [n^-1, Z^-1] in Montgomery form."""
    return plan_transform(
        k,
        inverse=inverse,
        input_order=input_order,
        output_order=output_order,
        src="x",
        dst="out",
        pre="coset" if (coset and not inverse) else None,
        post="coset_inv" if (coset and inverse) else None,
        post_const=inverse and not coset,
        max_levels=max_levels,
        small=small,
        lowest_levels=lowest_levels,
    )


def plan_coset_evaluations(
    k: int,
    src: str,
    dst: str,
    max_levels: int = TILE_LOG,
    small: bool = False,
    quotient: tuple[str, str] | None = None,
) -> list[Pass]:
    """Natural evaluations on the domain (``src``) -> natural evaluations on the coset
    (``dst``, may be ``src``): the H step's per-input recipe, shared by the resident and the
    streamed H step. An inverse DIF to bit-reversed coefficients with the 1/n scaling and the
    coset shift g^j folded into its last pass ("hprep"), then a forward DIT back to natural
    order (plain butterflies), which with ``quotient`` = (A's buffer, B's buffer) computes
    (A*B - C) / Z(g) in its store phase instead (C being this input)."""
    return plan_transform(
        k,
        inverse=True,
        input_order="natural",
        output_order="bitrev",
        src=src,
        dst=dst,
        post="hprep",
        max_levels=max_levels,
        small=small,
    ) + plan_transform(
        k,
        inverse=False,
        input_order="bitrev",
        output_order="natural",
        src=dst,
        dst=dst,
        quotient=quotient,
        max_levels=max_levels,
        small=small,
    )


def plan_h_step_parts(
    k: int, max_levels: int = TILE_LOG, small: bool = False
) -> list[tuple[str, list[Pass]]]:
    """The H step's passes as three parts, each named after the input it is the first to
    read: ("a", ...), ("b", ...), ("c", ...). A caller whose b and c are still on their way
    to the device (the engine's fallback copies them under the H step) makes the stream wait
    for each input just before its part: a's transforms run while b and c go up.

    Per input: inverse DIF to bit-reversed coefficients, with the 1/n scaling and the coset
    shift g^j folded into its last pass ("hprep"), then coset forward DIT back to natural order
    on the coset (plain butterflies); a's and b's parts touch only their own buffers. c's
    forward DIT computes (A*B - C) / Z(g) in its store phase, without the constant 1/Z(g):
    that factor is folded into the table of the final scaling, which costs the same (one
    multiplication per element less). Finally the coset inverse DIT gathers the natural
    quotient through bitrev, scales by n^-1 Z(g)^-1 g^-j and leaves canonical form
    ("h_final"). Work buffers: "out" doubles as a's, "wb" and "wc" are scratch."""

    final = plan_transform(
        k,
        inverse=True,
        input_order="natural",
        output_order="natural",
        src="wc",
        dst="out",
        post="h_final",
        max_levels=max_levels,
        small=small,
    )

    def coset(src: str, work: str, quotient: tuple[str, str] | None = None) -> list[Pass]:
        return plan_coset_evaluations(k, src, work, max_levels, small, quotient)

    return [
        ("a", coset("a", "out")),
        ("b", coset("b", "wb")),
        ("c", coset("c", "wc", quotient=("out", "wb")) + final),
    ]


def plan_h_step(k: int, max_levels: int = TILE_LOG, small: bool = False) -> list[Pass]:
    """Passes for the H step from "a", "b", "c" (natural evaluations, never written) to "out"
    (natural, canonical coefficients of H; the last one is zero for a satisfied system): the
    parts of :func:`plan_h_step_parts`, in order (a's, b's, then c's with the quotient and the
    final inverse)."""
    return [p for _, part in plan_h_step_parts(k, max_levels, small) for p in part]


def plan_cost(plans: list[Pass], batch: int = 1) -> tuple[int, int]:
    """(bytes moved through device memory, Montgomery multiplications) of a plan: each pass
    reads and writes every element once (32 B each way; twiddle and factor-table reads, which
    mostly hit L2, are not counted), a radix-2 level costs n/2 multiplications, a factor table
    2 per element (1 when full), a constant 1, the quotient 1 plus 2 extra reads."""
    nbytes = mults = 0
    for p in plans:
        n = batch << p.k
        nbytes += 2 * n * ELEM_BYTES
        mults += p.L * n // 2
        for table, full in ((F_PRE_TABLE, F_PRE_FULL), (F_POST_TABLE, F_POST_FULL)):
            if p.flags & table:
                mults += n if p.flags & full else 2 * n
        mults += n * bool(p.flags & F_POST_CONST)
        if p.flags & F_QUOTIENT:
            mults += n
            nbytes += 2 * n * ELEM_BYTES
    return nbytes, mults


# --- host-side table values (Python ints -> limb arrays) --------------------------------------


def domain_root(k: int) -> int:
    """Primitive 2^k-th root of unity of the size-2^k domain (as kernels/cpu/ntt.py)."""
    return pow(FR_ROOT_OF_UNITY, 1 << (FR_TWO_ADICITY - k), R)


def to_words(values: list[int], montgomery: bool) -> np.ndarray:
    """Canonical ints -> ``(len, 4)`` uint64 rows (Montgomery form if asked)."""
    if montgomery:
        values = [v * FR_MONT_R % R for v in values]
    buf = b"".join(v.to_bytes(32, "little") for v in values)
    return np.frombuffer(buf, dtype="<u8").reshape(len(values), 4).astype(np.uint64)


def from_words(arr: Any, montgomery: bool) -> list[int]:
    """``(..., 4)`` uint64 rows -> canonical ints (flattened)."""
    raw = np.ascontiguousarray(np.asarray(arr), dtype="<u8").tobytes()
    vals = [int.from_bytes(raw[i : i + 32], "little") for i in range(0, len(raw), 32)]
    if montgomery:
        rinv = pow(FR_MONT_R, -1, R)
        vals = [v * rinv % R for v in vals]
    return vals


def _powers(base: int, count: int, scale: int = 1, stride: int = 1) -> list[int]:
    step = pow(base, stride, R)
    out, acc = [], scale % R
    for _ in range(count):
        out.append(acc)
        acc = acc * step % R
    return out


def split_bits(k: int) -> int:
    """sb of a factor table for indices j < 2^k: lo has 2^sb entries, hi 2^(k-sb)."""
    return (k + 1) // 2


def factor_table_values(kind: str, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(hi, lo, sb) with f(j) = hi[j >> sb] * lo[j & (2^sb-1)] (Montgomery product):
    "coset": g^j; "coset_inv": n^-1 g^-j; "hprep": n^-1 g^j (all Montgomery); and
    "coset_inv_canon": n^-1 g^-j with lo canonical, so the product leaves canonical form;
    "h_final": as "coset_inv_canon" times Z(g)^-1 = (g^n - 1)^-1 (the H step's last scaling)."""
    n = 1 << k
    sb = split_bits(k)
    g = FR_COSET_GENERATOR
    ginv = pow(g, -1, R)
    ninv = pow(n, -1, R)
    base, scale, lo_mont = {
        "coset": (g, 1, True),
        "coset_inv": (ginv, ninv, True),
        "coset_inv_canon": (ginv, ninv, False),
        "h_final": (ginv, ninv * pow((pow(g, n, R) - 1) % R, -1, R), False),
        "hprep": (g, ninv, True),
    }[kind]
    hi = _powers(base, 1 << (k - sb), stride=1 << sb)
    lo = _powers(base, 1 << sb, scale=scale)
    return to_words(hi, True), to_words(lo, lo_mont), sb


def const_values(k: int) -> np.ndarray:
    """[n^-1, Z(g)^-1 = (g^n - 1)^-1], Montgomery form: the post_const array (the H step no
    longer reads Z(g)^-1 from it: "h_final" carries that factor)."""
    n = 1 << k
    zinv = pow((pow(FR_COSET_GENERATOR, n, R) - 1) % R, -1, R)
    return to_words([pow(n, -1, R), zinv], True)


def twiddle_split(K: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(hi, lo, sb, count) with T[i] = hi[i >> sb] * lo[i & mask] = w_K^i for i < count =
    2^(K-1) + 1. The last entry, w^(N/2) = -1, lets the inverse read w^-e = -T[2^(K-1) - e] for
    e = 0 too, so its butterflies need no run-time sign test (ntt.cuh, ntt_butterfly)."""
    half = 1 << max(0, K - 1)
    count = half + 1
    bits = max(0, K - 1)
    sb = (bits + 1) // 2
    w = domain_root(K)
    hi = _powers(w, (half >> sb) + 1, stride=1 << sb)
    lo = _powers(w, 1 << sb)
    return to_words(hi, True), to_words(lo, True), sb, count


def twiddle_bytes(k: int) -> int:
    """Device bytes of the twiddle table covering 2^k (:func:`twiddle_split`'s count)."""
    return ((1 << max(0, k - 1)) + 1) * ELEM_BYTES


def log2_size(n: int) -> int:
    """k for n = 2^k, checked (a power of two, at most 2^MAX_LOG_SIZE)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"NTT size must be a power of two, got {n}")
    k = n.bit_length() - 1
    if k > MAX_LOG_SIZE:
        raise ValueError(f"NTT size 2^{k} exceeds the supported 2^{MAX_LOG_SIZE}")
    return k

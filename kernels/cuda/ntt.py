"""GPU NTT and Groth16 H step over BLS12-381 Fr (CuPy + the CUDA C in ``src/ntt/ntt.cu``).

Why split into a planner and an executor: the planner (pure Python, no CuPy) turns one request
into a list of :class:`Pass` launches over named buffers and named tables; the executor maps
the names to CuPy arrays and launches. The CPU tests run the very same plans through a host
build of ``src/ntt/ntt.cuh`` (``tests/kernels/test_cuda_ntt_host.py``), so the index algebra is
proven in CI without a GPU, and the GPU tests only have to prove the device build.

Conventions are those of ``kernels/cpu/ntt.py`` (domain root ``w_k``, coset generator g = 7,
"bitrev" order = position i holds natural index bitrev_k(i)). Arrays are ``(n, 4)`` or
``(batch, n, 4)`` uint64, Montgomery form (``kernels/backend.py``).

Memory: the twiddle table holds 2^(K-1) + 1 elements for the largest K used (2 GiB at K = 27),
built once per device on the GPU and reused, with a stride, for every smaller size.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.constants import (
    FR_COSET_GENERATOR,
    FR_MODULUS,
    FR_MONT_R,
    FR_ROOT_OF_UNITY,
    FR_TWO_ADICITY,
)
from kernels.cuda.launch_ex import DependentLaunch
from kernels.cuda.runtime import KernelModule, load, require_cupy
from kernels.tuning import DEFAULT_TUNING, KernelTuning

R = FR_MODULUS
TILE_LOG = 10  # a tile holds at most 2^10 elements (32 KiB of shared memory) by default
# The "small" plans (tuning ntt_small on): passes of up to 2^11-element tiles (64 KiB; three
# blocks of 256 threads still fit an SM's 228 KiB), a whole transform of up to 2^12 in one block
# (128 KiB), and full factor tables (one multiplication per element instead of two) up to 2^22.
SMALL_TILE_LOG = 11
WHOLE_TILE_LOG = 12
# What CudaNtt plans with when it is given no max_levels: passes of at most 9 levels on 2^9-element
# tiles, measured faster than 2^10 tiles at every size from 2^13 to 2^27 on the H200
# (2026-12-03: 2^20 0.281 -> 0.274 ms, 2^22 1.120 -> 1.027, 2^24 4.48 -> 4.28, 2^25 9.26 ->
# 8.84; bench/notes/ntt.md, f6b345e), except the H step at 2^19 and
# 2^20, where its three passes per transform instead of two cost 6-10 % (default_max_levels).
FINE_TILE_LOG = 9
COARSE_H_STEP_LOGS = (19, 20)
FULL_TABLE_MAX_LOG = 22
DEFAULT_SHARED_BYTES = 48 << 10  # above this a kernel needs the opt-in attribute
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
F_TW_SHARED = 128

ORDERS = ("natural", "bitrev")
_U64 = np.dtype(np.uint64)  # CuPy arrays carry NumPy dtypes


# ---------------------------------------------------------------------------------------------
# planning (pure Python)
# ---------------------------------------------------------------------------------------------


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
        """The tile, and with F_TW_SHARED an array of the same shape for the twiddles."""
        return (ELEM_BYTES << self.tile_log) * (2 if self.flags & F_TW_SHARED else 1)


def place_twiddles(p: Pass, shared: bool) -> Pass:
    """``p`` with F_TW_SHARED where ``shared`` asks for it and it pays: a pass above the
    transform's lowest levels (each of its blocks needs its own 2^L - 1 rows of twiddles, which
    no other block shares) with a tile of at most 2^TILE_LOG elements (twice 32 KiB of shared
    memory still lets three blocks of 256 threads share an SM's 228 KiB; a 2^11 tile would
    leave one). The lowest levels' twiddles are the same for every block and stay in the
    table, where the L1 cache serves them."""
    if not shared or p.lowbits == 0 or p.tile_log > TILE_LOG:
        return p
    return dataclasses.replace(p, flags=p.flags | F_TW_SHARED)


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
    """The ``max_levels`` a :class:`CudaNtt` without one plans 2^k with: 2^9 tiles, except the
    H step at the sizes where the finer tiles' extra pass per transform was measured to cost
    more than they gain (COARSE_H_STEP_LOGS)."""
    if h_step and k in COARSE_H_STEP_LOGS:
        return TILE_LOG
    return FINE_TILE_LOG


def default_lowest_levels(k: int) -> int:
    """The levels a :class:`CudaNtt` without ``lowest_levels`` gives the transforms' pass over
    the lowest levels at 2^k: a whole 2^9 tile (FINE_TILE_LOG). That pass has no lower levels
    to take columns from, so with fewer levels it runs in blocks smaller than a tile; measured
    on the H200 (2026-12-03, 65334a9, medians of three rounds), forward 2^16 0.0443 -> 0.0415
    ms (8 + 8 -> 9 + 7 levels), 2^20 0.288 -> 0.272 (7 + 7 + 6 -> 9 + 6 + 5), 2^22 1.039 ->
    1.024, 2^24 equal (4.296 / 4.291). At 2^17 .. 2^18 and from 2^25 the plans are the same
    either way (2^18 still measured 0.0861 / 0.0801: the spread of those sizes). ``k`` is
    taken so a size-dependent rule can replace this one without changing callers."""
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

    ``small`` (tuning ntt_small): passes of up to SMALL_TILE_LOG levels (fewer passes at 2^11
    and 2^21 .. 2^22), one pass up to WHOLE_TILE_LOG, and full factor tables up to
    FULL_TABLE_MAX_LOG; a pass of at most TILE_LOG levels keeps its 2^TILE_LOG tile, so the
    grids of 2^13 .. 2^20 are the default ones.

    ``max_levels`` below TILE_LOG (``provetop bench ntt --max-levels``) also makes the tiles
    that small, 2^max_levels elements, with the small plans too: more passes with finer grids.
    Why one would: a pass of 2^10-element tiles at 2^20 is 1,024 blocks over the H200's 396
    three-block slots, 2.6 rounds with the last one 59 % full, where 2^7-element tiles give
    8,192 blocks and a last round under 4 % of the pass; at 2^20 the whole vector (32 MiB)
    stays in L2, so the extra pass costs little memory time. sppark runs 2^20 as three steps
    of 6-7 levels.

    ``lowest_levels`` (1 .. TILE_LOG; 0: off; ``provetop bench ntt --lowest-levels``) gives the
    pass over the lowest levels exactly that many, the others split as above. That pass has no
    lower levels to take columns from, so its tile is 2^L elements whatever the tile size: with
    2^9 tiles at 2^20 it is a 7-level pass in blocks of one warp (Nsight Compute, 2026-12-03:
    the slowest of the three, its IMAD pipe 55 % busy against 65 %). Not a default until
    measured.
    """
    if not 0 <= lowest_levels <= TILE_LOG:
        raise ValueError(f"lowest_levels must lie in 0..{TILE_LOG}, got {lowest_levels}")
    if input_order not in ORDERS or output_order not in ORDERS:
        raise ValueError(f"orders must be in {ORDERS}, got {input_order!r}, {output_order!r}")
    dit = output_order == "natural"
    gather = (input_order == "natural") if dit else (input_order == "bitrev")
    tile = min(TILE_LOG, max_levels)
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
    full = small and k <= FULL_TABLE_MAX_LOG
    passes = []
    done = 0
    for i, L in enumerate(levels):
        s = done + L if dit else k - done
        lowbits = s - L
        log_c = min(max(tile, L) - L, lowbits)
        first, last = i == 0, i == len(levels) - 1
        flags = 0
        if first and gather:
            flags |= F_GATHER
        if first and pre:
            flags |= F_PRE_TABLE | (F_PRE_FULL if full else 0)
        if last and post_const:
            flags |= F_POST_CONST
        if last and post:
            flags |= F_POST_TABLE | (F_POST_FULL if full else 0)
        if last and quotient:
            flags |= F_QUOTIENT
        passes.append(
            Pass(
                dit=dit,
                src=src if first else dst,
                dst=dst,
                k=k,
                s=s,
                L=L,
                log_c=log_c,
                inverse=inverse,
                flags=flags,
                pre=pre if first else None,
                post=post if last else None,
                qa=quotient[0] if (last and quotient) else None,
                qb=quotient[1] if (last and quotient) else None,
            )
        )
        done += L
    return passes


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
    """Passes for :meth:`CudaNtt.ntt`: buffer "x" (input, never written) into "out".
    The constants array (post_const) is always [n^-1, Z^-1] in Montgomery form."""
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


# ---------------------------------------------------------------------------------------------
# host-side table values (Python ints -> limb arrays)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# execution (CuPy)
# ---------------------------------------------------------------------------------------------


SOURCE = "ntt/ntt.cu"


def ntt_defines(tuning: KernelTuning = DEFAULT_TUNING) -> dict[str, str]:
    """Compile-time options of ntt.cu: none by default; ``tuning.ntt_defines``
    (``PROVETOP_NTT_DEFINES="A=1,B=2"``) for tuning runs (e.g. NTT_MIN_BLOCKS, MONT_PORTABLE)."""
    return dict(tuning.ntt_defines)


def module(tuning: KernelTuning = DEFAULT_TUNING) -> KernelModule:
    """ntt.cu on the current device, with ``tuning``'s defines (also home of the Fr utility
    kernels of :mod:`kernels.cuda.fr` and the multiplication ceilings of ``bench ntt``)."""
    return load(SOURCE, defines=tuning.ntt_defines, cubin_dir=tuning.cubin_dir)


@dataclass
class _DeviceTables:
    """The tables one device keeps for the life of the process (they do not depend on the
    module's defines): twiddles, factor tables and constants."""

    tw: Any = None
    tw_log: int = 0
    tables: dict[tuple[str, int, bool], tuple[Any, Any, int]] = field(default_factory=dict)
    consts: dict[int, Any] = field(default_factory=dict)
    generation: int = 0  # bumped when the twiddle table is rebuilt: cached programs go stale


_tables: dict[int, _DeviceTables] = {}
_tables_lock = threading.Lock()


def _device_tables() -> _DeviceTables:
    cupy = require_cupy()
    dev = cupy.cuda.Device().id
    with _tables_lock:
        st = _tables.get(dev)
        if st is None:
            st = _tables[dev] = _DeviceTables()
        return st


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


MAX_PROGRAMS = 256  # cached launch programs per CudaNtt (cleared when full)


@dataclass
class _DriverLaunch:
    """One pass for ``cuLaunchKernel``: its arguments packed once, one 8-byte slot each
    (pointers, and the int32 values in a slot's low half: little-endian), and the array of
    slot addresses the driver reads them through. Only the caller's buffers are written per
    call. ``keep`` holds the arrays whose addresses are packed, so they outlive the program."""

    fn: int
    grid: tuple[int, int]
    block: int
    shared: int
    blob: np.ndarray
    params: np.ndarray
    slots: tuple[tuple[int, str], ...]
    keep: tuple[Any, ...]
    ex: DependentLaunch | None = None  # tuning ntt_launch "pdl": through cuLaunchKernelEx
    params_ptr: int = 0  # params' address (numpy's .ctypes builds an object on every access)


def _driver_launch(
    fn: Any,
    grid: tuple[int, int],
    block: int,
    shared: int,
    args: tuple[Any, ...],
    dependent: bool | None = None,
) -> _DriverLaunch:
    """Pack ``args`` (buffer names as str, CuPy arrays, np.int32) for :class:`_DriverLaunch`;
    ``dependent`` not None: launched through cuLaunchKernelEx, as a programmatic dependent of
    the kernel before it when True."""
    blob = np.zeros(len(args), dtype=np.uint64)
    slots = []
    keep = []
    for i, a in enumerate(args):
        if isinstance(a, str):
            slots.append((i, a))
        elif isinstance(a, np.int32):
            blob[i] = int(a) & 0xFFFFFFFF
        else:
            blob[i] = a.data.ptr
            keep.append(a)
    fn_ptr = fn.kernel.ptr  # the CUfunction behind CuPy's RawKernel
    base = blob.ctypes.data
    params = np.array([base + 8 * i for i in range(len(args))], dtype=np.uint64)
    ex = None if dependent is None else DependentLaunch(fn_ptr, grid, block, shared, dependent)
    return _DriverLaunch(
        fn_ptr, grid, block, shared, blob, params, tuple(slots), tuple(keep), ex, params.ctypes.data
    )


@dataclass
class _Program:
    """Resolved launches of one plan (see :meth:`CudaNtt._program`): per pass the kernel, grid,
    block, shared bytes, the argument list with buffer names in it, and where the names are;
    with the ``driver`` launch (tuning ntt_launch) the same packed for ``cuLaunchKernel``."""

    generation: int
    launches: list[tuple[Any, tuple[int, int], tuple[int], int, list[Any], tuple[int, ...]]]
    driver: list[_DriverLaunch] | None = None
    cupy: Any = None  # the module, for the driver launch (no import check per call)
    device: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def launch(self, buffers: dict[str, Any], stream: Any) -> None:
        """Launch every pass on ``stream`` (a CuPy stream) with the named buffers."""
        if self.driver is not None:
            self._launch_driver(buffers, stream.ptr)
            return
        with stream:  # CuPy's kernel call launches on the current stream
            for fn, grid, block, shared, args, slots in self.launches:
                a = list(args)
                for i in slots:
                    a[i] = buffers[args[i]]
                fn(grid, block, tuple(a), shared_mem=shared)

    def _launch_driver(self, buffers: dict[str, Any], stream: int) -> None:
        """Why: CuPy's kernel call converts each of a pass's 19 arguments on every launch, and
        at 2^16 .. 2^20 that host time before the first launch is GPU idle time in every call
        (bench/notes/ntt.md, 2026-12-02, 9a03df2). ``cuLaunchKernel`` copies
        the argument values before it returns, so the one blob per pass is rewritten under
        the lock by the next call, from whichever thread."""
        driver = self.cupy.cuda.driver
        if not driver.ctxGetCurrent():
            # a thread whose first CUDA call this is (the caller's arrays came from another
            # thread): the runtime makes the device's primary context current, as CuPy's own
            # calls would have
            self.cupy.cuda.runtime.setDevice(self.device)
        launch = driver.launchKernel
        with self.lock:
            for d in self.driver:
                for i, name in d.slots:
                    d.blob[i] = buffers[name].data.ptr
                if d.ex is not None:
                    d.ex(stream, d.params_ptr)
                    continue
                gx, gy = d.grid
                launch(d.fn, gx, gy, 1, d.block, 1, 1, d.shared, stream, d.params_ptr, 0)


def _alloc(cupy: Any, shape: tuple[int, ...], allocator: Any) -> Any:
    if allocator is None:
        return cupy.empty(shape, dtype=cupy.uint64)
    nbytes = int(np.prod(shape)) * 8
    return cupy.ndarray(shape, dtype=cupy.uint64, memptr=allocator(nbytes))


class CudaNtt:
    """The NTT and H-step half of the CUDA backend (matches kernels.backend.KernelBackend)."""

    name = "cuda"

    def __init__(
        self,
        max_levels: int | None = None,
        tuning: KernelTuning = DEFAULT_TUNING,
        lowest_levels: int | None = None,
    ) -> None:
        # None: the measured rule per size (default_max_levels); a number pins every plan to it
        self.max_levels = max_levels
        # the transforms' pass over the lowest levels takes this many (plan_transform; 0: as
        # the others); None: default_lowest_levels when max_levels is None too, else 0, so a
        # pinned max_levels gives the plans it gave before the rule. The H step keeps its plans.
        if lowest_levels is not None and not 0 <= lowest_levels <= TILE_LOG:
            raise ValueError(f"lowest_levels must lie in 0..{TILE_LOG}, got {lowest_levels}")
        self.lowest_levels = lowest_levels
        self.tuning = tuning
        # tuning ntt_small: the small plans and cached launch programs (see _program)
        self.small = tuning.ntt_small == "on"
        # tuning ntt_twiddles: the twiddles of passes above the lowest levels in shared memory
        self.shared_twiddles = tuning.ntt_twiddles == "shared"
        self._programs: dict[tuple[Any, ...], _Program] = {}
        self._cupy: Any = None  # the module, once a call has checked it is there

    def plan(
        self, k: int, *, inverse: bool, coset: bool, input_order: str, output_order: str
    ) -> list[Pass]:
        """The passes :meth:`ntt` runs for these arguments (this instance's options)."""
        return plan_ntt(
            k,
            inverse=inverse,
            coset=coset,
            input_order=input_order,
            output_order=output_order,
            max_levels=self.levels_for(k),
            small=self.small,
            lowest_levels=self.lowest_for(k),
        )

    def lowest_for(self, k: int) -> int:
        """The levels of the transforms' pass over the lowest levels at 2^k (0: as the others):
        the number this instance was given, else the rule (see ``__init__``)."""
        if self.lowest_levels is not None:
            return self.lowest_levels
        return default_lowest_levels(k) if self.max_levels is None else 0

    def levels_for(self, k: int, *, h_step: bool = False) -> int:
        """The most levels per pass (and the tile, 2^that, below 2^TILE_LOG) of this instance's
        plans at 2^k: the one it was given, else :func:`default_max_levels`."""
        if self.max_levels is not None:
            return self.max_levels
        return default_max_levels(k, h_step=h_step)

    def h_plan(self, k: int) -> list[Pass]:
        """The passes :meth:`h_step` runs at 2^k (this instance's options)."""
        return plan_h_step(k, self.levels_for(k, h_step=True), small=self.small)

    def h_key(self, k: int) -> tuple[Any, ...]:
        """The program-cache key of :meth:`h_plan` on the current device."""
        return ("h_step", require_cupy().cuda.runtime.getDevice(), k)

    def run_h_step(
        self,
        k: int,
        buffers: dict[str, Any],
        stream: Any,
        ready: Mapping[str, Any] | None = None,
    ) -> None:
        """The H step's passes on ``stream`` with the named buffers, part by part
        (:func:`plan_h_step_parts`); before the part that first reads input "a", "b" or "c"
        the stream waits for ``ready[name]`` (a CUDA event, e.g. the end of that input's
        copy) where one is given. Without events: one cached program of the whole plan."""
        waits = {name: ev for name, ev in (ready or {}).items() if ev is not None}
        if not waits:
            self.run_plan(self.h_plan(k), buffers, 1, stream, self.h_key(k))
            return
        parts = plan_h_step_parts(k, self.levels_for(k, h_step=True), small=self.small)
        for name, plans in parts:
            if name in waits:
                stream.wait_event(waits[name])
            self.run_plan(plans, buffers, 1, stream, (*self.h_key(k), name))

    def module(self) -> KernelModule:
        """ntt.cu with this instance's tuning, on the current device."""
        return module(self.tuning)

    # --- tables -----------------------------------------------------------------------------
    def twiddles(self, k: int, stream: Any = None) -> tuple[Any, int]:
        """The device's twiddle table covering 2^k (built, or rebuilt larger, on first need)."""
        cupy = require_cupy()
        st = _device_tables()
        if st.tw is None or st.tw_log < k:
            hi, lo, sb, count = twiddle_split(k)
            s = stream or cupy.cuda.get_current_stream()
            with s:
                tw = cupy.empty((count, 4), dtype=cupy.uint64)
                d_hi, d_lo = cupy.asarray(hi), cupy.asarray(lo)
                self.module().get_function("fr_build_powers")(
                    ((count + 255) // 256,),
                    (256,),
                    (tw, d_hi, d_lo, np.int32(sb), np.uint64(count)),
                )
                s.synchronize()
            st.tw, st.tw_log = tw, k
            st.generation += 1
        return st.tw, st.tw_log

    def release_twiddles(self) -> int:
        """Drop this device's twiddle table (rebuilt by the next transform, ~2 ms at 2^27); the
        bytes it held, which go back to CuPy's pool until that is trimmed. The H step in one or
        two slots (``kernels.cuda.h_streamed``) gives its 2 GiB to the MSMs this way on a card
        of 8 GiB."""
        st = _device_tables()
        if st.tw is None:
            return 0
        nbytes = int(st.tw.nbytes)
        st.tw, st.tw_log = None, 0
        st.generation += 1  # cached programs referring to it are stale
        self._programs.clear()  # and must not keep its memory alive
        return nbytes

    def table(self, kind: str, k: int, full: bool = False) -> tuple[Any, Any, int]:
        """The factor table ``kind`` of size 2^k on the current device (built on first need):
        split (hi, lo, sb), or with ``full`` (hi, f, k) where f[j] = hi[j >> sb] lo[j & mask]
        for every j < 2^k, built on the device from the split one (one multiplication per
        entry, in lo's form: the product of a Montgomery hi and lo keeps lo's form)."""
        cupy = require_cupy()
        st = _device_tables()
        key = (kind, k, full)
        if key not in st.tables:
            if full:
                hi, lo, sb = self.table(kind, k)
                f = cupy.empty((1 << k, 4), dtype=cupy.uint64)
                self.module().get_function("fr_build_powers")(
                    (((1 << k) + 255) // 256,), (256,), (f, hi, lo, np.int32(sb), np.uint64(1 << k))
                )
                st.tables[key] = (hi, f, k)
            else:
                hi, lo, sb = factor_table_values(kind, k)
                st.tables[key] = (cupy.asarray(hi), cupy.asarray(lo), sb)
            cupy.cuda.Device().synchronize()
        return st.tables[key]

    def pass_tables(self, p: Pass) -> tuple[tuple[Any, Any, int] | None, ...]:
        """The (pre, post) factor tables pass ``p`` reads (None where it reads none), built
        on first need: what a warm-up calls so that no table is built inside a timed run."""
        pre = self.table(p.pre, p.k, bool(p.flags & F_PRE_FULL)) if p.pre else None
        post = self.table(p.post, p.k, bool(p.flags & F_POST_FULL)) if p.post else None
        return pre, post

    def consts(self, k: int) -> Any:
        """[n^-1, Z(g)^-1] for n = 2^k on the current device (see :func:`const_values`)."""
        cupy = require_cupy()
        st = _device_tables()
        if k not in st.consts:
            st.consts[k] = cupy.asarray(const_values(k))
            cupy.cuda.Device().synchronize()
        return st.consts[k]

    # --- execution --------------------------------------------------------------------------
    def run_plan(
        self,
        plans: list[Pass],
        buffers: dict[str, Any],
        batch: int,
        stream: Any,
        key: tuple[Any, ...] | None = None,
    ) -> None:
        """Launch every pass of ``plans`` on ``stream`` with the named buffers. With the small
        plans, ``key`` (naming ``plans`` and ``batch`` uniquely) caches the resolved launches."""
        if not plans:
            return
        if self.small:
            with stream:
                prog = self._program(plans, batch, key)
            prog.launch(buffers, stream)
            return
        mod = self.module()
        k = plans[0].k
        tw, K = self.twiddles(k, stream)
        consts = self.consts(k)
        with stream:
            for p in plans:
                self._launch(p, mod, buffers, batch, tw, K, consts)

    def _launch(
        self, p: Pass, mod: KernelModule, buffers: dict[str, Any], batch: int, tw: Any, K: int,
        consts: Any,
    ) -> None:  # fmt: skip
        """One pass; unused table pointers point at ``consts`` (never read)."""
        fn, args, shared = self._pass_args(p, mod, tw, K, consts)
        args = tuple(buffers[a] if isinstance(a, str) else a for a in args)
        fn(p.grid(batch), (p.block,), args, shared_mem=shared)

    def _pass_args(
        self, p: Pass, mod: KernelModule, tw: Any, K: int, consts: Any
    ) -> tuple[Any, tuple[Any, ...], int]:
        """(kernel, argument tuple, dynamic shared bytes) of pass ``p`` as this instance runs
        it (:func:`place_twiddles`), with buffer names (str) where the caller's arrays go;
        unused table pointers point at ``consts`` (never read). Shared memory above 48 KiB
        raises the kernel's dynamic shared-memory limit (once per size)."""
        p = place_twiddles(p, self.shared_twiddles)
        pre, post = self.pass_tables(p)
        pre_hi, pre_lo, pre_sb = pre or (consts, consts, 0)
        post_hi, post_lo, post_sb = post or (consts, consts, 0)
        fn = mod.get_function("ntt_pass_dit" if p.dit else "ntt_pass_dif")
        if (
            p.shared_bytes > DEFAULT_SHARED_BYTES
            and fn.max_dynamic_shared_size_bytes < p.shared_bytes
        ):
            fn.max_dynamic_shared_size_bytes = p.shared_bytes
        args = (
            p.dst, p.src, tw,
            np.int32(p.k), np.int32(p.s), np.int32(p.L), np.int32(p.log_c), np.int32(K),
            np.int32(int(p.inverse)), np.int32(p.flags), np.int32(pre_sb),
            np.int32(post_sb), pre_hi, pre_lo, post_hi, post_lo, consts,
            p.qa or consts, p.qb or consts,
        )  # fmt: skip
        return fn, args, p.shared_bytes

    def _program(
        self, plans: list[Pass], batch: int, key: tuple[Any, ...] | None = None
    ) -> _Program:
        """The launches of ``plans`` with everything but the caller's buffers resolved, cached
        under ``key`` (when given) until the device's twiddle table is rebuilt.

        Why: at 2^16 .. 2^20 a transform's kernels take 0.01 .. 0.25 ms, and the host work
        before the first launch (planning, table look-ups, building 19 arguments per pass) is
        on the critical path of every call: the GPU is idle until the first launch arrives."""
        cupy = require_cupy()
        st = _device_tables()
        if key is not None:
            prog = self._programs.get(key)
            if prog is not None and prog.generation == st.generation:
                return prog
        mod = self.module()
        k = plans[0].k
        tw, K = self.twiddles(k, cupy.cuda.get_current_stream())
        consts = self.consts(k)
        launches = []
        how = self.tuning.ntt_launch
        if how == "pdl" and int(cupy.cuda.Device().compute_capability) < 90:
            how = "driver"  # griddepcontrol is sm_90 on: plain driver launches elsewhere
        driver = [] if how in ("driver", "pdl") else None
        for pos, p in enumerate(plans):
            fn, args, shared = self._pass_args(p, mod, tw, K, consts)
            slots = tuple(i for i, a in enumerate(args) if isinstance(a, str))
            launches.append((fn, p.grid(batch), (p.block,), shared, list(args), slots))
            if driver is not None:
                dependent = (pos > 0) if how == "pdl" else None
                driver.append(_driver_launch(fn, p.grid(batch), p.block, shared, args, dependent))
        prog = _Program(st.generation, launches, driver, cupy, cupy.cuda.runtime.getDevice())
        if key is not None:
            if len(self._programs) >= MAX_PROGRAMS:
                self._programs.clear()
            self._programs[key] = prog
        return prog

    def ntt(
        self,
        x: Any,
        *,
        inverse: bool = False,
        coset: bool = False,
        input_order: str = "natural",
        output_order: str = "natural",
        stream: Any = None,
        allocator: Any = None,
        out: Any = None,
    ) -> Any:
        """NTT of ``x`` ((n, 4) or (batch, n, 4) uint64 CuPy, Montgomery) into a new array of
        the same shape (or into ``out``, which must not overlap ``x``). ``allocator`` is unused
        (the transform needs no scratch) but accepted for the backend interface; the output
        comes from CuPy's current allocator."""
        # Why the order below: at 2^16 .. 2^20 everything before the first launch is GPU idle
        # time in every call (a 2^20 call took 19.7 us of host time before this order, 13.0
        # after it, bench/notes/ntt.md, 8010486), so a cached program with ``out``
        # given touches no stream context and no allocator, and the checks compare against a
        # cached dtype.
        cupy = self._cupy or self._load_cupy()
        del allocator
        if x.dtype != _U64 or x.ndim not in (2, 3) or x.shape[-1] != 4:
            raise ValueError(f"expected (n, 4) or (batch, n, 4) uint64, got {x.shape} {x.dtype}")
        if not x.flags.c_contiguous:
            x = cupy.ascontiguousarray(x)
        n = x.shape[-2]
        batch = x.shape[0] if x.ndim == 3 else 1
        k = log2_size(n)
        s = stream or cupy.cuda.get_current_stream()
        if out is None:
            with s:
                out = cupy.empty_like(x)
        elif out.shape != x.shape or out.dtype != _U64 or not out.flags.c_contiguous:
            raise ValueError("out must be a C-contiguous array of x's shape and dtype")
        if k == 0:
            with s:
                out[...] = x
            return out
        if self.small:
            dev = cupy.cuda.runtime.getDevice()
            key = (dev, k, inverse, coset, input_order, output_order, batch)
            prog = self._programs.get(key)
            tables = _tables.get(dev)
            if prog is None or tables is None or prog.generation != tables.generation:
                plans = self.plan(
                    k,
                    inverse=inverse,
                    coset=coset,
                    input_order=input_order,
                    output_order=output_order,
                )
                with s:  # tables built on first need go on the caller's stream
                    prog = self._program(plans, batch, key)
            prog.launch({"x": x, "out": out}, s)
            return out
        plans = self.plan(
            k,
            inverse=inverse,
            coset=coset,
            input_order=input_order,
            output_order=output_order,
        )
        self.run_plan(plans, {"x": x, "out": out}, batch, s)
        return out

    def _load_cupy(self) -> Any:
        self._cupy = require_cupy()
        return self._cupy

    def h_step(
        self,
        a: Any,
        b: Any,
        c: Any,
        *,
        stream: Any = None,
        allocator: Any = None,
        out: Any = None,
        ready: Mapping[str, Any] | None = None,
    ) -> Any:
        """H = (A B - C) / Z from natural evaluations a, b, c ((n, 4) Montgomery): the n-1
        coefficients h_0..h_{n-2}, canonical, natural order, as a ``(n - 1, 4)`` view of an
        n-row array (``out`` if given, (n, 4) C-contiguous). Scratch (2 n rows) comes from
        ``allocator``. ``ready``: CUDA events by input name that ``stream`` waits for before
        that input's part (:meth:`run_h_step`)."""
        cupy = require_cupy()
        n = a.shape[0]
        for v in (a, b, c):
            if v.shape != (n, 4) or v.dtype != cupy.uint64:
                raise ValueError(f"expected ({n}, 4) uint64 inputs, got {v.shape} {v.dtype}")
        k = log2_size(n)
        if k < 1:
            raise ValueError("the H step needs n >= 2")
        s = stream or cupy.cuda.get_current_stream()
        with s:
            a, b, c = (cupy.ascontiguousarray(v) for v in (a, b, c))
            if out is None:
                out = cupy.empty((n, 4), dtype=cupy.uint64)
            elif out.shape != (n, 4) or out.dtype != cupy.uint64 or not out.flags.c_contiguous:
                raise ValueError(f"out must be a C-contiguous ({n}, 4) uint64 array")
            wb = _alloc(cupy, (n, 4), allocator)
            wc = _alloc(cupy, (n, 4), allocator)
            bufs = {"a": a, "b": b, "c": c, "out": out, "wb": wb, "wc": wc}
            self.run_h_step(k, bufs, s, ready)
        return out[: n - 1]

"""The NTT plans of kernels/cuda/ntt_plan.py, run by a host build of kernels/cuda/src/ntt/ntt.cuh.

Why: a CUDA kernel whose every loop strides by blockDim.x between __syncthreads() runs
correctly with one thread per block, so compiling ntt.cuh as C++ with tiny shims (one thread,
blocks looped over) executes the exact pass bodies and the exact launch plans the GPU gets. This
proves the index algebra, the table contents and the fused H-step pieces in CI on a CPU,
against the CPU reference kernels/cpu/ntt.py, on fresh random inputs.
"""

from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import ntt as ref
from provetop.kernels.cuda import ntt as cn
from provetop.kernels.cuda import ntt_plan as npl
from tests.kernels.host_build import build_driver

SHIM = r"""
#include <stdint.h>
#include <string.h>
struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1};
struct uint4 { uint32_t x, y, z, w; };
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    uint4 r = {a, b, c, d}; return r;
}
template <class T> static inline T __ldg(const T* p) { return *p; }
static inline uint32_t __brev(uint32_t x) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
static inline int __clz(uint32_t x) { return x ? __builtin_clz(x) : 32; }
static inline void __syncthreads() {}
#define __device__
#define __global__
#define __shared__
#define __forceinline__ inline
// 2^12 elements of 32 bytes (the largest tile a plan uses), twice over
uint32_t sm[32 << 10];
#include "ntt/ntt.cuh"

extern "C" void emu_pass(int dit, fr_t* dst, const fr_t* src, const fr_t* tw, int k, int s, int L,
                         int logC, int K, int inverse, int flags, int pre_sb, int post_sb,
                         const fr_t* pre_hi, const fr_t* pre_lo, const fr_t* post_hi,
                         const fr_t* post_lo, const fr_t* post_const, const fr_t* qa,
                         const fr_t* qb, unsigned gx, unsigned gy) {
    ntt_pass_args a = {k, s, L, logC, K, inverse, flags, pre_sb, post_sb};
    for (unsigned y = 0; y < gy; y++)
        for (unsigned x = 0; x < gx; x++) {
            blockIdx.x = x; blockIdx.y = y;
            if (dit) ntt_pass_body<true>(dst, src, tw, a, pre_hi, pre_lo, post_hi, post_lo,
                                         post_const, qa, qb);
            else ntt_pass_body<false>(dst, src, tw, a, pre_hi, pre_lo, post_hi, post_lo,
                                      post_const, qa, qb);
        }
}

extern "C" void emu_build_powers(fr_t* out, const fr_t* hi, const fr_t* lo, int sb,
                                 unsigned long long count) {
    for (unsigned long long i = 0; i < count; i++)
        out[i] = hi[i >> sb] * lo[i & ((1ull << sb) - 1)];
}
"""


# The builds every test here runs: the default (the data kept in [0, 2r) between a pass's load
# and store, ntt.cuh NTT_LAZY), and canonical throughout, so either is exact at every plan.
BUILDS = {"default": (), "eager": ("-DNTT_LAZY=0",)}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def emu(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    flags = ("-O2", "-fno-strict-aliasing", "-Wno-unknown-pragmas", *BUILDS[request.param])
    lib = build_driver(tmp_path_factory.mktemp("ntt_emu"), "emu", SHIM, flags, shared=True)
    return ctypes.CDLL(str(lib))


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    assert a.flags.c_contiguous and a.dtype == np.uint64
    return ctypes.c_void_p(a.ctypes.data)


class Emulator:
    """Runs provetop.kernels.cuda.ntt_plan plans on numpy buffers through the host build."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    def twiddles(self, K: int) -> np.ndarray:
        hi, lo, sb, count = npl.twiddle_split(K)
        out = np.zeros((count, 4), dtype=np.uint64)
        self.lib.emu_build_powers(_ptr(out), _ptr(hi), _ptr(lo), sb, ctypes.c_ulonglong(count))
        return out

    def table(self, kind: str, k: int, full: bool) -> tuple[np.ndarray, np.ndarray, int]:
        """As CudaNtt.table: split, or full (every factor, built from the split table). A full
        table comes with a poisoned hi, so a pass that ignored the FULL flag would fail."""
        hi, lo, sb = npl.factor_table_values(kind, k)
        if not full:
            return hi, lo, sb
        f = np.zeros((1 << k, 4), dtype=np.uint64)
        self.lib.emu_build_powers(_ptr(f), _ptr(hi), _ptr(lo), sb, ctypes.c_ulonglong(1 << k))
        return np.full_like(hi, np.uint64(0xFFFFFFFFFFFFFFFF)), f, k

    def run(self, plans: list[npl.Pass], bufs: dict[str, np.ndarray], batch: int, K: int) -> None:
        k = plans[0].k
        tw = self.twiddles(K)
        consts = npl.const_values(k)
        keep = []
        for p in plans:
            assert p.shared_bytes <= 4 * (32 << 10)  # the shim's shared array
            pre_full, post_full = bool(p.flags & npl.F_PRE_FULL), bool(p.flags & npl.F_POST_FULL)
            pre = self.table(p.pre, k, pre_full) if p.pre else (consts, consts, 0)
            post = self.table(p.post, k, post_full) if p.post else (consts, consts, 0)
            keep += [pre, post]
            gx, gy = p.grid(batch)
            self.lib.emu_pass(
                int(p.dit), _ptr(bufs[p.dst]), _ptr(bufs[p.src]), _ptr(tw), p.k, p.s, p.L,
                p.log_c, K, int(p.inverse), p.flags, pre[2], post[2], _ptr(pre[0]), _ptr(pre[1]),
                _ptr(post[0]), _ptr(post[1]), _ptr(consts),
                _ptr(bufs[p.qa]) if p.qa else _ptr(consts),
                _ptr(bufs[p.qb]) if p.qb else _ptr(consts),
                gx, gy,
            )  # fmt: skip


def _rand(n: int) -> list[int]:
    rng = random.Random()
    return [rng.randrange(FR_MODULUS) for _ in range(n)]


def _reorder(vals: list[int], order: str) -> list[int]:
    if order == "natural":
        return vals
    idx = ref.bitrev_indices(len(vals).bit_length() - 1)
    return [vals[int(i)] for i in idx]


@pytest.mark.parametrize(
    "k, small",
    [(1, False), (2, False), (3, False), (5, False), (8, False), (11, False), (12, False)]
    + [(1, True), (2, True), (7, True), (11, True), (12, True), (13, True)],
)
def test_plans_match_reference(emu: ctypes.CDLL, k: int, small: bool) -> None:
    em = Emulator(emu)
    n = 1 << k
    batch = 2
    # a table built for a larger size must serve smaller ones through the stride
    K = k + random.choice([0, 0, 1, 3])
    for inverse in (False, True):
        for coset in (False, True):
            for io in ("natural", "bitrev"):
                for oo in ("natural", "bitrev"):
                    vecs = [_rand(n) for _ in range(batch)]
                    x = np.stack([npl.to_words(v, True) for v in vecs])
                    out = np.full_like(x, np.uint64(0xFFFFFFFFFFFFFFFF))  # poisoned
                    plans = npl.plan_ntt(
                        k,
                        inverse=inverse,
                        coset=coset,
                        input_order=io,
                        output_order=oo,
                        small=small,
                    )
                    em.run(plans, {"x": x, "out": out}, batch, K)
                    for b in range(batch):
                        natural_in = _reorder(vecs[b], io)  # vecs[b] is stored in order io
                        want = ref.ntt(natural_in, inverse=inverse, coset=coset)
                        got = npl.from_words(out[b], True)
                        assert _reorder(got, oo) == want, (k, inverse, coset, io, oo, b)


@pytest.mark.parametrize(
    "k, small", [(1, False), (2, False), (4, False), (7, False), (11, False), (3, True), (12, True)]
)
def test_h_step_plan_matches_reference(emu: ctypes.CDLL, k: int, small: bool) -> None:
    em = Emulator(emu)
    n = 1 << k
    a, b = _rand(n), _rand(n)
    c = [x * y % FR_MODULUS for x, y in zip(a, b, strict=True)]
    c[0] = (c[0] + 1) % FR_MODULUS  # not a satisfied system: every coefficient matters
    bufs = {name: npl.to_words(v, True) for name, v in (("a", a), ("b", b), ("c", c))}
    for name in ("out", "wb", "wc"):
        bufs[name] = np.full((n, 4), np.uint64(0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
    em.run(npl.plan_h_step(k, small=small), bufs, 1, k)
    got = npl.from_words(bufs["out"], False)  # canonical output
    want = [int(v) for v in ref.h_step_objects(*(ref._as_objects(v) for v in (a, b, c)))]
    assert got == want


@pytest.mark.parametrize("k, small", [(2, False), (11, False), (20, True), (27, False)])
def test_h_step_parts_read_their_input_only_from_their_part_on(k: int, small: bool) -> None:
    """The parts a caller waits between (an input's copy still in flight): nothing before
    part "b" touches b or its work buffer, nothing before part "c" touches c or wc, and the
    parts in order are exactly the H step's plan (so the emulated plan above checks them)."""
    parts = npl.plan_h_step_parts(k, small=small)
    assert [name for name, _ in parts] == ["a", "b", "c"]
    assert [p for _, part in parts for p in part] == npl.plan_h_step(k, small=small)
    touched: set[str] = set()
    for name, plans in parts:
        assert name not in touched and plans[0].src == name
        for p in plans:
            touched |= {p.src, p.dst} | ({p.qa, p.qb} - {None})
    own = {"a": {"a", "out"}, "b": {"b", "wb"}}
    seen: set[str] = set()
    for name, plans in parts:
        here = set().union(*({p.src, p.dst} | ({p.qa, p.qb} - {None}) for p in plans))
        if name in own:
            assert here == own[name]
        assert not (here - seen - {name, "out", "wb", "wc"})
        seen |= here


def _check_one(
    em: Emulator, plans: list[npl.Pass], K: int, inverse: bool, coset: bool, io: str, oo: str
) -> None:
    """One transform of fresh random input through ``plans`` (a table built for 2^K), its
    output poisoned first, against the reference."""
    k = plans[0].k
    vals = _rand(1 << k)
    x = npl.to_words(vals, True)[None]
    out = np.full_like(x, np.uint64(0xFFFFFFFFFFFFFFFF))
    em.run(plans, {"x": x, "out": out}, 1, K)
    want = ref.ntt(_reorder(vals, io), inverse=inverse, coset=coset)
    assert _reorder(npl.from_words(out[0], True), oo) == want, (k, inverse, coset, io, oo)


@pytest.mark.parametrize("k, max_levels", [(5, 2), (9, 3), (10, 4), (14, 5), (16, 10)])
def test_plans_with_many_passes(emu: ctypes.CDLL, k: int, max_levels: int) -> None:
    """Plans of two to five passes, odd and even levels per pass, one column or many per tile:
    the results equal the reference in every direction and order (outputs poisoned); the table
    is built for a larger size half the time, so its stride is exercised too."""
    em = Emulator(emu)
    K = k + random.choice([0, 2])
    for inverse in (False, True):
        for coset in (False, True):
            io, oo = random.choice(npl.ORDERS), random.choice(npl.ORDERS)
            plans = npl.plan_ntt(k, inverse=inverse, coset=coset, input_order=io,
                                output_order=oo, max_levels=max_levels)  # fmt: skip
            _check_one(em, plans, K, inverse, coset, io, oo)


@pytest.mark.parametrize("k, levels", [(13, 7), (15, 7), (13, 9), (15, 9)])
def test_small_plans_with_small_tiles(emu: ctypes.CDLL, k: int, levels: int) -> None:
    """``max_levels`` below 2^10 makes the tiles that small with the small plans too (2^9 is
    CudaNtt's default, 2^7 the 2^20 grid in 2^7-element tiles): every pass has a 2^levels tile
    where the levels below it leave room for its columns, and the transforms still equal the
    reference in every direction (random orders, outputs poisoned)."""
    em = Emulator(emu)
    for inverse in (False, True):
        for coset in (False, True):
            io, oo = random.choice(npl.ORDERS), random.choice(npl.ORDERS)
            plans = npl.plan_ntt(k, inverse=inverse, coset=coset, input_order=io,
                                output_order=oo, max_levels=levels, small=True)  # fmt: skip
            # 2^levels wherever the levels below the pass leave room for its columns
            want = [p.L + min(levels - p.L, p.lowbits) for p in plans]
            assert [p.tile_log for p in plans] == want
            _check_one(em, plans, k, inverse, coset, io, oo)
    p20 = npl.plan_ntt(20, inverse=False, coset=False, input_order="natural",
                      output_order="natural", max_levels=7, small=True)  # fmt: skip
    assert [(p.L, p.tile_log, p.grid(1)[0]) for p in p20] == [(7, 7, 8192)] * 2 + [(6, 7, 8192)]


@pytest.mark.parametrize("k", [13, 15])
def test_plans_with_more_lowest_levels(emu: ctypes.CDLL, k: int) -> None:
    """``lowest_levels`` gives the pass over the lowest levels (the first in DIT order, the last
    in DIF) that many levels and splits the rest as before; the transforms still equal the
    reference in every direction (random orders, outputs poisoned)."""
    em = Emulator(emu)
    for inverse in (False, True):
        for coset in (False, True):
            io, oo = random.choice(npl.ORDERS), random.choice(npl.ORDERS)
            plans = npl.plan_ntt(k, inverse=inverse, coset=coset, input_order=io, output_order=oo,
                                max_levels=5, small=True, lowest_levels=7)  # fmt: skip
            lowest = plans[0] if oo == "natural" else plans[-1]
            assert lowest.lowbits == 0 and lowest.L == 7 and lowest.tile_log == 7
            assert sum(p.L for p in plans) == k and max(p.L for p in plans) == 7
            _check_one(em, plans, k, inverse, coset, io, oo)


def test_lowest_levels_shapes() -> None:
    """2^20 with 2^9 tiles: 7 + 7 + 6 by default, 9 + 6 + 5 with the lowest pass at 9 (5 + 6 +
    9 in DIF order); sizes that fit one pass, or the lowest pass alone, keep their plans; out of
    range is refused."""

    def levels(k: int, oo: str, lowest: int) -> list[int]:
        plans = npl.plan_ntt(k, inverse=False, coset=False, input_order="natural",
                            output_order=oo, max_levels=9, small=True,
                            lowest_levels=lowest)  # fmt: skip
        return [p.L for p in plans]

    assert levels(20, "natural", 0) == [7, 7, 6]
    assert levels(20, "natural", 9) == [9, 6, 5]
    assert levels(20, "bitrev", 9) == [6, 5, 9]
    assert levels(12, "natural", 9) == [12]
    assert levels(9, "natural", 10) == [9]
    with pytest.raises(ValueError, match="lowest_levels"):
        npl.plan_ntt(20, inverse=False, coset=False, input_order="natural",
                    output_order="natural", lowest_levels=11)  # fmt: skip
    with pytest.raises(ValueError, match="lowest_levels"):
        cn.CudaNtt(lowest_levels=-1)


def test_default_levels_rule() -> None:
    """A CudaNtt given no max_levels plans with 2^9 tiles at every size, its transforms' lowest
    pass a whole tile, and the H step with 2^10 at 2^19 and 2^20 only (the sizes where that was
    measured faster); a given number wins everywhere, and a pinned max_levels keeps the lowest
    pass as the others. Planning needs no GPU."""
    eng, pinned = cn.CudaNtt(), cn.CudaNtt(max_levels=10)
    off = cn.CudaNtt(lowest_levels=0)
    for k in range(1, 28):
        for oo in npl.ORDERS:
            plans = eng.plan(k, inverse=False, coset=True, input_order="natural",
                             output_order=oo)  # fmt: skip
            lowest = plans[0] if oo == "natural" else plans[-1]
            assert lowest.lowbits == 0
            if len(plans) > 1:
                assert lowest.L == npl.FINE_TILE_LOG, (k, oo)
            assert sum(p.L for p in plans) == k
        assert eng.levels_for(k) == npl.FINE_TILE_LOG
        assert eng.lowest_for(k) == npl.FINE_TILE_LOG
        assert off.lowest_for(k) == pinned.lowest_for(k) == 0
        assert all(p.tile_log <= max(p.L, npl.FINE_TILE_LOG) for p in plans), k
        h_levels = npl.TILE_LOG if k in (19, 20) else npl.FINE_TILE_LOG
        assert eng.levels_for(k, h_step=True) == h_levels
        assert eng.h_plan(k) == npl.plan_h_step(k, h_levels, small=True)
        assert pinned.levels_for(k) == pinned.levels_for(k, h_step=True) == 10

    def levels(e: cn.CudaNtt, k: int) -> list[int]:
        return [p.L for p in e.plan(k, inverse=False, coset=False, input_order="natural",
                                    output_order="natural")]  # fmt: skip

    assert levels(eng, 22) == [9, 7, 6] and levels(off, 22) == [8, 7, 7]
    assert levels(eng, 20) == [9, 6, 5] and levels(off, 20) == [7, 7, 6]
    assert levels(eng, 16) == [9, 7] and levels(off, 16) == [8, 8]
    assert levels(eng, 27) == levels(off, 27) == [9, 9, 9]


def test_split_levels() -> None:
    assert npl.split_levels(27) == [9, 9, 9]
    assert npl.split_levels(20) == [10, 10]
    assert npl.split_levels(11) == [6, 5]
    for k in range(1, 28):
        parts = npl.split_levels(k)
        assert sum(parts) == k and max(parts) <= npl.TILE_LOG


def test_small_plans_shape() -> None:
    """What the small plans promise: one pass up to 2^12, passes of at most 11 levels above,
    2^10-element tiles wherever a pass has at most 10 levels (the default grids), full tables up
    to 2^22 and split ones above, and nothing changed with small off."""
    for k in range(1, 28):
        plans = npl.plan_ntt(k, inverse=True, coset=True, input_order="natural",
                            output_order="natural", small=True)  # fmt: skip
        levels = [p.L for p in plans]
        assert sum(levels) == k
        if k <= npl.WHOLE_TILE_LOG:
            assert levels == [k]
        else:
            assert max(levels) <= npl.SMALL_TILE_LOG
            assert len(plans) == len(npl.split_levels(k, npl.SMALL_TILE_LOG))
        assert all(p.tile_log <= max(p.L, npl.TILE_LOG) for p in plans)
        assert bool(plans[-1].flags & npl.F_POST_FULL) == (k <= npl.FULL_TABLE_MAX_LOG)
        default = npl.plan_ntt(k, inverse=True, coset=True, input_order="natural",
                              output_order="natural")  # fmt: skip
        if npl.WHOLE_TILE_LOG < k <= 2 * npl.TILE_LOG:  # the same passes and tiles
            assert [(p.L, p.log_c) for p in plans] == [(p.L, p.log_c) for p in default]
        assert all(not p.flags & (npl.F_PRE_FULL | npl.F_POST_FULL) for p in default)
        assert max(p.tile_log for p in default) <= npl.TILE_LOG
    assert [p.L for p in npl.plan_ntt(22, inverse=False, coset=False, input_order="natural",
                                     output_order="natural", small=True)] == [11, 11]  # fmt: skip
    # one multiplication per element less for each full table (coset forward at 2^20)
    kw = dict(inverse=False, coset=True, input_order="natural", output_order="natural")
    small_cost = npl.plan_cost(npl.plan_ntt(20, small=True, **kw))[1]
    assert npl.plan_cost(npl.plan_ntt(20, **kw))[1] - small_cost == 1 << 20

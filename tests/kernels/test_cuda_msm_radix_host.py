"""The MSM's radix sort (``msm_sort = "radix"``) on the CPU: the host side of
kernels/cuda/msm_stages.py (``_radix_sort``, its plans from kernels/cuda/msm_plan.py, scans and
buffers, with numpy for CuPy) driving a host build of
kernels/cuda/src/msm/radix.cuh, against buckets computed here from the signed digits.

Why: the radix kernels' bodies stride every loop by blockDim.x between barriers and write their
warp operations so that one thread per block computes what a full block does, so a g++ build
with one-thread shims runs the exact index algebra the GPU runs. What it cannot see is the warp
operations (a warp of one lane here: the ones' shared rank, the scan's shuffles); the GPU tests
(test_cuda_msm.py) compare the same sort with the counting sort on the device, and this one
keeps the rest checked in CI, where there is no GPU.
"""

from __future__ import annotations

import ctypes
import random
from pathlib import Path

import numpy as np
import pytest

from provetop.kernels import layout
from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu.msm import signed_digits
from provetop.kernels.cuda import msm_plan as mp
from provetop.kernels.cuda import msm_stages
from tests.kernels.host_build import build_driver

SHIM = r"""
#include <stdint.h>
#include <string.h>
struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1},
                gridDim = {1, 1, 1};
static inline void __syncthreads() {}
static inline uint32_t atomicAdd(uint32_t* p, uint32_t v) { uint32_t o = *p; *p = o + v; return o; }
// one thread per block: a warp of one lane
static inline uint32_t __ballot_sync(uint32_t, bool pred) { return pred ? 1u : 0u; }
static inline uint32_t __shfl_sync(uint32_t, uint32_t v, uint32_t) { return v; }
static inline uint32_t __shfl_up_sync(uint32_t, uint32_t v, uint32_t) { return v; }
static inline int __popc(uint32_t x) { return __builtin_popcount(x); }
static inline int __ffs(uint32_t x) { return __builtin_ffs((int)x); }
#define __device__
#define __forceinline__ inline
// A chunk of the partition's levels is blockDim.x x MSM_RADIX_STAGE entries, held in each
// thread's registers between its ranks and its stores: one host thread holds the largest chunk.
#define MSM_RADIX_STAGE 4096
#include "msm/radix.cuh"

// Dynamic shared memory of one block: the most any launch here asks for (level a with 512
// superbins and a 4,096-entry chunk: 3 x 513 + 32 + 2 x 4,096 words; a bucket step of 2^12
// low keys), with room to spare.
static uint32_t sh[1 << 15];

#define EMU_GRID(blocks, call)                                               \
    do {                                                                     \
        gridDim.x = (blocks);                                                \
        for (unsigned q = 0; q < (blocks); q++) { blockIdx.x = q; call; }    \
    } while (0)

extern "C" void emu_hist(unsigned blocks, const uint32_t* scalars, uint32_t n, uint32_t c,
                         uint32_t W, uint32_t w_lo, uint32_t w_hi, uint32_t tile, uint32_t s,
                         uint32_t t, uint32_t* kbuf, uint32_t* hist) {
    EMU_GRID(blocks, msm_radix_hist_body(scalars, n, c, W, w_lo, w_hi, tile, s, t, kbuf, hist,
                                         sh));
}
extern "C" void emu_part_a(unsigned blocks, const uint32_t* kbuf, uint32_t n, uint32_t B,
                           uint32_t g, uint32_t tile, uint32_t s, uint32_t t, uint32_t chunk,
                           const uint32_t* base, uint32_t* a1_e, uint32_t* a1_k,
                           uint32_t* sorted) {
    EMU_GRID(blocks, msm_radix_part_a_body(kbuf, n, B, g, tile, s, t, chunk, base, a1_e, a1_k,
                                           sorted, sh));
}
extern "C" void emu_part_b(unsigned blocks, const uint32_t* a1_e, const uint32_t* a1_k,
                           uint32_t s, uint32_t t, uint32_t nsb, uint32_t chunk,
                           const uint32_t* sb_start, const uint32_t* pre_b, uint32_t* cursor,
                           uint32_t* a_ent, uint16_t* a_lo) {
    EMU_GRID(blocks, msm_radix_part_b_body(a1_e, a1_k, s, t, nsb, chunk, sb_start, pre_b,
                                           cursor, a_ent, a_lo, sh));
}
extern "C" void emu_bucket(unsigned blocks, const uint32_t* a_ent, const uint16_t* a_lo,
                           const uint32_t* offs, uint32_t key0, uint32_t nbin, uint32_t s,
                           uint32_t chunk, const uint32_t* pre, uint32_t* cursor,
                           uint32_t* sorted) {
    EMU_GRID(blocks, msm_radix_bucket_body(a_ent, a_lo, offs, key0, nbin, s, chunk, pre, cursor,
                                           sorted, sh));
}
"""

# The MSM's entry points and the host functions standing for them.
EMU = {
    "msm_radix_hist": "emu_hist",
    "msm_radix_part_a": "emu_part_a",
    "msm_radix_part_b": "emu_part_b",
    "msm_radix_bucket": "emu_bucket",
}
SHARED_WORDS = 1 << 15


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    lib = build_driver(tmp_path_factory.mktemp("radix"), "radix_host", SHIM, shared=True)
    return ctypes.CDLL(str(lib))


class HostKernels:
    """Stands for provetop.kernels.cuda.msm_stages.MsmKernels: launch_blocks runs the host build,
    one thread
    per block, with numpy arrays as the device buffers."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.launched: list[str] = []

    def launch_blocks(
        self, name: str, blocks: int, threads: int, args: tuple, shared: int, stream: object
    ) -> None:
        assert shared <= 4 * SHARED_WORDS, (name, shared)
        assert mp.RADIX_STAGE <= 4096, "one host thread holds at most 4,096 entries"
        assert threads == mp.RADIX_THREADS
        self.launched.append(name)
        if blocks <= 0:
            return
        c_args = [ctypes.c_uint(blocks)]
        for a in args:
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous, name
                c_args.append(ctypes.c_void_p(a.ctypes.data))
            else:
                c_args.append(ctypes.c_uint32(int(a)))
        getattr(self.lib, EMU[name])(*c_args)


def bucket_entries(ks: list[int], c: int) -> tuple[np.ndarray, dict[int, list[int]]]:
    """The offsets (K + 1) and each bucket's entries (point index | sign << 31), from the
    signed digits: a scalar 1 is one entry of the ones bucket (key W B), a 0 none, and digit d
    of window w the bucket w B + |d| - 1."""
    W, B = mp.num_windows(c), 1 << (c - 1)
    K = W * B + 1
    want: dict[int, list[int]] = {}
    for i, k in enumerate(ks):
        if k == 0:
            continue
        if k == 1:
            want.setdefault(W * B, []).append(i)
            continue
        for w, d in enumerate(signed_digits(k, c)):
            if d:
                want.setdefault(w * B + abs(d) - 1, []).append(i | (0x80000000 if d < 0 else 0))
    counts = np.zeros(K, dtype=np.int64)
    for key, entries in want.items():
        counts[key] = len(entries)
    offs = np.zeros(K + 1, dtype=np.uint32)
    offs[1:] = np.cumsum(counts)
    return offs, want


def scalars_for(kind: str, n: int, c: int, rng: random.Random) -> list[int]:
    if kind == "dense":
        return [rng.randrange(R) for _ in range(n)]
    if kind == "witness":  # half ones, some zeros, the rest dense
        return [rng.choice([1, 1, 0, rng.randrange(R)]) for _ in range(n)]
    # the ends of the bucket range in every window, and one heavy bucket
    W = mp.num_windows(c)
    pool = [R - 1, R - 2, (1 << c) - 1, 2, 1, 0, (1 << (c - 1)) + 1]
    pool += [(1 << (c - 1)) << (c * w) for w in range(W - 1)]
    pool = [k % R for k in pool]
    ks = [rng.choice(pool) if rng.random() < 0.8 else rng.randrange(R) for _ in range(n)]
    ks[: n // 8] = [2] * (n // 8)
    return ks


def run_radix(lib: ctypes.CDLL, ks: list[int], c: int) -> tuple:
    n = len(ks)
    p = mp.make_plan(n, c)
    offs, want = bucket_entries(ks, c)
    m = int(offs[-1])
    scalars = np.ascontiguousarray(layout.fr_to_limbs(ks, montgomery=False)).view(np.uint32)
    scalars = np.ascontiguousarray(scalars.reshape(n, 8))
    starts = [int(offs[w * p.B]) for w in range(p.W + 1)]
    cursor = offs[: p.K].copy()
    sorted_e = np.full(max(m, 1), 0xDEADBEEF, dtype=np.uint32)  # poisoned
    mod = HostKernels(lib)
    msm_stages._radix_sort(mod, scalars, n, p, offs, starts, cursor, sorted_e, None,
                           lambda _stage: None, m, xp=np)  # fmt: skip
    return offs, want, sorted_e, mod.launched


# (tiles, superbins, stage, bin entries, chunk): the shipped shape, and small ones that make a
# tile span many level-a chunks, a superbin many level-b blocks and a bin many bucket chunks
SHAPES = [
    (mp.RADIX_TILES, mp.RADIX_SUPERBINS, mp.RADIX_STAGE, mp.RADIX_BIN_ENTRIES, mp.RADIX_CHUNK),
    (3, 4, 64, 32, 48),
    (7, 3, 32, 64, 5),
    (2, 16, 512, 8, 1 << 15),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("group", [0, 1, 3])
def test_radix_sort_on_the_host(
    emu: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch, shape: tuple, group: int
) -> None:
    """Every bucket's entries, exactly, in the slots the offsets give it, every slot written;
    fresh random scalars of three kinds at several windows and sizes; with the rule's windows
    per launch (``group`` 0: all of them at these sizes) and with 1 or 3 (several launches, as
    at 2^27)."""
    tiles, superbins, stage, bin_entries, chunk = shape
    if group:
        rule = mp.radix_plan
        monkeypatch.setattr(mp, "radix_plan", lambda n, c, g=0, budget=0: rule(n, c, group))
    monkeypatch.setattr(mp, "RADIX_TILES", tiles)
    monkeypatch.setattr(mp, "RADIX_SUPERBINS", superbins)
    monkeypatch.setattr(mp, "RADIX_STAGE", stage)
    monkeypatch.setattr(mp, "RADIX_BIN_ENTRIES", bin_entries)
    monkeypatch.setattr(mp, "RADIX_CHUNK", chunk)
    rng = random.Random()
    for kind, n, c in [("dense", 700, 9), ("witness", 1100, 13), ("edges", 513, 7)]:
        ks = scalars_for(kind, n, c, rng)
        offs, want, got, launched = run_radix(emu, ks, c)
        what = f"{shape} group={group}: {kind} n={n} c={c}"
        assert {"msm_radix_hist", "msm_radix_part_a"} <= set(launched), what
        assert len(got) == max(int(offs[-1]), 1), what
        for key in range(len(offs) - 1):
            lo, hi = int(offs[key]), int(offs[key + 1])
            same = sorted(got[lo:hi].tolist()) == sorted(want.get(key, []))
            assert same, f"{what}: bucket {key}'s {hi - lo} slots hold other entries"


def test_every_kernel_has_a_host_build() -> None:
    """Each radix kernel the host code launches has its stand-in here, and its body is in
    radix.cuh (the GPU wrappers in msm.cu hold nothing else)."""
    src = (Path(mp.__file__).parent / "src" / "msm" / "radix.cuh").read_text()
    for kernel in EMU:
        assert f"void {kernel}_body(" in src

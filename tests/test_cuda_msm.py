"""The GPU MSM and SRS (kernels/cuda_msm.py, kernels/cuda_srs.py) against the CPU reference.

Why these cases: fresh random points and scalars at every size in {1, 2, 3, 31, 1000, 4096}
(sizes below, at and above a warp and a chunk), and the inputs that break a Pippenger in
practice: all-zero and all-one scalars, a real witness mix (48% zeros, 48% ones, 4% dense),
one point repeated many times (the doubling case inside a bucket), the point at infinity among
the inputs; every call's scratch comes from an allocator that fills memory with 0xff, so a
buffer the pipeline forgets to initialise shows up as a wrong result. At 2^20 and 2^24 the
reference MSM would take hours on a CPU; there the known-secret identity
MSM(k, [s]G) = [<k, s>]G is exact and costs one dot product in Fr and one scalar multiplication.
"""

from __future__ import annotations

import operator
import random

import numpy as np
import pytest

from kernels import layout
from kernels.constants import FR_MODULUS as R
from kernels.cpu import g1
from kernels.cpu import msm as cmsm

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def poison(cp):
    """An allocator (nbytes -> MemoryPointer) whose every block starts as 0xff bytes."""
    pool = cp.cuda.MemoryPool()

    def alloc(nbytes: int):
        mem = pool.malloc(nbytes)
        if nbytes:
            cp.cuda.runtime.memset(mem.ptr, 0xFF, nbytes)
        return mem

    return alloc


def random_points(cp, n: int) -> tuple[object, list[g1.Affine]]:
    """n random points [s]G from the GPU SRS (a few checked against the CPU scalar mult)."""
    from kernels.cuda_srs import srs_random_points

    pts_dev, secrets = srs_random_points(n)
    pts = layout.g1_from_limbs(pts_dev.get())
    for i in random.sample(range(n), min(n, 3)):
        assert pts[i] == g1.scalar_mul(g1.GENERATOR, secrets[i]), "GPU SRS point wrong"
    return pts_dev, pts


def scalars_of(kind: str, n: int, rng: random.Random) -> list[int]:
    if kind == "dense":
        return layout.random_fr(n, rng)
    if kind == "zeros":
        return [0] * n
    if kind == "ones":
        return [1] * n
    # a real witness: 48% zeros, 48% ones, 4% dense
    return [rng.choice((0, 1)) if rng.random() < 0.96 else rng.randrange(R) for _ in range(n)]


def gpu_msm(cp, pts_dev, ks: list[int], alloc, **kw) -> g1.Affine:
    from kernels.cuda_msm import msm

    sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
    out = msm(pts_dev, sc, allocator=alloc, **kw)
    assert isinstance(out, np.ndarray) and out.shape == (12,) and out.dtype == np.uint64
    return layout.g1_from_limbs(out)[0]


@pytest.mark.parametrize("n", [1, 2, 3, 31, 1000, 4096])
def test_msm_matches_reference(cp, poison, n: int) -> None:
    rng = random.Random()
    pts_dev, pts = random_points(cp, n)
    for kind in ("dense", "zeros", "ones", "witness"):
        ks = scalars_of(kind, n, rng)
        got = gpu_msm(cp, pts_dev, ks, poison)
        assert got == cmsm.msm_fast(pts, ks), f"GPU MSM != reference (n={n}, {kind})"


def test_repeated_points_and_infinity(cp, poison) -> None:
    rng = random.Random()
    n = 1000
    pts_dev, pts = random_points(cp, 8)
    idx = [rng.randrange(8) for _ in range(n)]
    big = cp.ascontiguousarray(pts_dev[cp.asarray(idx)])
    full = [pts[i] for i in idx]
    for i in rng.sample(range(n), 20):  # the point at infinity (all-zero row)
        big[i] = 0
        full[i] = None
    ks = layout.random_fr(n, rng)
    for i in range(0, n, 7):
        ks[i] = ks[0]  # the same (point, scalar) pairs: P + P inside buckets
    assert gpu_msm(cp, big, ks, poison) == cmsm.msm_fast(full, ks)
    # P and -P in one bucket cancel to infinity
    neg = cp.asarray(layout.g1_to_limbs([g1.affine_neg(pts[0])]))
    both = cp.concatenate([pts_dev[:1], neg])
    assert gpu_msm(cp, both, [5, 5], poison) is None


def test_window_sizes_agree(cp, poison) -> None:
    """Every window (small, odd, large) gives the same point: the digits and bucket layout are
    right for each c, not only for the one the rule picks."""
    rng = random.Random()
    pts_dev, pts = random_points(cp, 300)
    ks = scalars_of("dense", 300, rng)
    want = cmsm.msm_fast(pts, ks)
    for c in (4, 7, 13, 16, 21):
        assert gpu_msm(cp, pts_dev, ks, poison, window_bits=c) == want, f"window {c}"


def test_host_streamed_points(cp, poison) -> None:
    """Points in pinned host memory, uploaded in chunks overlapped with the compute."""
    from kernels.cuda_msm import msm_host_points, pinned_empty

    rng = random.Random()
    n = 4096
    pts_dev, pts = random_points(cp, n)
    host = pinned_empty((n, 12))
    host[:] = pts_dev.get()
    ks = scalars_of("witness", n, rng)
    ks[: n // 2] = layout.random_fr(n // 2, rng)
    sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
    got = msm_host_points(host, sc, chunk=1000, allocator=poison)
    want = cmsm.msm_fast(pts, ks)
    assert layout.g1_from_limbs(got)[0] == want
    # msm() itself routes host points (numpy, not pinned here) and numpy scalars
    from kernels.cuda_msm import msm

    plain = pts_dev.get()
    got2 = msm(plain, layout.fr_to_limbs(ks, montgomery=False), allocator=poison)
    assert layout.g1_from_limbs(got2)[0] == want


def test_selftest_rows(cp) -> None:
    """The rows `provetop selftest --backend cuda` gains from this module pass."""
    from kernels.cuda_msm import selftest_checks
    from kernels.selftest import run_check

    for check in selftest_checks():
        res = run_check(check)
        assert res.status == "pass", f"{check.name}: {res.status} {res.detail}"


def test_srs_edges(cp) -> None:
    from kernels.cuda_srs import srs

    rng = random.Random()
    secrets = [0, 1, 2, R - 1, R - 2, (1 << 254) + 12345] + layout.random_fr(26, rng)
    out = srs(cp.asarray(layout.fr_to_limbs(secrets, montgomery=False))).get()
    got = layout.g1_from_limbs(out)
    for s, p in zip(secrets, got, strict=True):
        assert p == g1.scalar_mul(g1.GENERATOR, s), f"srs([{s:#x}]G)"


def dot_mod_r(ks: list[int], ss: list[int]) -> int:
    return sum(map(operator.mul, ks, ss)) % R


@pytest.mark.slow
@pytest.mark.parametrize("log_n", [20, 24])
def test_identity_large(cp, log_n: int) -> None:
    """MSM(k, [s]G) == [<k, s> mod r]G at 2^20 and 2^24, with the SRS from the GPU generator."""
    from kernels.cuda_msm import msm
    from kernels.cuda_srs import srs

    n = 1 << log_n
    gen = np.random.default_rng()
    s_limbs = layout.random_fr_limbs(n, gen, montgomery=False)
    k_limbs = layout.random_fr_limbs(n, gen, montgomery=False)
    k_limbs[: n // 4] = 0  # a quarter zeros, a quarter ones, half dense
    k_limbs[n // 4 : n // 2] = 0
    k_limbs[n // 4 : n // 2, 0] = 1
    pts = srs(cp.asarray(s_limbs))
    got = msm(pts, cp.asarray(k_limbs))
    e = dot_mod_r(
        layout.fr_from_limbs(k_limbs, montgomery=False),
        layout.fr_from_limbs(s_limbs, montgomery=False),
    )
    assert layout.g1_from_limbs(got)[0] == g1.scalar_mul(g1.GENERATOR, e)

"""MSM: Pippenger (several windows) vs the naive sum vs py_ecc, edge cases, digits, buckets."""

from __future__ import annotations

import random

import pytest

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import g1
from provetop.kernels.cpu.msm import (
    ARKWORKS_AVAILABLE,
    batch_add,
    default_window_bits,
    msm_fast,
    msm_naive,
    num_windows,
    pippenger,
    signed_digits,
    trace_arrays,
)
from provetop.kernels.layout import g1_from_limbs, random_fr

try:  # the independent implementation (a test dependency; absent on the GPU image)
    from py_ecc import optimized_bls12_381 as ecc
except ImportError:  # pragma: no cover
    ecc = None


def rand_points(n: int, rng: random.Random) -> list:
    return [g1.scalar_mul(g1.GENERATOR, s) for s in random_fr(n, rng)]


def py_ecc_msm(points, scalars):
    if ecc is None:
        pytest.skip("py_ecc not installed")
    acc = ecc.Z1
    for pt, k in zip(points, scalars, strict=True):
        if pt is not None:
            acc = ecc.add(acc, ecc.multiply((ecc.FQ(pt[0]), ecc.FQ(pt[1]), ecc.FQ.one()), k))
    if ecc.is_inf(acc):
        return None
    x, y = ecc.normalize(acc)
    return (int(x.n), int(y.n))


def test_pippenger_naive_and_py_ecc_agree() -> None:
    rng = random.Random()
    pts = rand_points(10, rng)
    ks = random_fr(10, rng)
    want = py_ecc_msm(pts, ks)
    assert msm_naive(pts, ks) == want
    for c in (1, 2, 3, 4, 5, 8, 9):
        assert pippenger(pts, ks, window_bits=c) == want, c
    assert pippenger(pts, ks) == want
    assert msm_fast(pts, ks) == want
    assert msm_fast(pts, ks, use_arkworks=False) == want


def test_edge_cases() -> None:
    rng = random.Random()
    n = 40
    pts = rand_points(n, rng)
    pts[3] = None  # infinity
    pts[5] = pts[4]  # repeated point
    pts[7] = g1.affine_neg(pts[6])  # opposite points, both with scalar 1 -> cancel
    ks = random_fr(n, rng)
    for i in (0, 4, 5, 6, 7, 8):
        ks[i] = 1
    ks[1] = 0
    ks[2] = FR_MODULUS - 1
    ks[9] = 2
    ks[10] = (1 << 254) + 1
    want = msm_naive(pts, ks)
    if ecc is not None:
        assert want == py_ecc_msm(pts, ks)
    for c in (2, 4, 7):
        assert pippenger(pts, ks, window_bits=c) == want
        assert pippenger(pts, ks, window_bits=c, split_ones=False) == want
    assert msm_fast(pts, ks) == want
    # all zeros, all ones, single point, empty input
    assert pippenger(pts, [0] * n) is None and msm_fast(pts, [0] * n) is None
    assert pippenger(pts, [1] * n) == g1.affine_sum(pts) == msm_fast(pts, [1] * n)
    assert pippenger(pts[:1], [ks[11]]) == g1.scalar_mul(pts[0], ks[11])
    assert pippenger([], []) is None and msm_fast([], []) is None
    # the same point n times with scalar k = [n k] P
    p = pts[12]
    assert pippenger([p] * 9, [ks[13]] * 9) == g1.scalar_mul(p, 9 * ks[13])


def test_scalars_outside_fr_raise() -> None:
    rng = random.Random()
    pts = rand_points(2, rng)
    for bad in (FR_MODULUS, FR_MODULUS + 5, 1 << 255, -1):
        with pytest.raises(ValueError):
            pippenger(pts, [1, bad])
        with pytest.raises(ValueError):
            msm_fast(pts, [1, bad])
    # the naive definition accepts any int: [k]P = [k mod r]P in G1
    k = rng.randrange(FR_MODULUS)
    assert msm_naive(pts[:1], [k + FR_MODULUS]) == msm_naive(pts[:1], [k])
    with pytest.raises(ValueError):
        pippenger(pts, [1])


@pytest.mark.parametrize("c", [1, 2, 5, 8, 13, 16, 20])
def test_signed_digits(c: int) -> None:
    rng = random.Random()
    half = 1 << (c - 1)
    for k in [0, 1, FR_MODULUS - 1, (1 << 255) - 1] + random_fr(20, rng):
        d = signed_digits(k, c)
        assert len(d) == num_windows(c) == -(-256 // c)
        assert sum(dj << (c * j) for j, dj in enumerate(d)) == k
        assert all(-(half - 1) <= dj <= half for dj in d)
    with pytest.raises(ValueError):
        signed_digits(1 << 255, c)


def test_buckets_follow_their_definition() -> None:
    rng = random.Random()
    n, c = 30, 4
    pts = rand_points(n, rng)
    ks = random_fr(n, rng)
    ks[0], ks[1] = 1, 0
    res, tr = pippenger(pts, ks, window_bits=c, return_buckets=True)
    assert res == msm_naive(pts, ks)
    assert tr.ones_indices == [0] and 1 not in tr.tail_indices and 0 not in tr.tail_indices
    assert tr.ones_sum == pts[0]
    assert len(tr.buckets) == tr.num_windows and all(len(b) == 1 << (c - 1) for b in tr.buckets)
    for j in range(tr.num_windows):
        want = [None] * (1 << (c - 1))
        for i in tr.tail_indices:
            d = signed_digits(ks[i], c)[j]
            if d:
                want[abs(d) - 1] = g1.affine_add(
                    want[abs(d) - 1], pts[i] if d > 0 else g1.affine_neg(pts[i])
                )
        assert tr.buckets[j] == want
        assert tr.window_sums[j] == msm_naive(want, [b + 1 for b in range(len(want))])
    total = msm_naive(tr.window_sums, [1 << (c * j) for j in range(tr.num_windows)])
    assert g1.affine_add(total, tr.ones_sum) == res
    arrs = trace_arrays(tr)
    assert arrs["buckets"].shape == (tr.num_windows, 1 << (c - 1), 12)
    assert g1_from_limbs(arrs["buckets"][2]) == tr.buckets[2]
    assert g1_from_limbs(arrs["window_sums"]) == tr.window_sums
    assert g1_from_limbs(arrs["ones_sum"]) == [tr.ones_sum]


def test_batch_add() -> None:
    rng = random.Random()
    pts = rand_points(9, rng)
    assert batch_add(pts) == g1.affine_sum(pts)
    assert batch_add([]) is None and batch_add([None]) is None
    assert batch_add([pts[0], g1.affine_neg(pts[0])]) is None
    assert batch_add([pts[0], pts[0]]) == g1.affine_double(pts[0])
    assert batch_add([pts[0], None, pts[0], pts[1]]) == g1.affine_sum([pts[0], pts[0], pts[1]])


def test_default_window_bits_grows_with_n() -> None:
    sizes = [default_window_bits(1 << k) for k in range(0, 25, 4)]
    assert sizes == sorted(sizes) and 2 <= sizes[0] and sizes[-1] <= 16


@pytest.mark.skipif(not ARKWORKS_AVAILABLE, reason="py-arkworks-bls12381 not installed")
def test_arkworks_fast_path_matches_reference_at_256() -> None:
    rng = random.Random()
    pts = rand_points(16, rng) * 16
    ks = random_fr(256, rng)
    assert msm_fast(pts, ks) == pippenger(pts, ks)

"""The fixed-base MSM (kernels/cuda/msm_fixed.py) against the CPU reference.

Why these cases: the table's rows themselves (each 2^(c w) P_i against the CPU's scalar
multiplication, in a table built into 0xff-poisoned memory), then whole MSMs on fresh random
points and scalars at several sizes and windows (n = 1 and 31, below a warp; c = 4 with 64
windows; c = 20 with 2^19 buckets for 4096 points) with the inputs that break a Pippenger:
zeros, ones, a witness mix, repeated (point, scalar) pairs, the point at infinity, P and -P;
at 2^20 the known-secret identity. Every call's scratch comes from an allocator that fills
memory with 0xff. The window rule and its limits are checked without a GPU.
"""

from __future__ import annotations

import operator
import random

import numpy as np
import pytest

from provetop.kernels import layout
from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu import g1
from provetop.kernels.cpu import msm as cmsm
from provetop.kernels.cuda import msm as cm
from provetop.kernels.cuda import msm_fixed as mf
from provetop.kernels.cuda import msm_plan as mp
from tests.kernels.test_cuda_msm import (  # noqa: F401 (poison: a fixture)
    poison,
    random_points,
    repeated_points_with_infinity,
    scalars_of,
)


def fixed_msm(cp, table, ks: list[int], alloc) -> g1.Affine:
    sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
    out = mf.msm_fixed(table, sc, allocator=alloc)
    assert isinstance(out, np.ndarray) and out.shape == (12,) and out.dtype == np.uint64
    return layout.g1_from_limbs(out)[0]


@pytest.mark.gpu
@pytest.mark.parametrize("n, c", [(5, 4), (300, 7), (1000, 13)])
def test_table_rows_are_the_shifted_points(cp, poison, n: int, c: int) -> None:  # noqa: F811
    pts_dev, pts = random_points(cp, n)
    pts_dev[1] = 0  # the point at infinity stays infinity in every window
    pts[1] = None
    table = mf.build_table(pts_dev, c, allocator=poison)
    assert table.rows.shape == (mp.num_windows(c) * n, 12) and table.nbytes == table.rows.nbytes
    rows = layout.g1_from_limbs(table.rows.get())
    rng = random.Random()
    for w in range(table.windows):
        for i in {0, 1, n - 1, *rng.sample(range(n), min(n, 4))}:
            want = None if pts[i] is None else g1.scalar_mul(pts[i], 1 << (c * w))
            assert rows[w * n + i] == want, f"row of window {w}, point {i}"


@pytest.mark.gpu
@pytest.mark.parametrize("n, c", [(1, 4), (31, 5), (1000, 9), (4096, 12), (4096, 20)])
def test_fixed_msm_matches_reference(cp, poison, n: int, c: int) -> None:  # noqa: F811
    rng = random.Random()
    pts_dev, pts = random_points(cp, n)
    table = mf.build_table(pts_dev, c, allocator=poison)
    for kind in ("dense", "zeros", "ones", "witness"):
        ks = scalars_of(kind, n, rng)
        got = fixed_msm(cp, table, ks, poison)
        assert got == cmsm.msm_fast(pts, ks), f"fixed-base MSM != reference (n={n}, c={c}, {kind})"


@pytest.mark.gpu
def test_fixed_msm_edges(cp, poison) -> None:  # noqa: F811
    rng = random.Random()
    big, full, ks, (pts_dev, pts) = repeated_points_with_infinity(cp, 1000, rng)
    ks[3], ks[4], ks[5] = R - 1, 1, 2  # the largest scalar, a one, a single small digit
    for c in (6, 11):
        table = mf.build_table(big, c, allocator=poison)
        assert fixed_msm(cp, table, ks, poison) == cmsm.msm_fast(full, ks), c
    # P and -P with the same scalar cancel to infinity, in every window's bucket
    neg = cp.asarray(layout.g1_to_limbs([g1.affine_neg(pts[0])]))
    both = mf.build_table(cp.concatenate([pts_dev[:1], neg]), 8, allocator=poison)
    assert fixed_msm(cp, both, [5, 5], poison) is None
    assert fixed_msm(cp, both, [R - 3, R - 3], poison) is None


@pytest.mark.gpu
def test_fixed_and_general_msm_agree_and_tables_are_reused(cp, poison) -> None:  # noqa: F811
    """One table serves many scalar vectors (the prover's use), with the general MSM's
    answer each time; host scalars go up on the caller's stream."""
    rng = random.Random()
    n = 3000
    pts_dev, _ = random_points(cp, n)
    table = mf.build_table(pts_dev, allocator=poison)  # the rule's window
    assert table.c == mf.choose_fixed_window_bits(n)
    for _ in range(3):
        k_host = layout.fr_to_limbs(layout.random_fr(n, rng), montgomery=False)
        got = mf.msm_fixed(table, k_host, allocator=poison)
        want = cm.msm(pts_dev, cp.asarray(k_host), allocator=poison)
        assert np.array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.slow
def test_fixed_identity_2_20(cp) -> None:
    """MSM(k, [s]G) == [<k, s> mod r]G at 2^20 with the rule's window (c = 20: 13 windows into
    one set of 2^19 buckets), a quarter zeros, a quarter ones, half dense."""
    from provetop.kernels.cuda.srs import srs

    n = 1 << 20
    gen = np.random.default_rng()
    s_limbs = layout.random_fr_limbs(n, gen, montgomery=False)
    k_limbs = layout.random_fr_limbs(n, gen, montgomery=False)
    k_limbs[: n // 2] = 0
    k_limbs[n // 4 : n // 2, 0] = 1
    table = mf.build_table(srs(cp.asarray(s_limbs)))
    got = mf.msm_fixed(table, cp.asarray(k_limbs))
    ks = layout.fr_from_limbs(k_limbs, montgomery=False)
    ss = layout.fr_from_limbs(s_limbs, montgomery=False)
    e = sum(map(operator.mul, ks, ss)) % R
    assert layout.g1_from_limbs(got)[0] == g1.scalar_mul(g1.GENERATOR, e)


@pytest.mark.gpu
def test_bad_inputs_are_refused_with_a_reason(cp) -> None:
    pts_dev, _ = random_points(cp, 4)
    table = mf.build_table(pts_dev, 5)
    with pytest.raises(ValueError, match="3 scalars for a table of 4 points"):
        mf.msm_fixed(table, cp.zeros((3, 4), dtype=np.uint64))
    with pytest.raises(ValueError, match=r"\(n, 4\)"):
        mf.msm_fixed(table, cp.zeros((4, 3), dtype=np.uint64))
    with pytest.raises(ValueError, match="window bits"):
        mf.build_table(pts_dev, 30)


# --- no GPU: the window rule and its limits ------------------------------------------------------


def test_fixed_window_rule_minimises_its_model_within_the_memory_limit() -> None:
    for log_n in (10, 16, 20, 24, 27):
        n = 1 << log_n
        c = mf.choose_fixed_window_bits(n)
        costs = {
            w: mf.fixed_window_cost(n, w)
            for w in range(mp.MIN_WINDOW, mp.MAX_WINDOW + 1)
            if mp.num_windows(w) * n < mf.MAX_ROWS
        }
        assert costs[c] == min(costs.values()), log_n
        # one bucket set: never more modelled work than the general MSM's W sets
        assert mf.fixed_window_cost(n, c) <= mp.window_cost(n, mp.choose_window_bits(n))
    n = 1 << 20
    limit = 10 * n * mf.AFFINE_BYTES  # ten windows' rows at most: c >= 26 would be needed
    with pytest.raises(ValueError, match="no fixed-base table"):
        mf.choose_fixed_window_bits(n, limit)
    limit = 14 * n * mf.AFFINE_BYTES
    c = mf.choose_fixed_window_bits(n, limit)
    assert mf.table_bytes(n, c) <= limit and mp.num_windows(c) <= 14


def test_fixed_plan_is_one_window_with_the_ones_bucket_last() -> None:
    for c in (4, 13, 20, 23):
        p = mf.fixed_plan(1000, c)
        assert (p.W, p.B, p.K) == (1, 1 << (c - 1), (1 << (c - 1)) + 1)
        assert p.S * p.G >= p.B and p.S & (p.S - 1) == 0

"""SRS generation with known secrets and the two exact identities."""

from __future__ import annotations

import random

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import g1
from provetop.kernels.cpu.msm import msm_fast, pippenger
from provetop.kernels.cpu.srs import (
    ARKWORKS_AVAILABLE,
    check_h_identity,
    check_msm_identity,
    powers,
    srs_points,
)
from provetop.kernels.layout import random_fr

R = FR_MODULUS


def test_powers() -> None:
    tau = random.Random().randrange(R)
    ps = powers(tau, 6)
    assert ps == [pow(tau, i, R) for i in range(6)]
    assert powers(tau, 0) == []


def test_srs_points_match_scalar_mul_on_both_paths() -> None:
    rng = random.Random()
    secrets = random_fr(12, rng) + [0, R, 1, R - 1, 255, 256, 1 << 254]
    want = [g1.scalar_mul(g1.GENERATOR, s) for s in secrets]
    assert srs_points(secrets, use_arkworks=False) == want
    if ARKWORKS_AVAILABLE:
        assert srs_points(secrets, use_arkworks=True) == want


def test_msm_identity_accepts_the_right_point_and_rejects_others() -> None:
    rng = random.Random()
    n = 64
    secrets = powers(rng.randrange(R), n)
    pts = srs_points(secrets)
    ks = random_fr(n, rng)
    ks[0] = 0
    ks[1] = 1
    for res in (pippenger(pts, ks, window_bits=4), msm_fast(pts, ks)):
        assert check_msm_identity(secrets, ks, res)
    good = msm_fast(pts, ks)
    assert not check_msm_identity(secrets, ks, g1.affine_double(good))
    assert not check_msm_identity(secrets, ks, None)
    ks2 = list(ks)
    ks2[5] = (ks2[5] + 1) % R
    assert not check_msm_identity(secrets, ks2, good)


def test_h_identity_end_to_end_with_srs_msm() -> None:
    """H step -> MSM against the tau-power SRS equals [h(tau)]G, and (ab-c)(tau) = h(tau)Z(tau)."""
    from provetop.kernels.cpu.ntt import evaluate, h_step

    rng = random.Random()
    n = 256
    tau = rng.randrange(R)
    a, b = random_fr(n, rng), random_fr(n, rng)
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    h = h_step(a, b, c)
    assert check_h_identity(a, b, c, h, tau)
    secrets = powers(tau, n - 1)
    res = msm_fast(srs_points(secrets), h)
    assert check_msm_identity(secrets, h, res)
    assert res == g1.scalar_mul(g1.GENERATOR, evaluate(h, tau))

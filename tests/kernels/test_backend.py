"""CpuBackend on numpy arrays in the shared layout, get_backend, and the 2^12 partition."""

from __future__ import annotations

import random

import numpy as np
import pytest

from provetop.kernels.backend import KernelBackend
from provetop.kernels.backends import BackendUnavailable, get_backend
from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import g1, ntt
from provetop.kernels.cpu.srs import check_h_identity, check_msm_identity, powers
from provetop.kernels.cpu_backend import CpuBackend
from provetop.kernels.layout import (
    fr_from_limbs,
    fr_to_limbs,
    g1_from_limbs,
    g1_to_limbs,
    random_fr,
    random_fr_limbs,
)

R = FR_MODULUS


def test_get_backend() -> None:
    be = get_backend("cpu")
    assert isinstance(be, CpuBackend) and isinstance(be, KernelBackend) and be.name == "cpu"
    with pytest.raises(ValueError):
        get_backend("tpu")
    try:
        import provetop.kernels.cuda.backend  # noqa: F401
    except ImportError:
        with pytest.raises(BackendUnavailable):
            get_backend("cuda")


def test_ntt_on_montgomery_arrays_all_orders_and_batch() -> None:
    be = CpuBackend()
    rng = random.Random()
    xs = random_fr(64, rng)
    arr = fr_to_limbs(xs)
    for inverse in (False, True):
        for coset in (False, True):
            for io in ("natural", "bitrev"):
                for oo in ("natural", "bitrev"):
                    out = be.ntt(arr, inverse=inverse, coset=coset, input_order=io, output_order=oo)
                    assert out.shape == (64, 4) and out.dtype == np.uint64
                    want = ntt.ntt(
                        xs, inverse=inverse, coset=coset, input_order=io, output_order=oo
                    )
                    assert fr_from_limbs(out) == want
    batch = np.stack([arr, fr_to_limbs(random_fr(64, rng))])
    out = be.ntt(batch, coset=True)
    assert out.shape == (2, 64, 4)
    for i in range(2):
        assert fr_from_limbs(out[i]) == ntt.ntt(fr_from_limbs(batch[i]), coset=True)
    with pytest.raises(ValueError):
        be.ntt(arr.astype(np.int64))


def test_h_step_msm_srs_via_arrays() -> None:
    be = CpuBackend()
    rng = random.Random()
    n = 128
    tau = rng.randrange(R)
    a, b = random_fr(n, rng), random_fr(n, rng)
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    h_arr = be.h_step(fr_to_limbs(a), fr_to_limbs(b), fr_to_limbs(c))
    assert h_arr.shape == (n - 1, 4)
    h = fr_from_limbs(h_arr, montgomery=False)
    assert h == ntt.h_step(a, b, c)
    assert check_h_identity(a, b, c, h, tau)
    secrets = powers(tau, n - 1)
    pts = be.srs(fr_to_limbs(secrets, montgomery=False))
    assert pts.shape == (n - 1, 12)
    assert g1_from_limbs(pts[5])[0] == g1.scalar_mul(g1.GENERATOR, secrets[5])
    res = be.msm(pts, h_arr)
    assert res.shape == (12,)
    assert check_msm_identity(secrets, h, g1_from_limbs(res)[0])
    # the plain-Python path gives the same bits
    slow = CpuBackend(use_arkworks=False)
    assert np.array_equal(slow.msm(pts, h_arr), res)
    assert np.array_equal(slow.srs(fr_to_limbs(secrets[:8], montgomery=False)), pts[:8])
    # infinity result = all zeros
    zero = be.msm(pts, np.zeros((n - 1, 4), dtype=np.uint64))
    assert not zero.any()
    assert np.array_equal(be.msm(g1_to_limbs([None]), fr_to_limbs([5], False)), zero)


def test_scalar_rows_at_or_above_r_raise() -> None:
    be = CpuBackend()
    pts = g1_to_limbs([g1.GENERATOR])
    bad = fr_to_limbs([R - 1], montgomery=False)
    bad[0, 0] += np.uint64(1)
    with pytest.raises(ValueError):
        be.msm(pts, bad)


def test_partition_2_12_is_exact() -> None:
    """One full partition at n = 2^12 (H step + one MSM of 2^12 random 255-bit scalars) checked
    by both exact identities. Its speed is measured by `python -m provetop.kernels.cpu_bench`, not
    here:
    timing assertions belong in benchmarks."""
    be = CpuBackend()
    n = 1 << 12
    gen = np.random.default_rng()
    tau = random.Random().randrange(R)
    secrets = powers(tau, n)
    pts = be.srs(fr_to_limbs(secrets, montgomery=False))
    a, b = random_fr_limbs(n, gen), random_fr_limbs(n, gen)
    av, bv = fr_from_limbs(a), fr_from_limbs(b)
    c = fr_to_limbs([x * y % R for x, y in zip(av, bv, strict=True)])
    sc = random_fr_limbs(n, gen, montgomery=False)
    h = be.h_step(a, b, c)
    res = be.msm(pts, sc)
    assert check_h_identity(av, bv, fr_from_limbs(c), fr_from_limbs(h, montgomery=False), tau)
    assert check_msm_identity(secrets, fr_from_limbs(sc, montgomery=False), g1_from_limbs(res)[0])

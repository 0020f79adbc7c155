"""Limb layout round trips and the exact byte/limb order the GPU kernels read."""

from __future__ import annotations

import random

import numpy as np
import pytest

from provetop.kernels.constants import FP_MODULUS, FR_MODULUS, G1_GENERATOR
from provetop.kernels.cpu import g1
from provetop.kernels.layout import (
    fp_from_limbs,
    fp_to_limbs,
    fr_from_limbs,
    fr_to_limbs,
    g1_from_limbs,
    g1_jacobian_from_limbs,
    g1_jacobian_to_limbs,
    g1_to_limbs,
    g1_xyzz_from_limbs,
    g1_xyzz_to_limbs,
    random_fr,
    random_fr_limbs,
)


def test_fr_round_trip_and_limb_order() -> None:
    rng = random.Random()
    xs = random_fr(500, rng) + [0, 1, FR_MODULUS - 1]
    for mont in (True, False):
        arr = fr_to_limbs(xs, montgomery=mont)
        assert arr.dtype == np.uint64 and arr.shape == (len(xs), 4)
        assert arr.flags["C_CONTIGUOUS"] and arr.flags["WRITEABLE"]
        assert fr_from_limbs(arr, montgomery=mont) == xs
    canon = fr_to_limbs(xs, montgomery=False)
    mont = fr_to_limbs(xs)
    for i in (0, 7, len(xs) - 1):
        assert sum(int(v) << (64 * j) for j, v in enumerate(canon[i])) == xs[i]
        assert sum(int(v) << (64 * j) for j, v in enumerate(mont[i])) == xs[i] * 2**256 % FR_MODULUS
    # byte view: little-endian bytes of the integer = 8 little-endian 32-bit words
    assert canon[3].tobytes() == xs[3].to_bytes(32, "little")
    words = canon[3].view(np.uint32)
    assert sum(int(w) << (32 * j) for j, w in enumerate(words)) == xs[3]


def test_fp_round_trip() -> None:
    rng = random.Random()
    xs = [rng.randrange(FP_MODULUS) for _ in range(300)] + [0, FP_MODULUS - 1]
    arr = fp_to_limbs(xs)
    assert arr.shape == (len(xs), 6)
    assert fp_from_limbs(arr) == xs
    assert fp_from_limbs(fp_to_limbs(xs, montgomery=False), montgomery=False) == xs
    assert sum(int(v) << (64 * j) for j, v in enumerate(arr[0])) == xs[0] * 2**384 % FP_MODULUS


def test_out_of_range_rejected() -> None:
    with pytest.raises(ValueError):
        fr_to_limbs([FR_MODULUS])
    with pytest.raises(ValueError):
        fr_to_limbs([-1], montgomery=False)
    with pytest.raises(ValueError):
        fp_to_limbs([FP_MODULUS])
    bad = fr_to_limbs([FR_MODULUS - 1], montgomery=False)
    bad[0, 0] += np.uint64(1)  # = r
    with pytest.raises(ValueError):
        fr_from_limbs(bad, montgomery=False)


def test_g1_round_trip_and_infinity() -> None:
    rng = random.Random()
    pts = [g1.scalar_mul(G1_GENERATOR, rng.randrange(1, FR_MODULUS)) for _ in range(5)]
    pts.insert(2, None)
    arr = g1_to_limbs(pts)
    assert arr.shape == (6, 12)
    assert not arr[2].any()  # infinity = all-zero row
    assert fp_from_limbs(arr[0, :6]) == [pts[0][0]] and fp_from_limbs(arr[0, 6:]) == [pts[0][1]]
    assert g1_from_limbs(arr) == pts
    assert g1_from_limbs(arr[1]) == [pts[1]]  # a single (12,) row
    jac = [g1.jac_scalar_mul(p, 3) for p in pts]
    assert g1_jacobian_from_limbs(g1_jacobian_to_limbs(jac)) == jac
    assert g1_jacobian_to_limbs(jac).shape == (6, 18)
    xyzz = [g1.xyzz_double(g1.xyzz_from_affine(p)) for p in pts]
    assert g1_xyzz_from_limbs(g1_xyzz_to_limbs(xyzz)) == xyzz
    assert g1_xyzz_to_limbs(xyzz).shape == (6, 24)


def test_random_fr_uniform_range_and_rng_kinds() -> None:
    a = random_fr(2000)
    assert all(0 <= v < FR_MODULUS for v in a)
    assert len(set(a)) == 2000
    # top bit pattern: values above r/2 appear about half the time
    assert 800 < sum(v > FR_MODULUS // 2 for v in a) < 1200
    assert random_fr(50, random.Random(5)) == random_fr(50, random.Random(5))
    g = np.random.default_rng(9)
    b = random_fr(50, g)
    assert b == random_fr(50, np.random.default_rng(9))
    assert all(0 <= v < FR_MODULUS for v in b)
    arr = random_fr_limbs(3000)
    assert arr.shape == (3000, 4) and arr.dtype == np.uint64
    assert max(fr_from_limbs(arr, montgomery=False)) < FR_MODULUS
    seeded = random_fr_limbs(20, random.Random(3), montgomery=False)
    assert fr_from_limbs(seeded, montgomery=False) == random_fr(20, random.Random(3))
    assert fr_from_limbs(random_fr_limbs(20, random.Random(3))) == random_fr(20, random.Random(3))


def test_device_like_arrays_are_copied_to_host() -> None:
    class FakeDevice:  # stands in for a CuPy array: only .get() reaches the host
        def __init__(self, a: np.ndarray) -> None:
            self._a = a

        def get(self) -> np.ndarray:
            return self._a.copy()

    xs = random_fr(8)
    assert fr_from_limbs(FakeDevice(fr_to_limbs(xs))) == xs
    pts = [G1_GENERATOR, None]
    assert g1_from_limbs(FakeDevice(g1_to_limbs(pts))) == pts

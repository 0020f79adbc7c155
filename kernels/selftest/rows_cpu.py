"""The self-test rows of the CPU reference, and everything ``provetop selftest --backend cpu``
runs.

Why: an operator must be able to prove, on a new host and before proving anything, that every
kernel of the chosen backend agrees with the exact reference. Reference rows check the CPU
reference against definitions and against py_ecc, an independent implementation (constants,
fields, NTT vs the O(n^2) DFT, Pippenger vs the naive sum and py_ecc, point encodings vs
py_ecc). Each check draws fresh random inputs (so repeated runs cover new ground), runs in well
under a second, and raises AssertionError with a message on any mismatch.
"""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any

from provetop.kernels import constants
from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import g1, srs
from provetop.kernels.cpu.fields import FP, FR
from provetop.kernels.cpu.msm import (
    ARKWORKS_AVAILABLE,
    msm_fast,
    msm_naive,
    pippenger,
    signed_digits,
)
from provetop.kernels.cpu.ntt import ntt, ntt_naive
from provetop.kernels.cpu_backend import CpuBackend
from provetop.kernels.layout import (
    fp_from_limbs,
    fp_to_limbs,
    fr_from_limbs,
    fr_to_limbs,
    g1_from_limbs,
    g1_to_limbs,
    random_fr,
)
from provetop.kernels.selftest.registry import Check, SkipCheck
from provetop.kernels.selftest.rows_backend import backend_checks


def _rng() -> random.Random:
    return random.Random()  # OS-seeded: fresh inputs every run


def _py_ecc() -> tuple[ModuleType, ModuleType]:
    try:
        from py_ecc import optimized_bls12_381 as ecc
        from py_ecc.bls import g2_primitives
    except ImportError as exc:
        raise SkipCheck(f"py_ecc not installed ({exc})") from exc
    return ecc, g2_primitives


def _to_ecc(ecc: Any, pt: Any) -> Any:
    if pt is None:
        return ecc.Z1
    return (ecc.FQ(pt[0]), ecc.FQ(pt[1]), ecc.FQ.one())


def _from_ecc(ecc: Any, q: Any) -> Any:
    if ecc.is_inf(q):
        return None
    x, y = ecc.normalize(q)
    return (int(x.n), int(y.n))


# --- reference checks --------------------------------------------------------------------------


def _check_constants() -> None:
    c = constants
    w = c.FR_ROOT_OF_UNITY
    assert pow(w, 1 << 32, c.FR_MODULUS) == 1, "root of unity: w^(2^32) != 1"
    assert pow(w, 1 << 31, c.FR_MODULUS) != 1, "root of unity: order below 2^32"
    for q, _ in c.FR_MODULUS_MINUS_ONE_FACTORS:
        assert pow(7, (c.FR_MODULUS - 1) // q, c.FR_MODULUS) != 1, f"7 is not a generator ({q})"
    assert g1.is_in_subgroup(c.G1_GENERATOR), "G1 generator not in the subgroup"
    assert c.FR_MONT_R == (1 << 256) % c.FR_MODULUS and c.FP_MONT_R == (1 << 384) % c.FP_MODULUS


def _check_fields() -> None:
    rng = _rng()
    for f in (FR, FP):
        xs = [rng.randrange(1, f.modulus) for _ in range(64)]
        inv = f.batch_inverse(xs)
        for x, xi in zip(xs, inv, strict=True):
            assert f.mul(x, xi) == 1, f"{f.name}: x * batch_inverse(x) != 1"
            assert xi == f.inv(x), f"{f.name}: batch inverse != inverse"
            s = f.sqrt(f.square(x))
            assert s in (x, f.neg(x)), f"{f.name}: sqrt(x^2) not +-x"
            y = rng.randrange(f.modulus)
            assert f.from_montgomery(f.montgomery_mul(f.to_montgomery(x), f.to_montgomery(y))) == (
                f.mul(x, y)
            ), f"{f.name}: Montgomery product"


def _check_layout() -> None:
    rng = _rng()
    xs = random_fr(1024, rng)
    assert fr_from_limbs(fr_to_limbs(xs)) == xs, "Fr Montgomery limb round trip"
    assert fr_from_limbs(fr_to_limbs(xs, False), False) == xs, "Fr canonical limb round trip"
    v = xs[0]
    row = fr_to_limbs([v], montgomery=False)[0]
    assert sum(int(limb) << (64 * i) for i, limb in enumerate(row)) == v, "Fr limb order"
    ps = [rng.randrange(1 << 381) % g1.P for _ in range(256)]
    assert fp_from_limbs(fp_to_limbs(ps)) == ps, "Fp limb round trip"
    pts = [g1.scalar_mul(g1.GENERATOR, rng.randrange(1, 1 << 64)) for _ in range(4)] + [None]
    assert g1_from_limbs(g1_to_limbs(pts)) == pts, "G1 limb round trip"


def _check_ntt_dft() -> None:
    rng = _rng()
    xs = random_fr(16, rng)
    for inverse in (False, True):
        for coset in (False, True):
            got = ntt(xs, inverse=inverse, coset=coset)
            assert got == ntt_naive(xs, inverse=inverse, coset=coset), (
                f"NTT vs DFT mismatch (inverse={inverse}, coset={coset})"
            )


def _check_msm_py_ecc() -> None:
    ecc, _ = _py_ecc()

    rng = _rng()
    n = 8
    ks = random_fr(n, rng)
    pts = [g1.scalar_mul(g1.GENERATOR, s) for s in random_fr(n, rng)]
    pts[1] = pts[0]  # a repeated point
    ks[2] = 0
    ks[3] = 1
    ref = ecc.Z1
    for pt, k in zip(pts, ks, strict=True):
        ref = ecc.add(ref, ecc.multiply(_to_ecc(ecc, pt), k))
    want = _from_ecc(ecc, ref)
    assert msm_naive(pts, ks) == want, "naive MSM != py_ecc"
    for c in (1, 3, 4, 7):
        assert pippenger(pts, ks, window_bits=c) == want, f"pippenger (c={c}) != py_ecc"


def _check_msm_edges() -> None:
    rng = _rng()
    n = 32
    pts = [g1.scalar_mul(g1.GENERATOR, s) for s in random_fr(n, rng)]
    pts[4] = None
    pts[6] = pts[5]
    pts[8] = g1.affine_neg(pts[7])
    ks = random_fr(n, rng)
    for i in (0, 1, 5, 6, 7, 8, 9):
        ks[i] = 1
    ks[2] = 0
    ks[3] = FR_MODULUS - 1
    want = msm_naive(pts, ks)
    assert pippenger(pts, ks) == want, "pippenger != naive (edge cases)"
    assert pippenger(pts, ks, split_ones=False) == want, "pippenger without ones split"
    assert msm_fast(pts, ks) == want, "msm_fast != naive (edge cases)"
    assert pippenger(pts, [0] * n) is None, "all-zero scalars must give infinity"
    assert pippenger(pts, [1] * n) == g1.affine_sum(pts), "all-one scalars"
    try:
        pippenger(pts[:1], [FR_MODULUS])
    except ValueError:
        pass
    else:
        raise AssertionError("scalar >= r was accepted")


def _check_buckets() -> None:
    rng = _rng()
    n = 24
    pts = [g1.scalar_mul(g1.GENERATOR, s) for s in random_fr(n, rng)]
    ks = random_fr(n, rng)
    c = 6
    res, tr = pippenger(pts, ks, window_bits=c, return_buckets=True)
    assert res == msm_naive(pts, ks), "pippenger != naive"
    for j in range(tr.num_windows):
        want: list[g1.Affine] = [None] * (1 << (c - 1))
        for i in tr.tail_indices:
            d = signed_digits(ks[i], c)[j]
            if d:
                p = pts[i] if d > 0 else g1.affine_neg(pts[i])
                want[abs(d) - 1] = g1.affine_add(want[abs(d) - 1], p)
        assert tr.buckets[j] == want, f"window {j}: buckets differ from their definition"
        ws = g1.affine_sum([g1.scalar_mul(b, i + 1) for i, b in enumerate(want)])
        assert tr.window_sums[j] == ws, f"window {j}: window sum"


def _check_encodings() -> None:
    ecc, prim = _py_ecc()

    rng = _rng()
    pts = [g1.scalar_mul(g1.GENERATOR, s) for s in random_fr(6, rng)] + [None]
    for pt in pts:
        enc = g1.encode_compressed(pt)
        assert enc == bytes(prim.G1_to_pubkey(_to_ecc(ecc, pt))), "compressed != py_ecc"
        assert _from_ecc(ecc, prim.pubkey_to_G1(enc)) == pt, "py_ecc cannot decode ours"
        assert g1.decode_compressed(enc) == pt, "compressed round trip"
        assert g1.decode_uncompressed(g1.encode_uncompressed(pt)) == pt, "uncompressed round trip"


def _check_srs_reference() -> None:
    rng = _rng()
    secrets = random_fr(8, rng)
    want = [g1.scalar_mul(g1.GENERATOR, s) for s in secrets]
    assert srs.srs_points(secrets) == want, "srs_points != scalar_mul"
    assert srs.srs_points(secrets, use_arkworks=False) == want, "python srs != scalar_mul"


def reference_checks() -> list[Check]:
    """Checks of the CPU reference itself (definitions and py_ecc)."""
    return [
        Check("constants: 2^32 root, generator 7, G1 generator", 1, _check_constants),
        Check("fields: inverse, batch inverse, sqrt, Montgomery", 64, _check_fields),
        Check("layout: Fr/Fp/G1 limb round trips", 1024, _check_layout),
        Check("ntt: vs O(n^2) DFT, all coset/inverse", 16, _check_ntt_dft),
        Check("msm: pippenger/naive vs py_ecc", 8, _check_msm_py_ecc),
        Check("msm: zeros, ones, infinity, repeats, >= r", 32, _check_msm_edges),
        Check("msm: signed digits and buckets", 24, _check_buckets),
        Check("g1: 48/96-byte encodings vs py_ecc", 7, _check_encodings),
        Check("srs: fixed-base vs scalar mul", 8, _check_srs_reference),
    ]


def cpu_checks() -> list[Check]:
    """Everything ``provetop selftest --backend cpu`` runs. The backend checks use n = 2^12
    with py-arkworks-bls12381 and 2^10 without it (plain-Python MSM/SRS are ~10x slower), so
    the whole run stays at a few seconds either way."""
    return reference_checks() + backend_checks(CpuBackend(), log_n=12 if ARKWORKS_AVAILABLE else 10)

"""G1 arithmetic in every coordinate system, against py_ecc, and the ZCash encodings."""

from __future__ import annotations

import random

import pytest

from provetop.kernels.constants import FP_MODULUS, FR_MODULUS
from provetop.kernels.cpu import g1

ecc = pytest.importorskip("py_ecc.optimized_bls12_381")  # the independent implementation
_prim = pytest.importorskip("py_ecc.bls.g2_primitives")
G1_to_pubkey, pubkey_to_G1 = _prim.G1_to_pubkey, _prim.pubkey_to_G1

P = FP_MODULUS


def to_ecc(pt):
    return ecc.Z1 if pt is None else (ecc.FQ(pt[0]), ecc.FQ(pt[1]), ecc.FQ.one())


def from_ecc(q):
    if ecc.is_inf(q):
        return None
    x, y = ecc.normalize(q)
    return (int(x.n), int(y.n))


def rand_point(rng: random.Random):
    return g1.scalar_mul(g1.GENERATOR, rng.randrange(1, FR_MODULUS))


def test_scalar_mul_and_add_match_py_ecc() -> None:
    rng = random.Random()
    for _ in range(3):
        k1, k2 = rng.randrange(FR_MODULUS), rng.randrange(FR_MODULUS)
        p1, p2 = g1.scalar_mul(g1.GENERATOR, k1), g1.scalar_mul(g1.GENERATOR, k2)
        assert p1 == from_ecc(ecc.multiply(ecc.G1, k1))
        assert g1.affine_add(p1, p2) == from_ecc(ecc.add(to_ecc(p1), to_ecc(p2)))
        assert g1.affine_double(p1) == from_ecc(ecc.double(to_ecc(p1)))


def test_coordinate_systems_agree_including_exceptional_cases() -> None:
    rng = random.Random()
    p, q = rand_point(rng), rand_point(rng)
    cases = [(p, q), (p, p), (p, g1.affine_neg(p)), (None, q), (p, None), (None, None)]
    for a, b in cases:
        want = g1.affine_add(a, b)
        ja, jb = g1.jac_from_affine(a), g1.jac_from_affine(b)
        # use non-trivial Z: scale by a random lambda
        lam = rng.randrange(1, P)
        ja = (ja[0] * lam**2 % P, ja[1] * lam**3 % P, ja[2] * lam % P)
        assert g1.jac_to_affine(g1.jac_add(ja, jb)) == want
        assert g1.jac_to_affine(g1.jac_add_mixed(ja, b)) == want
        xa, xb = g1.xyzz_from_affine(a), g1.xyzz_from_affine(b)
        xa = (xa[0] * lam**2 % P, xa[1] * lam**3 % P, xa[2] * lam**2 % P, xa[3] * lam**3 % P)
        assert g1.xyzz_to_affine(g1.xyzz_add(xa, xb)) == want
        assert g1.xyzz_to_affine(g1.xyzz_add_mixed(xa, b)) == want
    for a in (p, None):
        assert g1.jac_to_affine(g1.jac_double(g1.jac_from_affine(a))) == g1.affine_double(a)
        assert g1.xyzz_to_affine(g1.xyzz_double(g1.xyzz_from_affine(a))) == g1.affine_double(a)
        assert g1.jac_to_affine(g1.jac_neg(g1.jac_from_affine(a))) == g1.affine_neg(a)
        assert g1.xyzz_to_affine(g1.xyzz_neg(g1.xyzz_from_affine(a))) == g1.affine_neg(a)


def test_batch_normalisation() -> None:
    rng = random.Random()
    pts = [rand_point(rng) for _ in range(5)] + [None]
    jac = [g1.jac_scalar_mul(p, 5) for p in pts]
    xyzz = [g1.xyzz_double(g1.xyzz_from_affine(p)) for p in pts]
    assert g1.batch_jac_to_affine(jac) == [g1.jac_to_affine(j) for j in jac]
    assert g1.batch_xyzz_to_affine(xyzz) == [g1.xyzz_to_affine(x) for x in xyzz]


def test_scalar_mul_edges() -> None:
    rng = random.Random()
    p = rand_point(rng)
    assert g1.scalar_mul(p, 0) is None
    assert g1.scalar_mul(p, FR_MODULUS) is None
    assert g1.scalar_mul(p, 1) == p
    assert g1.scalar_mul(p, -1) == g1.affine_neg(p)
    k = rng.randrange(FR_MODULUS)
    assert g1.scalar_mul(p, k + FR_MODULUS) == g1.scalar_mul(p, k)
    assert g1.scalar_mul(None, k) is None


def test_on_curve_and_subgroup() -> None:
    rng = random.Random()
    p = rand_point(rng)
    assert g1.is_on_curve(p) and g1.is_in_subgroup(p)
    assert g1.is_in_subgroup(None)
    assert not g1.is_on_curve((p[0], (p[1] + 1) % P))
    assert not g1.is_on_curve((p[0] + P, p[1]))  # non-canonical coordinate
    # a curve point outside G1: find x with x^3 + 4 a square
    x = rng.randrange(P)
    while pow((x**3 + 4) % P, (P - 1) // 2, P) != 1:
        x += 1
    q = (x, pow((x**3 + 4) % P, (P + 1) // 4, P))
    assert g1.is_on_curve(q) and not g1.is_in_subgroup(q)


def test_encodings_round_trip_against_py_ecc() -> None:
    rng = random.Random()
    pts = [rand_point(rng) for _ in range(6)] + [None, g1.GENERATOR]
    for pt in pts:
        comp = g1.encode_compressed(pt)
        assert len(comp) == 48 and comp[0] & 0x80
        assert comp == bytes(G1_to_pubkey(to_ecc(pt)))
        assert from_ecc(pubkey_to_G1(comp)) == pt
        assert g1.decode_compressed(comp) == pt
        unc = g1.encode_uncompressed(pt)
        assert len(unc) == 96 and not unc[0] & 0x80
        assert g1.decode_uncompressed(unc) == pt
    # both y signs occur over enough points and set the sort flag accordingly
    flags = {g1.encode_compressed(rand_point(rng))[0] & 0x20 for _ in range(12)}
    assert flags == {0, 0x20}
    # the standard generator's known compressed encoding starts 0x97f1d3a7
    assert g1.encode_compressed(g1.GENERATOR)[:4].hex() == "97f1d3a7"
    assert g1.encode_compressed(None) == bytes([0xC0]) + bytes(47)


def test_decoding_rejects_malformed_input() -> None:
    rng = random.Random()
    pt = rand_point(rng)
    comp = bytearray(g1.encode_compressed(pt))
    with pytest.raises(ValueError):
        g1.decode_compressed(bytes(comp[:47]))
    no_flag = bytearray(comp)
    no_flag[0] &= 0x7F
    with pytest.raises(ValueError):
        g1.decode_compressed(bytes(no_flag))
    bad_inf = bytearray(g1.encode_compressed(None))
    bad_inf[-1] = 1
    with pytest.raises(ValueError):
        g1.decode_compressed(bytes(bad_inf))
    big_x = bytearray((P).to_bytes(48, "big"))
    big_x[0] |= 0x80
    with pytest.raises(ValueError):
        g1.decode_compressed(bytes(big_x))
    unc = bytearray(g1.encode_uncompressed(pt))
    unc[-1] ^= 1
    with pytest.raises(ValueError):
        g1.decode_uncompressed(bytes(unc))
    # a curve point outside the subgroup is rejected unless the check is skipped
    x = rng.randrange(P)
    while True:
        y = pow((x**3 + 4) % P, (P + 1) // 4, P)
        if y * y % P == (x**3 + 4) % P:
            break
        x += 1
    q = (x, y)
    with pytest.raises(ValueError):
        g1.decode_compressed(g1.encode_compressed(q))
    assert g1.decode_compressed(g1.encode_compressed(q), subgroup_check=False) == q
    assert g1.decode_uncompressed(g1.encode_uncompressed(q), subgroup_check=False) == q

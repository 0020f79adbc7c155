"""Every constant in kernels/constants.py recomputed from its definition."""

from __future__ import annotations

from provetop.kernels import constants as c
from provetop.kernels.cpu import g1


def _is_probable_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def test_moduli_are_the_bls12_381_primes() -> None:
    x = c.BLS_X
    assert c.FR_MODULUS == x**4 - x**2 + 1
    assert c.FP_MODULUS == (x - 1) ** 2 * (x**4 - x**2 + 1) // 3 + x
    assert _is_probable_prime(c.FR_MODULUS) and _is_probable_prime(c.FP_MODULUS)
    assert c.FR_MODULUS.bit_length() == 255 and c.FP_MODULUS.bit_length() == 381
    assert c.FR_LIMBS == 4 and c.FP_LIMBS == 6 and c.LIMB_BITS == 64


def test_montgomery_constants() -> None:
    assert c.FR_MONT_R == (1 << 256) % c.FR_MODULUS
    assert c.FP_MONT_R == (1 << 384) % c.FP_MODULUS
    assert c.FR_MONT_R2 == c.FR_MONT_R**2 % c.FR_MODULUS
    assert c.FP_MONT_R2 == c.FP_MONT_R**2 % c.FP_MODULUS
    assert c.FR_MONT_R * c.FR_MONT_R_INV % c.FR_MODULUS == 1
    assert c.FP_MONT_R * c.FP_MONT_R_INV % c.FP_MODULUS == 1
    assert (c.FR_MODULUS * c.FR_MONT_INV64 + 1) % (1 << 64) == 0
    assert (c.FP_MODULUS * c.FP_MONT_INV64 + 1) % (1 << 64) == 0
    assert (c.FR_MODULUS * c.FR_MONT_INV32 + 1) % (1 << 32) == 0
    assert (c.FP_MODULUS * c.FP_MONT_INV32 + 1) % (1 << 32) == 0


def test_seven_generates_fr_star_and_root_of_unity_has_order_exactly_2_32() -> None:
    prod = 1
    for q, e in c.FR_MODULUS_MINUS_ONE_FACTORS:
        assert _is_probable_prime(q)
        prod *= q**e
    assert prod == c.FR_MODULUS - 1
    for q, _ in c.FR_MODULUS_MINUS_ONE_FACTORS:
        assert pow(c.FR_MULTIPLICATIVE_GENERATOR, (c.FR_MODULUS - 1) // q, c.FR_MODULUS) != 1
    w = c.FR_ROOT_OF_UNITY
    assert pow(w, 1 << 32, c.FR_MODULUS) == 1
    assert pow(w, 1 << 31, c.FR_MODULUS) == c.FR_MODULUS - 1  # so the order is exactly 2^32
    assert (c.FR_MODULUS - 1) >> 32 == c.FR_TRACE and c.FR_TRACE % 2 == 1
    # The coset generator lies outside every 2^k-th-roots subgroup: g^n != 1 for n | 2^32.
    assert pow(c.FR_COSET_GENERATOR, 1 << 32, c.FR_MODULUS) != 1


def test_generator_on_curve_in_subgroup_and_cofactor() -> None:
    assert g1.is_on_curve(c.G1_GENERATOR)
    assert g1.is_in_subgroup(c.G1_GENERATOR)
    assert c.G1_COFACTOR == (c.BLS_X - 1) ** 2 // 3
    assert c.G1_CURVE_ORDER == c.FP_MODULUS + 1 - (c.BLS_X + 1)
    # [h*r]Q = infinity for an arbitrary curve point Q (not necessarily in G1)
    x = 5
    while True:
        y = pow((x**3 + 4) % c.FP_MODULUS, (c.FP_MODULUS + 1) // 4, c.FP_MODULUS)
        if y * y % c.FP_MODULUS == (x**3 + 4) % c.FP_MODULUS:
            break
        x += 1
    q = (x, y)
    assert g1.is_on_curve(q)
    assert g1.scalar_mul(q, c.G1_CURVE_ORDER) is None
    assert not g1.is_in_subgroup(q)  # a random curve point is almost never in G1
    assert g1.is_in_subgroup(g1.scalar_mul(q, c.G1_COFACTOR))

"""BLS12-381 constants: the one place every CPU and GPU module takes its numbers from.

Why one file: a kernel that disagrees with the reference about a modulus, a Montgomery radix or
a root of unity fails in confusing ways; keeping every number here (and testing each one in
``tests/kernels/test_constants.py``) makes such a disagreement impossible.

Sources: the curve is defined in the IETF draft "Pairing-Friendly Curves"
(draft-irtf-cfrg-pairing-friendly-curves, section 4.2.1) and in the ZCash BLS12-381
specification; every derived number below is recomputed from those definitions and checked at
import time (cheap asserts) and again, more thoroughly, in the tests.
"""

from __future__ import annotations

# --- the curve parameter -------------------------------------------------------------------
# BLS parameter x (IETF draft, "BLS12_381": x = -0xd201000000010000). Everything else follows.
BLS_X: int = -0xD201000000010000

# --- scalar field Fr ------------------------------------------------------------------------
# r = x^4 - x^2 + 1, the prime order of the G1/G2 subgroups (255 bits).
FR_MODULUS: int = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001
FR_BITS: int = 255
FR_LIMBS: int = 4  # 64-bit limbs per Fr element
FR_BYTES: int = 32

# --- base field Fp --------------------------------------------------------------------------
# p = (x - 1)^2 (x^4 - x^2 + 1) / 3 + x (381 bits); p = 3 mod 4, so sqrt(a) = a^((p+1)/4).
FP_MODULUS: int = int(
    "1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab",
    16,
)
FP_BITS: int = 381
FP_LIMBS: int = 6  # 64-bit limbs per Fp element
FP_BYTES: int = 48

LIMB_BITS: int = 64
LIMB_MASK: int = (1 << LIMB_BITS) - 1

# --- Montgomery form ------------------------------------------------------------------------
# An element a is stored as a*R mod m with R = 2^(64 * limbs): the radix the GPU kernels use.
FR_MONT_RADIX_BITS: int = 256
FP_MONT_RADIX_BITS: int = 384
FR_MONT_R: int = pow(2, 256, FR_MODULUS)  # 2^256 mod r (Montgomery form of 1)
FR_MONT_R2: int = pow(2, 512, FR_MODULUS)  # 2^512 mod r (converts canonical -> Montgomery)
FR_MONT_R_INV: int = pow(2, -256, FR_MODULUS)  # 2^-256 mod r (converts Montgomery -> canonical)
FP_MONT_R: int = pow(2, 384, FP_MODULUS)  # 2^384 mod p
FP_MONT_R2: int = pow(2, 768, FP_MODULUS)  # 2^768 mod p
FP_MONT_R_INV: int = pow(2, -384, FP_MODULUS)
# -m^-1 mod 2^64: the per-limb factor of word-by-word Montgomery reduction (CIOS).
FR_MONT_INV64: int = (-pow(FR_MODULUS, -1, 1 << 64)) % (1 << 64)
FP_MONT_INV64: int = (-pow(FP_MODULUS, -1, 1 << 64)) % (1 << 64)
# The same, for 32-bit limbs (the GPU kernels may multiply 32-bit words).
FR_MONT_INV32: int = (-pow(FR_MODULUS, -1, 1 << 32)) % (1 << 32)
FP_MONT_INV32: int = (-pow(FP_MODULUS, -1, 1 << 32)) % (1 << 32)

# --- roots of unity and the coset generator ----------------------------------------------
# r - 1 = 2^32 * t with t odd: Fr has 2^32-th roots of unity, so NTTs up to n = 2^32.
FR_TWO_ADICITY: int = 32
FR_TRACE: int = (FR_MODULUS - 1) >> FR_TWO_ADICITY  # the odd part t
# 7 is the smallest generator of the multiplicative group Fr^* (arkworks/zkcrypto use it as
# well); the full factorisation of r - 1 below lets the tests prove it is a generator.
FR_MULTIPLICATIVE_GENERATOR: int = 7
FR_MODULUS_MINUS_ONE_FACTORS: tuple[tuple[int, int], ...] = (
    (2, 32),
    (3, 1),
    (11, 1),
    (19, 1),
    (10177, 1),
    (125527, 1),
    (859267, 1),
    (906349, 2),
    (2508409, 1),
    (2529403, 1),
    (52437899, 1),
    (254760293, 2),
)
# 7^t has order exactly 2^32 because 7 generates Fr^*: the primitive 2^32-th root of unity
# (equal to arkworks' TWO_ADIC_ROOT_OF_UNITY 0x16a2...0d2b).
FR_ROOT_OF_UNITY: int = pow(FR_MULTIPLICATIVE_GENERATOR, FR_TRACE, FR_MODULUS)
# Coset for the Groth16 H step: evaluate on g * w^i with g = 7. Since 7 is a generator it is
# not in any 2^k-th-roots subgroup, so the coset is disjoint from the domain and Z(g w^i) =
# g^n - 1 != 0. (supraseal/bellman use the same g = 7.)
FR_COSET_GENERATOR: int = FR_MULTIPLICATIVE_GENERATOR

# --- G1: y^2 = x^3 + 4 over Fp --------------------------------------------------------------
G1_A: int = 0
G1_B: int = 4
# The standard generator (IETF draft section 4.2.1; ZCash spec).
G1_GENERATOR: tuple[int, int] = (
    int(
        "17f1d3a73197d7942695638c4fa9ac0fc3688c4f9774b905a14e3a3f171bac586c55e83ff97a1aeffb3af00adb22c6bb",
        16,
    ),
    int(
        "08b3f481e3aaa0f1a09e30ed741d8ae4fcf5e095d5d00af600db18cb2c04b3edd03cc744a2888ae40caa232946c5e7e1",
        16,
    ),
)
# #E(Fp) = h * r with cofactor h = (x - 1)^2 / 3; the trace of Frobenius is x + 1.
G1_COFACTOR: int = 0x396C8C005555E1568C00AAAB0000AAAB
G1_CURVE_ORDER: int = G1_COFACTOR * FR_MODULUS
G1_SUBGROUP_ORDER: int = FR_MODULUS  # G1 = the order-r subgroup of E(Fp)

# --- the encodings (ZCash / IETF serialisation) --------------------------------------------
# Big-endian x; the 3 most significant bits of the first byte are flags:
# bit 7 (0x80) compressed, bit 6 (0x40) infinity, bit 5 (0x20) "y is the larger root"
# (y > (p - 1) / 2), set only in compressed form.
G1_COMPRESSED_BYTES: int = 48
G1_UNCOMPRESSED_BYTES: int = 96
FLAG_COMPRESSED: int = 0x80
FLAG_INFINITY: int = 0x40
FLAG_SORT: int = 0x20

# --- cheap import-time consistency checks (the tests do the expensive ones) ----------------
assert FR_MODULUS == BLS_X**4 - BLS_X**2 + 1
assert FP_MODULUS == (BLS_X - 1) ** 2 * FR_MODULUS // 3 + BLS_X
assert G1_COFACTOR == (BLS_X - 1) ** 2 // 3
assert G1_CURVE_ORDER == FP_MODULUS + 1 - (BLS_X + 1)
assert FR_MODULUS.bit_length() == FR_BITS and FP_MODULUS.bit_length() == FP_BITS
assert FP_MODULUS % 4 == 3
assert (FR_MODULUS - 1) % (1 << FR_TWO_ADICITY) == 0 and FR_TRACE % 2 == 1
assert pow(FR_ROOT_OF_UNITY, 1 << (FR_TWO_ADICITY - 1), FR_MODULUS) == FR_MODULUS - 1
assert (G1_GENERATOR[1] ** 2 - G1_GENERATOR[0] ** 3 - G1_B) % FP_MODULUS == 0

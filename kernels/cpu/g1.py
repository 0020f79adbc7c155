"""BLS12-381 G1 (y^2 = x^3 + 4 over Fp) in affine, Jacobian and XYZZ coordinates.

Why three coordinate systems: affine is the storage and wire format; Jacobian is the usual
choice for scalar multiplication; XYZZ is what the GPU buckets use (its mixed addition is the
cheapest, 8M + 2S), so the reference must speak it to let a test compare buckets.

Representations (canonical ints, never Montgomery here):

- affine: ``(x, y)`` tuple, ``None`` is the point at infinity;
- Jacobian: ``(X, Y, Z)`` with x = X/Z^2, y = Y/Z^3; infinity is any Z = 0, written (1, 1, 0);
- XYZZ: ``(X, Y, ZZ, ZZZ)`` with x = X/ZZ, y = Y/ZZZ (ZZ^3 = ZZZ^2); infinity is ZZ = 0,
  written (1, 1, 0, 0).

Formulas: Jacobian doubling dbl-2009-l, addition add-1998-cmo-2, XYZZ add-2008-s,
madd-2008-s, dbl-2008-s-1 (Explicit-Formulas Database, a = 0). Every addition handles the
exceptional cases (equal points -> doubling, opposite points -> infinity, infinity operands).

Encodings follow the ZCash / IETF serialisation: big-endian x (and y), 3 flag bits in the most
significant bits of byte 0 (0x80 compressed, 0x40 infinity, 0x20 y is the larger of y and
p - y, compressed only).
"""

from __future__ import annotations

from provetop.kernels.constants import (
    FLAG_COMPRESSED,
    FLAG_INFINITY,
    FLAG_SORT,
    FP_MODULUS,
    FR_MODULUS,
    G1_B,
    G1_GENERATOR,
)
from provetop.kernels.cpu.fields import FP

P = FP_MODULUS
Affine = tuple[int, int] | None
Jacobian = tuple[int, int, int]
XYZZ = tuple[int, int, int, int]

GENERATOR: tuple[int, int] = G1_GENERATOR
JAC_INFINITY: Jacobian = (1, 1, 0)
XYZZ_INFINITY: XYZZ = (1, 1, 0, 0)


# --- affine --------------------------------------------------------------------------------


def is_on_curve(pt: Affine) -> bool:
    """y^2 = x^3 + 4 with coordinates in [0, p); infinity counts as on the curve."""
    if pt is None:
        return True
    x, y = pt
    if not (0 <= x < P and 0 <= y < P):
        return False
    return (y * y - x * x * x - G1_B) % P == 0


def affine_neg(pt: Affine) -> Affine:
    if pt is None:
        return None
    return (pt[0], -pt[1] % P)


def affine_double(pt: Affine) -> Affine:
    if pt is None or pt[1] == 0:
        return None
    x, y = pt
    lam = 3 * x * x * pow(2 * y, -1, P) % P
    x3 = (lam * lam - 2 * x) % P
    return (x3, (lam * (x - x3) - y) % P)


def affine_add(p1: Affine, p2: Affine) -> Affine:
    """Textbook chord-and-tangent addition (one inversion): the simplest oracle."""
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    x1, y1 = p1
    x2, y2 = p2
    if x1 == x2:
        if (y1 + y2) % P == 0:
            return None
        return affine_double(p1)
    lam = (y2 - y1) * pow(x2 - x1, -1, P) % P
    x3 = (lam * lam - x1 - x2) % P
    return (x3, (lam * (x1 - x3) - y1) % P)


def affine_sum(points: list[Affine]) -> Affine:
    """Sum of affine points through XYZZ (one inversion at the end)."""
    acc = XYZZ_INFINITY
    for pt in points:
        acc = xyzz_add_mixed(acc, pt)
    return xyzz_to_affine(acc)


# --- Jacobian ------------------------------------------------------------------------------


def jac_from_affine(pt: Affine) -> Jacobian:
    return JAC_INFINITY if pt is None else (pt[0], pt[1], 1)


def jac_to_affine(pt: Jacobian) -> Affine:
    X, Y, Z = pt
    if Z % P == 0:
        return None
    zi = pow(Z, -1, P)
    zi2 = zi * zi % P
    return (X * zi2 % P, Y * zi2 * zi % P)


def jac_neg(pt: Jacobian) -> Jacobian:
    return (pt[0], -pt[1] % P, pt[2])


def jac_double(pt: Jacobian) -> Jacobian:
    X, Y, Z = pt
    if Z == 0 or Y == 0:
        return JAC_INFINITY
    A = X * X % P
    B = Y * Y % P
    C = B * B % P
    D = 2 * ((X + B) * (X + B) - A - C) % P
    E = 3 * A % P
    F = E * E % P
    X3 = (F - 2 * D) % P
    Y3 = (E * (D - X3) - 8 * C) % P
    Z3 = 2 * Y * Z % P
    return (X3, Y3, Z3)


def jac_add(p1: Jacobian, p2: Jacobian) -> Jacobian:
    X1, Y1, Z1 = p1
    X2, Y2, Z2 = p2
    if Z1 == 0:
        return p2
    if Z2 == 0:
        return p1
    Z1Z1 = Z1 * Z1 % P
    Z2Z2 = Z2 * Z2 % P
    U1 = X1 * Z2Z2 % P
    U2 = X2 * Z1Z1 % P
    S1 = Y1 * Z2 * Z2Z2 % P
    S2 = Y2 * Z1 * Z1Z1 % P
    H = (U2 - U1) % P
    Rr = (S2 - S1) % P
    if H == 0:
        return jac_double(p1) if Rr == 0 else JAC_INFINITY
    HH = H * H % P
    HHH = H * HH % P
    V = U1 * HH % P
    X3 = (Rr * Rr - HHH - 2 * V) % P
    Y3 = (Rr * (V - X3) - S1 * HHH) % P
    Z3 = Z1 * Z2 * H % P
    return (X3, Y3, Z3)


def jac_add_mixed(p1: Jacobian, p2: Affine) -> Jacobian:
    """Jacobian + affine (Z2 = 1)."""
    if p2 is None:
        return p1
    X1, Y1, Z1 = p1
    if Z1 == 0:
        return (p2[0], p2[1], 1)
    x2, y2 = p2
    Z1Z1 = Z1 * Z1 % P
    U2 = x2 * Z1Z1 % P
    S2 = y2 * Z1 * Z1Z1 % P
    H = (U2 - X1) % P
    Rr = (S2 - Y1) % P
    if H == 0:
        return jac_double(p1) if Rr == 0 else JAC_INFINITY
    HH = H * H % P
    HHH = H * HH % P
    V = X1 * HH % P
    X3 = (Rr * Rr - HHH - 2 * V) % P
    Y3 = (Rr * (V - X3) - Y1 * HHH) % P
    Z3 = Z1 * H % P
    return (X3, Y3, Z3)


def jac_eq(p1: Jacobian, p2: Jacobian) -> bool:
    return jac_to_affine(p1) == jac_to_affine(p2)


# --- XYZZ ----------------------------------------------------------------------------------


def xyzz_from_affine(pt: Affine) -> XYZZ:
    return XYZZ_INFINITY if pt is None else (pt[0], pt[1], 1, 1)


def xyzz_to_affine(pt: XYZZ) -> Affine:
    X, Y, ZZ, ZZZ = pt
    if ZZ % P == 0:
        return None
    return (X * pow(ZZ, -1, P) % P, Y * pow(ZZZ, -1, P) % P)


def xyzz_neg(pt: XYZZ) -> XYZZ:
    return (pt[0], -pt[1] % P, pt[2], pt[3])


def xyzz_double(pt: XYZZ) -> XYZZ:
    X1, Y1, ZZ1, ZZZ1 = pt
    if ZZ1 == 0 or Y1 == 0:
        return XYZZ_INFINITY
    U = 2 * Y1 % P
    V = U * U % P
    W = U * V % P
    S = X1 * V % P
    M = 3 * X1 * X1 % P
    X3 = (M * M - 2 * S) % P
    Y3 = (M * (S - X3) - W * Y1) % P
    return (X3, Y3, V * ZZ1 % P, W * ZZZ1 % P)


def xyzz_add(p1: XYZZ, p2: XYZZ) -> XYZZ:
    X1, Y1, ZZ1, ZZZ1 = p1
    X2, Y2, ZZ2, ZZZ2 = p2
    if ZZ1 == 0:
        return p2
    if ZZ2 == 0:
        return p1
    U1 = X1 * ZZ2 % P
    U2 = X2 * ZZ1 % P
    S1 = Y1 * ZZZ2 % P
    S2 = Y2 * ZZZ1 % P
    PP_ = (U2 - U1) % P
    Rr = (S2 - S1) % P
    if PP_ == 0:
        return xyzz_double(p1) if Rr == 0 else XYZZ_INFINITY
    PP = PP_ * PP_ % P
    PPP = PP_ * PP % P
    Q = U1 * PP % P
    X3 = (Rr * Rr - PPP - 2 * Q) % P
    Y3 = (Rr * (Q - X3) - S1 * PPP) % P
    return (X3, Y3, ZZ1 * ZZ2 % P * PP % P, ZZZ1 * ZZZ2 % P * PPP % P)


def xyzz_add_mixed(p1: XYZZ, p2: Affine) -> XYZZ:
    """XYZZ + affine (ZZ2 = ZZZ2 = 1): the bucket-accumulation step."""
    if p2 is None:
        return p1
    X1, Y1, ZZ1, ZZZ1 = p1
    if ZZ1 == 0:
        return (p2[0], p2[1], 1, 1)
    x2, y2 = p2
    PP_ = (x2 * ZZ1 - X1) % P
    Rr = (y2 * ZZZ1 - Y1) % P
    if PP_ == 0:
        return xyzz_double(p1) if Rr == 0 else XYZZ_INFINITY
    PP = PP_ * PP_ % P
    PPP = PP_ * PP % P
    Q = X1 * PP % P
    X3 = (Rr * Rr - PPP - 2 * Q) % P
    Y3 = (Rr * (Q - X3) - Y1 * PPP) % P
    return (X3, Y3, ZZ1 * PP % P, ZZZ1 * PPP % P)


def xyzz_eq(p1: XYZZ, p2: XYZZ) -> bool:
    return xyzz_to_affine(p1) == xyzz_to_affine(p2)


def batch_xyzz_to_affine(points: list[XYZZ]) -> list[Affine]:
    """Many XYZZ points to affine with one inversion (of all ZZ*ZZZ products)."""
    idx = [i for i, pt in enumerate(points) if pt[2] % P]
    prods = [points[i][2] * points[i][3] % P for i in idx]
    out: list[Affine] = [None] * len(points)
    if not prods:
        return out
    inv = FP.batch_inverse(prods)
    for i, t in zip(idx, inv, strict=True):
        X, Y, ZZ, ZZZ = points[i]
        # t = 1/(ZZ*ZZZ): 1/ZZ = ZZZ * t, 1/ZZZ = ZZ * t
        out[i] = (X * ZZZ % P * t % P, Y * ZZ % P * t % P)
    return out


def batch_jac_to_affine(points: list[Jacobian]) -> list[Affine]:
    """Many Jacobian points to affine with one inversion."""
    idx = [i for i, pt in enumerate(points) if pt[2] % P]
    out: list[Affine] = [None] * len(points)
    if not idx:
        return out
    inv = FP.batch_inverse([points[i][2] for i in idx])
    for i, zi in zip(idx, inv, strict=True):
        X, Y, _ = points[i]
        zi2 = zi * zi % P
        out[i] = (X * zi2 % P, Y * zi2 % P * zi % P)
    return out


# --- scalar multiplication and the subgroup ----------------------------------------------


def jac_scalar_mul(pt: Affine, k: int) -> Jacobian:
    """[k]pt for any integer k (negative: [|k|](-pt)), left-to-right double-and-add with
    mixed additions. No reduction mod r, so it is also right for points outside G1."""
    if pt is None or k == 0:
        return JAC_INFINITY
    if k < 0:
        pt, k = affine_neg(pt), -k
    acc = JAC_INFINITY
    for bit in bin(k)[2:]:
        acc = jac_double(acc)
        if bit == "1":
            acc = jac_add_mixed(acc, pt)
    return acc


def scalar_mul(pt: Affine, k: int) -> Affine:
    """[k]pt in affine coordinates (any integer k)."""
    return jac_to_affine(jac_scalar_mul(pt, k))


def is_in_subgroup(pt: Affine) -> bool:
    """On the curve and [r]pt = infinity: the exact (slow, ~1 ms) membership test for G1."""
    if not is_on_curve(pt):
        return False
    return jac_scalar_mul(pt, FR_MODULUS)[2] == 0


# --- encodings -----------------------------------------------------------------------------


def _y_is_larger(y: int) -> bool:
    return y > (P - 1) // 2


def encode_compressed(pt: Affine) -> bytes:
    """48 bytes: big-endian x with flags 0x80 | (0x20 if y > (p-1)/2); infinity is 0xc0 then
    zeros."""
    if pt is None:
        return bytes([FLAG_COMPRESSED | FLAG_INFINITY]) + bytes(47)
    x, y = pt
    out = bytearray(x.to_bytes(48, "big"))
    out[0] |= FLAG_COMPRESSED | (FLAG_SORT if _y_is_larger(y) else 0)
    return bytes(out)


def encode_uncompressed(pt: Affine) -> bytes:
    """96 bytes: big-endian x then y, no flags; infinity is 0x40 then zeros."""
    if pt is None:
        return bytes([FLAG_INFINITY]) + bytes(95)
    return pt[0].to_bytes(48, "big") + pt[1].to_bytes(48, "big")


def decode_compressed(data: bytes, subgroup_check: bool = True) -> Affine:
    """Inverse of :func:`encode_compressed`; ValueError on any malformed input (wrong length,
    missing compression flag, non-canonical infinity, x >= p, x not on the curve, or (with
    ``subgroup_check``) a point outside G1)."""
    if len(data) != 48:
        raise ValueError("compressed G1 point must be 48 bytes")
    flags = data[0] & 0xE0
    if not flags & FLAG_COMPRESSED:
        raise ValueError("compression flag not set")
    body = bytes([data[0] & 0x1F]) + data[1:]
    x = int.from_bytes(body, "big")
    if flags & FLAG_INFINITY:
        if flags & FLAG_SORT or x != 0:
            raise ValueError("non-canonical encoding of infinity")
        return None
    if x >= P:
        raise ValueError("x coordinate not below p")
    y2 = (x * x * x + G1_B) % P
    y = pow(y2, (P + 1) // 4, P)  # p = 3 mod 4
    if y * y % P != y2:
        raise ValueError("x is not the abscissa of a curve point")
    if _y_is_larger(y) != bool(flags & FLAG_SORT):
        y = -y % P
    pt = (x, y)
    if subgroup_check and not is_in_subgroup(pt):
        raise ValueError("point not in the G1 subgroup")
    return pt


def decode_uncompressed(data: bytes, subgroup_check: bool = True) -> Affine:
    """Inverse of :func:`encode_uncompressed`, with the same checks as the compressed form."""
    if len(data) != 96:
        raise ValueError("uncompressed G1 point must be 96 bytes")
    flags = data[0] & 0xE0
    if flags & FLAG_COMPRESSED:
        raise ValueError("compression flag set on a 96-byte encoding")
    if flags & FLAG_SORT:
        raise ValueError("sort flag set on an uncompressed encoding")
    body = bytes([data[0] & 0x1F]) + data[1:]
    if flags & FLAG_INFINITY:
        if any(body):
            raise ValueError("non-canonical encoding of infinity")
        return None
    x = int.from_bytes(body[:48], "big")
    y = int.from_bytes(body[48:], "big")
    pt = (x, y)
    if not is_on_curve(pt):
        raise ValueError("point not on the curve")
    if subgroup_check and not is_in_subgroup(pt):
        raise ValueError("point not in the G1 subgroup")
    return pt

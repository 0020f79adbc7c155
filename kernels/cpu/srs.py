"""Structured reference strings with known secrets, and the two exact checks they enable.

Why known secrets: if every SRS point is P_i = [s_i]G with s_i known, an MSM of any size is
checked exactly by one Fr dot product and one scalar multiplication,
MSM(k, P) = [sum k_i s_i]G, and with s_i = tau^i the whole H step is checked by
(a*b - c)(tau) = h(tau) * Z(tau). Neither needs a second MSM implementation.

Generation is fixed-base: a table T[j][d] = [d * 2^(8j)]G (32 windows of 8 bits, d in 1..255)
turns each [s]G into at most 32 additions. With py-arkworks-bls12381 the additions run in Rust
(about 80 us per point including the affine conversion); without it, XYZZ mixed additions on
Python ints and one batch inversion at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu.g1 import (
    GENERATOR,
    XYZZ_INFINITY,
    Affine,
    batch_jac_to_affine,
    batch_xyzz_to_affine,
    jac_add_mixed,
    jac_scalar_mul,
    scalar_mul,
    xyzz_add_mixed,
)
from provetop.kernels.cpu.ntt import evaluate, evaluate_interpolant, log2_size

try:
    from py_arkworks_bls12381 import G1Point as _ArkG1

    ARKWORKS_AVAILABLE = True
except ImportError:  # pragma: no cover - the GPU image has no arkworks
    ARKWORKS_AVAILABLE = False

R = FR_MODULUS
TABLE_BITS = 8
TABLE_WINDOWS = -(-255 // TABLE_BITS)  # 32


def powers(tau: int, n: int) -> list[int]:
    """[1, tau, tau^2, ..., tau^(n-1)] mod r: the secrets of the H query."""
    out = [1] * n
    acc = 1
    tau %= R
    for i in range(1, n):
        acc = acc * tau % R
        out[i] = acc
    return out


@lru_cache(maxsize=1)
def _python_table() -> list[list[Affine]]:
    """T[j][d-1] = [d * 2^(8j)]G as affine points (one batch inversion for all 8160)."""
    jac = []
    for j in range(TABLE_WINDOWS):
        base = jac_scalar_mul(GENERATOR, 1 << (TABLE_BITS * j))
        base_aff = batch_jac_to_affine([base])[0]
        row = [base]
        for _ in range(2, 1 << TABLE_BITS):
            row.append(jac_add_mixed(row[-1], base_aff))
        jac.append(row)
    flat = batch_jac_to_affine([p for row in jac for p in row])
    w = (1 << TABLE_BITS) - 1
    return [flat[j * w : (j + 1) * w] for j in range(TABLE_WINDOWS)]


@lru_cache(maxsize=1)
def _ark_table() -> list[list[_ArkG1]]:
    g = _ArkG1()  # arkworks' default G1Point is the standard generator (checked in tests)
    table = []
    base = g
    for _ in range(TABLE_WINDOWS):
        row = [base]
        for _ in range(2, 1 << TABLE_BITS):
            row.append(row[-1] + base)
        table.append(row)
        base = row[-1] + base  # 2^8 * base
    return table


def _digits(s: int) -> list[int]:
    mask = (1 << TABLE_BITS) - 1
    return [(s >> (TABLE_BITS * j)) & mask for j in range(TABLE_WINDOWS)]


def srs_points(secrets: Sequence[int], use_arkworks: bool | None = None) -> list[Affine]:
    """P_i = [s_i mod r]G as affine points (None where s_i = 0 mod r), by fixed-base tables.
    ``use_arkworks``: None = when importable; False forces the plain-Python path (tests)."""
    ss = [int(s) % R for s in secrets]
    if use_arkworks is None:
        use_arkworks = ARKWORKS_AVAILABLE
    if use_arkworks:
        table = _ark_table()
        ident = _ArkG1.identity()
        out: list[Affine] = []
        for s in ss:
            acc = ident
            for j, d in enumerate(_digits(s)):
                if d:
                    acc = acc + table[j][d - 1]
            raw = acc.to_xy_bytes_le()
            out.append(
                (int.from_bytes(raw[:48], "little"), int.from_bytes(raw[48:], "little"))
                if any(raw)
                else None
            )
        return out
    table_py = _python_table()
    accs = []
    for s in ss:
        acc_xyzz = XYZZ_INFINITY
        for j, d in enumerate(_digits(s)):
            if d:
                acc_xyzz = xyzz_add_mixed(acc_xyzz, table_py[j][d - 1])
        accs.append(acc_xyzz)
    return batch_xyzz_to_affine(accs)


def check_msm_identity(secrets: Sequence[int], scalars: Sequence[int], result: Affine) -> bool:
    """True iff ``result`` = [sum k_i s_i mod r]G, i.e. ``result`` is the MSM of ``scalars``
    against the points [s_i]G. Exact, at the cost of one dot product and one scalar mul."""
    if len(secrets) != len(scalars):
        raise ValueError("secrets and scalars differ in length")
    e = sum(int(k) * int(s) for k, s in zip(scalars, secrets, strict=True)) % R
    return scalar_mul(GENERATOR, e) == result


def check_h_identity(
    a: Sequence[int], b: Sequence[int], c: Sequence[int], h: Sequence[int], tau: int
) -> bool:
    """True iff (A*B - C)(tau) = H(tau) * Z(tau), where A, B, C interpolate the evaluations
    ``a``, ``b``, ``c`` on the size-n domain (natural order), ``h`` are H's coefficients and
    Z(x) = x^n - 1. For a random tau this detects a wrong H except with probability ~2n/r."""
    n = len(a)
    log2_size(n)
    if len(b) != n or len(c) != n:
        raise ValueError("a, b and c must have the same length")
    A, B, C = evaluate_interpolant((a, b, c), tau)  # = evaluate(ntt(v, inverse=True), tau)
    z = (pow(tau, n, R) - 1) % R
    return (A * B - C) % R == evaluate(h, tau) * z % R

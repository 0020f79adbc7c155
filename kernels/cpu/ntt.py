"""Exact NTT over Fr and the Groth16 H step, on canonical Python ints.

Conventions (shared with the GPU kernels; see ``docs/kernels.md``):

- domain of size n = 2^k: the powers of ``w_k = domain_root(k) = FR_ROOT_OF_UNITY^(2^(32-k))``;
- forward: ``X[i] = sum_j x[j] * w^(i*j)`` (coefficients -> evaluations);
- inverse: ``x[j] = n^-1 * sum_i X[i] * w^(-i*j)``;
- coset (g = ``FR_COSET_GENERATOR`` = 7): forward evaluates on ``g * w^i``, i.e. ``X[i] =
  sum_j x[j] g^j w^(ij)``; inverse undoes exactly that (divides coefficient j by g^j);
- ``"bitrev"`` order: position i holds the element of natural index ``bitrev_k(i)`` (the k-bit
  reversal of i); it applies to the input and output independently.

Why numpy object arrays: one radix-2 level is a handful of whole-array operations on Python
ints, which moves the interpreter loop into numpy's C loop (about 3x faster than lists) while
staying exact for every k (k <= 27 is what the engine needs; k = 20 takes a few seconds here).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np

from provetop.kernels.constants import (
    FR_COSET_GENERATOR,
    FR_MODULUS,
    FR_ROOT_OF_UNITY,
    FR_TWO_ADICITY,
)

Order = Literal["natural", "bitrev"]
R = FR_MODULUS


def domain_root(k: int) -> int:
    """The primitive 2^k-th root of unity generating the size-2^k domain (0 <= k <= 32)."""
    if not 0 <= k <= FR_TWO_ADICITY:
        raise ValueError(f"domain size 2^{k} exceeds Fr's 2-adicity {FR_TWO_ADICITY}")
    return pow(FR_ROOT_OF_UNITY, 1 << (FR_TWO_ADICITY - k), R)


def log2_size(n: int) -> int:
    """k with n = 2^k; ValueError otherwise."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"NTT size must be a power of two, got {n}")
    return n.bit_length() - 1


@lru_cache(maxsize=8)
def bitrev_indices(k: int) -> np.ndarray:
    """``idx[i] = bitrev_k(i)``; an involution, so ``a[idx]`` converts either way."""
    n = 1 << k
    idx = np.zeros(n, dtype=np.int64)
    i = np.arange(n, dtype=np.int64)
    for b in range(k):
        idx |= ((i >> b) & 1) << (k - 1 - b)
    return idx


def _powers(base: int, count: int) -> np.ndarray:
    out = [1] * count
    acc = 1
    for j in range(1, count):
        acc = acc * base % R
        out[j] = acc
    arr = np.empty(count, dtype=object)
    arr[:] = out
    return arr


@lru_cache(maxsize=6)
def _twiddles(k: int, inverse: bool) -> np.ndarray:
    """w^j (or w^-j) for j < n/2, n = 2^k."""
    w = domain_root(k)
    if inverse:
        w = pow(w, -1, R)
    return _powers(w, max(1, (1 << k) // 2))


@lru_cache(maxsize=6)
def _coset_powers(k: int, inverse: bool) -> np.ndarray:
    """g^j (or g^-j) for j < 2^k."""
    g = FR_COSET_GENERATOR if not inverse else pow(FR_COSET_GENERATOR, -1, R)
    return _powers(g, 1 << k)


def _dit_inplace(a: np.ndarray, k: int, inverse: bool) -> None:
    """Cooley-Tukey radix-2: bit-reversed input, natural output, unscaled, and *lazily
    reduced*: only the twiddle products are taken mod r, the sums and differences are not
    (Python ints are exact, and since every t is in [0, r) a value's magnitude grows by at most
    r per level, so after k levels |a_i| < (k + 1) r). The caller reduces at the end; this saves
    two of the three big-int reductions per butterfly."""
    n = 1 << k
    tw = _twiddles(k, inverse)
    h = 1
    while h < n:
        blocks = a.reshape(n // (2 * h), 2, h)
        lo = blocks[:, 0, :]
        hi = blocks[:, 1, :]
        t = hi * tw[0 : n // 2 : n // (2 * h)] % R if h > 1 else hi % R
        new_hi = lo - t  # computed before either half is overwritten (t may alias hi)
        blocks[:, 0, :] = lo + t
        blocks[:, 1, :] = new_hi
        h *= 2


def as_objects(values: Sequence[int] | np.ndarray) -> np.ndarray:
    """A 1-D numpy object array of Python ints: the input form of :func:`ntt_objects` and
    :func:`h_step_objects`."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = [int(v) for v in values]
    return arr


_as_objects = as_objects  # older name, kept for callers that already use it


def ntt_objects(
    a: np.ndarray,
    *,
    inverse: bool = False,
    coset: bool = False,
    input_order: Order = "natural",
    output_order: Order = "natural",
) -> np.ndarray:
    """:func:`ntt` on a 1-D object array of canonical ints (not modified); returns a new one.
    The internal entry point, so chained transforms skip list conversions."""
    for name, order in (("input_order", input_order), ("output_order", output_order)):
        if order not in ("natural", "bitrev"):
            raise ValueError(f"{name} must be 'natural' or 'bitrev', got {order!r}")
    n = a.shape[0]
    k = log2_size(n)
    if k > FR_TWO_ADICITY:
        raise ValueError("NTT size exceeds 2^32")
    idx = bitrev_indices(k)
    x: np.ndarray = a[idx] if input_order == "bitrev" else a.copy()  # x: natural order
    if coset and not inverse:
        x = x * _coset_powers(k, False) % R
    x = x[idx]  # to bit-reversed for the DIT butterflies
    _dit_inplace(x, k, inverse)
    if inverse:
        x = x * pow(n, -1, R) % R
        if coset:
            x = x * _coset_powers(k, True) % R
    else:
        x %= R
    if output_order == "bitrev":
        x = x[idx]
    return x


def ntt(
    values: Sequence[int],
    *,
    inverse: bool = False,
    coset: bool = False,
    input_order: Order = "natural",
    output_order: Order = "natural",
) -> list[int]:
    """The NTT of ``values`` (canonical ints in [0, r), length 2^k) under the module's
    conventions; returns canonical ints."""
    out = ntt_objects(
        _as_objects(values),
        inverse=inverse,
        coset=coset,
        input_order=input_order,
        output_order=output_order,
    )
    return [int(v) for v in out]


def ntt_naive(values: Sequence[int], *, inverse: bool = False, coset: bool = False) -> list[int]:
    """O(n^2) DFT straight from the definitions, natural order: the oracle for tests."""
    n = len(values)
    k = log2_size(n)
    w = domain_root(k)
    g = FR_COSET_GENERATOR
    if not inverse:
        xs = [v * pow(g, j, R) % R for j, v in enumerate(values)] if coset else list(values)
        return [sum(xs[j] * pow(w, i * j, R) for j in range(n)) % R for i in range(n)]
    wi = pow(w, -1, R)
    ninv = pow(n, -1, R)
    out = [sum(values[i] * pow(wi, i * j, R) for i in range(n)) * ninv % R for j in range(n)]
    if coset:
        gi = pow(g, -1, R)
        out = [v * pow(gi, j, R) % R for j, v in enumerate(out)]
    return out


def vanishing_on_coset(k: int) -> int:
    """Z(g w^i) = (g w^i)^n - 1 = g^n - 1 for every i: the constant the H step divides by."""
    return (pow(FR_COSET_GENERATOR, 1 << k, R) - 1) % R


def h_step_objects(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """:func:`h_step` on object arrays; returns all n coefficients (the caller drops the last,
    which is zero exactly when a*b = c on the domain)."""
    n = a.shape[0]
    k = log2_size(n)
    if b.shape[0] != n or c.shape[0] != n:
        raise ValueError("a, b and c must have the same length")
    ev = []
    for v in (a, b, c):
        coeffs = ntt_objects(v, inverse=True, output_order="bitrev")
        ev.append(ntt_objects(coeffs, coset=True, input_order="bitrev"))
    zinv = pow(vanishing_on_coset(k), -1, R)
    h = (ev[0] * ev[1] % R - ev[2]) * zinv % R
    return ntt_objects(h, inverse=True, coset=True)


def h_step(a: Sequence[int], b: Sequence[int], c: Sequence[int]) -> list[int]:
    """The Groth16 quotient H = (A*B - C)/Z from evaluations a, b, c on the size-n domain
    (natural order, canonical): 3 inverse NTTs to coefficients, 3 coset NTTs, pointwise
    (a*b - c) / (g^n - 1), one coset inverse NTT. Returns the n-1 coefficients h_0..h_{n-2}
    (H has degree <= n-2 when a*b = c on the domain, i.e. for a satisfied constraint system)."""
    h = h_step_objects(_as_objects(a), _as_objects(b), _as_objects(c))
    return [int(v) for v in h[:-1]]


def evaluate_interpolant(evals: Sequence[Sequence[int]], x: int) -> list[int]:
    """For each vector of evaluations on the size-n domain (natural order), the value at ``x``
    of the polynomial of degree < n that interpolates it, without any NTT.

    Barycentric form: P(x) = (x^n - 1)/n * sum_i e_i w^i / (x - w^i). The weights are shared by
    all vectors and need one batch inversion, so the cost is O(n) field operations instead of
    an O(n log n) inverse NTT per vector (about 10x cheaper at n = 2^20 in Python). If x is
    itself a domain point w^m, the answer is simply e_m."""
    vecs = [list(v) for v in evals]
    if not vecs:
        return []
    n = len(vecs[0])
    k = log2_size(n)
    if any(len(v) != n for v in vecs):
        raise ValueError("all evaluation vectors must have the same length")
    x %= R
    w = domain_root(k)
    zx = (pow(x, n, R) - 1) % R
    if zx == 0:  # x is a domain point
        acc, m = 1, 0
        while acc != x:
            acc = acc * w % R
            m += 1
        return [v[m] % R for v in vecs]
    wp = _powers(w, n)  # w^i
    dens = ((x - wp) % R).tolist()  # x - w^i, all non-zero
    # one batch inversion (Montgomery's trick), on plain lists: the fastest loop in Python
    prefix = [0] * n
    acc = 1
    for i, d in enumerate(dens):
        prefix[i] = acc
        acc = acc * d % R
    inv = pow(acc, -1, R)
    inv_list = [0] * n
    for i in range(n - 1, -1, -1):
        inv_list[i] = inv * prefix[i] % R
        inv = inv * dens[i] % R
    invs = as_objects(inv_list)
    weights = wp * invs % R * (zx * pow(n, -1, R) % R) % R
    return [int((as_objects(v) * weights % R).sum() % R) for v in vecs]


def evaluate(coeffs: Sequence[int], x: int) -> int:
    """Horner evaluation of sum coeffs[i] x^i mod r."""
    acc = 0
    for cf in reversed(coeffs):
        acc = (acc * x + cf) % R
    return acc

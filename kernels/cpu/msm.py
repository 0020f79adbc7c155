"""Multi-scalar multiplication on G1: the reference Pippenger, a naive oracle and a fast path.

Why the reference spells out every stage: the GPU MSM runs the same algorithm (scalars 0
skipped, scalars 1 summed by batch addition, the rest through signed-digit Pippenger with XYZZ
buckets), so a GPU test can compare digits, buckets and window sums, not only the final point.

Scalars: ints in [0, r). A scalar outside that range raises ValueError (the GPU layout stores
canonical Fr, and the signed recoding below needs k < 2^255); callers reduce mod r themselves if
they mean a field element. ``msm_naive`` alone accepts any int (it is the definition).

Signed window digits (``window_bits`` = c, ``num_windows(c)`` = ceil(256 / c) windows):
walking windows from the least significant, ``d_j = ((k >> (c*j)) & (2^c - 1)) + carry``; if
``d_j > 2^(c-1)`` then ``d_j -= 2^c`` and the carry into window j+1 is 1, else 0. So every digit
lies in [-(2^(c-1) - 1), 2^(c-1)] and ``k = sum_j d_j * 2^(c*j)``. Since k < 2^255 and
c * num_windows >= 256, the top window never overflows (the final carry is 0).

Buckets: window j has 2^(c-1) buckets. A point with digit d != 0 in window j is added to
bucket ``|d| - 1`` (bucket b holds the points of magnitude b + 1), negated when d < 0. The
window sum is ``W_j = sum_b (b + 1) * bucket[j][b]`` (running-sum reduction from the top
bucket down), and the result is ``sum_j 2^(c*j) * W_j`` (Horner from the top window, c
doublings per step), plus the batch-addition sum of the points whose scalar is 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from provetop.kernels.constants import FP_MODULUS, FR_MODULUS
from provetop.kernels.cpu.fields import FP
from provetop.kernels.cpu.g1 import (
    XYZZ,
    XYZZ_INFINITY,
    Affine,
    affine_neg,
    batch_xyzz_to_affine,
    jac_add,
    jac_scalar_mul,
    jac_to_affine,
    xyzz_add,
    xyzz_add_mixed,
    xyzz_double,
    xyzz_to_affine,
)
from provetop.kernels.layout import g1_to_limbs

P = FP_MODULUS
SCALAR_BITS = 255  # every scalar is < r < 2^255

try:  # the fast path; absent on the GPU image
    from py_arkworks_bls12381 import G1Point as _ArkG1
    from py_arkworks_bls12381 import Scalar as _ArkScalar

    ARKWORKS_AVAILABLE = True
except ImportError:  # pragma: no cover
    ARKWORKS_AVAILABLE = False


# --- digits --------------------------------------------------------------------------------


def num_windows(window_bits: int) -> int:
    """ceil(256 / c): enough windows for a 255-bit scalar plus the recoding carry."""
    return -(-(SCALAR_BITS + 1) // window_bits)


def default_window_bits(n: int) -> int:
    """Window size minimising ~ num_windows * (n + 2^(c-1)) bucket additions, in [2, 16]."""
    if n <= 1:
        return 2
    best, best_cost = 2, None
    for c in range(2, 17):
        cost = num_windows(c) * (n + 2 * (1 << (c - 1)))
        if best_cost is None or cost < best_cost:
            best, best_cost = c, cost
    return best


def signed_digits(k: int, window_bits: int) -> list[int]:
    """The signed recoding of ``k`` (0 <= k < 2^255): ``num_windows(c)`` digits, least
    significant window first, each in [-(2^(c-1) - 1), 2^(c-1)], with sum d_j 2^(c j) = k."""
    c = window_bits
    if not 1 <= c <= 31:
        raise ValueError("window_bits must be in [1, 31]")
    if not 0 <= k < (1 << SCALAR_BITS):
        raise ValueError("scalar outside [0, 2^255)")
    mask = (1 << c) - 1
    half = 1 << (c - 1)
    full = 1 << c
    out = []
    carry = 0
    for j in range(num_windows(c)):
        d = ((k >> (c * j)) & mask) + carry
        if d > half:
            d -= full
            carry = 1
        else:
            carry = 0
        out.append(d)
    assert carry == 0
    return out


def _check_scalars(scalars: Sequence[int]) -> list[int]:
    out = [int(s) for s in scalars]
    for s in out:
        if not 0 <= s < FR_MODULUS:
            raise ValueError("MSM scalar outside [0, r): reduce it mod r first")
    return out


# --- batch addition ------------------------------------------------------------------------


def batch_add(points: Sequence[Affine]) -> Affine:
    """Sum of affine points by a pairwise tree: each level adds disjoint pairs in affine
    coordinates, sharing one field inversion (Montgomery's trick) across the level. This is
    the "batch addition" path for scalars equal to 1. Handles infinity, equal points
    (doubling) and opposite points (their sum, infinity, is dropped)."""
    level: list[tuple[int, int]] = [pt for pt in points if pt is not None]
    while len(level) > 1:
        pairs: list[tuple[int, int, int, int, bool]] = []
        dens: list[int] = []
        for i in range(0, len(level) - 1, 2):
            (x1, y1), (x2, y2) = level[i], level[i + 1]
            if x1 != x2:
                pairs.append((x1, y1, x2, y2, False))
                dens.append((x2 - x1) % P)
            elif y1 == y2 and y1 != 0:
                pairs.append((x1, y1, x2, y2, True))
                dens.append(2 * y1 % P)
        nxt: list[tuple[int, int]] = [level[-1]] if len(level) % 2 else []
        if dens:
            for (x1, y1, x2, y2, dbl), inv in zip(pairs, FP.batch_inverse(dens), strict=True):
                lam = (3 * x1 * x1 if dbl else y2 - y1) * inv % P
                x3 = (lam * lam - x1 - x2) % P
                nxt.append((x3, (lam * (x1 - x3) - y1) % P))
        level = nxt
    return level[0] if level else None


# --- Pippenger -----------------------------------------------------------------------------


@dataclass
class MsmTrace:
    """Intermediate values of :func:`pippenger`, for comparison with a GPU implementation.

    ``tail_indices``: indices (into the input) of the points that went through the buckets
    (scalar >= 2, or >= 1 when ``split_ones`` is False; infinity points are skipped);
    ``ones_indices``: those summed by batch addition. ``buckets[j][b]`` is the affine sum for
    window j, bucket b (magnitude b + 1); ``window_sums[j]`` = sum_b (b+1) buckets[j][b];
    ``ones_sum`` is the batch-addition result."""

    window_bits: int
    num_windows: int
    tail_indices: list[int] = field(default_factory=list)
    ones_indices: list[int] = field(default_factory=list)
    buckets: list[list[Affine]] = field(default_factory=list)
    window_sums: list[Affine] = field(default_factory=list)
    ones_sum: Affine = None


@overload
def pippenger(
    points: Sequence[Affine],
    scalars: Sequence[int],
    window_bits: int | None = None,
    return_buckets: Literal[False] = False,
    split_ones: bool = True,
) -> Affine: ...


@overload
def pippenger(
    points: Sequence[Affine],
    scalars: Sequence[int],
    window_bits: int | None,
    return_buckets: Literal[True],
    split_ones: bool = True,
) -> tuple[Affine, MsmTrace]: ...


@overload
def pippenger(
    points: Sequence[Affine],
    scalars: Sequence[int],
    window_bits: int | None = None,
    *,
    return_buckets: Literal[True],
    split_ones: bool = True,
) -> tuple[Affine, MsmTrace]: ...


@overload
def pippenger(
    points: Sequence[Affine],
    scalars: Sequence[int],
    window_bits: int | None = None,
    return_buckets: bool = False,
    split_ones: bool = True,
) -> Affine | tuple[Affine, MsmTrace]: ...


def pippenger(
    points: Sequence[Affine],
    scalars: Sequence[int],
    window_bits: int | None = None,
    return_buckets: bool = False,
    split_ones: bool = True,
) -> Affine | tuple[Affine, MsmTrace]:
    """sum_i scalars[i] * points[i] by signed-digit Pippenger with XYZZ buckets (see the
    module docstring for the digit recoding and bucket indexing). Zero scalars and infinity
    points are skipped; with ``split_ones`` scalars equal to 1 go to :func:`batch_add`. With
    ``return_buckets`` returns ``(result, MsmTrace)``."""
    if len(points) != len(scalars):
        raise ValueError("points and scalars differ in length")
    ks = _check_scalars(scalars)
    tail = [i for i, k in enumerate(ks) if k > (1 if split_ones else 0) and points[i] is not None]
    ones = [i for i, k in enumerate(ks) if k == 1 and points[i] is not None] if split_ones else []
    c = window_bits if window_bits is not None else default_window_bits(len(tail))
    nw = num_windows(c)
    nb = 1 << (c - 1)
    trace = MsmTrace(window_bits=c, num_windows=nw, tail_indices=tail, ones_indices=ones)

    digits = [signed_digits(ks[i], c) for i in tail]
    pts = [points[i] for i in tail]
    negs = [affine_neg(p) for p in pts]
    window_sums: list[XYZZ] = []
    all_buckets: list[list[XYZZ]] = []
    for j in range(nw):
        buckets: list[XYZZ] = [XYZZ_INFINITY] * nb
        for t in range(len(pts)):
            d = digits[t][j]
            if d > 0:
                buckets[d - 1] = xyzz_add_mixed(buckets[d - 1], pts[t])
            elif d < 0:
                buckets[-d - 1] = xyzz_add_mixed(buckets[-d - 1], negs[t])
        running = XYZZ_INFINITY
        total = XYZZ_INFINITY
        for b in range(nb - 1, -1, -1):
            running = xyzz_add(running, buckets[b])
            total = xyzz_add(total, running)
        window_sums.append(total)
        if return_buckets:
            all_buckets.append(buckets)

    acc = XYZZ_INFINITY
    for j in range(nw - 1, -1, -1):
        for _ in range(c):
            acc = xyzz_double(acc)
        acc = xyzz_add(acc, window_sums[j])

    ones_sum = batch_add([points[i] for i in ones])
    result = xyzz_to_affine(xyzz_add_mixed(acc, ones_sum))
    if not return_buckets:
        return result
    trace.buckets = [batch_xyzz_to_affine(bs) for bs in all_buckets]
    trace.window_sums = batch_xyzz_to_affine(window_sums)
    trace.ones_sum = ones_sum
    return result, trace


def trace_arrays(trace: MsmTrace) -> dict[str, Any]:
    """The trace in the shared limb layout, for bit-for-bit comparison with GPU buffers:
    ``buckets`` ``(num_windows, 2^(c-1), 12)`` and ``window_sums`` ``(num_windows, 12)`` as
    affine Montgomery points (infinity = zeros), ``ones_sum`` ``(12,)``."""
    nb = 1 << (trace.window_bits - 1)
    flat = [p for row in trace.buckets for p in row]
    return {
        "buckets": g1_to_limbs(flat).reshape(len(trace.buckets), nb, 12),
        "window_sums": g1_to_limbs(trace.window_sums),
        "ones_sum": g1_to_limbs([trace.ones_sum])[0],
    }


# --- oracle and fast path -------------------------------------------------------------------


def msm_naive(points: Sequence[Affine], scalars: Sequence[int]) -> Affine:
    """sum_i [k_i] P_i by one double-and-add per term: the definition, for any int k_i."""
    if len(points) != len(scalars):
        raise ValueError("points and scalars differ in length")
    acc = (1, 1, 0)
    for pt, k in zip(points, scalars, strict=True):
        acc = jac_add(acc, jac_scalar_mul(pt, int(k)))
    return jac_to_affine(acc)


def _to_ark(pt: Affine) -> _ArkG1:
    if pt is None:
        return _ArkG1.identity()
    return _ArkG1.from_xy_bytes_unchecked_le(
        pt[0].to_bytes(48, "little") + pt[1].to_bytes(48, "little")
    )


def _from_ark(q: _ArkG1) -> Affine:
    raw = q.to_xy_bytes_le()
    if not any(raw):
        return None
    return (int.from_bytes(raw[:48], "little"), int.from_bytes(raw[48:], "little"))


def msm_fast(
    points: Sequence[Affine], scalars: Sequence[int], use_arkworks: bool | None = None
) -> Affine:
    """The same sum as :func:`pippenger` (same scalar rules), through py-arkworks-bls12381's
    ``G1Point.multiexp_unchecked`` when importable, else the reference :func:`pippenger`.
    Points must be on the curve (the arkworks path does not re-check). ``use_arkworks``:
    None = when importable; False forces the reference path."""
    if len(points) != len(scalars):
        raise ValueError("points and scalars differ in length")
    ks = _check_scalars(scalars)
    if use_arkworks is None:
        use_arkworks = ARKWORKS_AVAILABLE
    if not use_arkworks:
        return pippenger(points, ks)
    keep = [i for i, k in enumerate(ks) if k and points[i] is not None]
    if not keep:
        return None
    ark_pts = [_to_ark(points[i]) for i in keep]
    ark_sc = [_ArkScalar.from_le_bytes(ks[i].to_bytes(32, "little")) for i in keep]
    return _from_ark(_ArkG1.multiexp_unchecked(ark_pts, ark_sc))


__all__ = [
    "ARKWORKS_AVAILABLE",
    "MsmTrace",
    "batch_add",
    "default_window_bits",
    "msm_fast",
    "msm_naive",
    "num_windows",
    "pippenger",
    "signed_digits",
    "trace_arrays",
]

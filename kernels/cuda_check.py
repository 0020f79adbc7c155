"""The exact partition checks of ``kernels.cpu.srs`` on the GPU, streamed in chunks.

Why: at n = 2^27 the CPU checks are hours of Python per partition, and holding a, b, c and h
on the device for a check would need 16 GiB beside the partitions it checks. Here every
vector stays where it is (host numpy or device CuPy) and crosses to the device ``chunk``
elements at a time; the device keeps only the chunk buffers and one partial sum per block
(``kernels/cuda/fr_check.cu``). The answers are the same integers the CPU functions compute,
and ``tests/test_cuda_check.py`` compares the two on fresh random inputs.

The SRS secrets of a query are the powers s_i = sigma^i of one secret sigma (``engine.srs``),
so <k, s> is the value at sigma of the polynomial with coefficients k, and the secrets never
need to be stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.constants import FR_MODULUS
from kernels.cuda_build import load_module, on_stream, require_cupy
from kernels.layout import fr_from_limbs, fr_to_limbs

R = FR_MODULUS
K = 8  # = CHECK_K in fr_check.cu: elements per thread
BLOCK = 256  # = CHECK_BLOCK in fr_check.cu
DEFAULT_CHUNK = 1 << 21  # elements per device chunk: 64 MiB per vector (3 for the H check)


def _module() -> Any:
    return load_module("fr_check.cu")


def _grid(count: int) -> int:
    return max(1, -(-count // (K * BLOCK)))


def _is_host(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def _device_chunk(cupy: Any, x: Any, lo: int, hi: int) -> Any:
    """Rows [lo, hi) of ``x`` on the device (a view when ``x`` is already there)."""
    part = x[lo:hi]
    return cupy.asarray(part) if _is_host(x) else cupy.ascontiguousarray(part)


def _sum_partials(partials: Any, nsum: int, montgomery: bool) -> list[int]:
    host = np.asarray(partials.get()).reshape(-1, nsum, 4)
    return [
        sum(fr_from_limbs(np.ascontiguousarray(host[:, j]), montgomery=montgomery)) % R
        for j in range(nsum)
    ]


def powers(
    base: int,
    start: int,
    count: int,
    *,
    canonical: bool = True,
    stream: Any = None,
    allocator: Any = None,
    out: Any = None,
) -> Any:
    """``(count, 4)`` device array of base^(start + j): one SRS query's secrets (canonical, as
    ``kernels.cuda_srs.srs`` takes them) without a host round trip."""
    cupy = require_cupy()
    fn = _module().get_function("fr_powers_range")
    with on_stream(stream, allocator) as s:
        if out is None:
            out = cupy.empty((count, 4), dtype=np.uint64)
        if count:
            d_base = cupy.asarray(fr_to_limbs([base % R]))
            fn((_grid(count),), (BLOCK,), (out, d_base, np.uint64(start), np.uint64(count),
                                           np.int32(bool(canonical))), stream=s)  # fmt: skip
    return out


def dot_powers(
    values: Any,
    sigma: int,
    *,
    montgomery: bool = False,
    chunk: int = DEFAULT_CHUNK,
    stream: Any = None,
    allocator: Any = None,
) -> int:
    """sum_i v_i sigma^i mod r for ``(m, 4)`` rows ``values`` (canonical unless
    ``montgomery``), host or device: <k, s> of the MSM identity, or h(tau)."""
    cupy = require_cupy()
    fn = _module().get_function("fr_dot_powers")
    m = int(values.shape[0])
    total = 0
    with on_stream(stream, allocator) as s:
        d_sigma = cupy.asarray(fr_to_limbs([sigma % R]))
        for lo in range(0, m, chunk):
            hi = min(m, lo + chunk)
            part = _device_chunk(cupy, values, lo, hi)
            grid = _grid(hi - lo)
            partials = cupy.empty((grid, 4), dtype=np.uint64)
            fn((grid,), (BLOCK,), (partials, part, d_sigma, np.uint64(lo), np.uint64(hi - lo)),
               stream=s)  # fmt: skip
            total += _sum_partials(partials, 1, montgomery)[0]
            del part, partials
    return total % R


def interpolants_at(
    a: Any,
    b: Any,
    c: Any,
    x: int,
    *,
    chunk: int = DEFAULT_CHUNK,
    stream: Any = None,
    allocator: Any = None,
) -> tuple[int, int, int]:
    """A(x), B(x), C(x) for the polynomials of degree < n whose evaluations on the size-n
    domain (natural order, Montgomery rows) are ``a``, ``b``, ``c``: the barycentric form of
    ``kernels.cpu.ntt.evaluate_interpolant``, one shared batch inversion per K elements."""
    from kernels.cpu.ntt import domain_root, evaluate_interpolant

    cupy = require_cupy()
    n = int(a.shape[0])
    if b.shape[0] != n or c.shape[0] != n or n & (n - 1) or n == 0:
        raise ValueError("a, b, c must be evaluations on one domain of size 2^k")
    x %= R
    zx = (pow(x, n, R) - 1) % R
    if zx == 0:  # a domain point: no division by x - w^i (probability ~n/r for a random x)
        rows = [fr_from_limbs(np.asarray(cupy.asnumpy(v))) for v in (a, b, c)]
        return tuple(evaluate_interpolant(rows, x))  # type: ignore[return-value]
    fn = _module().get_function("fr_barycentric3")
    k = n.bit_length() - 1
    sums = [0, 0, 0]
    with on_stream(stream, allocator) as s:
        consts = cupy.asarray(fr_to_limbs([domain_root(k), x]))
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            parts = [_device_chunk(cupy, v, lo, hi) for v in (a, b, c)]
            grid = _grid(hi - lo)
            partials = cupy.empty((grid * 3, 4), dtype=np.uint64)
            fn((grid,), (BLOCK,), (partials, *parts, consts, np.uint64(lo), np.uint64(hi - lo)),
               stream=s)  # fmt: skip
            for j, v in enumerate(_sum_partials(partials, 3, montgomery=True)):
                sums[j] += v
            del parts, partials
    scale = zx * pow(n, -1, R) % R
    return tuple(v * scale % R for v in sums)  # type: ignore[return-value]


def check_h_identity(a: Any, b: Any, c: Any, h: Any, tau: int, **kw: Any) -> bool:
    """``kernels.cpu.srs.check_h_identity`` for limb arrays: a, b, c evaluations (Montgomery),
    h canonical coefficients (``(n, 4)``, or ``(n - 1, 4)``)."""
    n = int(a.shape[0])
    A, B, C = interpolants_at(a, b, c, tau, **kw)
    z = (pow(tau, n, R) - 1) % R
    return (A * B - C) % R == dot_powers(h, tau, **kw) * z % R


def check_msm_identity(sigma: int, scalars: Any, result: Any, **kw: Any) -> bool:
    """``kernels.cpu.srs.check_msm_identity`` for the points [sigma^i]G: ``result`` (an
    affine point as ``kernels.cpu.g1`` represents it) = [<k, s>]G, k canonical rows."""
    from kernels.cpu.g1 import GENERATOR, scalar_mul

    e = dot_powers(scalars, sigma, **kw)
    return scalar_mul(GENERATOR, e) == result


__all__ = ["check_h_identity", "check_msm_identity", "dot_powers", "interpolants_at", "powers"]

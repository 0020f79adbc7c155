"""The exact partition checks of ``provetop.kernels.cpu.srs`` on the GPU, streamed in chunks.

Why: at n = 2^27 the CPU checks are hours of Python per partition, and holding a, b, c and h
on the device for a check would need 16 GiB beside the partitions it checks. Here every
vector stays where it is (host numpy or device CuPy) and crosses to the device ``chunk``
elements at a time; the device keeps only the chunk buffers and one partial sum per block
(``src/checks/fr_check.cu``). The answers are the same integers the CPU functions compute,
and ``tests/kernels/test_cuda_check.py`` compares the two on fresh random inputs.

The SRS secrets of a query are the powers s_i = sigma^i of one secret sigma
(``provetop.engine.spec.srs``),
so <k, s> is the value at sigma of the polynomial with coefficients k, and the secrets never
need to be stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu.g1 import GENERATOR, Affine, scalar_mul
from provetop.kernels.cpu.ntt import domain_root, evaluate_interpolant
from provetop.kernels.cuda.runtime import KernelModule, load, on_stream, require_cupy, to_device
from provetop.kernels.layout import fr_from_limbs, fr_to_limbs
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

R = FR_MODULUS
K = 8  # = CHECK_K in fr_check.cu: elements per thread
BLOCK = 256  # = CHECK_BLOCK in fr_check.cu
DEFAULT_CHUNK = 1 << 21  # elements per device chunk: 64 MiB per vector (3 for the H check)


SOURCE = "checks/fr_check.cu"


def module(tuning: KernelTuning = DEFAULT_TUNING) -> KernelModule:
    """fr_check.cu on the current device."""
    return load(SOURCE, cubin_dir=tuning.cubin_dir)


# Blocks per launch: 4 per SM of an H200 (132 SMs) keeps every SM busy; the kernels' grid-stride
# loops cover any count with it, and each sum ends as at most GRID partials.
GRID = 4 * 132


def _grid(count: int) -> int:
    return max(1, min(GRID, -(-count // (K * BLOCK))))


def _acc(cupy: Any, nsum: int) -> Any:
    """The per-block accumulators a check's launches add into (zeroed once)."""
    return cupy.zeros((GRID * nsum, 4), dtype=np.uint64)


def _is_host(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def _device_chunk(cupy: Any, x: Any, lo: int, hi: int) -> Any:
    """Rows [lo, hi) of ``x`` on the device (a view when ``x`` is already there)."""
    part = x[lo:hi]
    return to_device(cupy, part) if _is_host(x) else cupy.ascontiguousarray(part)


def _sum_partials(partials: Any, nsum: int, montgomery: bool) -> list[int]:
    """The per-block accumulators, summed: copied on the current stream once its kernels
    are done (a plain ``get`` would not wait for a non-blocking stream)."""
    cupy = require_cupy()
    s = cupy.cuda.get_current_stream()
    host = np.asarray(partials.get(stream=s))
    s.synchronize()
    host = host.reshape(-1, nsum, 4)
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
    tuning: KernelTuning = DEFAULT_TUNING,
) -> Any:
    """``(count, 4)`` device array of base^(start + j): one SRS query's secrets (canonical, as
    ``provetop.kernels.cuda.srs.srs`` takes them) without a host round trip."""
    cupy = require_cupy()
    fn = module(tuning).get_function("fr_powers_range")
    with on_stream(stream, allocator) as s:
        if out is None:
            out = cupy.empty((count, 4), dtype=np.uint64)
        if count:
            d_base = to_device(cupy, fr_to_limbs([base % R]))
            fn((_grid(count),), (BLOCK,), (out, d_base, np.uint64(start), np.uint64(count),
                                           np.int32(bool(canonical))), stream=s)  # fmt: skip
    return out


def dot_powers_prefixes(
    values: Any,
    terms: list[tuple[int, int]],
    *,
    montgomery: bool = False,
    chunk: int = DEFAULT_CHUNK,
    stream: Any = None,
    allocator: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> list[int]:
    """For each (sigma, m) in ``terms``: sum_{i < m} v_i sigma^i mod r, in one pass over
    ``values`` (rows canonical unless ``montgomery``; host or device). The L, A and B-G1
    MSMs read prefixes of one aux vector, so their three checks share one upload of it."""
    cupy = require_cupy()
    fn = module(tuning).get_function("fr_dot_powers")
    rows = int(values.shape[0])
    for _sigma, m in terms:
        if not 0 <= m <= rows:
            raise ValueError(f"prefix of {m} rows asked of {rows}")
    end = max((m for _s, m in terms), default=0)
    with on_stream(stream, allocator):
        accs = [_acc(cupy, 1) for _ in terms]
        sigmas = [to_device(cupy, fr_to_limbs([sigma % R])) for sigma, _m in terms]
        for lo in range(0, end, chunk):
            hi = min(end, lo + chunk)
            part = _device_chunk(cupy, values, lo, hi)
            for acc, d_sigma, (_sigma, m) in zip(accs, sigmas, terms, strict=True):
                count = min(hi, m) - lo
                if count > 0:
                    fn((_grid(count),), (BLOCK,),
                       (acc, part, d_sigma, np.uint64(lo), np.uint64(count)))  # fmt: skip
            del part
        return [_sum_partials(acc, 1, montgomery)[0] for acc in accs]


def dot_powers(
    values: Any,
    sigma: int,
    *,
    montgomery: bool = False,
    chunk: int = DEFAULT_CHUNK,
    stream: Any = None,
    allocator: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> int:
    """sum_i v_i sigma^i mod r for ``(m, 4)`` rows ``values`` (canonical unless
    ``montgomery``), host or device: <k, s> of the MSM identity, or h(tau)."""
    terms = [(sigma, int(values.shape[0]))]
    kw = {"montgomery": montgomery, "chunk": chunk, "stream": stream, "allocator": allocator}
    kw["tuning"] = tuning
    return dot_powers_prefixes(values, terms, **kw)[0]


def interpolants_at(
    a: Any,
    b: Any,
    c: Any,
    x: int,
    *,
    chunk: int = DEFAULT_CHUNK,
    stream: Any = None,
    allocator: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> tuple[int, int, int]:
    """A(x), B(x), C(x) for the polynomials of degree < n whose evaluations on the size-n
    domain (natural order, Montgomery rows) are ``a``, ``b``, ``c``: the barycentric form of
    ``provetop.kernels.cpu.ntt.evaluate_interpolant``, one shared batch inversion per K elements."""
    cupy = require_cupy()
    n = int(a.shape[0])
    if b.shape[0] != n or c.shape[0] != n or n & (n - 1) or n == 0:
        raise ValueError("a, b, c must be evaluations on one domain of size 2^k")
    x %= R
    zx = (pow(x, n, R) - 1) % R
    if zx == 0:  # a domain point: no division by x - w^i (probability ~n/r for a random x)
        s = stream or cupy.cuda.get_current_stream()  # read after the kernels queued on it
        rows = [fr_from_limbs(np.asarray(cupy.asnumpy(v, stream=s))) for v in (a, b, c)]
        at_a, at_b, at_c = evaluate_interpolant(rows, x)
        return at_a, at_b, at_c
    fn = module(tuning).get_function("fr_barycentric3")
    k = n.bit_length() - 1
    with on_stream(stream, allocator) as s:
        consts = to_device(cupy, fr_to_limbs([domain_root(k), x]))
        acc = _acc(cupy, 3)
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            parts = [_device_chunk(cupy, v, lo, hi) for v in (a, b, c)]
            fn((_grid(hi - lo),), (BLOCK,),
               (acc, *parts, consts, np.uint64(lo), np.uint64(hi - lo)))  # fmt: skip
            del parts
        sums = _sum_partials(acc, 3, montgomery=True)
        s.synchronize()
    scale = zx * pow(n, -1, R) % R
    at_a, at_b, at_c = (v * scale % R for v in sums)
    return at_a, at_b, at_c


def check_h_identity(a: Any, b: Any, c: Any, h: Any, tau: int, **kw: Any) -> bool:
    """``provetop.kernels.cpu.srs.check_h_identity`` for limb arrays: a, b, c evaluations
    (Montgomery),
    h canonical coefficients (``(n, 4)``, or ``(n - 1, 4)``)."""
    n = int(a.shape[0])
    A, B, C = interpolants_at(a, b, c, tau, **kw)
    z = (pow(tau, n, R) - 1) % R
    return (A * B - C) % R == dot_powers(h, tau, **kw) * z % R


def check_msm_identity(sigma: int, scalars: Any, result: Affine, **kw: Any) -> bool:
    """``provetop.kernels.cpu.srs.check_msm_identity`` for the points [sigma^i]G: ``result`` (an
    affine point as ``provetop.kernels.cpu.g1`` represents it) = [<k, s>]G, k canonical rows."""
    e = dot_powers(scalars, sigma, **kw)
    return scalar_mul(GENERATOR, e) == result


__all__ = [
    "GRID",
    "check_h_identity",
    "check_msm_identity",
    "dot_powers",
    "dot_powers_prefixes",
    "interpolants_at",
    "module",
    "powers",
]

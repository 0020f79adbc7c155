"""Small Fr utilities on the GPU: elementwise ops, polynomial evaluation, random vectors.

Why: the NTT tests, the self-test and the benchmark need to check results exactly on the
device (a 2^24 polynomial cannot cross to Python for every check) and to make large random
inputs without a host round trip. The kernels live in ``src/ntt/ntt.cu`` (one module with the
NTT's, loaded with the same tuning defines, so a tuning run compiles it once).
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cuda.ntt import module
from provetop.kernels.cuda.ntt_plan import from_words, to_words
from provetop.kernels.cuda.runtime import require_cupy
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

R = FR_MODULUS
OPS = {"mul": 0, "add": 1, "sub": 2, "to_mont": 3, "from_mont": 4, "sqr": 5, "inv": 6, "neg": 7}
HORNER_CHUNK = 256


def elementwise(
    op: str, a: Any, b: Any = None, stream: Any = None, *, tuning: KernelTuning = DEFAULT_TUNING
) -> Any:
    """``op`` (see OPS) applied row by row to ``(n, 4)`` uint64 CuPy arrays; a new array."""
    cupy = require_cupy()
    a = cupy.ascontiguousarray(a)
    b = a if b is None else cupy.ascontiguousarray(b)
    n = a.size // 4
    out = cupy.empty_like(a)
    fn = module(tuning).get_function("fr_elementwise")
    s = stream or cupy.cuda.get_current_stream()
    with s:
        fn(((n + 255) // 256,), (256,), (out, a, b, np.int32(OPS[op]), np.uint64(n)))
    return out


def evaluate(
    coeffs: Any, x: int, stream: Any = None, *, tuning: KernelTuning = DEFAULT_TUNING
) -> int:
    """P(x) for P = sum_i coeffs[i] X^i with ``coeffs`` ``(n, 4)`` Montgomery on the device and
    x a canonical int; chunked Horner on the GPU, the last few values combined in Python."""
    cupy = require_cupy()
    s = stream or cupy.cuda.get_current_stream()
    fn = module(tuning).get_function("fr_horner_chunks")
    xx = x % R
    with s:  # every copy and kernel below on s, so each reads what the one before wrote
        cur = cupy.ascontiguousarray(coeffs)
        while cur.shape[0] > HORNER_CHUNK:
            n = cur.shape[0]
            parts = (n + HORNER_CHUNK - 1) // HORNER_CHUNK
            out = cupy.empty((parts, 4), dtype=cupy.uint64)
            d_x = cupy.asarray(to_words([xx], True))
            fn(
                ((parts + 127) // 128,), (128,),
                (out, cur, np.uint64(n), np.int32(HORNER_CHUNK), d_x),
            )  # fmt: skip
            cur = out
            xx = pow(xx, HORNER_CHUNK, R)
        vals = from_words(cupy.asnumpy(cur, stream=s), True)
    acc = 0
    for v in reversed(vals):
        acc = (acc * xx + v) % R
    return acc


def random_fr(
    shape: tuple[int, ...],
    seed: int | None = None,
    stream: Any = None,
    first: int = 0,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> Any:
    """Random Fr elements on the device, shape ``shape + (4,)`` uint64, each < 2^254 < r
    (valid in Montgomery or canonical form). A fresh OS-drawn seed unless one is given.
    ``first``: where in the seed's sequence the elements start (chunks of one vector)."""
    cupy = require_cupy()
    n = int(np.prod(shape)) if shape else 1
    out = cupy.empty(tuple(shape) + (4,), dtype=cupy.uint64)
    seed = secrets.randbits(64) if seed is None else seed
    s = stream or cupy.cuda.get_current_stream()
    fn = module(tuning).get_function("fr_random")
    with s:
        fn(((n + 255) // 256,), (256,), (out, np.uint64(n), np.uint64(seed), np.uint64(first)))
    return out

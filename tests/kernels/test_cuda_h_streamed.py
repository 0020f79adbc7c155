"""The H step in one or two device slots on the GPU (marked ``gpu``), against the in-place H
step (itself checked against the CPU reference in test_cuda_ntt.py) and, at k = 10, against
the CPU reference directly.

Fresh random inputs every run, in page-locked host memory as the engine's witness pool holds
them; the slots, the host scratch and the operand buffer (through the allocator) are poisoned
with 0xFF.. first. The one-slot plan also runs with an operand chunk that does not divide n, so
the last partial chunk of the product and of the difference is exercised.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import ntt as ref
from provetop.kernels.cuda import fr as cuda_fr
from provetop.kernels.cuda.h_streamed import run_streamed_h_step
from provetop.kernels.cuda.host_pinned import pinned_empty
from provetop.kernels.cuda.ntt import CudaNtt
from provetop.kernels.cuda.ntt_plan import from_words, to_words
from tests.kernels.test_cuda_ntt import PoisonAllocator

pytestmark = pytest.mark.gpu

R = FR_MODULUS
POISON = np.uint64(0xFFFFFFFFFFFFFFFF)


def _pinned(values: np.ndarray) -> np.ndarray:
    out = pinned_empty(values.shape)
    out[...] = values
    return out


def _inputs(cp, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = 1 << k
    a = cuda_fr.random_fr((n,), seed=random.getrandbits(64))
    b = cuda_fr.random_fr((n,), seed=random.getrandbits(64))
    c = cuda_fr.elementwise("mul", a, b)
    c[n // 3] = cuda_fr.random_fr((1,), seed=random.getrandbits(64))[0]  # unsatisfied: all terms
    return tuple(_pinned(cp.asnumpy(v)) for v in (a, b, c))  # type: ignore[return-value]


def _streamed(cp, a, b, c, slots: int, chunk: int | None = None):
    n = a.shape[0]
    p = cp.full((n, 4), POISON, dtype=cp.uint64)
    q = cp.full((n, 4), POISON, dtype=cp.uint64) if slots == 2 else None
    scratch = None
    if slots == 1:
        scratch = pinned_empty((n, 4))
        scratch[...] = POISON
    kw = {"operand_chunk": chunk} if chunk else {}
    alloc = PoisonAllocator(cp)
    h = run_streamed_h_step(a, b, c, p, q, scratch, ntt=CudaNtt(), allocator=alloc, **kw)
    cp.cuda.get_current_stream().synchronize()
    assert h.shape == (n - 1, 4) and int(h.data.ptr) == int(p.data.ptr)
    return cp.asnumpy(p)


@pytest.mark.parametrize("slots", [1, 2])
def test_matches_the_cpu_reference(cp, slots: int) -> None:
    k = 10
    n = 1 << k
    rng = random.Random()
    a, b = [rng.randrange(R) for _ in range(n)], [rng.randrange(R) for _ in range(n)]
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    c[7] = (c[7] + 3) % R
    host = [_pinned(to_words(v, True)) for v in (a, b, c)]
    got = from_words(_streamed(cp, *host, slots, chunk=300), False)
    want = [int(v) for v in ref.h_step_objects(*(ref._as_objects(v) for v in (a, b, c)))]
    assert got == want


@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("k", [1, 2, 5, 16, 20])
def test_matches_the_in_place_h_step(cp, slots: int, k: int) -> None:
    a, b, c = _inputs(cp, k)
    want = CudaNtt().h_step(*(cp.asarray(v) for v in (a, b, c)))
    want_rows = cp.asnumpy(want)
    chunk = None if k < 16 else (1 << (k - 3)) + 5  # a last partial operand chunk
    got = _streamed(cp, a, b, c, slots, chunk)
    assert np.array_equal(got[: (1 << k) - 1], want_rows)

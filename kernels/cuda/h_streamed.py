"""The H step in less device memory: one or two polynomial slots instead of three.

Why: the in-place H step (``CudaBackend.h_step``) needs a, b and c on the device at once, 3 x 4
GiB at n = 2^27, which no card of 8 or 12 GiB has beside anything else. The step is linear
until the one pointwise product, so it can go through the device one polynomial at a time:

- two slots (P, Q; 8 GiB at 2^27): A' = coset evaluations of a in P, B' in Q, P = A' B';
  C' in Q, P = P - C'; the inverse coset transform of P in place, then P in natural order;
- one slot (P; 4 GiB at 2^27) and a host scratch S of the same size, page-locked: A' in P,
  copied to S; B' in P, P = P S (S streamed up in chunks through one small device buffer),
  copied to S; C' in P, P = S - P; the same last transform.

Every transform runs in place (tile-local DIF passes from natural order, DIT passes from
bit-reversed order: no gather, ``provetop.kernels.cuda.ntt_plan.plan_transform``); the one gathering
pass of the in-place H step (the last inverse transform into natural order) becomes a DIF pass
into bit-reversed order plus an in-place swap of bit-reversed pairs (``fr_bitrev_swap``). The
arithmetic is the H step's: the same factor tables ("hprep", "h_final"), so H comes out
canonical and identical to :meth:`provetop.kernels.cuda.ntt.CudaNtt.h_step`'s.

Planner and executor as for the resident H step (``provetop.kernels.cuda.ntt_plan``,
``provetop.kernels.cuda.ntt``): :func:`plan_streamed_h_step` is pure Python
over named buffers (a, b, c and S on the host, P and Q on the device), run on the GPU by
:func:`run_streamed_h_step` and on numpy buffers by the CPU tests (with the host build of
``ntt.cuh`` for the passes), so the sequence is proven in CI.

Link traffic at 2^27 (4 GiB per polynomial): two slots 12 GiB up; one slot 20 GiB up and 8
GiB down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from provetop.kernels.cuda.ntt import CudaNtt
from provetop.kernels.cuda.ntt_plan import (
    TILE_LOG,
    Pass,
    log2_size,
    plan_coset_evaluations,
    plan_transform,
)
from provetop.kernels.cuda.runtime import require_cupy

HOST_BUFFERS = frozenset({"a", "b", "c", "S"})
DEVICE_BUFFERS = frozenset({"P", "Q"})
# Rows of S per upload of the one-slot product and difference: 2^22 rows = 128 MiB of device
# memory (the only device memory the one-slot plan uses beside P); 32 copies at 2^27
OPERAND_CHUNK = 1 << 22
ELEMENTWISE_BLOCK = 256
OPS = {"mul": 0, "sub": 2}  # fr_elementwise's op codes (ntt.cu)


@dataclass(frozen=True)
class Step:
    """One step over named buffers: ``copy`` dst <- src; ``passes`` (in place on dst);
    ``mul``/``sub`` dst = src[0] op src[1]; ``swap`` dst into the other order."""

    op: str
    dst: str
    src: tuple[str, ...] = ()
    passes: tuple[Pass, ...] = ()


def _coset_evaluations(k: int, buf: str, max_levels: int) -> Step:
    """Natural evaluations on the domain -> natural evaluations on the coset, in place (the
    resident H step's recipe, ``provetop.kernels.cuda.ntt_plan.plan_coset_evaluations``)."""
    return Step("passes", buf, passes=tuple(plan_coset_evaluations(k, buf, buf, max_levels)))


def plan_streamed_h_step(k: int, slots: int, max_levels: int = TILE_LOG) -> list[Step]:
    """The steps of the H step with ``slots`` (1 or 2) device polynomials; H ends in P."""
    if slots not in (1, 2):
        raise ValueError(f"slots must be 1 or 2, got {slots}")
    if k < 1:
        raise ValueError("the H step needs n >= 2")
    spare = "Q" if slots == 2 else "S"  # where A' (then A' B') waits
    steps = [Step("copy", "P", ("a",)), _coset_evaluations(k, "P", max_levels)]
    if slots == 2:
        steps += [Step("copy", "Q", ("b",)), _coset_evaluations(k, "Q", max_levels)]
        steps += [Step("mul", "P", ("P", "Q"))]
        steps += [Step("copy", "Q", ("c",)), _coset_evaluations(k, "Q", max_levels)]
        steps += [Step("sub", "P", ("P", "Q"))]
    else:
        steps += [Step("copy", spare, ("P",))]
        steps += [Step("copy", "P", ("b",)), _coset_evaluations(k, "P", max_levels)]
        steps += [Step("mul", "P", ("P", spare)), Step("copy", spare, ("P",))]
        steps += [Step("copy", "P", ("c",)), _coset_evaluations(k, "P", max_levels)]
        steps += [Step("sub", "P", (spare, "P"))]
    final = plan_transform(
        k,
        inverse=True,
        input_order="natural",
        output_order="bitrev",
        src="P",
        dst="P",
        post="h_final",
        max_levels=max_levels,
    )
    steps += [Step("passes", "P", passes=tuple(final)), Step("swap", "P")]
    return steps


def _grid(n: int) -> tuple[int]:
    return ((n + ELEMENTWISE_BLOCK - 1) // ELEMENTWISE_BLOCK,)


def run_streamed_h_step(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    p: Any,
    q: Any = None,
    scratch: np.ndarray | None = None,
    *,
    ntt: CudaNtt,
    stream: Any = None,
    allocator: Any = None,
    operand_chunk: int = OPERAND_CHUNK,
) -> Any:
    """H's n-1 canonical coefficients (a view of ``p``) from host evaluations a, b, c ((n, 4)
    Montgomery; page-locked for asynchronous copies). ``p`` (and ``q`` for two slots) are
    C-contiguous (n, 4) uint64 device arrays the caller allocated; without ``q``, ``scratch``
    is the (n, 4) host array S (page-locked). The operand buffer of the one-slot plan comes
    from ``allocator``. Everything runs on ``stream`` in order."""
    cupy = require_cupy()
    n = _check_streamed_inputs(cupy, a, b, c, p, q, scratch)
    slots = 2 if q is not None else 1
    k = log2_size(n)
    steps = plan_streamed_h_step(k, slots, ntt.levels_for(k, h_step=True))
    bufs: dict[str, Any] = {"a": a, "b": b, "c": c, "P": p}
    if q is not None:
        bufs["Q"] = q
    else:
        bufs["S"] = scratch
    s = stream or cupy.cuda.get_current_stream()
    mod = ntt.module()
    swap = mod.get_function("fr_bitrev_swap")
    ops = _Elementwise(cupy, mod.get_function("fr_elementwise"), n, operand_chunk, allocator, s)
    with s:
        for st in steps:
            if st.op == "copy":
                src, dst = bufs[st.src[0]], bufs[st.dst]
                if st.dst in DEVICE_BUFFERS:
                    dst.set(src, stream=s)
                else:
                    src.get(stream=s, out=dst, blocking=False)
            elif st.op == "passes":
                ntt.run_plan(list(st.passes), {st.dst: bufs[st.dst]}, 1, s)
            elif st.op in OPS:
                ops(st, bufs)
            elif st.op == "swap":
                swap(_grid(n), (ELEMENTWISE_BLOCK,), (bufs[st.dst], np.int32(k)))
            else:  # pragma: no cover - the planner makes no other step
                raise AssertionError(st.op)
    return p[: n - 1]


def _check_streamed_inputs(
    cupy: Any, a: np.ndarray, b: np.ndarray, c: np.ndarray, p: Any, q: Any, scratch: Any
) -> int:
    """n, once the inputs are what :func:`run_streamed_h_step` takes (else ValueError)."""
    n = int(a.shape[0])
    for v in (a, b, c):
        if v.shape != (n, 4) or v.dtype != np.uint64 or not v.flags.c_contiguous:
            raise ValueError(f"expected C-contiguous ({n}, 4) uint64 host inputs")
    devs = [p] + ([q] if q is not None else [])
    for v in devs:
        if v.shape != (n, 4) or v.dtype != cupy.uint64 or not v.flags.c_contiguous:
            raise ValueError(f"slots must be C-contiguous ({n}, 4) uint64 device arrays")
    if q is not None and int(p.data.ptr) == int(q.data.ptr):
        raise ValueError("the two slots must be distinct buffers")
    if q is None and (scratch is None or scratch.shape != (n, 4) or scratch.dtype != np.uint64):
        raise ValueError(f"one slot needs a ({n}, 4) uint64 host scratch")
    return n


class _Elementwise:
    """The ``mul`` and ``sub`` steps (``fr_elementwise``): on two device buffers at once; with
    one operand on the host (S of the one-slot plan), that operand streamed up through one
    device buffer of ``operand_chunk`` rows, made at the first such step."""

    def __init__(
        self, cupy: Any, fn: Any, n: int, operand_chunk: int, allocator: Any, stream: Any
    ) -> None:
        self.cupy, self.fn, self.n, self.stream = cupy, fn, n, stream
        self.operand_chunk, self.allocator = operand_chunk, allocator
        self.operand: Any = None

    def __call__(self, st: Step, bufs: dict[str, Any]) -> None:
        n, fn, s = self.n, self.fn, self.stream
        x, y = (bufs[name] for name in st.src)
        out, code = bufs[st.dst], np.int32(OPS[st.op])
        host = [name in HOST_BUFFERS for name in st.src]
        if not any(host):
            fn(_grid(n), (ELEMENTWISE_BLOCK,), (out, x, y, code, np.uint64(n)))
            return
        operand = self._operand()
        for lo in range(0, n, operand.shape[0]):
            hi = min(n, lo + operand.shape[0])
            t = operand[: hi - lo]
            t.set((x if host[0] else y)[lo:hi], stream=s)
            xs = t if host[0] else x[lo:hi]
            ys = t if host[1] else y[lo:hi]
            m = np.uint64(hi - lo)
            fn(_grid(hi - lo), (ELEMENTWISE_BLOCK,), (out[lo:hi], xs, ys, code, m))

    def _operand(self) -> Any:
        if self.operand is None:
            cupy, rows = self.cupy, min(self.n, self.operand_chunk)
            if self.allocator is None:
                self.operand = cupy.empty((rows, 4), dtype=cupy.uint64)
            else:
                memptr = self.allocator(rows * 32)
                self.operand = cupy.ndarray((rows, 4), dtype=cupy.uint64, memptr=memptr)
        return self.operand

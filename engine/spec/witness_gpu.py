"""The synthetic witness made on the GPU into a worker's pinned host buffers (CUDA runs).

Why: the witness is synthetic (``provetop.engine.spec.workload``), but at n = 2^27 making it on the
CPU is
the slowest step of the run: ~16 s of numpy per 4 GiB vector and ~15 min of Python for
c = a * b. A real prover's witness comes from circuit synthesis on the CPU; ours only has to be
valid and of the right shape, so each worker makes it on its own device, chunk by chunk (a few
hundred MiB of device memory through the engine's allocator), and copies it into host buffers
that stay page-locked for the worker's life: the pinned pool of the pre-stage (the design's
alternative to cudaHostRegister per partition), so the pre-stage upload runs at full copy
speed and needs no registration. The distribution is the CPU path's (a, b uniform below
2^254, c = a*b, the aux mix of zeros, ones and dense scalars), and the values are labelled
synthetic like the CPU ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from provetop.engine.spec.srs import StepProgress
from provetop.engine.spec.workload import QuerySizes, Witness
from provetop.kernels.cuda.fr import elementwise, random_fr
from provetop.kernels.cuda.host_pinned import pinned_empty
from provetop.kernels.cuda.runtime import on_stream

CHUNK = 1 << 21  # elements per device round trip: 3 x 64 MiB of device memory for a, b, c


class PinnedBuffers:
    """One worker's page-locked host buffers for a, b, c (n rows) and z (m rows); made at
    the worker's first partition and reused for every later one (the worker runs one
    partition at a time, and a witness is dropped before the next is made)."""

    def __init__(
        self, n: int, m: int, pin_method: str, progress: StepProgress | None = None
    ) -> None:
        """``progress``: an ``provetop.engine.telemetry.progress.Progress`` over both arrays'
        bytes, or
        None."""
        step = None if progress is None else progress.advance
        self.abc = pinned_empty((3, n, 4), method=pin_method, progress=step)
        self.z = pinned_empty((m, 4), method=pin_method, progress=step)
        if progress is not None:
            progress.finish()

    @property
    def nbytes(self) -> int:
        return int(self.abc.nbytes + self.z.nbytes)


def _seed(seed: int, vector: int) -> int:
    """An independent 64-bit seed for one vector (its chunks continue one sequence)."""
    return int(np.random.SeedSequence([seed, vector]).generate_state(1, np.uint64)[0])


def synthesize_on_gpu(
    domain_log: int,
    sizes: QuerySizes,
    profile: tuple[float, float, float],
    seed: int,
    bufs: PinnedBuffers,
    *,
    stream: Any,
    allocator: Any,
    chunk: int = CHUNK,
) -> Witness:
    """A witness like ``provetop.engine.spec.workload.synthesize`` in ``bufs`` (see the module
    docstring);
    ``seed`` makes it reproducible, whatever ``chunk`` is (each vector has its own generator
    seed and a chunk continues its sequence; the partition's ``--seed`` stream picks ``seed``)."""
    import cupy

    n = 1 << domain_log
    m = max(sizes.l, sizes.a, sizes.b_g1)
    zeros, ones, _dense = profile
    a_h, b_h, c_h = bufs.abc[0], bufs.abc[1], bufs.abc[2]
    seeds = [_seed(seed, v) for v in range(4)]  # a, b, the zero/one choice, z
    # Nothing below waits for the GPU until the end: copies into the pinned pool are queued
    # (blocking=False) and the zero/one counts stay on the device. A host round trip per
    # chunk (CuPy's default blocking get) left the stream idle between chunks, and beside a
    # neighbour's MSM each relaunch queued behind its blocks: 2.0 s per 2^27 witness against
    # 0.6 s alone (bench/notes/pipeline.md). Each chunk's device arrays are freed in stream
    # order, after their copies, so device memory stays at one chunk's worth.
    with on_stream(stream, allocator) as s:
        try:
            for lo in range(0, n, chunk):
                hi = min(n, lo + chunk)
                a = random_fr((hi - lo,), seed=seeds[0], stream=s, first=lo)
                b = random_fr((hi - lo,), seed=seeds[1], stream=s, first=lo)
                c = elementwise("mul", a, b, stream=s)
                for dev, host in ((a, a_h), (b, b_h), (c, c_h)):
                    dev.get(stream=s, out=host[lo:hi], blocking=False)
                del a, b, c
            counts = cupy.zeros(2, dtype=cupy.int64)
            for lo in range(0, m, chunk):
                hi = min(m, lo + chunk)
                z = random_fr((hi - lo,), seed=seeds[3], stream=s, first=lo)
                # the zero / one / dense choice: a uniform double from 53 random bits of our own
                # generator (CuPy's curand-based one compiles for ~30 s on a fresh machine)
                bits = random_fr((hi - lo,), seed=seeds[2], stream=s, first=lo)[:, 0]
                u = (bits >> 11).astype(cupy.float64) * 2.0**-53
                is_zero = u < zeros
                is_one = (u >= zeros) & (u < zeros + ones)
                # arithmetic, not a boolean-mask assignment (that one can synchronise the host)
                z *= ~(is_zero | is_one)[:, None]
                z[:, 0] += is_one
                z.get(stream=s, out=bufs.z[lo:hi], blocking=False)
                counts += cupy.stack([is_zero.sum(), is_one.sum()])
                del z, bits, u, is_zero, is_one
            n_zeros, n_ones = (int(x) for x in counts.get(stream=s))
            s.synchronize()
        finally:
            # a failure part-way leaves copies queued into the pinned pool: let them land
            # before the pool can be written again (the look-ahead thread's stream is
            # covered by no worker's synchronise)
            try:
                s.synchronize()
            except Exception:  # the stream's own error is the one being raised
                pass

    counts_by_kind = {"zeros": n_zeros, "ones": n_ones, "dense": m - n_zeros - n_ones}
    return Witness(a=a_h, b=b_h, c=c_h, z=bufs.z, counts=counts_by_kind, pinned=True)


# The warm-up's witness: enough rows for two chunks of each loop (so the chunked path and its
# tail run) with every kind of aux scalar, a few KiB pinned
WARM_ROWS = 64
WARM_CHUNK = 48


def warm_synthesis(pin_method: str, *, stream: Any, allocator: Any) -> None:
    """One tiny witness made as a partition makes it, so that CuPy's own kernels of the
    synthesis (the shifts, the float conversion, the comparisons, the masked products, the
    boolean sums: each compiled by NVRTC on first use, per expression and dtype) are built
    before the first partition. Without it a ``small`` run's first synthesis took 7.0 s on a
    new H100 with prebuilt cubins and an empty kernel cache, against 2-5 ms for the next ones
    (2026-12-07)."""
    bufs = PinnedBuffers(WARM_ROWS, WARM_ROWS, pin_method)
    sizes = QuerySizes(h=WARM_ROWS - 1, l=WARM_ROWS // 2, a=WARM_ROWS, b_g1=WARM_ROWS)
    synthesize_on_gpu(
        6,  # 2^6 = WARM_ROWS
        sizes,
        (0.4, 0.3, 0.3),
        0,
        bufs,
        stream=stream,
        allocator=allocator,
        chunk=WARM_CHUNK,
    )

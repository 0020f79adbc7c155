"""How a CUDA device's streamed MSMs fit its memory: the footprint with the GPU MSM's own
scratch sizes, and the plan chosen with the window cap, the chunk and whether the streamed
queries run in one interleaved pass.

Why apart from ``provetop.engine.memory.plan``: that module chooses how many of a, b, c sit on the
device from a footprint; this one builds the footprint a CUDA run's MSMs really need (their
scratch depends on the kernels' settings and on how the queries are streamed) and searches the
streaming choices around ``choose_plan``. Pure arithmetic: no device is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from provetop.engine.memory.allocator import Footprint
from provetop.engine.memory.plan import MemoryPlan, PlanError, choose_plan
from provetop.engine.spec.workload import FR_BYTES, QuerySizes
from provetop.kernels.cuda.msm_plan import (
    companion_window_cap,
    host_scratch_bytes,
    many_scratch_bytes,
    pass_lead,
    pass_scalar_slots,
    scratch_bytes,
    stream_cost,
    stream_window_bits,
    stream_window_floor,
)
from provetop.kernels.cuda.ntt_plan import twiddle_bytes
from provetop.kernels.tuning import KernelTuning


def cuda_footprint(
    fp: Footprint,
    sizes: dict[str, int],
    streamed: dict[str, int],
    tuning: KernelTuning,
    window_max: int | None = None,
    together: bool = False,
) -> Footprint:
    """``fp`` with each MSM's scratch from the GPU MSM's own formula (which depends on the
    kernels' settings); a query whose points are streamed from host (``streamed``: query ->
    chunk points) counts its two chunk buffers and its buckets at a window of at most
    ``window_max`` (default: the whole query's, uncapped). ``together``: the streamed queries'
    MSMs run in one pass (:func:`interleaved_bytes`), as the footprint's ``together``."""

    msm = {}
    for q, m in sizes.items():
        chunk = streamed.get(q)
        if chunk:
            c = stream_window_bits(m, window_max, -(-m // chunk))
            msm[q] = host_scratch_bytes(m, chunk, c, tuning=tuning)
        else:
            msm[q] = scratch_bytes(m, tuning=tuning)
    both = interleaved_bytes(sizes, streamed, tuning, window_max) if together else 0
    return Footprint(u=fp.u, msm=msm, margin=fp.margin, together=both)


def can_interleave(streamed: dict[str, int]) -> bool:
    """Whether the streamed MSMs may run in one pass: H among them with at least one other
    (the point is to hide the copy-bound queries' copies under H's sums)."""
    return "h" in streamed and len(streamed) >= 2  # decided: bench/notes/memory.md, c1e7701


def interleaved_order(streamed: dict[str, int]) -> list[str]:
    """The streamed queries of a joint pass, H first, then the others in pipeline order."""
    return ["h", *(q for q in streamed if q != "h")]


def interleaved_bytes(
    sizes: dict[str, int], streamed: dict[str, int], tuning: KernelTuning, window_max: int | None
) -> int:
    """Device bytes of the joint pass (:func:`provetop.kernels.cuda.msm_plan.many_scratch_bytes`):
    H at a
    window of at most ``window_max``, the others at most COMPANION_WINDOW_MAX, with
    ``tuning.msm_host_buffers`` chunk buffers."""
    qs = interleaved_order(streamed)
    chunk = max(streamed.values())
    windows = []
    for q in qs:
        cap = window_max if q == "h" else companion_window_cap(window_max)
        windows.append(stream_window_bits(sizes[q], cap, -(-sizes[q] // chunk)))
    slots = 0
    if pass_reads_host_scalars(sizes, streamed):  # every query but H reads z there
        shared = [q != "h" for q in qs]
        slots = pass_scalar_slots(
            [sizes[q] for q in qs],
            chunk,
            shared,
            tuning.msm_host_buffers,
            pass_lead(tuning, host_scalars=True),
        )
    return many_scratch_bytes(
        [sizes[q] for q in qs],
        chunk,
        windows,
        tuning.msm_host_buffers,
        scalar_slots=slots,
        tuning=tuning,
    )


def pass_reads_host_scalars(sizes: dict[str, int], streamed: dict[str, int]) -> bool:
    """Whether a joint pass reads the aux scalars from host memory, chunk by chunk: then its
    plan needs no device copy of z, only the pass's scalar buffers (:func:`interleaved_bytes`).
    Only where every query that reads z is streamed (in the pass): a query whose points are on
    the device (B-G1 on a 40 GiB card) reads a device copy of z, which its MSM would otherwise
    upload inside its own phase (+21 ms at 5a95826); the pass then copies z up whole."""
    # decided: bench/notes/memory.md, 4db55d1 and 5a95826
    return set(sizes) - {"h"} <= set(streamed)


def window_floor(streamed: dict[str, int], tuning: KernelTuning) -> int:
    """The smallest window cap a streamed MSM is given
    (:func:`provetop.kernels.cuda.msm_plan.stream_window_floor` of the largest chunk): no plan
    needs more
    memory with the buckets kept per query than with a bucket array per chunk."""
    return stream_window_floor(max(streamed.values(), default=1), tuning)


@dataclass(frozen=True)
class StreamPlan:
    """A device's memory plan with how its streamed MSMs run: ``window_max`` caps their window
    (None: no query is streamed), ``together``: in one interleaved pass, ``chunk``: points per
    upload (None: the backend's own)."""

    footprint: Footprint
    plan: MemoryPlan
    window_max: int | None = None
    together: bool = False
    chunk: int | None = None
    host_scalars: bool = False  # the joint pass reads z from host memory (no device copy)


def plan_rank(plan: MemoryPlan) -> tuple[int, bool, bool]:
    """How fast a memory plan runs, as a sortable key (larger is faster): more slots, the aux
    scalars beside H, the twiddle table kept."""
    return (plan.slots, plan.z_with_h, not plan.release_tables)


# The chunks plan_streaming weighs: the configured one times 4/4, 5/4, ..., 11/4. Why these:
# measured on the H200 (porep-32g, 2026-12-02; bench/notes/memory.md), the one pass alone
# (bench/stream_probe.py, z from host memory, four buffers, one call) took 1,315 ms at 6 Mi
# points, 1,338 at 8 Mi, 1,308 at 11 Mi and 1,391 at 16 Mi, although the cost model (H's
# additions into kept sums only) keeps falling (1.134 of a resident MSM at 6 Mi, 1.094 at
# 11 Mi, 1.078 at 16 Mi, c = 20): the gaps between the chunks grow with them (50 ms at 6 Mi,
# 167 at 16 Mi), the copy stream three chunks ahead no longer hiding the copy-bound chunks'
# copies. So the model chooses, within what was measured to pay.
CHUNK_STEPS = tuple(range(4, 12))


def plan_streaming(
    free: int,
    base: Footprint,
    sizes: dict[str, int],
    streamed: dict[str, int],
    tuning: KernelTuning,
    z: int,
    tables: int,
    device: str = "device",
) -> StreamPlan:
    """:func:`plan_with_window` with the chunk chosen too: among the chunks of CHUNK_STEPS
    (with ``tuning.msm_host_chunk_grow`` on), those whose plan is as fast as the configured
    chunk's (the same slots, aux scalars and table) and no less interleaved, the one whose
    H-sized query the model (:func:`provetop.kernels.cuda.msm_plan.stream_cost`, at the window the
    plan
    allows) finds cheapest; ties to the smaller chunk. Why a larger chunk pays: every chunk
    after the first adds into the kept buckets it reaches, so fewer chunks are fewer of those
    additions (and fewer count stages)."""
    reference = plan_with_window(free, base, sizes, streamed, tuning, z, tables, device)
    if not streamed or tuning.msm_host_chunk_grow != "on" or reference.window_max is None:
        return reference
    small = min(streamed.values())
    n = max(sizes[q] for q in streamed)

    def cost(sp: StreamPlan, chunk: int) -> float:
        chunks = -(-n // chunk)
        c = min(sp.window_max or 0, stream_window_bits(n, None, chunks))
        return stream_cost(n, c, chunks)

    best, best_cost = replace(reference, chunk=small), cost(reference, small)
    for step in CHUNK_STEPS[1:]:
        chunk = small * step // CHUNK_STEPS[0]
        try:
            sp = plan_with_window(
                free, base, sizes, {q: chunk for q in streamed}, tuning, z, tables, device
            )
        except PlanError:
            continue
        if plan_rank(sp.plan) != plan_rank(reference.plan) or sp.together < reference.together:
            continue
        c_cost = cost(sp, chunk)
        if c_cost < best_cost:
            best, best_cost = replace(sp, chunk=chunk), c_cost
    return best


def plan_with_window(
    free: int,
    base: Footprint,
    sizes: dict[str, int],
    streamed: dict[str, int],
    tuning: KernelTuning,
    z: int,
    tables: int,
    device: str = "device",
) -> StreamPlan:
    """The memory plan for a device with ``free`` bytes, and how its streamed MSMs run: the
    plan of the floor's window (:func:`window_floor`) run one query after the other is the
    reference; among the variants whose plan is as fast (the same slots, the aux scalars where
    they were, the twiddle table kept if it was), the first of: all streamed MSMs in one
    interleaved pass at the largest cap, then one after the other at the largest cap. Why
    this order: measured on the H200 (bench/notes/memory.md, 2026-12-02), the copy-bound
    queries' ~700 ms of copies hide under H's sums only when they run together, which is
    worth more than a bit of window (~7 % of H's sums); and a larger window is fewer windows
    of additions per point, but its buckets (192 bytes each, W 2^(c-1) of them) must not push
    the H step onto a slower plan. :class:`provetop.engine.memory.plan.PlanError` when no plan fits
    even at the floor."""
    if not streamed:
        fp = cuda_footprint(base, sizes, streamed, tuning)
        return StreamPlan(fp, choose_plan(free, fp, z, tables, device=device))
    floor = window_floor(streamed, tuning)
    top = max(stream_window_bits(sizes[q], None, -(-sizes[q] // streamed[q])) for q in streamed)
    fp = cuda_footprint(base, sizes, streamed, tuning, floor)
    reference = choose_plan(free, fp, z, tables, device=device)

    modes = (True, False) if can_interleave(streamed) else (False,)
    for together in modes:
        host_z = together and pass_reads_host_scalars(sizes, streamed)
        for cap in range(top, floor - 1, -1):
            fp_c = cuda_footprint(base, sizes, streamed, tuning, cap, together)
            try:
                plan_c = choose_plan(free, fp_c, 0 if host_z else z, tables, device=device)
            except PlanError:
                continue
            if plan_rank(plan_c) < plan_rank(reference) or (together and not plan_c.z_with_h):
                continue
            return StreamPlan(fp_c, plan_c, cap, together, host_scalars=host_z)
    return StreamPlan(fp, reference, floor)


def aux_scalar_bytes(sizes: QuerySizes) -> int:
    """Device bytes of the aux scalars z (one Fr per row of the largest aux query)."""
    return max(sizes.l, sizes.a, sizes.b_g1) * FR_BYTES


def startup_plan_inputs(
    base: Footprint, sizes: QuerySizes, domain_log: int, host_chunk: int, tuning: KernelTuning
) -> tuple[Footprint, int, int]:
    """(footprint, aux scalar bytes, twiddle table bytes) of the smallest CUDA region: every
    query streamed from the host. The start-up check (``provetop.engine.run.runner``) refuses a
    device on
    which no plan fits these, before the SRS is made."""
    streamed = {q: host_chunk for q in sizes.as_dict()}
    fp = cuda_footprint(base, sizes.as_dict(), streamed, tuning, window_floor(streamed, tuning))
    return fp, aux_scalar_bytes(sizes), twiddle_bytes(domain_log)

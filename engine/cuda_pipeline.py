"""A CUDA run's set-up around the one partition driver: per device, per run.

Why a separate module: ``engine.pipeline`` is the one path every backend runs, and the steps
a partition takes on a GPU are ``engine.partition_cuda``. What is left here is what a CUDA run
sets up once per device or once per run, before and after its partitions:

- :class:`BoundBackend`: the kernel backend with the calling worker's compute stream and the
  device's stream-ordered pool (``CudaDevice.kernel_args``) injected into every call, and the
  H step run in place (H in d_a's memory, d_b/d_c as work buffers: the footprint the allocator
  plans for);
- :class:`CudaPartitionRunner`: the driver with the CUDA steps, what each worker runs;
- :class:`LazyAwarePolicy`: the aware policy that trims only when the free memory is short.
  Trimming is not free on a real device: the calling worker waits for its own streams, a
  ``free_all_blocks`` costs cudaFree calls (each waits for the whole device). The cuzk
  two-worker regression (32.1 -> 41.0 s/proof) came from trims that made one worker wait for
  the other's kernels; here a pre-stage that fits is decided from ``cudaMemGetInfo`` alone;
- :func:`cuda_footprint`: the partition's footprint with the GPU MSM's own scratch sizes
  (``kernels.cuda.msm_plan.scratch_bytes``) plus the two chunk buffers of a streamed query;
- :func:`place_device_srs`: the SRS residency decision carried out and emitted (``alloc``
  events, site ``srs``; proof/partition/worker are -1: the SRS belongs to the run);
- :class:`CudaRun`: the per-device set-up and tear-down (contexts, the host check, the
  retired witness pools, the interpreter's switch interval).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from engine.allocator import AwarePolicy, Decision, Footprint
from engine.devices.base import Block
from engine.devices.cuda import CudaDevice
from engine.gate import DeviceGate
from engine.hostmem import (
    HostMemoryError,
    PinnedPlan,
    host_available,
    refusal,
    witness_pool_bytes,
)
from engine.memory_plan import RESIDENT, MemoryPlan, PlanError, choose_plan
from engine.partition_cuda import CudaPartition
from engine.pipeline import PartitionRunner, RunContext
from engine.progress import Progress
from engine.residency import G1_AFFINE_BYTES, plan_residency
from engine.srs import Srs
from engine.tuning import DEFAULT_SWITCH_INTERVAL_S
from engine.workload import FR_BYTES
from kernels.cuda.host_pinned import pinned_empty, take_fallbacks
from kernels.cuda.msm_plan import (
    INTERLEAVE_BUFFERS,
    INTERLEAVE_LEAD,
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
from kernels.cuda.ntt_plan import twiddle_bytes
from kernels.tuning import KernelTuning


class BoundBackend:
    """``backend`` with ``device.kernel_args()`` (this thread's stream, the async pool)."""

    def __init__(
        self,
        backend: Any,
        device: Any,
        window_max: int | None = None,
        together: list[str] | None = None,
        chunk: int | None = None,
        host_scalars: bool = False,
        buffers: int = INTERLEAVE_BUFFERS,
        lead: int = INTERLEAVE_LEAD,
    ) -> None:
        self.backend = backend
        self.device = device
        self.name = backend.name
        self.window_max = window_max  # the streamed MSMs' window cap (:func:`plan_with_window`)
        self.together = together  # the queries streamed in one pass (H first), or None
        self.chunk = chunk  # points per upload of a streamed MSM (:func:`plan_streaming`)
        # the one pass reads the aux scalars from host memory, chunk by chunk (no device copy)
        self.host_scalars = bool(together) and host_scalars
        self.buffers = buffers  # point buffers of the one pass (the plan counted them)
        self.lead = lead  # H's chunks the one pass takes before any other query's

    def h_step(self, a: Any, b: Any, c: Any, **kw: Any) -> Any:
        args = {**self.device.kernel_args("ntt_scratch"), "overwrite_inputs": True, **kw}
        return self.backend.h_step(a, b, c, **args)

    def h_step_streamed(self, a: Any, b: Any, c: Any, slots: list[Any], **kw: Any) -> Any:
        args = {**self.device.kernel_args("ntt_scratch"), **kw}
        return self.backend.h_step_streamed(a, b, c, slots, **args)

    def msm(self, points: Any, scalars: Any, **kw: Any) -> Any:
        args = {**self.device.kernel_args("msm_scratch"), "window_max": self.window_max, **kw}
        if self.chunk is not None:
            args.setdefault("chunk", self.chunk)
        return self.backend.msm(points, scalars, **args)

    def msm_many(self, points: list[Any], scalars: list[Any], **kw: Any) -> Any:
        caps = [self.window_max] + [companion_window_cap(self.window_max)] * (len(points) - 1)
        args = {**self.device.kernel_args("msm_scratch"), "windows_max": caps, **kw}
        args.setdefault("buffers", self.buffers)
        args.setdefault("lead", self.lead)
        if self.chunk is not None:
            args.setdefault("chunk", self.chunk)
        if self.host_scalars:
            args.setdefault("host_scalars", True)
        return self.backend.msm_many(points, scalars, **args)

    def ntt(self, x: Any, **kw: Any) -> Any:
        return self.backend.ntt(x, **{**self.device.kernel_args("ntt_scratch"), **kw})

    def srs(self, secrets: Any, **kw: Any) -> Any:
        return self.backend.srs(secrets, **kw)


class CudaPartitionRunner(PartitionRunner):
    """The one driver (``engine.pipeline``) with the CUDA steps
    (:class:`engine.partition_cuda.CudaPartition`): what a worker of a CUDA run runs."""

    def __init__(
        self,
        ctx: RunContext,
        device: Any,
        worker: int,
        mutex: threading.Lock,
        gate: DeviceGate | None = None,
    ) -> None:
        super().__init__(ctx, device, worker, mutex, gate, ops=CudaPartition)


class LazyAwarePolicy(AwarePolicy):
    """Aware, but a pre-stage that fits in what the driver reports free needs no trim."""

    def prestage(self, device: Any, fp: Footprint, forced: bool, reserved: int = 0) -> Decision:
        if not forced:
            free, _total = device.mem_info()
            if free >= fp.prestage + fp.margin + reserved:
                return Decision("ok", "fits without a trim", free=free, margin=fp.margin)
        return super().prestage(device, fp, forced, reserved)


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


def can_interleave(streamed: dict[str, int], tuning: KernelTuning) -> bool:
    """Whether the streamed MSMs may run in one pass: H among them with at least one other
    (the point is to hide the copy-bound queries' copies under H's sums), and not switched
    off (``PROVETOP_MSM_HOST_INTERLEAVE``)."""
    return "h" in streamed and len(streamed) >= 2 and tuning.msm_host_interleave == "on"


def interleaved_order(streamed: dict[str, int]) -> list[str]:
    """The streamed queries of a joint pass, H first, then the others in pipeline order."""
    return ["h", *(q for q in streamed if q != "h")]


def interleaved_bytes(
    sizes: dict[str, int], streamed: dict[str, int], tuning: KernelTuning, window_max: int | None
) -> int:
    """Device bytes of the joint pass (:func:`kernels.cuda.msm_plan.many_scratch_bytes`): H at a
    window of at most ``window_max``, the others at most COMPANION_WINDOW_MAX, with
    ``tuning.msm_host_buffers`` chunk buffers."""
    qs = interleaved_order(streamed)
    chunk = max(streamed.values())
    windows = []
    for q in qs:
        cap = window_max if q == "h" else companion_window_cap(window_max)
        windows.append(stream_window_bits(sizes[q], cap, -(-sizes[q] // chunk)))
    slots = 0
    if pass_reads_host_scalars(tuning, sizes, streamed):  # every query but H reads z there
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


def pass_reads_host_scalars(
    tuning: KernelTuning, sizes: dict[str, int], streamed: dict[str, int]
) -> bool:
    """Whether a joint pass reads the aux scalars from host memory, chunk by chunk
    (``PROVETOP_MSM_PASS_SCALARS=host``): then its plan needs no device copy of z, only the
    pass's scalar buffers (:func:`interleaved_bytes`). Only where every query that reads z is
    streamed (in the pass): a query whose points are on the device (B-G1 on a 40 GiB card)
    reads a device copy of z, which its MSM would otherwise upload inside its own phase
    (+21 ms at 5a95826)."""
    return tuning.msm_pass_scalars == "host" and set(sizes) - {"h"} <= set(streamed)


def window_floor(streamed: dict[str, int], tuning: KernelTuning) -> int:
    """The smallest window cap a streamed MSM is given
    (:func:`kernels.cuda.msm_plan.stream_window_floor` of the largest chunk): no plan needs more
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
# measured on the H200 (porep-32g, 2026-12-02; docs/performance-notes.md), the one pass alone
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
    H-sized query the model (:func:`kernels.cuda.msm_plan.stream_cost`, at the window the plan
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
    this order: measured on the H200 (docs/performance-notes.md, 2026-12-02), the copy-bound
    queries' ~700 ms of copies hide under H's sums only when they run together, which is
    worth more than a bit of window (~7 % of H's sums); and a larger window is fewer windows
    of additions per point, but its buckets (192 bytes each, W 2^(c-1) of them) must not push
    the H step onto a slower plan. :class:`engine.memory_plan.PlanError` when no plan fits
    even at the floor."""
    if not streamed:
        fp = cuda_footprint(base, sizes, streamed, tuning)
        return StreamPlan(fp, choose_plan(free, fp, z, tables, device=device))
    floor = window_floor(streamed, tuning)
    top = max(stream_window_bits(sizes[q], None, -(-sizes[q] // streamed[q])) for q in streamed)
    fp = cuda_footprint(base, sizes, streamed, tuning, floor)
    reference = choose_plan(free, fp, z, tables, device=device)

    modes = (True, False) if can_interleave(streamed, tuning) else (False,)
    for together in modes:
        host_z = together and pass_reads_host_scalars(tuning, sizes, streamed)
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


class HostSrs:
    """The queries streamed from the host, made once into pinned memory and shared by every
    device (a real prover loads its parameters into host memory once)."""

    def __init__(self, srs: Srs, backend: Any, pin_method: str) -> None:
        self.srs = srs
        self.backend = backend
        self.pin_method = pin_method
        self._lock = threading.Lock()

    def get(self, query: str, device: Any, progress: Progress | None = None) -> Any:
        """The query's pinned host points, made on ``device`` by the first caller (counted in
        ``progress``; a later caller counts them at once, already made)."""
        with self._lock:
            pts = self.srs.points.get(query)
            m = self.srs.sizes[query]
            if pts is None:
                pts = pinned_empty((m, 12), method=self.pin_method)
                with device.dev:
                    self.backend.srs_powers(
                        self.srs.sigmas[query],
                        m,
                        pts,
                        chunk=SRS_CHUNK,
                        progress=None if progress is None else progress.advance,
                        **_srs_args(device),
                    )
                self.srs.points[query] = pts
            elif progress is not None:
                progress.advance(m)
            return pts


SRS_CHUNK = 1 << 22  # points per SRS generation launch: ~1 GiB of scratch (cuda_srs)


def _srs_args(device: Any) -> dict[str, Any]:
    """Stream and allocator for SRS generation on ``device`` (its stream-ordered pool, so the
    scratch is trimmed away before the partitions start)."""
    return {"stream": device.streams().compute, "allocator": device.allocator("srs")}


def place_device_srs(
    device: Any,
    srs: Srs,
    fp: Footprint,
    workers: int,
    host_chunk: int,
    bus: Any,
    host: HostSrs,
    stopping: Callable[[], bool] | None = None,
) -> tuple[dict[str, Any], list[Block], dict[str, int]]:
    """Decide where each query lives on ``device``, make it there (device queries straight
    into a ``raw`` block; host ones from the shared pinned copy) and emit one ``alloc`` event
    per query. Returns (points by query, device blocks to free at the end, streamed queries ->
    chunk points). The points made are counted in one ``progress`` step per device; between
    two chunks ``stopping()`` ends the generation (``engine.progress.Stopped``)."""
    cupy = device.cupy
    sizes = dict(srs.sizes)
    device.synchronize()
    device.trim()
    free, _ = device.mem_info()
    chunk_bytes = host_chunk * G1_AFFINE_BYTES
    plan = plan_residency(sizes, free, fp, workers, chunk_bytes)
    points: dict[str, Any] = {}
    blocks: list[Block] = []
    progress = Progress(
        bus.emit,
        "device_srs",
        f"SRS on device {device.index}",
        sum(sizes[p.query] for p in plan),
        "points",
        stop=stopping,
        device=device.index,
    )
    try:
        for p in plan:
            m = sizes[p.query]
            if p.where == "device":
                blk = device.malloc(p.nbytes, "raw", "srs")
                blocks.append(blk)
                arr = cupy.ndarray((m, 12), dtype=cupy.uint64, memptr=blk.handle)
                with device.dev:
                    host.backend.srs_powers(
                        srs.sigmas[p.query],
                        m,
                        arr,
                        chunk=SRS_CHUNK,
                        progress=progress.advance,
                        **_srs_args(device),
                    )
                points[p.query] = arr
            else:
                points[p.query] = host.get(p.query, device, progress)
                device.pin(p.nbytes)
            bus.emit(
                "alloc",
                proof=-1,
                partition=-1,
                worker=-1,
                device=device.index,
                site="srs",
                pool="raw" if p.where == "device" else "host",
                requested=p.nbytes,
                decision="ok" if p.where == "device" else "fallback",
                reason=f"{p.query}: {p.reason}",
                free=p.free,
                margin=p.need,
                pools=device.sample(),
            )
    except BaseException:  # stopped (or failed) part-way: the blocks made so far go back now
        try:
            device.synchronize()  # nothing still writes into them
        except Exception:
            pass
        for blk in blocks:
            device.free(blk)
        raise
    progress.finish()
    device.synchronize()
    device.trim()  # the generation scratch goes back before the first pre-stage decision
    streamed = {p.query: host_chunk for p in plan if p.where == "host"}
    return points, blocks, streamed


class CudaRun:
    """Per-device set-up and tear-down of a CUDA run (devices, SRS placement, contexts).

    GIL: a worker in its GPU region launches ~100 small kernels per MSM from Python, each
    needing the GIL; a neighbour doing pure-Python work (synthesis, verification) keeps the
    GIL for the whole switch interval (5 ms by default), so each launch can wait 5 ms. On the
    first H200 run that stretched a 2^20 MSM from 13-19 ms to 670-930 ms (gpu_ms too: the
    stream idles between launches). The run lowers the interval to ``switch_interval_s``
    (``PROVETOP_SWITCH_INTERVAL``, 0.5 ms by default: ``engine.tuning``; process-wide;
    restored at close)."""

    def __init__(self, switch_interval_s: float = DEFAULT_SWITCH_INTERVAL_S) -> None:
        import sys

        self.blocks: dict[int, list[Block]] = {}
        self.host_srs: HostSrs | None = None
        self._lock = threading.Lock()
        self._host_available = host_available()  # before this run pins anything
        # queries streamed from host memory by any device so far: the one shared host SRS
        self._host_streamed: dict[str, int] = {}
        self._scratch_workers = 0  # workers of one-slot devices (a host scratch each)
        # witness pools of workers that have stopped, freed only at close: unpinning 17 GB
        # while a neighbour still runs stalled its launches (the last partition's H step took
        # 1.7-2.2 s instead of 0.32 in every H200 run of 2026-11-30, before e2ae67e)
        self._retired: list[Any] = []
        self._old_interval = sys.getswitchinterval()
        sys.setswitchinterval(switch_interval_s)

    def context(self, ctx: RunContext, device: Any, workers: int) -> RunContext:
        """The run context for ``device``'s workers: bound backend, placed SRS, footprint
        and policy for real pools."""
        backend = ctx.backend
        host_chunk = int(getattr(backend, "host_chunk", 1 << 22))
        warm_up = getattr(backend, "warm_up", None)
        if warm_up is not None:  # tables outside the trimmed pool; compile before partitions
            progress = Progress(
                ctx.bus.emit,
                "warmup",
                f"CUDA warm-up on device {device.index}",
                len(backend.WARM_UP_STEPS),  # warm_up calls step() after each of them
                "steps",
                device=device.index,
            )
            with device.dev:
                warm_up(ctx.config.domain_log, step=lambda name: progress.advance(1))
            progress.finish()
        with self._lock:
            if self.host_srs is None:
                self.host_srs = HostSrs(ctx.srs, backend, ctx.tuning.kernels.pin_method)
        points, blocks, streamed = place_device_srs(
            device,
            ctx.srs,
            ctx.footprint,
            workers,
            host_chunk,
            ctx.bus,
            self.host_srs,
            ctx.stopping,
        )

        for line in take_fallbacks():  # the host SRS, pinned on this thread
            ctx.bus.emit(
                "fault", kind="registration", message=line, site="host_srs", device=device.index
            )
        sizes, kt = dict(ctx.srs.sizes), ctx.tuning.kernels
        plan = RESIDENT
        if ctx.policy.name == "aware":  # naive keeps the seed's path: its OOMs are the point
            free, _total = device.mem_info()
            z, tables = aux_scalar_bytes(ctx.sizes), twiddle_bytes(ctx.config.domain_log)
            where = f"device {device.index}"
            chosen = plan_streaming(free, ctx.footprint, sizes, streamed, kt, z, tables, where)
            fp, plan = chosen.footprint, chosen.plan
            window_max, together, chunk = chosen.window_max, chosen.together, chosen.chunk
            host_z = chosen.host_scalars
            emit_plan(ctx.bus, device, plan, fp, window_max, together, chunk, host_z)
        else:  # naive: the floor's window, the smallest bucket arrays, one query at a time
            window_max = window_floor(streamed, kt) if streamed else None
            together, chunk, host_z = False, None, False
            fp = cuda_footprint(ctx.footprint, sizes, streamed, kt, window_max)
        with self._lock:
            if plan.slots == 1:
                self._scratch_workers += workers
            self.blocks[device.index] = blocks
            # after every device: a smaller card may stream queries the first one kept, and
            # the shared host SRS holds the union (the witness pools are pinned only later,
            # at each worker's first partition)
            self._host_streamed.update(streamed)
            self._check_host(ctx, self._host_streamed, workers)
        srs = Srs(sigmas=ctx.srs.sigmas, sizes=ctx.srs.sizes, points=points)
        policy = LazyAwarePolicy() if ctx.policy.name == "aware" else ctx.policy
        return replace(
            ctx,
            backend=BoundBackend(
                backend,
                device,
                window_max,
                interleaved_order(streamed) if together else None,
                chunk,
                host_z,
                kt.msm_host_buffers,
                pass_lead(kt, host_z),
            ),
            srs=srs,
            footprint=fp,
            policy=policy,
            plan=plan,
        )

    def _check_host(self, ctx: RunContext, streamed: dict[str, int], workers: int) -> None:
        """Refuse (HostMemoryError) a run whose page-locked memory would not fit the host,
        before the witness pools are pinned (see ``engine.hostmem``)."""
        cfg, sizes, qs = ctx.config, dict(ctx.srs.sizes), ctx.sizes
        m = max(qs.l, qs.a, qs.b_g1)  # the aux witness z
        plan = PinnedPlan(
            host_srs=sum(sizes[q] * G1_AFFINE_BYTES for q in streamed),
            pool=witness_pool_bytes(cfg.domain_log, m),
            pools=len(cfg.devices) * workers * (2 if cfg.synthesis_ahead else 1),
            scratch=self._scratch_workers * (1 << cfg.domain_log) * FR_BYTES,
        )
        line = refusal(plan, self._host_available, cfg.synthesis_ahead)
        if line is not None:
            raise HostMemoryError(line)

    def retire(self, runner: Any) -> None:
        """Keep a stopped worker's pinned pools until :meth:`close` (see ``_retired``)."""
        detach = getattr(runner, "detach_pools", None)
        if detach is not None:
            pools = detach()
            with self._lock:
                self._retired.extend(pools)

    def close(self, devices: list[Any]) -> None:
        """Free the device-resident SRS and the retired witness pools, give the ballast back,
        trim the pools."""
        import sys

        sys.setswitchinterval(self._old_interval)
        with self._lock:
            self._retired.clear()
        for d in devices:
            for blk in self.blocks.pop(d.index, []):
                d.free(blk)
            close = getattr(d, "close", None)
            if close is not None:
                close()


def aux_scalar_bytes(sizes: Any) -> int:
    """Device bytes of the aux scalars z (one Fr per row of the largest aux query)."""
    return max(sizes.l, sizes.a, sizes.b_g1) * FR_BYTES


def startup_plan_inputs(
    base: Footprint, sizes: Any, domain_log: int, host_chunk: int, tuning: KernelTuning
) -> tuple[Footprint, int, int]:
    """(footprint, aux scalar bytes, twiddle table bytes) of the smallest CUDA region: every
    query streamed from the host. The start-up check (``engine.runner``) refuses a device on
    which no plan fits these, before the SRS is made."""
    streamed = {q: host_chunk for q in sizes.as_dict()}
    fp = cuda_footprint(base, sizes.as_dict(), streamed, tuning, window_floor(streamed, tuning))
    return fp, aux_scalar_bytes(sizes), twiddle_bytes(domain_log)


def emit_plan(
    bus: Any,
    device: Any,
    plan: MemoryPlan,
    fp: Footprint,
    window_max: int | None = None,
    together: bool = False,
    chunk: int | None = None,
    host_scalars: bool = False,
) -> None:
    """The device's plan as an ``alloc`` event of the run (site ``plan``; proof, partition
    and worker -1, as the SRS placement's), so the dashboard and the recording show it, with
    the streamed MSMs' window cap where any query is streamed, whether they run in one
    interleaved pass, their chunk, and whether the pass reads the aux scalars from host
    memory."""
    reason = f"memory plan {plan.reason}"
    if window_max:
        how = "in one interleaved pass" if together else "one after the other"
        reason += f"; streamed MSMs {how}, at a window of at most {window_max} bits"
        if chunk:
            reason += f", in chunks of {chunk} points"
        if host_scalars:
            reason += ", the aux scalars sent up with each chunk"
    bus.emit(
        "alloc",
        proof=-1,
        partition=-1,
        worker=-1,
        device=device.index,
        site="plan",
        pool="async",
        requested=plan.need,
        decision="fallback" if plan.streamed else "ok",
        reason=reason,
        free=plan.free,
        margin=fp.margin,
        pools=device.sample(),
    )


def make_cuda_devices(
    indices: tuple[int, ...],
    capacity: int | None,
    sync_scope: str = "worker",
    priority_to: str = "synthesis",
) -> list[Any]:
    """One :class:`engine.devices.cuda.CudaDevice` per index (``--device-memory`` each).
    ``sync_scope="device"`` (``PROVETOP_SYNC_SCOPE``) makes every synchronise before a trim
    wait for the whole device (the other worker's kernels too): the variant to measure the
    trim stall against. ``priority_to="compute"`` (``PROVETOP_PRIORITY_TO``) gives the compute
    streams the greatest priority instead of the synthesis stream
    (``engine.devices.cuda.PRIORITY_TO``)."""
    return [
        CudaDevice(i, capacity, sync_scope=sync_scope, priority_to=priority_to) for i in indices
    ]

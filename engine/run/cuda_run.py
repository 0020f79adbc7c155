"""A CUDA run's set-up around the one partition driver, per device and per run.

What a CUDA run does once per device or once per run, before and after its partitions:
:class:`CudaRun` (the warm-up, the SRS placed on each device by ``provetop.engine.run.cuda_srs``,
the
memory plan chosen by ``provetop.engine.memory.stream_plan`` and emitted, the host check of the
pinned
memory, the bound backend and lazy policy of the device's workers, the retired witness pools,
the interpreter's switch interval), the plan's ``alloc`` event (:func:`emit_plan`) and the
devices themselves (:func:`make_cuda_devices`). The steps of a partition on a GPU are
``provetop.engine.partition.cuda``; the one driver every backend runs is
``provetop.engine.partition.pipeline``.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from provetop.engine.devices.base import Block, Device
from provetop.engine.devices.cuda import CudaDevice
from provetop.engine.memory.allocator import Footprint, LazyAwarePolicy
from provetop.engine.memory.hostmem import (
    HostMemoryError,
    PinnedPlan,
    host_available,
    refusal,
    witness_pool_bytes,
)
from provetop.engine.memory.plan import RESIDENT, MemoryPlan
from provetop.engine.memory.residency import G1_AFFINE_BYTES
from provetop.engine.memory.stream_plan import (
    StreamPlan,
    aux_scalar_bytes,
    cuda_footprint,
    interleaved_order,
    plan_streaming,
    window_floor,
)
from provetop.engine.partition.context import EventBus, RunContext
from provetop.engine.partition.cuda_backend import BoundBackend
from provetop.engine.partition.pipeline import PartitionRunner
from provetop.engine.run.cuda_srs import HostSrs, emit_run_alloc, place_device_srs
from provetop.engine.settings.tuning import DEFAULT_SWITCH_INTERVAL_S
from provetop.engine.spec.srs import Srs
from provetop.engine.spec.witness_gpu import warm_synthesis
from provetop.engine.spec.workload import FR_BYTES
from provetop.engine.telemetry.progress import Progress
from provetop.kernels.backend import HostStreaming, KernelBackend, WarmUp
from provetop.kernels.cuda.host_pinned import take_fallbacks
from provetop.kernels.cuda.msm_plan import pass_lead
from provetop.kernels.cuda.ntt_plan import twiddle_bytes
from provetop.kernels.tuning import DEFAULT_TUNING

if TYPE_CHECKING:
    from provetop.kernels.cuda.backend import CudaBackend


class CudaRun:
    """Per-device set-up and tear-down of a CUDA run (devices, SRS placement, contexts).

    GIL: a worker in its GPU region launches ~100 small kernels per MSM from Python, each
    needing the GIL; a neighbour doing pure-Python work (synthesis, verification) keeps the
    GIL for the whole switch interval (5 ms by default), so each launch can wait 5 ms. On the
    first H200 run that stretched a 2^20 MSM from 13-19 ms to 670-930 ms (gpu_ms too: the
    stream idles between launches). The run lowers the interval to ``switch_interval_s``
    (``PROVETOP_SWITCH_INTERVAL``, 0.5 ms by default: ``provetop.engine.settings.tuning``;
    process-wide;
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

    def context(self, ctx: RunContext, device: Device, workers: int) -> RunContext:
        """The run context for ``device``'s workers: bound backend, placed SRS, footprint
        and policy for real pools."""
        gpu = cuda_side(device)
        backend = cast("CudaBackend", ctx.backend)  # a CUDA run's (or a test's stand-in)
        self._warm_up(ctx, device, gpu)
        points, blocks, streamed = self._place_srs(ctx, device, workers)
        chosen = self._plan(ctx, device, streamed)
        self._keep(ctx, device, workers, chosen.plan, blocks, streamed)
        kt = ctx.tuning.kernels
        bound = BoundBackend(
            backend,
            gpu,
            chosen.window_max,
            interleaved_order(streamed) if chosen.together else None,
            chosen.chunk,
            chosen.host_scalars,
            kt.msm_host_buffers,
            pass_lead(kt, chosen.host_scalars),
        )
        srs = Srs(sigmas=ctx.srs.sigmas, sizes=ctx.srs.sizes, points=points)
        policy = LazyAwarePolicy() if ctx.policy.name == "aware" else ctx.policy
        return replace(
            ctx, backend=bound, srs=srs, footprint=chosen.footprint, policy=policy, plan=chosen.plan
        )

    def _warm_up(self, ctx: RunContext, device: Device, gpu: CudaDevice) -> None:
        """Tables outside the trimmed pool, modules compiled, before any partition (a
        ``progress`` step of its own: minutes of NVRTC on a new machine)."""
        backend = ctx.backend
        if not isinstance(backend, WarmUp):
            return
        progress = Progress(
            ctx.bus.emit,
            "warmup",
            f"CUDA warm-up on device {device.index}",
            len(backend.WARM_UP_STEPS) + 1,  # warm_up calls step() after each; the witness
            "steps",
            device=device.index,
        )
        with gpu.dev:
            backend.warm_up(ctx.config.domain_log, step=lambda name: progress.advance(1))
            # the witness's own CuPy kernels, on the synthesis stream as a partition makes it
            warm_synthesis(ctx.tuning.kernels.pin_method, **gpu.kernel_args("synthesis"))
            progress.advance(1)
        progress.finish()

    def _place_srs(
        self, ctx: RunContext, device: Device, workers: int
    ) -> tuple[dict[str, Any], list[Block], dict[str, int]]:
        """The SRS on ``device`` (``provetop.engine.run.cuda_srs``); the host queries from the one
        pinned copy every device shares, made by the first device that streams them."""
        with self._lock:
            if self.host_srs is None:
                backend = cast("CudaBackend", ctx.backend)
                self.host_srs = HostSrs(ctx.srs, backend, ctx.tuning.kernels.pin_method)
            host = self.host_srs
        placed = place_device_srs(
            device,
            ctx.srs,
            ctx.footprint,
            workers,
            host_chunk(ctx.backend),
            ctx.bus,
            host,
            ctx.stopping,
        )
        for line in take_fallbacks():  # the host SRS, pinned on this thread
            ctx.bus.emit(
                "fault", kind="registration", message=line, site="host_srs", device=device.index
            )
        return placed

    def _plan(self, ctx: RunContext, device: Device, streamed: dict[str, int]) -> StreamPlan:
        """The device's memory plan and how its streamed MSMs run; aware's plan is emitted.
        Naive keeps the seed's path (its OOMs are the point): the floor's window, the
        smallest bucket arrays, one query at a time."""
        sizes, kt = dict(ctx.srs.sizes), ctx.tuning.kernels
        if ctx.policy.name != "aware":
            window_max = window_floor(streamed, kt) if streamed else None
            fp = cuda_footprint(ctx.footprint, sizes, streamed, kt, window_max)
            return StreamPlan(fp, RESIDENT, window_max)
        free, _total = device.mem_info()
        z, tables = aux_scalar_bytes(ctx.sizes), twiddle_bytes(ctx.config.domain_log)
        where = f"device {device.index}"
        chosen = plan_streaming(free, ctx.footprint, sizes, streamed, kt, z, tables, where)
        emit_plan(
            ctx.bus,
            device,
            chosen.plan,
            chosen.footprint,
            chosen.window_max,
            chosen.together,
            chosen.chunk,
            chosen.host_scalars,
        )
        return chosen

    def _keep(
        self,
        ctx: RunContext,
        device: Device,
        workers: int,
        plan: MemoryPlan,
        blocks: list[Block],
        streamed: dict[str, int],
    ) -> None:
        """The device's SRS blocks kept for :meth:`close`, and the host check redone with
        every device so far: a smaller card may stream queries the first one kept, and the
        shared host SRS holds the union (the witness pools are pinned only later, at each
        worker's first partition)."""
        with self._lock:
            if plan.slots == 1:
                self._scratch_workers += workers
            self.blocks[device.index] = blocks
            self._host_streamed.update(streamed)
            self._check_host(ctx, self._host_streamed, workers)

    def _check_host(self, ctx: RunContext, streamed: dict[str, int], workers: int) -> None:
        """Refuse (HostMemoryError) a run whose page-locked memory would not fit the host,
        before the witness pools are pinned (see ``provetop.engine.memory.hostmem``)."""
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

    def retire(self, runner: PartitionRunner) -> None:
        """Keep a stopped worker's pinned pools until :meth:`close` (see ``_retired``)."""
        pools = runner.detach_pools()
        with self._lock:
            self._retired.extend(pools)

    def close(self, devices: list[Device]) -> None:
        """Free the device-resident SRS and the retired witness pools, give the ballast back,
        trim the pools."""
        import sys

        sys.setswitchinterval(self._old_interval)
        with self._lock:
            self._retired.clear()
        for d in devices:
            for blk in self.blocks.pop(d.index, []):
                d.free(blk)
            d.close()


def emit_plan(
    bus: EventBus,
    device: Device,
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
    emit_run_alloc(
        bus,
        device,
        site="plan",
        pool="async",
        requested=plan.need,
        decision="fallback" if plan.streamed else "ok",
        reason=reason,
        free=plan.free,
        margin=fp.margin,
    )


def make_cuda_devices(indices: tuple[int, ...], capacity: int | None) -> list[Device]:
    """One :class:`provetop.engine.devices.cuda.CudaDevice` per index (``--device-memory`` each)."""
    return [CudaDevice(i, capacity) for i in indices]


def cuda_side(device: Device) -> CudaDevice:
    """``device``'s CUDA side: a CUDA run's devices all have one."""
    gpu = device.cuda
    if gpu is None:
        raise TypeError(f"device {device.index} has no CUDA side: a CUDA run needs CUDA devices")
    return gpu


def host_chunk(backend: KernelBackend) -> int:
    """Points per chunk of a query streamed from host memory: the backend's, else the
    kernels' default (a backend that streams nothing names none)."""
    if isinstance(backend, HostStreaming):
        return int(backend.host_chunk)
    return DEFAULT_TUNING.msm_host_chunk

"""What a partition does differently on a real GPU, kept beside the shared pipeline.

Why a separate module: ``engine.pipeline`` is the one path every backend runs; the CUDA run
only changes *how* some steps are carried out, never their order. This module holds those
differences:

- :class:`BoundBackend`: the kernel backend with the calling worker's compute stream and the
  device's stream-ordered pool (``CudaDevice.kernel_args``) injected into every call, and the
  H step run in place (H in d_a's memory, d_b/d_c as work buffers: the footprint the allocator
  plans for);
- :class:`CudaPartitionRunner`: phase ``gpu_ms`` from CUDA events on the worker's compute
  stream (``phase_end``); the pipeline's MSM-scratch block becomes a *reservation* (the MSM
  draws its real scratch through the allocator, so allocating the planned bytes as well would
  count them twice);
- :class:`LazyAwarePolicy`: the aware policy that trims only when the free memory is short.
  Trimming is not free on a real device: the calling worker waits for its own streams, a
  ``free_all_blocks`` costs cudaFree calls (each waits for the whole device). The cuzk
  two-worker regression (32.1 -> 41.0 s/proof) came from trims that made one worker wait for
  the other's kernels; here a pre-stage that fits is decided from ``cudaMemGetInfo`` alone;
- :func:`cuda_footprint`: the partition's footprint with the GPU MSM's own scratch sizes
  (``kernels.cuda_msm.scratch_bytes``) plus the two chunk buffers of a streamed query;
- :func:`place_device_srs`: the SRS residency decision carried out and emitted (``alloc``
  events, site ``srs``; proof/partition/worker are -1: the SRS belongs to the run).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from engine.allocator import AwarePolicy, Decision, Footprint
from engine.devices.base import Block
from engine.pipeline import MSM_PHASES, PartitionRunner, RunContext
from engine.residency import G1_AFFINE_BYTES, plan_residency
from engine.srs import QUERIES, Srs
from recordings.schema import PHASES

GPU_PHASES = frozenset({"check_inputs", "h_step", *MSM_PHASES.values(), "check_sums"})
# copies host -> device: their gpu_ms is the copies' own time from upload-stream events (the
# phases also allocate and wait for the compute stream)
COPY_PHASES = frozenset(p.name for p in PHASES.values() if p.upload)
MIN_SYNTH_CHUNK = 1 << 16  # elements: 3 x 2 MiB of device memory; 2,048 chunks at 2^27


class BoundBackend:
    """``backend`` with ``device.kernel_args()`` (this thread's stream, the async pool)."""

    def __init__(self, backend: Any, device: Any) -> None:
        self.backend = backend
        self.device = device
        self.name = backend.name

    def h_step(self, a: Any, b: Any, c: Any, **kw: Any) -> Any:
        args = {**self.device.kernel_args("ntt_scratch"), "overwrite_inputs": True, **kw}
        return self.backend.h_step(a, b, c, **args)

    def msm(self, points: Any, scalars: Any, **kw: Any) -> Any:
        return self.backend.msm(points, scalars, **{**self.device.kernel_args("msm_scratch"), **kw})

    def ntt(self, x: Any, **kw: Any) -> Any:
        return self.backend.ntt(x, **{**self.device.kernel_args("ntt_scratch"), **kw})

    def srs(self, secrets: Any, **kw: Any) -> Any:
        return self.backend.srs(secrets, **kw)


class CudaPartitionRunner(PartitionRunner):
    """``PartitionRunner`` with CUDA-event phase times and MSM scratch as a reservation; on a
    real CUDA device also: the witness made on the GPU into the worker's pinned pool
    (``engine.witness_gpu``), the aux scalars uploaded once per partition into a
    stream-ordered block while ``msm_h`` runs (the L, A and B-G1 MSMs read prefixes of it;
    before, each MSM uploaded its own copy inside the GPU region), and the exact checks on
    the GPU (``kernels.cuda_check``)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.real = hasattr(self.device, "kernel_args")  # a CudaDevice (tests use modeled ones)
        if self.real:
            # Pre-stage buffers from CuPy's caching pool (cudaMalloc underneath, the issue's
            # "CuPy MemoryPool"): a worker's next partition reuses the cached 4 + 8 GiB blocks.
            # With a plain cudaMalloc/cudaFree per partition (the H200 run at bd04ed3) the
            # cudaMalloc took 310-450 ms, ending when the holder's running kernel phase ended,
            # and the holder's cudaFree at copy_back waited ~50 ms for the neighbour's upload:
            # inside the GPU region. The aware policy trims this cache (free_all_blocks) before
            # every decision that does not fit; naive never does, so its cached blocks are the
            # phantom that refuses the stream-ordered pool.
            self.prestage_pool = "sync"
            self.checks_on_device = True  # in the region: see PartitionRunner._attempt
        # pinned witness pools, used in turn: one, or two with --synthesis-ahead (the next
        # witness is made while the current one's partition still reads its pool; the
        # look-ahead starts witness k+2 only after partition k has completed)
        self._bufs: list[Any] = []
        self._made = 0
        self._z_ready: Any = None

    def _synthesize(self, rng: Any, tries: int = 0) -> Any:
        if not self.real:
            return super()._synthesize(rng, tries)
        from engine.witness_gpu import CHUNK, PinnedBuffers, synthesize_on_gpu

        cfg, sizes = self.ctx.config, self.ctx.sizes
        n, m = 1 << cfg.domain_log, max(sizes.l, sizes.a, sizes.b_g1)
        kw = self.device.kernel_args("synthesis")  # first: makes the device current here
        depth = 2 if cfg.synthesis_ahead else 1
        if len(self._bufs) < depth:
            self._bufs.append(PinnedBuffers(n, m))
            self._report_pin_fallbacks("witness_pool")
        bufs = self._bufs[self._made % depth]
        self._made += 1
        seed = int(rng.integers(1 << 63))
        return synthesize_on_gpu(
            cfg.domain_log,
            sizes,
            cfg.witness_profile,
            seed,
            bufs,
            chunk=max(CHUNK >> (2 * tries), MIN_SYNTH_CHUNK),  # a quarter per refusal
            **kw,
        )

    def _report_pin_fallbacks(self, site: str) -> None:
        """A ``registration`` fault per pool that could not be registered (cudaHostAlloc was
        used instead: slower to pin, the same copies; ``kernels.host_pinned``)."""
        from kernels.cuda.host_pinned import take_fallbacks

        for line in take_fallbacks():
            self.bus.emit(
                "fault",
                kind="registration",
                message=line,
                site=site,
                device=self.device.index,
                worker=self.worker,
            )

    def detach_pools(self) -> list[Any]:
        """The worker's pinned witness pools, handed over when it stops (see
        ``CudaRun.retire``); the runner keeps none."""
        pools, self._bufs = self._bufs, []
        return pools

    def _fallback_upload(self, att: Any, w: Any) -> tuple:
        """The fallback path with a pinned-pool witness: a, b, c copied whole from the pool
        (page-locked already, so no staging buffer: the chunked path through a small pinned
        buffer took 33-35 s for 12 GiB on the H200 when the budget left chunks of a few MiB)."""
        if not (self.real and w.pinned):
            return super()._fallback_upload(att, w)
        dev, fp = self.device, self.ctx.footprint
        free, _total = dev.mem_info()
        reason = "a, b, c from the worker's pinned pool into the stream-ordered pool, whole"
        decision = Decision("fallback", reason, free=free, margin=fp.margin)
        self._alloc_event(att, "prestage", "async", 3 * fp.u, decision)
        blocks = [self._malloc(att, fp.u, "async", "prestage") for _ in range(3)]
        self.ctx.sample(dev)
        a, b, c = (
            dev.upload(src, blk, pinned=True)
            for src, blk in zip((w.a, w.b, w.c), blocks, strict=True)
        )
        return blocks[0], blocks[1:], a, b, c

    def _msm_scalars(self, att: Any, w: Any, h: Any) -> dict[str, Any]:
        if not (self.real and w.pinned):
            return super()._msm_scalars(att, w, h)
        blk = PartitionRunner._malloc(self, att, int(w.z.nbytes), "async", "msm_scalars")
        att.scalars_block = blk
        z, self._z_ready = self.device.upload_async(w.z, blk)
        s = self.ctx.sizes
        return {"h": h, "l": z[: s.l], "a": z[: s.a], "b_g1": z[: s.b_g1]}

    def _gpu_extra(self, w: Any, prestaged: bool) -> int:
        """The ledger entry with the aux scalars' block (msm_scalars, 4.2 GB at 2^27), which
        the footprint does not know: without it a neighbour's pre-stage could be granted the
        memory this partition's scalars need after its H step. On the fallback path the
        region peaks at a, b, c, or at d_a + scalars + the largest MSM scratch."""
        extra = super()._gpu_extra(w, prestaged)
        if not (self.real and w.pinned):
            return extra
        fp, z = self.ctx.footprint, self.device.round(int(w.z.nbytes))
        if prestaged:
            return extra + z
        return max(extra, self.device.round(fp.u) + z + fp.msm_max)

    def _region_need(self, w: Any) -> int:
        need = super()._region_need(w)
        if self.real and w.pinned:
            need += self.device.round(int(w.z.nbytes))  # the aux scalars' block (msm_scalars)
        return need

    def _before_msm(self, query: str) -> None:
        if query != "h" and self._z_ready is not None:  # msm_h overlaps the scalar upload
            self.device.streams().compute.wait_event(self._z_ready)
            self._z_ready = None

    def _release(self, att: Any) -> None:
        try:
            if self._z_ready is not None:
                # An attempt that failed between the scalar upload and msm_l: the upload
                # stream may still be writing the scalars block, which is freed below in
                # stream order on the compute stream; without this wait the pool could hand
                # the block out (to this worker or, once the free completes, to the other)
                # mid-copy.
                z_ready, self._z_ready = self._z_ready, None
                self.device.streams().compute.wait_event(z_ready)
        finally:
            super()._release(att)  # the gate's bookkeeping comes back whatever happened

    def _free_scalars(self, att: Any) -> None:
        blk = getattr(att, "scalars_block", None)
        if blk is not None:
            self._free(att, blk)
            att.scalars_block = None

    def _inputs_on_device(self, att: Any, a: Any, b: Any, c: Any) -> None:
        """A checked partition's A(tau), B(tau), C(tau) from the device copies of a, b, c
        (no second upload of 12 GiB for the check). A wrong upload still fails the check:
        a*b - c would then not vanish on the domain, and no H satisfies the identity."""
        from kernels.cuda import check as cuda_check

        with self.device.dev:
            kw = self.device.kernel_args("check_inputs")  # an OOM names the phase as its site
            att.abc_at_tau = cuda_check.interpolants_at(a, b, c, self.ctx.srs.tau, **kw)

    def _device_sums(self, att: Any, w: Any, h: Any) -> dict[str, int]:
        """h(tau) = <h, tau^i> from H's device copy, and the three aux sums <z, s^i> in one
        pass over the *host* z: the scalars as the witness holds them, not the device copy
        the MSMs read, so a wrong scalar upload fails the check too."""
        from kernels.cuda import check as cuda_check

        srs, sizes = self.ctx.srs, self.ctx.sizes
        aux = ("l", "a", "b_g1")
        terms = [(srs.sigmas[q], getattr(sizes, q)) for q in aux]
        with self.device.dev:
            kw = self.device.kernel_args("check_sums")
            sums = {"h": cuda_check.dot_powers(h, srs.tau, **kw)}
            sums.update(zip(aux, cuda_check.dot_powers_prefixes(w.z, terms, **kw), strict=True))
        return sums

    def _exact_checks(
        self, att: Any, w: Any, h: Any, scalars: dict[str, Any], results: Any
    ) -> bool:
        """The two identities from the device sums taken inside the region: (A B - C)(tau)
        = h(tau) Z(tau), and for each query MSM = [<k, s>]G. Only host arithmetic is left
        here (outside the mutex: no GPU work beside the next holder)."""
        if not self.real:
            return super()._exact_checks(att, w, h, scalars, results)
        from kernels.constants import FR_MODULUS as R
        from kernels.cpu.g1 import GENERATOR, scalar_mul
        from kernels.layout import g1_from_limbs

        sums = att.device_sums
        if att.abc_at_tau is None or sums is None:
            return False
        A, B, C = att.abc_at_tau
        n = 1 << self.ctx.config.domain_log
        tau = self.ctx.srs.tau
        ok = (A * B - C) % R == sums["h"] * ((pow(tau, n, R) - 1) % R) % R
        for q in QUERIES:
            ok = ok and scalar_mul(GENERATOR, sums[q]) == g1_from_limbs(results[q])[0]
        return bool(ok)

    def _gpu_timer(self, phase: str) -> Any:
        """CUDA events around the kernel phases (compute stream) and the copies (upload
        stream)."""
        if phase in GPU_PHASES:
            return self.device.gpu_timer()
        if phase in COPY_PHASES:
            return self.device.copy_timer()
        return None

    def _malloc(self, att, nbytes: int, pool: str, site: str) -> Block:
        if site == "msm_scratch":  # the MSM allocates the real scratch through allocator()
            if self.ctx.faults is not None:  # injected OOMs still fire at this site
                self.ctx.faults.on_alloc(self.device, nbytes, pool, site)
            return Block(pool=pool, size=self.device.round(nbytes), requested=nbytes, site=site)
        return super()._malloc(att, nbytes, pool, site)


class LazyAwarePolicy(AwarePolicy):
    """Aware, but a pre-stage that fits in what the driver reports free needs no trim."""

    def prestage(self, device: Any, fp: Footprint, forced: bool, reserved: int = 0) -> Decision:
        if not forced:
            free, _total = device.mem_info()
            if free >= fp.prestage + fp.margin + reserved:
                return Decision("ok", "fits without a trim", free=free, margin=fp.margin)
        return super().prestage(device, fp, forced, reserved)


def cuda_footprint(fp: Footprint, sizes: dict[str, int], streamed: dict[str, int]) -> Footprint:
    """``fp`` with each MSM's scratch from the GPU MSM's own formula, plus two chunk buffers
    for a query whose points are streamed from host (``streamed``: query -> chunk points)."""
    from kernels.cuda.msm import scratch_bytes

    msm = {}
    for q, m in sizes.items():
        chunk = streamed.get(q)
        if chunk:
            msm[q] = scratch_bytes(min(m, chunk)) + 2 * min(m, chunk) * G1_AFFINE_BYTES
        else:
            msm[q] = scratch_bytes(m)
    return Footprint(u=fp.u, msm=msm, margin=fp.margin)


class HostSrs:
    """The queries streamed from the host, made once into pinned memory and shared by every
    device (a real prover loads its parameters into host memory once)."""

    def __init__(self, srs: Srs, backend: Any) -> None:
        self.srs = srs
        self.backend = backend
        self._lock = threading.Lock()

    def get(self, query: str, device: Any) -> Any:
        """The query's pinned host points, made on ``device`` by the first caller."""
        with self._lock:
            pts = self.srs.points.get(query)
            if pts is None:
                from kernels.cuda.host_pinned import pinned_empty

                m = self.srs.sizes[query]
                pts = pinned_empty((m, 12))
                with device.dev:
                    self.backend.srs_powers(
                        self.srs.sigmas[query], m, pts, chunk=SRS_CHUNK, **_srs_args(device)
                    )
                self.srs.points[query] = pts
            return pts


SRS_CHUNK = 1 << 22  # points per SRS generation launch: ~1 GiB of scratch (cuda_srs)


def _srs_args(device: Any) -> dict[str, Any]:
    """Stream and allocator for SRS generation on ``device`` (its stream-ordered pool, so the
    scratch is trimmed away before the partitions start)."""
    return {"stream": device.streams().compute, "allocator": device.allocator("srs")}


def place_device_srs(
    device: Any, srs: Srs, fp: Footprint, workers: int, host_chunk: int, bus: Any, host: HostSrs
) -> tuple[dict[str, Any], list[Block], dict[str, int]]:
    """Decide where each query lives on ``device``, make it there (device queries straight
    into a ``raw`` block; host ones from the shared pinned copy) and emit one ``alloc`` event
    per query. Returns (points by query, device blocks to free at the end, streamed queries ->
    chunk points)."""
    cupy = device.cupy
    sizes = dict(srs.sizes)
    device.synchronize()
    device.trim()
    free, _ = device.mem_info()
    chunk_bytes = host_chunk * G1_AFFINE_BYTES
    plan = plan_residency(sizes, free, fp, workers, chunk_bytes)
    points: dict[str, Any] = {}
    blocks: list[Block] = []
    for p in plan:
        m = sizes[p.query]
        if p.where == "device":
            blk = device.malloc(p.nbytes, "raw", "srs")
            blocks.append(blk)
            arr = cupy.ndarray((m, 12), dtype=cupy.uint64, memptr=blk.handle)
            with device.dev:
                host.backend.srs_powers(
                    srs.sigmas[p.query], m, arr, chunk=SRS_CHUNK, **_srs_args(device)
                )
            points[p.query] = arr
        else:
            points[p.query] = host.get(p.query, device)
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
    device.synchronize()
    device.trim()  # the generation scratch goes back before the first pre-stage decision
    streamed = {p.query: host_chunk for p in plan if p.where == "host"}
    return points, blocks, streamed


SWITCH_INTERVAL_S = 0.0005  # PROVETOP_SWITCH_INTERVAL overrides; see CudaRun


def switch_interval_s() -> float:
    """The interpreter's switch interval for a CUDA run: ``PROVETOP_SWITCH_INTERVAL`` seconds,
    in (0, 1], else :data:`SWITCH_INTERVAL_S`. A bad value is one clear error at start-up
    (``CudaDeviceError``), not a traceback from inside the run."""
    import os

    from engine.devices.cuda import CudaDeviceError

    raw = os.environ.get("PROVETOP_SWITCH_INTERVAL")
    if raw is None:
        return SWITCH_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # also false for nan
        raise CudaDeviceError(f"PROVETOP_SWITCH_INTERVAL must be seconds in (0, 1], got {raw!r}")
    return value


class CudaRun:
    """Per-device set-up and tear-down of a CUDA run (devices, SRS placement, contexts).

    GIL: a worker in its GPU region launches ~100 small kernels per MSM from Python, each
    needing the GIL; a neighbour doing pure-Python work (synthesis, verification) keeps the
    GIL for the whole switch interval (5 ms by default), so each launch can wait 5 ms. On the
    first H200 run that stretched a 2^20 MSM from 13-19 ms to 670-930 ms (gpu_ms too: the
    stream idles between launches). The run lowers the interval to :data:`SWITCH_INTERVAL_S`
    (process-wide; restored at close)."""

    def __init__(self) -> None:
        import sys

        from engine.hostmem import host_available

        self.blocks: dict[int, list[Block]] = {}
        self.host_srs: HostSrs | None = None
        self._lock = threading.Lock()
        self._host_available = host_available()  # before this run pins anything
        # queries streamed from host memory by any device so far: the one shared host SRS
        self._host_streamed: dict[str, int] = {}
        # witness pools of workers that have stopped, freed only at close: unpinning 17 GB
        # while a neighbour still runs stalled its launches (the last partition's H step took
        # 1.7-2.2 s instead of 0.32 in every H200 run of session 5)
        self._retired: list[Any] = []
        self._old_interval = sys.getswitchinterval()
        sys.setswitchinterval(switch_interval_s())

    def context(self, ctx: RunContext, device: Any, workers: int) -> RunContext:
        """The run context for ``device``'s workers: bound backend, placed SRS, footprint
        and policy for real pools."""
        backend = ctx.backend
        host_chunk = int(getattr(backend, "host_chunk", 1 << 22))
        warm_up = getattr(backend, "warm_up", None)
        if warm_up is not None:  # tables outside the trimmed pool; compile before partitions
            with device.dev:
                warm_up(ctx.config.domain_log)
        with self._lock:
            if self.host_srs is None:
                self.host_srs = HostSrs(ctx.srs, backend)
        points, blocks, streamed = place_device_srs(
            device, ctx.srs, ctx.footprint, workers, host_chunk, ctx.bus, self.host_srs
        )
        from kernels.cuda.host_pinned import take_fallbacks

        for line in take_fallbacks():  # the host SRS, pinned on this thread
            ctx.bus.emit(
                "fault", kind="registration", message=line, site="host_srs", device=device.index
            )
        with self._lock:
            self.blocks[device.index] = blocks
            # after every device: a smaller card may stream queries the first one kept, and
            # the shared host SRS holds the union (the witness pools are pinned only later,
            # at each worker's first partition)
            self._host_streamed.update(streamed)
            self._check_host(ctx, self._host_streamed, workers)
        srs = Srs(sigmas=ctx.srs.sigmas, sizes=ctx.srs.sizes, points=points)
        fp = cuda_footprint(ctx.footprint, dict(ctx.srs.sizes), streamed)
        policy = LazyAwarePolicy() if ctx.policy.name == "aware" else ctx.policy
        return replace(
            ctx, backend=BoundBackend(backend, device), srs=srs, footprint=fp, policy=policy
        )

    def _check_host(self, ctx: RunContext, streamed: dict[str, int], workers: int) -> None:
        """Refuse (HostMemoryError) a run whose page-locked memory would not fit the host,
        before the witness pools are pinned (see ``engine.hostmem``)."""
        from engine.hostmem import HostMemoryError, PinnedPlan, refusal, witness_pool_bytes

        cfg, sizes, qs = ctx.config, dict(ctx.srs.sizes), ctx.sizes
        m = max(qs.l, qs.a, qs.b_g1)  # the aux witness z
        plan = PinnedPlan(
            host_srs=sum(sizes[q] * G1_AFFINE_BYTES for q in streamed),
            pool=witness_pool_bytes(cfg.domain_log, m),
            pools=len(cfg.devices) * workers * (2 if cfg.synthesis_ahead else 1),
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


def make_cuda_devices(indices: tuple[int, ...], capacity: int | None) -> list[Any]:
    """One :class:`engine.devices.cuda.CudaDevice` per index (``--device-memory`` each).
    ``PROVETOP_SYNC_SCOPE=device`` makes every synchronise before a trim wait for the whole
    device (the other worker's kernels too): the variant to measure the trim stall against.
    ``PROVETOP_PRIORITY_TO=compute`` gives the compute streams the greatest priority instead
    of the synthesis stream (``engine.devices.cuda.PRIORITY_TO``)."""
    import os

    from engine.devices.cuda import CudaDevice

    switch_interval_s()  # checked here, where a bad value still stops the start cleanly
    scope = os.environ.get("PROVETOP_SYNC_SCOPE", "worker")
    priority_to = os.environ.get("PROVETOP_PRIORITY_TO", "synthesis")
    return [CudaDevice(i, capacity, sync_scope=scope, priority_to=priority_to) for i in indices]

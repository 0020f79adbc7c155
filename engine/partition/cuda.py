"""The partition's steps on a real GPU (``provetop.engine.partition.ops``): CuPy and our kernels.

Why these differ from the cpu ops (``provetop.engine.partition.cpu``), step by step:

- synthesis: the witness is made on the GPU into the worker's pinned pool
  (``provetop.engine.spec.witness_gpu``), the pre-stage's page-locked buffers: no registration per
  partition;
- pre-stage pool: d_a and d_bc come from CuPy's caching pool, so a worker's next partition
  reuses the cached 4 + 8 GiB blocks (see :class:`CudaPartition`);
- fallback: a, b, c copied whole from the pinned pool into the stream-ordered pool;
- MSM scalars: the aux scalars uploaded once per partition into a stream-ordered block while
  ``msm_h`` runs; the L, A and B-G1 MSMs read prefixes of it;
- MSM scratch: a *reservation* (the MSM draws its real scratch through the allocator, so
  allocating the planned bytes as well would count them twice);
- checks: sums on the GPU inside the region (``provetop.kernels.cuda.check``), compared on the host;
- phase times: CUDA events on the worker's compute stream (kernel phases) and upload stream
  (copies), into ``phase_end``'s ``gpu_ms``.

The kernel calls themselves go through ``ctx.backend``, which
``provetop.engine.run.cuda_run.CudaRun``
binds to the calling worker's streams and the device's stream-ordered pool
(``BoundBackend``). On a device without CUDA (a modeled one, in the tests) the steps that need
CuPy fall back on the cpu ops; the timers and the MSM-scratch reservation still apply.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from provetop.engine.devices.base import Block, Device
from provetop.engine.devices.cuda import H2D, CudaDevice
from provetop.engine.memory.allocator import Decision
from provetop.engine.memory.gate import DeviceGate
from provetop.engine.memory.handover import Handover, Offer, Taker
from provetop.engine.memory.hostmem import witness_pool_bytes
from provetop.engine.memory.plan import MemoryPlan
from provetop.engine.partition.cpu import CpuPartition
from provetop.engine.partition.cuda_backend import BoundBackend
from provetop.engine.partition.ops import MSM_PHASES, Attempt, PhaseTimer, WorkerScope
from provetop.engine.partition.pipeline import PartitionRunner, RunContext
from provetop.engine.spec.srs import QUERIES
from provetop.engine.spec.witness_gpu import CHUNK, PinnedBuffers, synthesize_on_gpu
from provetop.engine.spec.workload import Witness
from provetop.engine.telemetry.progress import Progress
from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu.g1 import GENERATOR, scalar_mul
from provetop.kernels.cuda import check as cuda_check
from provetop.kernels.cuda.host_pinned import pinned_empty, take_fallbacks
from provetop.kernels.layout import g1_from_limbs
from provetop.recordings.schema import PHASES

GPU_PHASES = frozenset(
    {"check_inputs", "h_step", *MSM_PHASES.values(), "msm_interleaved", "check_sums"}
)
# copies host -> device: their gpu_ms is the copies' own time from upload-stream events (the
# phases also allocate and wait for the compute stream)
COPY_PHASES = frozenset(p.name for p in PHASES.values() if p.upload)
MIN_SYNTH_CHUNK = 1 << 16  # elements: 3 x 2 MiB of device memory; 2,048 chunks at 2^27


class CudaPartition:
    """:class:`provetop.engine.partition.ops.PartitionOps` on a CUDA device: CUDA-event phase times
    and
    MSM scratch as a reservation; on a real CUDA device also the witness made on the GPU
    into the worker's pinned pool, the aux scalars uploaded once per partition into a
    stream-ordered block while ``msm_h`` runs (before, each MSM uploaded its own copy inside
    the GPU region), and the exact checks on the GPU (``provetop.kernels.cuda.check``)."""

    def __init__(self, scope: WorkerScope) -> None:
        self.scope = scope
        self.ctx = scope.ctx
        self.device = scope.device
        self.worker = scope.worker
        self.bus = scope.bus
        self.host = CpuPartition(scope)  # the steps a device without CUDA takes
        self.real = self.device.cuda is not None  # a CudaDevice (tests use modeled ones)
        self.prestage_pool = self.host.prestage_pool
        self.checks_on_device = self.host.checks_on_device
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
            self.checks_on_device = True  # in the region: see PartitionRunner._state
        # the H step returns once queued, on a real device (provetop.engine.memory.h_step_fence)
        self.h_step_async = self.real
        # pinned witness pools, used in turn: one, or two with --synthesis-ahead (the next
        # witness is made while the current one's partition still reads its pool; the
        # look-ahead starts witness k+2 only after partition k has completed)
        self._bufs: list[Any] = []
        self._made = 0
        self._z_ready: Any = None
        self._z_pending: Any = None  # (host z, its device array) for the one pass to copy
        # the fallback's b and c copies still in flight under the H step: {"b": event, ...}
        self._abc_ready: dict[str, Any] = {}
        self._scratch: Any = None  # the one-slot plan's pinned host scratch
        # provetop.engine.memory.handover: this worker's offer of its H block to the next
        # partition's a (as
        # giver), its claim on a neighbour's (as taker), and the claimed block once adopted
        self._handover: Handover | None = None
        self._offer: Offer | None = None
        self._taker: Taker | None = None
        self._adopted: Block | None = None

    @property
    def gpu(self) -> CudaDevice:
        """The device's CUDA side: only the steps of a real device (``real``) reach for it."""
        cuda = self.device.cuda
        if cuda is None:
            raise RuntimeError(f"device {self.device.index} has no CUDA side")
        return cuda

    @property
    def kernels(self) -> BoundBackend:
        """The run's backend as a CUDA run binds it to this worker
        (``provetop.engine.run.cuda_run``:
        its streams, the device's pool, the streamed MSMs' plan). Only the steps of a real
        device reach for it; elsewhere the context's backend is called as it is."""
        return cast(BoundBackend, self.ctx.backend)

    # -- synthesis ----------------------------------------------------------------------------

    def synthesize(self, rng: Any, tries: int = 0) -> Any:
        if not self.real:
            return self.host.synthesize(rng, tries)
        cfg, sizes = self.ctx.config, self.ctx.sizes
        n, m = 1 << cfg.domain_log, max(sizes.l, sizes.a, sizes.b_g1)
        kw = self.gpu.kernel_args("synthesis")  # first: makes the device current here
        depth = 2 if cfg.synthesis_ahead else 1
        if len(self._bufs) < depth:
            progress = Progress(
                self.bus.emit,
                "pin_witness",
                f"pinning the witness pool of worker {self.worker} on device {self.device.index}",
                witness_pool_bytes(cfg.domain_log, m),
                "bytes",
                device=self.device.index,
                worker=self.worker,
            )
            self._bufs.append(PinnedBuffers(n, m, self.ctx.tuning.kernels.pin_method, progress))
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
        ``CudaRun.retire``); the ops keep none."""
        pools, self._bufs = self._bufs, []
        if self._scratch is not None:
            pools.append(self._scratch)
            self._scratch = None
        return pools

    # -- timing and the ledger ----------------------------------------------------------------

    def phase_timer(self, phase: str) -> PhaseTimer | None:
        """CUDA events around the kernel phases (compute stream) and the copies (upload
        stream)."""
        if phase in GPU_PHASES:
            return self.device.gpu_timer()
        if phase in COPY_PHASES:
            return self.device.copy_timer()
        return None

    def _z_on_device(self, w: Any) -> bool:
        """Whether this partition copies the aux scalars to the device: not where the one
        pass reads them from the witness's pinned memory chunk by chunk
        (``BoundBackend.host_scalars``: its scalar buffers are in the pass's footprint)."""
        return bool(self.real and w.pinned and not self.kernels.host_scalars)

    def gpu_extra(self, w: Any, prestaged: bool) -> int:
        """The ledger entry with the aux scalars' block (msm_scalars, 4.2 GB at 2^27), which
        the footprint does not know: without it a neighbour's pre-stage could be granted the
        memory this partition's scalars need after its H step. On the fallback path the
        region peaks at a, b, c, or at d_a + scalars + the largest MSM scratch."""
        extra = self.host.gpu_extra(w, prestaged)
        if not self._z_on_device(w):
            return extra
        fp, z = self.ctx.footprint, self.device.round(int(w.z.nbytes))
        if prestaged:
            return extra + z
        return max(extra, self.device.round(fp.u) + z + fp.msm_max)

    def region_need(self, w: Any) -> int:
        need = self.host.region_need(w)
        if self._z_on_device(w):
            need += self.device.round(int(w.z.nbytes))  # the aux scalars' block (msm_scalars)
        return need

    # -- the upload ---------------------------------------------------------------------------

    def fallback_upload(self, att: Attempt, w: Any) -> tuple[Block, list[Block], Any, Any, Any]:
        """The fallback path with a pinned-pool witness: a, b, c copied whole from the pool
        (page-locked already, so no staging buffer: the chunked path through a small pinned
        buffer took 33-35 s for 12 GiB on the H200 when the budget left chunks of a few MiB).
        Where this partition's a went up into the previous partition's H block while that
        one's MSM pass ran (``take_offer``), the block is adopted and only the rows the pass
        never released are copied here."""
        if not (self.real and w.pinned):
            return self.host.fallback_upload(att, w)
        dev, gpu, fp = self.device, self.gpu, self.ctx.footprint
        free, _total = dev.mem_info()
        handed = self._adopt(att, w)
        reason = "a, b, c from the worker's pinned pool into the stream-ordered pool, whole"
        if handed is not None:
            reason = "b and c from the worker's pinned pool into the stream-ordered pool, whole"
        reason += "; b and c go up under the H step's transforms of a"
        decision = Decision("fallback", reason, free=free, margin=fp.margin)
        count = 3 if handed is None else 2
        self.scope.alloc_event(att, "prestage", "async", count * fp.u, decision)
        if handed is None:
            blocks = [self.scope.malloc(att, fp.u, "async", "prestage")]
        else:
            blocks = [handed[0]]
        blocks += [self.scope.malloc(att, fp.u, "async", "prestage") for _ in range(2)]
        self.ctx.sample(dev)
        if handed is None:
            a = dev.upload(w.a, blocks[0], pinned=True)
        else:
            a, self._abc_ready["a"] = handed[1], handed[2]
        # the phase times a's copy; b's and c's run on the upload stream, and the H step
        # waits for each just before its own transforms (provetop.kernels.cuda.ntt.run_h_step)
        # decided: bench/notes/memory.md, 1eb9006
        b, self._abc_ready["b"] = gpu.upload_async(w.b, blocks[1], event="abc.b")
        c, self._abc_ready["c"] = gpu.upload_async(w.c, blocks[2], event="abc.c")
        return blocks[0], blocks[1:], a, b, c

    # -- the H block handed to the next partition's a (provetop.engine.memory.handover)
    # ---------------

    def offer_h(self, att: Attempt, block: Block, h: Any, handover: Handover) -> None:
        """Before the one pass of a partition that reads H nowhere after it: offer H's block
        (d_a) to the worker waiting for the mutex, row range by row range as the pass is done
        with them. Only where H fills the block from its start (the in-place H step)."""
        if not self.real or block.handle is None or int(h.data.ptr) != int(block.handle.ptr):
            return
        rows = int(block.size) // int(h.strides[0])  # H has n - 1 rows, a has n
        for k in range(-(-int(h.shape[0]) // self._pass_chunk())):
            self.gpu.event(f"handover.read.{k}")  # made now: see CudaDevice.event
        self._handover = handover
        self._offer = handover.open(block, rows)

    def _pass_chunk(self) -> int:
        """Points per chunk of the one pass (the plan's, else the configured one)."""
        chunk = self.kernels.chunk or self.ctx.tuning.kernels.msm_host_chunk
        return max(1, int(chunk))

    def _rows_read(self) -> Any:
        """The one pass's ``rows_read`` for H (query 0): an event per chunk, to the offer."""
        offer, handover = self._offer, self._handover
        if offer is None or handover is None:
            return None
        dev = self.gpu
        count = [0]

        def read(q: int, lo: int, hi: int, stream: Any) -> None:
            if q != 0:
                return
            event = dev.event(f"handover.read.{count[0]}")
            count[0] += 1
            event.record(stream)
            handover.read(offer, lo, hi, event)

        return read

    def close_offer(self, att: Attempt) -> bool:
        """The giver's region ends (or its attempt fails): True when H's block now belongs to
        the taker (it is taken off this attempt's blocks: the driver must not free it)."""
        offer, handover = self._offer, self._handover
        self._offer = None
        if offer is None or handover is None:
            return False
        gpu = self.gpu
        final = gpu.event("handover.final")
        final.record(gpu.streams().compute)
        handed, wait = handover.close(offer, final)
        if handed:
            att.blocks[:] = [b for b in att.blocks if b is not offer.block]
            return True
        if wait is not None:  # a withdrawn taker's copies into the block come first
            gpu.streams().compute.wait_event(wait)
        return False

    def take_offer(self, att: Attempt, w: Any, handover: Handover) -> None:
        """While waiting for the mutex on the fallback path: claim the running pass's H block
        for this partition's a (``provetop.engine.memory.handover``); its copies go on this
        worker's upload
        stream, queued by whichever thread learns that a range is free."""
        if not (self.real and w.pinned) or self._taker is not None:
            return
        dev = self.gpu
        st = dev.streams()  # this thread's: the copier may run on the giver's thread
        a = w.a
        row_bytes = int(a.strides[0])
        src, rt, stream = int(a.ctypes.data), dev.rt, st.upload

        def bind(block: Block) -> Any:
            dst = int(block.handle.ptr)

            def copy(lo: int, hi: int, event: Any) -> None:
                stream.wait_event(event)
                off = lo * row_bytes
                rt.memcpyAsync(dst + off, src + off, (hi - lo) * row_bytes, H2D, stream.ptr)

            return copy

        taker = handover.take(bind, int(a.shape[0]), owner=self.worker)
        if taker is not None:
            self._handover, self._taker = handover, taker

    def _adopt(self, att: Attempt, w: Any) -> tuple[Block, Any, Any] | None:
        """The claimed block, now this attempt's, with a's view and the event after its last
        copy (the rows the giver's pass never released are copied now, after the giver's
        final event); None without a claim, or when the giver kept the block."""
        taker, self._taker = self._taker, None
        handover = self._handover
        if taker is None or handover is None:
            return None
        dev = self.gpu
        st = dev.streams()
        block = taker.block
        if block is None:  # the giver kept it: stop any copies into it, wait for ours
            handover.withdraw(taker, lambda: self._drained(st))
            return None
        att.blocks.append(block)
        self._adopted = block
        handover.adopted(taker)
        gaps, copy = taker.uncovered(), taker.copy
        for lo, hi in gaps:  # the same copier, on this worker's upload stream
            assert copy is not None  # bound when the claim met the offer
            copy(lo, hi, taker.final)
        ready = dev.event("abc.a")
        ready.record(st.upload)
        rows = int(w.a.shape[0])
        early = rows - sum(hi - lo for lo, hi in gaps)
        reason = (
            f"a went up into the previous partition's H block as its MSM pass finished with "
            f"each chunk: {early} of {rows} rows before this region"
        )
        decision = Decision("ok", reason)
        self.scope.alloc_event(att, "handover", block.pool, block.size, decision)
        cupy = dev.cupy
        view = cupy.ndarray(w.a.shape, dtype=w.a.dtype, memptr=block.handle)
        return block, view, ready

    def _drained(self, st: Any) -> Any:
        event = self.gpu.event("handover.drained")
        event.record(st.upload)
        return event

    def _withdraw(self, att: Attempt) -> None:
        """A claim this attempt never used (it failed before its region): no more copies into
        the giver's block; a block already handed over becomes this attempt's to free, after
        its copies."""
        taker, self._taker = self._taker, None
        handover = self._handover
        if taker is None or handover is None:
            return
        st = self.gpu.streams()
        block = handover.withdraw(taker, lambda: self._drained(st))
        if block is not None:
            att.blocks.append(block)
            self._adopted = block
            st.compute.wait_event(self._drained(st))

    def _wait_for_abc(self) -> None:
        """The compute stream waits for the a, b and c copies still in flight (a check that
        reads them, or an attempt that ends before the H step: its blocks go back in stream
        order on the compute stream, and the pool must not hand them out mid-copy)."""
        ready, self._abc_ready = self._abc_ready, {}
        for event in ready.values():
            self.gpu.streams().compute.wait_event(event)

    # -- the GPU region -----------------------------------------------------------------------

    def check_inputs(self, att: Attempt, a: Any, b: Any, c: Any) -> None:
        """A checked partition's A(tau), B(tau), C(tau) from the device copies of a, b, c
        (no second upload of 12 GiB for the check). A wrong upload still fails the check:
        a*b - c would then not vanish on the domain, and no H satisfies the identity."""

        self._wait_for_abc()  # the check reads b and c whole
        gpu = self.gpu
        with gpu.dev:
            kw = gpu.kernel_args("check_inputs")  # an OOM names the phase as its site
            kw["tuning"] = self.ctx.tuning.kernels
            att.abc_at_tau = cuda_check.interpolants_at(a, b, c, self.ctx.srs.tau, **kw)

    def h_step(self, a: Any, b: Any, c: Any) -> Any:
        """In place through the bound backend: H in d_a's memory, d_b/d_c as work buffers;
        with b and c still going up, the step waits for each before its transforms."""
        if not self._abc_ready:
            return self.ctx.backend.h_step(a, b, c)
        ready, self._abc_ready = self._abc_ready, {}
        return self.kernels.h_step(a, b, c, ready=ready)

    def h_step_streamed(self, att: Attempt, w: Any, plan: MemoryPlan) -> tuple[Block, Any]:
        """a, b, c from the worker's pinned pool through ``plan.slots`` stream-ordered blocks
        (``provetop.kernels.cuda.h_streamed``), with a pinned host scratch for one slot. A plan that
        gives the twiddle table to the MSMs (``plan.release_tables``) drops it afterwards and
        trims CuPy's pool, where it lived."""
        if not (self.real and w.pinned):
            return self.host.h_step_streamed(att, w, plan)
        dev, gpu, fp, scope = self.device, self.gpu, self.ctx.footprint, self.scope
        n = 1 << self.ctx.config.domain_log
        free = self._room(plan.slots * fp.u + fp.margin)
        reason = f"the H step through {plan.name}, a, b, c one at a time from the pinned pool"
        decision = Decision("fallback", reason, free=free, margin=fp.margin)
        scope.alloc_event(att, "h_slots", "async", plan.slots * fp.u, decision)
        blocks = [scope.malloc(att, fp.u, "async", "h_slots") for _ in range(plan.slots)]
        cupy = gpu.cupy
        slots = [cupy.ndarray((n, 4), dtype=cupy.uint64, memptr=b.handle) for b in blocks]
        scratch = self._host_scratch(n) if plan.slots == 1 else None
        self.ctx.sample(dev)
        with gpu.dev:
            h, released = self.kernels.h_step_streamed(
                w.a, w.b, w.c, slots, scratch=scratch, release_twiddles=plan.release_tables
            )
        del slots
        if released:
            dev.trim(("sync",))
        scope.free(att, blocks[1:])
        return blocks[0], h

    def _room(self, need: int) -> int:
        """Free device bytes, after giving the pools' unused reserves back to the driver when
        fewer than ``need`` are free: the stream-ordered pool keeps what the last partition
        freed (its release threshold is unlimited), in blocks of the last partition's sizes,
        and a small card has no other memory for this partition's first block."""
        free, _total = self.device.mem_info()
        if free < need:
            self.device.synchronize()
            self.device.trim()
            free, _total = self.device.mem_info()
        return free

    def _host_scratch(self, n: int) -> Any:
        """The one-slot plan's page-locked (n, 4) host scratch, made at the worker's first
        such partition and kept (handed over by :meth:`detach_pools`)."""
        if self._scratch is None or self._scratch.shape[0] != n:
            self._scratch = pinned_empty((n, 4), method=self.ctx.tuning.kernels.pin_method)
            self._report_pin_fallbacks("h_scratch")
        return self._scratch

    def msm_scalars(self, att: Attempt, w: Any, h: Any) -> dict[str, Any]:
        if not (self.real and w.pinned):
            return self.host.msm_scalars(att, w, h)
        s = self.ctx.sizes
        if h is not None and not self._z_on_device(w):
            # the one pass reads z's prefixes from the pinned pool, chunk by chunk
            return {"h": h, "l": w.z[: s.l], "a": w.z[: s.a], "b_g1": w.z[: s.b_g1]}
        if h is None:  # after H's block went back (a small card's plan): make room for z
            self._room(int(w.z.nbytes) + self.ctx.footprint.margin)
        blk = self.scope.malloc(att, int(w.z.nbytes), "async", "msm_scalars")
        att.scalars_block = blk
        if h is not None and self.msm_together():
            # the one pass copies z itself, after H's first chunks (msm_many's prelude), so
            # that H's first chunks do not share the link with 4.2 GB of scalars
            z = self.gpu.cupy.ndarray(w.z.shape, dtype=w.z.dtype, memptr=blk.handle)
            self._z_pending = (w.z, z)
        else:
            z, self._z_ready = self.gpu.upload_async(w.z, blk)
        out = {"l": z[: s.l], "a": z[: s.a], "b_g1": z[: s.b_g1]}
        return out if h is None else {"h": h, **out}

    def wait_for_scalars(self, query: str) -> None:
        if query != "h" and self._z_ready is not None:  # msm_h overlaps the scalar upload
            self.gpu.streams().compute.wait_event(self._z_ready)
            self._z_ready = None

    def msm_scratch(self, att: Attempt, nbytes: int) -> Block:
        """A reservation: the MSM allocates the real scratch through allocator()."""
        pool, site = "async", "msm_scratch"
        if self.ctx.faults is not None:  # injected OOMs still fire at this site
            self.ctx.faults.on_alloc(self.device, nbytes, pool, site)
        return Block(pool=pool, size=self.device.round(nbytes), requested=nbytes, site=site)

    def msm(self, query: str, scalars: Any) -> Any:
        return self.ctx.backend.msm(self.ctx.srs.points[query], scalars)

    def msm_together(self) -> list[str]:
        """The streamed queries, H first, where the device's plan runs them in one pass
        (``provetop.engine.memory.stream_plan.plan_with_window``)."""
        if not self.real:
            return []
        together = self.kernels.together
        return list(together) if together else []

    def msm_many(self, queries: list[str], scalars: dict[str, Any]) -> dict[str, Any]:
        """One interleaved pass. The aux scalars go up inside it, on its copy stream after
        H's first chunks (``msm_scalars`` left them to it), and only the queries other than H
        wait for them, before their own first chunk."""
        z_ready, pending = self._z_ready, self._z_pending
        self._z_pending = None
        ready = [None if q == "h" else z_ready for q in queries]
        points = [self.ctx.srs.points[q] for q in queries]
        prelude = [pending] if pending is not None else None
        extra = {}
        if queries and queries[0] == "h" and self._offer is not None:
            extra["rows_read"] = self._rows_read()
        out = self.kernels.msm_many(
            points, [scalars[q] for q in queries], ready=ready, prelude=prelude, **extra
        )
        if any(q != "h" for q in queries):
            self._z_ready = None  # the compute stream has waited for it
        return dict(zip(queries, out, strict=True))

    def check_h(self, att: Attempt, h: Any) -> int:
        """<h, tau^i> from H's device copy, before a plan with the aux scalars after H gives
        H's memory back."""
        gpu = self.gpu
        with gpu.dev:
            kw = gpu.kernel_args("check_sums")
            kw["tuning"] = self.ctx.tuning.kernels
            return cuda_check.dot_powers(h, self.ctx.srs.tau, **kw)

    def check_sums(self, att: Attempt, w: Any, h: Any) -> dict[str, int]:
        """h(tau) = <h, tau^i> from H's device copy, and the three aux sums <z, s^i> in one
        pass over the *host* z: the scalars as the witness holds them, not the device copy
        the MSMs read, so a wrong scalar upload fails the check too."""

        srs, sizes, gpu = self.ctx.srs, self.ctx.sizes.as_dict(), self.gpu
        aux = ("l", "a", "b_g1")
        terms = [(srs.sigmas[q], sizes[q]) for q in aux]
        with gpu.dev:
            kw = gpu.kernel_args("check_sums")
            kw["tuning"] = self.ctx.tuning.kernels
            sums = {} if h is None else {"h": cuda_check.dot_powers(h, srs.tau, **kw)}
            sums.update(zip(aux, cuda_check.dot_powers_prefixes(w.z, terms, **kw), strict=True))
        return sums

    def free_scalars(self, att: Attempt) -> None:
        blk = att.scalars_block
        if blk is not None:
            self.scope.free(att, blk)
            att.scalars_block = None

    # -- after the region ---------------------------------------------------------------------

    def verify(self, att: Attempt, w: Witness, h: Any, results: dict[str, Any]) -> bool:
        """The two identities from the device sums taken inside the region: (A B - C)(tau)
        = h(tau) Z(tau), and for each query MSM = [<k, s>]G. Only host arithmetic is left
        here (outside the mutex: no GPU work beside the next holder)."""
        if not self.real:
            return self.host.verify(att, w, h, results)

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

    def drain_uploads(self, att: Attempt) -> None:
        """An attempt that failed between the scalar upload and msm_l: the upload stream may
        still be writing the scalars block, which the driver frees in stream order on the
        compute stream; without this wait the pool could hand the block out (to this worker
        or, once the free completes, to the other) mid-copy."""
        self._z_pending = None  # a one pass that never ran: nothing was copied
        self.close_offer(att)  # a failed giver: the block still goes to a standing claim
        self._withdraw(att)  # a failed taker: no more copies into the giver's block
        self._wait_for_abc()  # a, b and c copies of a fallback that never reached the H step
        adopted, self._adopted = self._adopted, None
        if adopted is not None and not adopted.freed:
            # an adopted block goes back in the order of the giver's stream (where it was
            # allocated), which knows nothing of this worker's kernels and copies on it
            self.gpu.streams().compute.synchronize()
        if self._z_ready is not None:
            z_ready, self._z_ready = self._z_ready, None
            self.gpu.streams().compute.wait_event(z_ready)


class CudaPartitionRunner(PartitionRunner):
    """The one driver (``provetop.engine.partition.pipeline``) with the CUDA steps
    (:class:`provetop.engine.partition.cuda.CudaPartition`): what a worker of a CUDA run runs."""

    def __init__(
        self,
        ctx: RunContext,
        device: Device,
        worker: int,
        mutex: threading.Lock,
        gate: DeviceGate | None = None,
    ) -> None:
        super().__init__(ctx, device, worker, mutex, gate, ops=CudaPartition)

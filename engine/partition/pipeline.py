"""One partition, top to bottom, on one worker of one device: the driver.

Why one module: this is the path a newcomer should be able to trace in minutes (architecture
doc, "Flow of one partition"). The driver owns the order and everything around the steps:
every phase is timed and emitted (``phase_begin``/``phase_end``); every allocation decision
is emitted with the pool state (``alloc`` + a ``memory`` sample); every failure is a
``fault``. Memory is always given back in ``finally``, so an OOM never leaks into the next
partition; a partition whose first attempt fails is retried once on the fallback path after
the engine synchronises and trims the device.

What differs between backends is *how* a step is carried out: the driver calls the steps of
:class:`engine.partition.ops.PartitionOps` (``engine.partition.cpu`` on the cpu backend,
``engine.partition.cuda`` on a GPU) and never asks which implementation it has.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.devices.base import Device, DeviceOOM
from engine.memory.allocator import Decision, Footprint
from engine.memory.gate import DeviceGate
from engine.memory.plan import RESIDENT, MemoryPlan
from engine.partition.cpu import CpuPartition
from engine.partition.ops import MSM_PHASES, Attempt, PartitionOps, WorkerScope
from engine.settings.config import EngineConfig
from engine.settings.tuning import Tuning
from engine.spec.srs import QUERIES, Srs
from engine.spec.workload import QuerySizes, Witness, partition_rng

__all__ = [
    "MSM_PHASES",
    "Attempt",
    "DeviceGate",
    "PartitionFailed",
    "PartitionResult",
    "PartitionRunner",
    "Prepared",
    "RunContext",
]


@dataclass
class RunContext:
    """What every partition of a run shares (read-only for the pipeline, except controls)."""

    config: EngineConfig
    backend: Any
    srs: Srs
    sizes: QuerySizes
    footprint: Footprint
    policy: Any
    bus: Any
    controls: Any  # engine.telemetry.control.Controls
    sample: Any  # callable(device) -> None: emit a memory sample now
    faults: Any = None  # engine.partition.faults.FaultInjector, or None (no injection)
    tuning: Tuning = field(default_factory=Tuning)  # the run's PROVETOP_* settings
    plan: MemoryPlan = RESIDENT  # how the device's memory is used (engine.memory.plan)
    # True once the run is stopping: the start-up steps (the SRS on CUDA) end between chunks
    stopping: Callable[[], bool] = lambda: False


SKIP_WAIT_S = 120.0  # longest a skipped pre-stage waits for its neighbours' pre-stages
# A synthesis refused device memory tries this many times in all, pausing 0.5 s, then 1 s: a
# neighbour's fallback under the mutex holds the card for about one GPU region (~1.6 s at 2^27)
SYNTH_OOM_TRIES = 3
SYNTH_OOM_PAUSE_S = 0.5
# A fallback refused its a, b, c (policy.fallback_tries > 1) pauses 0.5, 1, 2 s between tries,
# holding the mutex: 3.5 s outlast what a neighbour does on the device outside the mutex at 2^27
# (its exact check ~0.2 s, its next synthesis 0.6-2.1 s; bench/notes/pipeline.md, 2026-11-29).
# On the H200 at 16 GiB such a neighbour's live blocks kept a stream-ordered pool chunk from
# being reused: 5.5 GB reserved and unused, and the fallback's third 4 GiB array refused.
FALLBACK_OOM_PAUSE_S = 0.5


# The longest a worker that took the mutex back waits for the other worker's region when it
# has handed that worker its H block (engine.memory.handover): that worker is already waiting for
# the
# mutex, so it comes within a thread switch; a worker that died never comes.
HANDOVER_WAIT_S = 2.0


class PartitionFailed(Exception):
    """An attempt that could not complete; ``oom`` tells whether the fallback may help."""

    def __init__(self, message: str, oom: bool) -> None:
        super().__init__(message)
        self.oom = oom


@dataclass
class Prepared:
    """A synthesised partition waiting for its attempt (or the synthesis failure)."""

    att: Attempt
    witness: Witness | None
    failure: PartitionFailed | None


@dataclass
class PartitionResult:
    ok: bool
    verified: bool | None
    attempts: int


class PartitionRunner:
    """Runs partitions for one worker (``worker`` is its index within ``device``), calling the
    backend's steps through ``ops`` (:class:`engine.partition.ops.PartitionOps`; a factory taking
    the worker's :class:`engine.partition.ops.WorkerScope`, by default the cpu ops)."""

    def __init__(
        self,
        ctx: RunContext,
        device: Device,
        worker: int,
        mutex: threading.Lock,
        gate: DeviceGate | None = None,
        ops: Callable[[WorkerScope], PartitionOps] = CpuPartition,
    ) -> None:
        self.ctx = ctx
        self.device = device
        self.worker = worker
        self.mutex = mutex
        self.gate = gate or DeviceGate()
        self.bus = ctx.bus
        self.scope = WorkerScope(ctx, device, worker)
        self.ops: PartitionOps = ops(self.scope)

    def detach_pools(self) -> list[Any]:
        """The worker's pinned pools, handed to the run when the worker stops
        (``engine.run.cuda_run.CudaRun.retire``)."""
        return self.ops.detach_pools()

    # -- the whole partition ------------------------------------------------------------------

    def run(self, proof: int, partition: int) -> PartitionResult:
        """Synthesise, then attempt; on failure recover and retry once on the fallback path."""
        return self.complete(self.prepare(proof, partition))

    def prepare(self, proof: int, partition: int, lane: int | None = None) -> Prepared:
        """The synthesis phase alone (the look-ahead runs it on another thread while this
        worker's previous partition completes; ``lane`` is then the telemetry worker its
        phases are drawn on). A synthesis failure is kept for :meth:`complete` to report."""
        att = Attempt(proof, partition, 0, lane=lane)
        # Before the phase, so that it times the synthesis alone: the wait is the worker's
        # idle time on its lane, not a slower witness.
        after = self._after_the_h_step()
        try:
            with self._phase(att, "synthesis"):
                witness = self._synthesize_tries(att, after)
        except PartitionFailed as exc:
            return Prepared(att, None, exc)
        finally:
            att.lane = None
        return Prepared(att, witness, None)

    def complete(self, prep: Prepared) -> PartitionResult:
        """Everything after synthesis: the attempt, and on failure the retry."""
        att, witness = prep.att, prep.witness
        proof, partition = att.proof, att.partition
        try:
            if prep.failure is not None:
                raise prep.failure
            self._attempt(att, witness, retry=False)
            self._done(att, ok=True)
            return PartitionResult(True, att.verified, 1)
        except PartitionFailed as exc:
            retry = witness is not None
            self._done(att, ok=False, failure=str(exc), will_retry=retry)
            if not retry:
                return PartitionResult(False, None, 1)
        att2 = Attempt(proof, partition, 1)
        self.gate.begin_recovery()
        try:
            self._recover()
            self._attempt(att2, witness, retry=True)
            self._done(att2, ok=True)
            return PartitionResult(True, att2.verified, 2)
        except PartitionFailed as exc:
            self._done(att2, ok=False, failure=str(exc), will_retry=False)
            self._recover()
            return PartitionResult(False, None, 2)
        finally:
            self.gate.end_recovery()

    def _recover(self) -> None:
        """After a failed attempt: wait for the device and give cached memory back, so the
        failure cannot poison what runs next (the seed's partitions all died of this)."""
        self.device.synchronize()
        self.device.trim()
        self.ctx.sample(self.device)

    def _after_the_h_step(self) -> Any:
        """Host work about to start (a synthesis, a host check) waits while another worker's
        region is due or running with its H step not yet queued (``engine.memory.h_step_fence``).
        Returns what a synthesis's device work should wait for: the H step's marker with
        ``PROVETOP_SYNTHESIS_AFTER_H=done``, else None."""
        if not self._fences():
            return None
        marker = self.gate.h_step.wait_queued()
        return marker if self.ctx.tuning.synthesis_after_h == "done" else None

    def _synthesize_tries(self, att: Attempt, after: Any = None) -> Witness:
        """The witness, or PartitionFailed. A synthesis refused device memory (a neighbour's
        fallback or retry may hold nearly the whole card) tries again after a pause, with
        ``tries`` telling the ops to use smaller chunks: the witness depends only on the
        partition's seed, so the same one comes out. ``after``: see :meth:`_after_the_h_step`."""
        cfg = self.ctx.config
        for tries in range(SYNTH_OOM_TRIES):
            rng = partition_rng(cfg.seed, att.proof, att.partition)
            try:
                return self.ops.synthesize(rng, tries, after=after)
            except DeviceOOM as exc:
                self.scope.fault_oom(att, exc)
                if tries + 1 == SYNTH_OOM_TRIES:
                    raise PartitionFailed(f"synthesis: {exc}", False) from None
                time.sleep(SYNTH_OOM_PAUSE_S * (tries + 1))
            except Exception as exc:  # nothing to retry without a witness
                self.scope.fault_exception(att, exc)
                raise PartitionFailed(f"synthesis: {type(exc).__name__}: {exc}", False) from None
        raise AssertionError("unreachable")

    # -- one attempt --------------------------------------------------------------------------

    def _attempt(self, att: Attempt, w: Witness, retry: bool) -> None:
        dev, fp, ops, scope = self.device, self.ctx.footprint, self.ops, self.scope
        plan = self.ctx.plan
        held = False
        t_acquired = 0
        try:
            with self._phase(att, "prestage"), self.gate.decide:
                if retry:
                    decision = Decision("fallback", "retry on the fallback path after a failure")
                elif plan.streamed:  # this device's memory has no room for a, b, c at once
                    decision = Decision("fallback", f"memory plan {plan.reason}")
                else:
                    forced = self.ctx.controls.is_forced(dev.index)
                    reserved = self.gate.reserved_by_others(self.worker)
                    decision = self.ctx.policy.prestage(dev, fp, forced, reserved)
                    if decision.status == "ok":
                        att.holds_prestage = self.gate.try_prestage()
                        if not att.holds_prestage:
                            reason = self.gate.refusal
                            decision = Decision("skip", reason, decision.free, decision.margin)
                att.prestage, att.prestage_reason = decision.status, decision.reason
                att.forced = decision.forced
                scope.alloc_event(att, "prestage", ops.prestage_pool, fp.prestage, decision)
                if decision.status == "ok":
                    dev.pin(w.abc_bytes)  # cudaHostRegister of a, b, c for async upload
                    att.pinned += w.abc_bytes
                    how = (
                        "a, b, c already in the worker's pinned pool"
                        if w.pinned
                        else "register a, b, c for the upload stream"
                    )
                    pinned = Decision("ok", how)
                    scope.alloc_event(att, "host_register", "host", w.abc_bytes, pinned)
                    d_a = scope.malloc(att, fp.u, ops.prestage_pool, "prestage")
                    d_bc = scope.malloc(att, 2 * fp.u, ops.prestage_pool, "prestage")
                    self.ctx.sample(dev)
                self.gate.commit(self.worker, ops.gpu_extra(w, decision.status == "ok"))
            prestaged = att.prestage == "ok"
            if prestaged:
                with self._phase(att, "upload"):
                    a = dev.upload(w.a, d_a, pinned=w.pinned)
                    b = dev.upload(w.b, d_bc, pinned=w.pinned)
                    c = dev.upload(w.c, d_bc, offset=int(w.b.nbytes), pinned=w.pinned)
            if not (prestaged or plan.streamed or retry) and self._hands_over():
                # a from the pinned pool into the running pass's H block (engine.memory.handover)
                ops.take_offer(att, w, self.gate.handover)
            with self._phase(att, "mutex_wait"):
                t0 = time.monotonic_ns()
                if att.prestage == "skip":
                    # Memory was short: the fallback's working set (a, b, c under the mutex)
                    # may only fit once the neighbours' pre-staged buffers are gone. Taking
                    # the mutex before them OOMed every such partition on a 16 GiB H200.
                    self.gate.wait_no_prestage(SKIP_WAIT_S)
                self.gate.h_step.want(self.worker)
                self.mutex.acquire()
                held = True
                self._let_the_taker_first()
                self.gate.h_step.acquired(self.worker, self._fences() and not plan.streamed)
                t_acquired = time.monotonic_ns()
                att.wait_ns = t_acquired - t0
                self._mutex_event(att, "acquire", t_acquired)
            if not (prestaged or plan.streamed):
                with self._phase(att, "fallback_upload"):
                    # the pre-stage blocks a neighbour (or this worker) gave back while this
                    # one waited sit in the caching pool, and the CUDA ops' pinned fallback
                    # takes a, b, c from the stream-ordered pool without a policy trim
                    self._reclaim_cache(att, 3 * fp.u + fp.margin, "prestage")
                    d_a, d_bc, a, b, c = self._fallback_upload_tries(att, w)
            # A checked partition's device sums run inside its own region. Taken outside
            # (during its upload, after its release) they ran beside another worker's MSMs
            # and stretched them by ~200 ms (H200, bench/notes/pipeline.md, b8f7d46).
            device_check = ops.checks_on_device and self._verifies(att)
            host_check = self._verifies(att) and not device_check
            if device_check:
                with self._phase(att, "check_inputs"):
                    if plan.streamed:  # from the witness: a, b, c never sit on the device
                        ops.check_inputs(att, w.a, w.b, w.c)
                    else:
                        ops.check_inputs(att, a, b, c)
            with self._phase(att, "h_step"):
                if plan.streamed:
                    d_a, h = ops.h_step_streamed(att, w, plan)
                    a = None
                else:
                    h = ops.h_step(a, b, c)  # stays on the device for msm_h
                    self.gate.h_step.queued(self.worker, ops.h_step_done())
                    del b, c
                    scope.free(att, d_bc)
            if prestaged:
                self._reclaim_cache(att, ops.region_need(w), "msm_scratch")
            results: dict[str, np.ndarray] = {}
            h_sum: int | None = None
            h_host: Any = None
            if plan.z_with_h:
                scalars = ops.msm_scalars(att, w, h)
            else:  # the aux scalars go up only once H's block is free (below, before msm_l)
                scalars = {"h": h}
            together = ops.msm_together() if plan.z_with_h else []
            if together and not (host_check or plan.streamed) and self._hands_over():
                if device_check:  # H's check sum first: nothing reads H after the pass
                    with self._phase(att, "check_sums"):
                        h_sum = ops.check_h(att, h)
                # the next partition's a may take H's rows as the pass finishes with them
                ops.offer_h(att, d_a, h, self.gate.handover)
            if together:  # the streamed MSMs in one pass: copies hidden under H's sums
                with self._phase(att, "msm_interleaved"):
                    scratch = ops.msm_scratch(att, fp.together or fp.msm_max)
                    results.update(ops.msm_many(together, scalars))
                    scope.free(att, scratch)
            for q in QUERIES:
                if q in results:
                    continue
                if q not in scalars:  # the aux scalars go up where H was (engine.memory.plan)
                    if device_check:
                        with self._phase(att, "check_sums"):
                            h_sum = ops.check_h(att, h)
                    elif host_check:
                        h_host = dev.download(h)
                    # every view of H goes before its block: CuPy frees the memory with the
                    # last reference, and the aux scalars are to be allocated in its place
                    scalars = h = a = None
                    scope.free(att, d_a)
                    scalars = ops.msm_scalars(att, w, None)
                ops.wait_for_scalars(q)
                with self._phase(att, MSM_PHASES[q]):
                    scratch = ops.msm_scratch(att, fp.msm[q])
                    res = ops.msm(q, scalars[q])
                    results[q] = res
                    scope.free(att, scratch)
            if device_check:
                with self._phase(att, "check_sums"):
                    att.device_sums = ops.check_sums(att, w, h if h_sum is None else None)
                    if h_sum is not None:
                        att.device_sums["h"] = h_sum
            with self._phase(att, "copy_back"):
                results = {q: dev.download(r) for q, r in results.items()}
                # H leaves the device only for a host check: its copy dies with d_a below
                if h is not None:
                    h = dev.download(h) if host_check else None
                else:
                    h = h_host
                # the last views of d_a and the scalars: a stream-ordered block (fallback path)
                # goes back to the pool only when no array refers to it, and ``a`` otherwise
                # kept d_a's 4 GiB (2^27) reserved through verify, outside the mutex
                del scalars, a
                if not ops.close_offer(att):  # else H's block is now the next partition's a
                    scope.free(att, d_a)
                ops.free_scalars(att)
                self._prestage_done(att)
                self.gate.uncommit(self.worker)
            t_release = time.monotonic_ns()
            att.hold_ns = t_release - t_acquired
            held = False
            self.gate.h_step.released(self.worker)
            self.mutex.release()
            self._mutex_event(att, "release", t_release)
            self.ctx.sample(dev)
            if self._verifies(att):  # Python on the GIL: after the next holder's host steps
                self._after_the_h_step()
            with self._phase(att, "verify"):
                att.verified = ops.verify(att, w, h, results) if self._verifies(att) else None
            with self._phase(att, "release"):
                self._release(att)
        except DeviceOOM as exc:
            if exc.site == "prestage" and att.prestage == "ok":
                att.prestage = "fallback"
                att.prestage_reason = f"{exc.pool} allocation of {exc.requested} bytes refused"
            scope.fault_oom(att, exc)
            raise PartitionFailed(f"OOM: {exc}", oom=True) from None
        except PartitionFailed:
            raise
        except Exception as exc:
            scope.fault_exception(att, exc)
            raise PartitionFailed(f"{type(exc).__name__}: {exc}", oom=False) from None
        finally:
            self.gate.h_step.released(self.worker)  # also a want that never got the mutex
            if held:
                t_release = time.monotonic_ns()
                att.hold_ns = t_release - t_acquired
                self.mutex.release()
                self._mutex_event(att, "release", t_release)
            self._release(att)

    def _let_the_taker_first(self) -> None:
        """Holding the mutex: if H's block was handed to the other worker's waiting a, that
        worker's region must come first (``Handover.owed_elsewhere``). The mutex is released
        while waiting, at most ``HANDOVER_WAIT_S`` in all (a taker that never comes: its
        block is then still held, and this region's allocations find out)."""
        handover = self.gate.handover
        deadline = time.monotonic() + HANDOVER_WAIT_S
        while (owed := handover.owed_elsewhere(self.worker)) is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.mutex.release()
            try:
                handover.wait_settled(owed, left)
            finally:
                self.mutex.acquire()

    def _fences(self) -> bool:
        """Whether a synthesis waits for the running region's H step to be queued, and with
        ``done`` finished (``engine.memory.h_step_fence``): only where the H step is queued on a
        device and returns at once."""
        return self.ctx.tuning.synthesis_after_h != "off" and self.ops.h_step_async

    def _hands_over(self) -> bool:
        """Whether H's block may pass to the next partition's a (``engine.memory.handover``): with
        two workers a device, the waiting one holds the next region."""
        return self.ctx.config.workers_per_device == 2 and self.ctx.tuning.a_handover == "on"

    def _fallback_upload_tries(self, att: Attempt, w: Witness) -> tuple:
        """``ops.fallback_upload``, tried up to ``policy.fallback_tries`` times: after a
        refusal (an ``oom`` fault with the pool state) this try's blocks go back, the worker's
        own streams are synchronised, the pools trimmed, and it pauses before the next try.
        Each try starts from nothing, so what a refusal leaves cannot add up."""
        tries = int(getattr(self.ctx.policy, "fallback_tries", 1))
        for k in range(tries):
            first = len(att.blocks)
            try:
                return self.ops.fallback_upload(att, w)
            except DeviceOOM as exc:
                if k + 1 == tries:
                    raise
                self.scope.fault_oom(att, exc)
            for blk in att.blocks[first:]:
                self.device.free(blk)
            del att.blocks[first:]
            self.device.synchronize()
            self.device.trim()
            time.sleep(FALLBACK_OOM_PAUSE_S * (1 << k))
        raise AssertionError("unreachable")

    def _verifies(self, att: Attempt) -> bool:
        """Whether this partition is checked exactly (``--verify``: always, sampled, never)."""
        cfg = self.ctx.config
        mode = cfg.verify_mode
        if mode == "never":
            return False
        if mode == "sampled":
            index = att.proof * cfg.partitions + att.partition
            return index % cfg.verify_every == 0
        return True

    # -- memory -------------------------------------------------------------------------------

    def _reclaim_cache(self, att: Attempt, need: int, site: str) -> None:
        """Ask the policy whether the pre-stage blocks in a caching pool must go back to the
        driver for the next ``need`` bytes of stream-ordered allocations at ``site`` (after
        the H step: d_bc, for the MSMs; before a fallback: whatever pre-stage blocks were
        given back meanwhile, for its a, b, c; ``reclaim_cache`` in ``engine.memory.allocator``); a
        trim is an ``alloc`` event."""
        if self.ops.prestage_pool != "sync":
            return  # a plain cudaFree already gave them back
        decision = self.ctx.policy.reclaim_cache(self.device, need)
        if decision is not None:
            self.scope.alloc_event(att, site, "sync", need, decision)

    def _release(self, att: Attempt) -> None:
        """Everything the attempt holds goes back, once the ops have drained what still
        writes into it. The gate's bookkeeping comes back even when a free raises (freeing a
        cached block first synchronises the worker's streams, which raise after a failed
        kernel): a pre-stage left counted would keep a neighbour's fallback waiting for
        ``SKIP_WAIT_S`` and its recovery for ten minutes."""
        try:
            self.ops.drain_uploads(att)
        finally:
            try:
                for blk in att.blocks:
                    self.device.free(blk)
            finally:
                att.blocks.clear()
                self._prestage_done(att)
                self.gate.uncommit(self.worker)
                if att.pinned:
                    self.device.unpin(att.pinned)
                    att.pinned = 0

    def _prestage_done(self, att: Attempt) -> None:
        if att.holds_prestage:
            att.holds_prestage = False
            self.gate.prestage_released()

    # -- events -------------------------------------------------------------------------------

    @contextmanager
    def _phase(self, att: Attempt, name: str):
        where = self.scope.where(att)
        lane = where if att.lane is None else {**where, "worker": att.lane}
        self.bus.emit("phase_begin", **lane, phase=name)
        t0 = time.monotonic_ns()
        timer = self.ops.phase_timer(name)
        started = False
        ok = False
        try:
            if self.ctx.faults is not None:
                self.ctx.faults.on_phase(name, self.device, where)
            if timer is not None:
                timer.start()
                started = True
            yield
            ok = True
        finally:
            gpu = {}
            # Only a started timer has a time: the CUDA timers re-record one pair of events per
            # thread, so stopping one that never started (a fault injected at the phase's
            # start) measured from the previous phase's start and reported that as gpu_ms.
            if started:
                try:
                    gpu["gpu_ms"] = timer.stop()
                except Exception:  # a failed phase may leave its stream in error: no time
                    pass
            ms = (time.monotonic_ns() - t0) / 1e6
            att.phases_ms[name] = att.phases_ms.get(name, 0.0) + ms
            self.bus.emit("phase_end", **lane, phase=name, ok=ok, **gpu)

    def _mutex_event(self, att: Attempt, action: str, at_ns: int) -> None:
        """Stamped with the instant the lock was taken or given back (not the emit time), so
        the hold intervals in the stream are exact."""
        hold = att.hold_ns if action == "release" else 0
        t = at_ns - self.bus.clock.t0
        where = self.scope.where(att)
        self.bus.emit_at(t, "mutex", **where, wait_ns=att.wait_ns, hold_ns=hold, action=action)

    def _done(
        self, att: Attempt, ok: bool, failure: str | None = None, will_retry: bool = False
    ) -> None:
        self.bus.emit(
            "partition_done",
            **self.scope.where(att),
            attempt=att.attempt,
            ok=ok,
            phases_ms=dict(att.phases_ms),
            gpu_total_ms=att.hold_ns / 1e6,
            mutex_wait_ms=att.wait_ns / 1e6,
            prestage=att.prestage,
            prestage_reason=att.prestage_reason,
            forced=att.forced,
            verified=att.verified if ok else None,
            failure=failure,
            will_retry=will_retry,
        )

"""One partition, top to bottom, on one worker of one device: the driver.

Why one module: this is the path a newcomer should be able to trace in minutes (architecture
doc, "Flow of one partition"). The driver owns the order and everything around the steps:
every phase is timed and emitted (``phase_begin``/``phase_end``); every allocation decision
is emitted with the pool state (``alloc`` + a ``memory`` sample); every failure is a
``fault``. Memory is always given back in ``finally``, so an OOM never leaks into the next
partition; a partition whose first attempt fails is retried once on the fallback path after
the engine synchronises and trims the device.

What differs between backends is *how* a step is carried out: the driver calls the steps of
:class:`provetop.engine.partition.ops.PartitionOps` (``provetop.engine.partition.cpu`` on the cpu
backend,
``provetop.engine.partition.cuda`` on a GPU), and the optional ones the ops take (asked once, when
the driver is built); it never asks which implementation it has. An attempt takes one of
three paths, chosen from the device's plan and the pre-stage decision (:meth:`_path`), each
one short method over the same named steps: pre-staged (a, b, c up before the mutex),
fallback (under it) and streamed (through the plan's slots, inside the H step).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from provetop.engine.devices.base import Block, Device, DeviceOOM
from provetop.engine.memory.allocator import Decision
from provetop.engine.memory.gate import DeviceGate
from provetop.engine.partition.context import RunContext
from provetop.engine.partition.cpu import CpuPartition
from provetop.engine.partition.ops import (
    MSM_PHASES,
    Attempt,
    DeviceChecks,
    HandoverSteps,
    OnePass,
    OptionalSteps,
    PartitionOps,
    WorkerScope,
)
from provetop.engine.spec.srs import QUERIES
from provetop.engine.spec.workload import Witness, partition_rng

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
# has handed that worker its H block (provetop.engine.memory.handover): that worker is already
# waiting
# for the mutex, so it comes within a thread switch; a worker that died never comes.
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


@dataclass
class _AttemptState:
    """One attempt's arrays and blocks between the steps of its path. A field is cleared
    where the step that last reads it ends: CuPy frees device memory with its last
    reference, and a view kept here would keep its block reserved."""

    att: Attempt
    w: Witness
    retry: bool
    checks: DeviceChecks | None = None  # this partition's device checks, if it has them
    host_check: bool = False  # checked on the host, from H's coefficients, after the release
    d_a: Block | None = None  # a's block, then H's
    d_bc: Block | list[Block] | None = None  # b's and c's
    a: Any = None
    b: Any = None
    c: Any = None
    h: Any = None
    scalars: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    h_sum: int | None = None  # <h, tau^i>, where it was taken before H's block went back
    h_host: Any = None  # H's host copy, where it was taken before H's block went back
    held: bool = False  # the device mutex
    t_acquired: int = 0


class PartitionRunner:
    """Runs partitions for one worker (``worker`` is its index within ``device``), calling the
    backend's steps through ``ops`` (:class:`provetop.engine.partition.ops.PartitionOps`; a factory
    taking
    the worker's :class:`provetop.engine.partition.ops.WorkerScope`, by default the cpu ops)."""

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
        self.steps = OptionalSteps.of(self.ops)  # asked once: the paths run without the rest

    def detach_pools(self) -> list[Any]:
        """The worker's pinned pools, handed to the run when the worker stops
        (``provetop.engine.run.cuda_run.CudaRun.retire``); none where the ops keep none."""
        pools = self.steps.pools
        return pools.detach_pools() if pools is not None else []

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
        self._after_the_h_step()
        try:
            with self._phase(att, "synthesis"):
                witness = self._synthesize_tries(att)
        except PartitionFailed as exc:
            return Prepared(att, None, exc)
        finally:
            att.lane = None
        return Prepared(att, witness, None)

    def complete(self, prep: Prepared) -> PartitionResult:
        """Everything after synthesis: the attempt, and on failure the retry."""
        att, witness = prep.att, prep.witness
        if witness is None:  # the synthesis failed: nothing to attempt, nothing to retry
            failure = prep.failure or PartitionFailed("synthesis: no witness", False)
            self._done(att, ok=False, failure=str(failure), will_retry=False)
            return PartitionResult(False, None, 1)
        try:
            self._attempt(att, witness, retry=False)
            self._done(att, ok=True)
            return PartitionResult(True, att.verified, 1)
        except PartitionFailed as exc:
            self._done(att, ok=False, failure=str(exc), will_retry=True)
        return self._retry(att, witness)

    def _retry(self, failed: Attempt, witness: Witness) -> PartitionResult:
        """The second attempt, on the fallback path, once the device has recovered."""
        att = Attempt(failed.proof, failed.partition, 1)
        self.gate.begin_recovery()
        try:
            self._recover()
            self._attempt(att, witness, retry=True)
            self._done(att, ok=True)
            return PartitionResult(True, att.verified, 2)
        except PartitionFailed as exc:
            self._done(att, ok=False, failure=str(exc), will_retry=False)
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

    def _after_the_h_step(self) -> None:
        """Host work about to start (a synthesis, a host check) waits, on the host only, while
        another worker's region is due or running with its H step not yet queued
        (``provetop.engine.memory.h_step_fence``)."""
        # decided: bench/notes/pipeline.md, 64f4703, 9a03df2, 616e196 and 9304e3b
        if self._fences():
            self.gate.h_step.wait_queued()

    def _synthesize_tries(self, att: Attempt) -> Witness:
        """The witness, or PartitionFailed. A synthesis refused device memory (a neighbour's
        fallback or retry may hold nearly the whole card) tries again after a pause, with
        ``tries`` telling the ops to use smaller chunks: the witness depends only on the
        partition's seed, so the same one comes out."""
        cfg = self.ctx.config
        for tries in range(SYNTH_OOM_TRIES):
            rng = partition_rng(cfg.seed, att.proof, att.partition)
            try:
                return self.ops.synthesize(rng, tries)
            except DeviceOOM as exc:
                self.scope.fault_oom(att, exc)
                if tries + 1 == SYNTH_OOM_TRIES:
                    raise PartitionFailed(f"synthesis: {exc}", False) from None
                time.sleep(SYNTH_OOM_PAUSE_S * (tries + 1))
            except Exception as exc:  # nothing to retry without a witness
                self.scope.fault_exception(att, exc)
                raise PartitionFailed(f"synthesis: {type(exc).__name__}: {exc}", False) from None
        raise AssertionError("unreachable")

    # -- one attempt ------------------------------------------------------------------------

    def _attempt(self, att: Attempt, w: Witness, retry: bool) -> None:
        """One attempt: the pre-stage decision, the path it picks (:meth:`_path`), the mutex
        given back, the check and the release. Any failure becomes the attempt's ``fault``
        and a :class:`PartitionFailed`; whatever it held goes back either way."""
        st = self._state(att, w, retry)
        try:
            self._prestage(st)
            self._path(att)(st)
            self._end_region(st)
            self._verify(st)
            with self._phase(att, "release"):
                self._release(att)
        except DeviceOOM as exc:
            if exc.site == "prestage" and att.prestage == "ok":
                att.prestage = "fallback"
                att.prestage_reason = f"{exc.pool} allocation of {exc.requested} bytes refused"
            self.scope.fault_oom(att, exc)
            raise PartitionFailed(f"OOM: {exc}", oom=True) from None
        except PartitionFailed:
            raise
        except Exception as exc:
            self.scope.fault_exception(att, exc)
            raise PartitionFailed(f"{type(exc).__name__}: {exc}", oom=False) from None
        finally:
            self._after_attempt(st)

    def _path(self, att: Attempt) -> Callable[[_AttemptState], None]:
        """The attempt's way through the device: streamed where the device's plan has no room
        for a, b, c at once, else pre-staged or fallback as the pre-stage decided."""
        if self.ctx.plan.streamed:
            return self._streamed
        return self._prestaged if att.prestage == "ok" else self._fallback

    # -- the three paths ----------------------------------------------------------------------

    def _prestaged(self, st: _AttemptState) -> None:
        """a, b, c went up outside the mutex, into the buffers the pre-stage allocated."""
        self._upload(st)
        self._acquire(st, fenced=self._fences())
        self._check_inputs(st, st.a, st.b, st.c)
        self._h_step(st)
        self._reclaim_cache(st.att, self.ops.region_need(st.w), "msm_scratch")
        self._msms(st, offer=True)
        self._check_sums(st)
        self._copy_back(st)

    def _fallback(self, st: _AttemptState) -> None:
        """a, b, c go up under the mutex (a early, into the previous partition's H block,
        where the ops hand it over)."""
        self._take_offer(st)
        self._acquire(st, fenced=self._fences())
        self._fallback_upload(st)
        self._check_inputs(st, st.a, st.b, st.c)
        self._h_step(st)
        self._msms(st, offer=True)
        self._check_sums(st)
        self._copy_back(st)

    def _streamed(self, st: _AttemptState) -> None:
        """a, b, c never sit on the device together: the H step takes them from the witness
        one at a time, through the plan's slots (``provetop.engine.memory.plan``)."""
        self._acquire(st, fenced=False)
        self._check_inputs(st, st.w.a, st.w.b, st.w.c)
        self._h_step_streamed(st)
        self._msms(st, offer=False)
        self._check_sums(st)
        self._copy_back(st)

    # -- the steps of the paths ---------------------------------------------------------------

    def _state(self, att: Attempt, w: Witness, retry: bool) -> _AttemptState:
        """A fresh attempt's state. A checked partition's device sums run inside its own
        region: taken outside (during its upload, after its release) they ran beside another
        worker's MSMs and stretched them by ~200 ms (H200, bench/notes/pipeline.md, b8f7d46)."""
        checked = self._verifies(att)
        checks = self.steps.checks if checked else None
        return _AttemptState(att, w, retry, checks=checks, host_check=checked and checks is None)

    def _prestage(self, st: _AttemptState) -> None:
        """Phase ``prestage``, one worker at a time: the decision and its ``alloc`` event, an
        ``ok`` partition's buffers, and the ledger entry of what its region may still take."""
        att, w, fp = st.att, st.w, self.ctx.footprint
        with self._phase(att, "prestage"), self.gate.decide:
            decision = self._decide(att, st.retry)
            att.prestage, att.prestage_reason = decision.status, decision.reason
            att.forced = decision.forced
            self.scope.alloc_event(att, "prestage", self.ops.prestage_pool, fp.prestage, decision)
            if decision.status == "ok":
                self._prestage_buffers(st)
            self.gate.commit(self.worker, self.ops.gpu_extra(w, decision.status == "ok"))

    def _decide(self, att: Attempt, retry: bool) -> Decision:
        """The pre-stage decision: a retry and a streamed plan take no pre-stage; else the
        policy decides, and an ``ok`` the gate refuses (a recovery, a waiting fallback) is a
        ``skip``."""
        plan = self.ctx.plan
        if retry:
            return Decision("fallback", "retry on the fallback path after a failure")
        if plan.streamed:  # this device's memory has no room for a, b, c at once
            return Decision("fallback", f"memory plan {plan.reason}")
        forced = self.ctx.controls.is_forced(self.device.index)
        reserved = self.gate.reserved_by_others(self.worker)
        decision = self.ctx.policy.prestage(self.device, self.ctx.footprint, forced, reserved)
        if decision.status == "ok":
            att.holds_prestage = self.gate.try_prestage()
            if not att.holds_prestage:
                return Decision("skip", self.gate.refusal, decision.free, decision.margin)
        return decision

    def _prestage_buffers(self, st: _AttemptState) -> None:
        """An ``ok`` partition's host registration and device buffers (d_a, d_bc)."""
        att, w, fp, dev = st.att, st.w, self.ctx.footprint, self.device
        dev.pin(w.abc_bytes)  # cudaHostRegister of a, b, c for async upload
        att.pinned += w.abc_bytes
        how = (
            "a, b, c already in the worker's pinned pool"
            if w.pinned
            else "register a, b, c for the upload stream"
        )
        self.scope.alloc_event(att, "host_register", "host", w.abc_bytes, Decision("ok", how))
        st.d_a = self.scope.malloc(att, fp.u, self.ops.prestage_pool, "prestage")
        st.d_bc = self.scope.malloc(att, 2 * fp.u, self.ops.prestage_pool, "prestage")
        self.ctx.sample(dev)

    def _upload(self, st: _AttemptState) -> None:
        """Phase ``upload`` (pre-staged): a, b, c into d_a and d_bc, outside the mutex."""
        w, dev = st.w, self.device
        assert isinstance(st.d_a, Block) and isinstance(st.d_bc, Block)  # the pre-stage's
        with self._phase(st.att, "upload"):
            st.a = dev.upload(w.a, st.d_a, pinned=w.pinned)
            st.b = dev.upload(w.b, st.d_bc, pinned=w.pinned)
            st.c = dev.upload(w.c, st.d_bc, offset=int(w.b.nbytes), pinned=w.pinned)

    def _take_offer(self, st: _AttemptState) -> None:
        """Before waiting for the mutex (fallback, first attempt): a from the pinned pool into
        the running pass's H block (``provetop.engine.memory.handover``)."""
        handover = self._handover()
        if handover is not None and not st.retry:
            handover.take_offer(st.att, st.w, self.gate.handover)

    def _acquire(self, st: _AttemptState, fenced: bool) -> None:
        """Phase ``mutex_wait``: the device mutex, and the ``mutex`` event with the wait.
        ``fenced``: a neighbour's synthesis waits for this region's H step to be queued."""
        att = st.att
        with self._phase(att, "mutex_wait"):
            t0 = time.monotonic_ns()
            if att.prestage == "skip":
                # Memory was short: the fallback's working set (a, b, c under the mutex)
                # may only fit once the neighbours' pre-staged buffers are gone. Taking
                # the mutex before them OOMed every such partition on a 16 GiB H200.
                self.gate.wait_no_prestage(SKIP_WAIT_S)
            self.gate.h_step.want(self.worker)
            self.mutex.acquire()
            st.held = True
            if self.steps.handover is not None:
                self._let_the_taker_first()
            self.gate.h_step.acquired(self.worker, fenced)
            st.t_acquired = time.monotonic_ns()
            att.wait_ns = st.t_acquired - t0
            self._mutex_event(att, "acquire", st.t_acquired)

    def _fallback_upload(self, st: _AttemptState) -> None:
        """Phase ``fallback_upload``: a, b, c on the device under the mutex."""
        fp = self.ctx.footprint
        with self._phase(st.att, "fallback_upload"):
            # the pre-stage blocks a neighbour (or this worker) gave back while this
            # one waited sit in the caching pool, and the CUDA ops' pinned fallback
            # takes a, b, c from the stream-ordered pool without a policy trim
            self._reclaim_cache(st.att, 3 * fp.u + fp.margin, "prestage")
            st.d_a, st.d_bc, st.a, st.b, st.c = self._fallback_upload_tries(st.att, st.w)

    def _check_inputs(self, st: _AttemptState, a: Any, b: Any, c: Any) -> None:
        """Phase ``check_inputs`` (a partition checked on the device): A, B, C at tau."""
        if st.checks is not None:
            with self._phase(st.att, "check_inputs"):
                st.checks.check_inputs(st.att, a, b, c)

    def _h_step(self, st: _AttemptState) -> None:
        """Phase ``h_step`` from a, b, c on the device; H stays there for ``msm_h``, and d_bc
        goes back. Where the step is only queued, the fence learns of it."""
        with self._phase(st.att, "h_step"):
            st.h = self.ops.h_step(st.a, st.b, st.c)
            if self._fences():
                self.gate.h_step.queued(self.worker)
            st.b = st.c = None
            assert st.d_bc is not None  # the pre-stage's, or the fallback upload's
            self.scope.free(st.att, st.d_bc)

    def _h_step_streamed(self, st: _AttemptState) -> None:
        """Phase ``h_step`` of a streamed plan: H in the block the ops return."""
        with self._phase(st.att, "h_step"):
            st.d_a, st.h = self.ops.h_step_streamed(st.att, st.w, self.ctx.plan)

    def _msms(self, st: _AttemptState, offer: bool) -> None:
        """The four MSMs: those of the one pass first (where the ops run one), then each
        query left in a phase of its own. ``offer``: H's block may go to the next
        partition's a as the pass finishes reading it (not from a streamed plan's slot)."""
        plan, one_pass = self.ctx.plan, self.steps.one_pass
        if plan.z_with_h:
            st.scalars = self.ops.msm_scalars(st.att, st.w, st.h)
        else:  # the aux scalars go up only once H's block is free (before msm_l)
            st.scalars = {"h": st.h}
        together = one_pass.msm_together() if one_pass is not None and plan.z_with_h else []
        if one_pass is not None and together:
            if offer and not st.host_check:
                self._offer_h(st)
            self._one_pass(st, one_pass, together)
        for q in QUERIES:
            if q not in st.results:
                self._msm(st, q)

    def _offer_h(self, st: _AttemptState) -> None:
        """Before the one pass: H's check sum first (nothing reads H after the pass), then
        H's rows offered to the next partition's a as the pass is done with them."""
        handover = self._handover()
        if handover is None:
            return
        if st.checks is not None:
            with self._phase(st.att, "check_sums"):
                st.h_sum = st.checks.check_h(st.att, st.h)
        assert st.d_a is not None  # H's block, set by the H step
        handover.offer_h(st.att, st.d_a, st.h, self.gate.handover)

    def _one_pass(self, st: _AttemptState, one_pass: OnePass, together: list[str]) -> None:
        """Phase ``msm_interleaved``: the streamed MSMs in one pass, copies hidden under H's
        sums."""
        fp = self.ctx.footprint
        with self._phase(st.att, "msm_interleaved"):
            scratch = self.ops.msm_scratch(st.att, fp.together or fp.msm_max)
            st.results.update(one_pass.msm_many(together, st.scalars))
            self.scope.free(st.att, scratch)

    def _msm(self, st: _AttemptState, q: str) -> None:
        """The MSM of query ``q`` in its own phase, with its planned scratch."""
        if q not in st.scalars:  # the aux scalars go up where H was (provetop.engine.memory.plan)
            self._scalars_after_h(st)
        if self.steps.copies is not None:
            self.steps.copies.wait_for_scalars(q)
        with self._phase(st.att, MSM_PHASES[q]):
            scratch = self.ops.msm_scratch(st.att, self.ctx.footprint.msm[q])
            st.results[q] = self.ops.msm(q, st.scalars[q])
            self.scope.free(st.att, scratch)

    def _scalars_after_h(self, st: _AttemptState) -> None:
        """A plan with the aux scalars after H: H's sum (device check) or host copy (host
        check) is taken, H's block goes back, and the aux scalars go up in its place."""
        if st.checks is not None:
            with self._phase(st.att, "check_sums"):
                st.h_sum = st.checks.check_h(st.att, st.h)
        elif st.host_check:
            st.h_host = self.device.download(st.h)
        # every view of H goes before its block: CuPy frees the memory with the last
        # reference, and the aux scalars are to be allocated in its place
        st.scalars, st.h, st.a = {}, None, None
        assert st.d_a is not None  # H's block, set by the H step
        self.scope.free(st.att, st.d_a)
        st.scalars = self.ops.msm_scalars(st.att, st.w, None)

    def _check_sums(self, st: _AttemptState) -> None:
        """Phase ``check_sums`` (a partition checked on the device): every query's sum."""
        if st.checks is None:
            return
        att = st.att
        with self._phase(att, "check_sums"):
            att.device_sums = st.checks.check_sums(att, st.w, st.h if st.h_sum is None else None)
            if st.h_sum is not None:
                att.device_sums["h"] = st.h_sum

    def _copy_back(self, st: _AttemptState) -> None:
        """Phase ``copy_back``: the results (and, for a host check, H) to the host, then
        d_a, the scalars, the pre-stage count and the ledger entry given back, inside the
        region."""
        att, dev = st.att, self.device
        with self._phase(att, "copy_back"):
            st.results = {q: dev.download(r) for q, r in st.results.items()}
            # H leaves the device only for a host check: its copy dies with d_a below
            if st.h is not None:
                st.h = dev.download(st.h) if st.host_check else None
            else:
                st.h = st.h_host
            # the last views of d_a and the scalars: a stream-ordered block (fallback path)
            # goes back to the pool only when no array refers to it, and ``a`` otherwise
            # kept d_a's 4 GiB (2^27) reserved through verify, outside the mutex
            st.scalars, st.a = {}, None
            if not self._close_offer(att):  # else H's block is now the next partition's a
                assert st.d_a is not None  # set by every path by its H step
                self.scope.free(att, st.d_a)
            if self.steps.copies is not None:
                self.steps.copies.free_scalars(att)
            self._prestage_done(att)
            self.gate.uncommit(self.worker)

    def _close_offer(self, att: Attempt) -> bool:
        """The region ends: True when H's block was handed to the next partition's a."""
        handover = self.steps.handover
        return handover is not None and handover.close_offer(att)

    def _end_region(self, st: _AttemptState) -> None:
        """The mutex given back (the ``mutex`` event stamped with the instant), a sample."""
        t_release = time.monotonic_ns()
        st.att.hold_ns = t_release - st.t_acquired
        st.held = False
        self.gate.h_step.released(self.worker)
        self.mutex.release()
        self._mutex_event(st.att, "release", t_release)
        self.ctx.sample(self.device)

    def _verify(self, st: _AttemptState) -> None:
        """Phase ``verify``, outside the mutex: the exact identities of a checked partition."""
        att = st.att
        checked = self._verifies(att)
        if checked:  # Python on the GIL: after the next holder's host steps
            self._after_the_h_step()
        with self._phase(att, "verify"):
            att.verified = self.ops.verify(att, st.w, st.h, st.results) if checked else None

    def _after_attempt(self, st: _AttemptState) -> None:
        """Whatever the attempt's end: the fence and the mutex given back (an attempt that
        failed inside its region still holds it), then everything it holds."""
        self.gate.h_step.released(self.worker)  # also a want that never got the mutex
        if st.held:
            t_release = time.monotonic_ns()
            st.att.hold_ns = t_release - st.t_acquired
            self.mutex.release()
            self._mutex_event(st.att, "release", t_release)
        self._release(st.att)

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
        """Whether a synthesis waits for the running region's H step to be queued
        (``provetop.engine.memory.h_step_fence``): only where the H step is queued on a device and
        returns at once."""
        return self.ops.h_step_async

    def _handover(self) -> HandoverSteps | None:
        """The ops' hand-over steps where H's block may pass to the next partition's a
        (``provetop.engine.memory.handover``): with two workers a device, the waiting one holds the
        next region; else None."""
        if self.ctx.config.workers_per_device != 2:
            return None
        return self.steps.handover  # decided: bench/notes/memory.md, 6d599a8 and 2c079c0

    def _fallback_upload_tries(
        self, att: Attempt, w: Witness
    ) -> tuple[Block, list[Block], Any, Any, Any]:
        """``ops.fallback_upload``, tried up to ``policy.fallback_tries`` times: after a
        refusal (an ``oom`` fault with the pool state) this try's blocks go back, the worker's
        own streams are synchronised, the pools trimmed, and it pauses before the next try.
        Each try starts from nothing, so what a refusal leaves cannot add up."""
        tries = int(self.ctx.policy.fallback_tries)
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
        given back meanwhile, for its a, b, c; ``reclaim_cache`` in
        ``provetop.engine.memory.allocator``); a
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
            if self.steps.copies is not None:
                self.steps.copies.drain_uploads(att)
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
    def _phase(self, att: Attempt, name: str) -> Iterator[None]:
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
            gpu: dict[str, float] = {}
            # Only a started timer has a time: the CUDA timers re-record one pair of events per
            # thread, so stopping one that never started (a fault injected at the phase's
            # start) measured from the previous phase's start and reported that as gpu_ms.
            if started and timer is not None:
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

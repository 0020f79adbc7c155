"""One partition, phase by phase, on one worker of one device.

Why one module: this is the path a newcomer should be able to trace in minutes (architecture
doc, "Flow of one partition"). Every phase is timed and emitted (``phase_begin``/``phase_end``);
every allocation decision is emitted with the pool state (``alloc`` + a ``memory`` sample);
every failure is a ``fault``. Memory is always given back in ``finally``, so an OOM never
leaks into the next partition; a partition whose first attempt fails is retried once on the
fallback path after the engine synchronises and trims the device.

The arithmetic goes through the ``KernelBackend`` interface only (h_step, msm), so the same
code drives the CPU reference and the CUDA kernels.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.allocator import Decision, Footprint
from engine.config import EngineConfig
from engine.devices.base import Block, Device, DeviceOOM
from engine.srs import QUERIES, Srs
from engine.workload import QuerySizes, Witness, partition_rng, synthesize

MSM_PHASES = {"h": "msm_h", "l": "msm_l", "a": "msm_a", "b_g1": "msm_b_g1"}


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
    controls: Any  # engine.control.Controls
    sample: Any  # callable(device) -> None: emit a memory sample now
    faults: Any = None  # engine.faults.FaultInjector, or None (no injection)


class DeviceGate:
    """Per-device bookkeeping that lets a retry recover: while a worker retries after a
    failure, no worker starts a new pre-stage on that device, and the retry waits until every
    pre-staged buffer held outside the mutex has been released. Then the retry has the whole
    device under the mutex, so an OOM is never followed by another one caused by a neighbour
    (the seed's partitions failed in a cascade)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self.prestaged = 0  # workers holding pre-stage buffers
        self.recovering = 0
        self.waiting = 0  # skipped workers waiting for the pre-staged buffers to go
        self.refusal = ""  # why the last try_prestage() said no
        # Pre-stage decisions and their allocations happen one worker at a time, against a
        # ledger of what workers committed to the GPU region may still allocate there.
        self.decide = threading.Lock()
        self._extra: dict[int, int] = {}

    def reserved_by_others(self, worker: int) -> int:
        with self._cv:
            return sum(v for w, v in self._extra.items() if w != worker)

    def commit(self, worker: int, extra: int) -> None:
        with self._cv:
            self._extra[worker] = extra

    def uncommit(self, worker: int) -> None:
        with self._cv:
            self._extra.pop(worker, None)

    def wait_no_prestage(self, timeout: float) -> bool:
        """Block until no worker holds pre-stage buffers (False on timeout). While anyone
        waits here no new pre-stage is granted: a neighbour that releases its buffers and
        pre-stages its next partition at once would otherwise keep the waiter asleep (with
        the look-ahead the next pre-stage comes within milliseconds)."""
        with self._cv:
            self.waiting += 1
            try:
                return self._cv.wait_for(lambda: self.prestaged == 0, timeout)
            finally:
                self.waiting -= 1
                self._cv.notify_all()

    def try_prestage(self) -> bool:
        """Count a pre-stage in, or say no (the reason is left in ``refusal``)."""
        with self._cv:
            if self.recovering:
                self.refusal = "another worker is recovering from a failure on this device"
                return False
            if self.waiting:
                self.refusal = "a neighbour's fallback is waiting for the pre-staged buffers"
                return False
            self.prestaged += 1
            return True

    def prestage_released(self) -> None:
        with self._cv:
            self.prestaged -= 1
            self._cv.notify_all()

    def begin_recovery(self, timeout: float = 600.0) -> None:
        with self._cv:
            self.recovering += 1
            self._cv.wait_for(lambda: self.prestaged == 0, timeout)

    def end_recovery(self) -> None:
        with self._cv:
            self.recovering -= 1
            self._cv.notify_all()


SKIP_WAIT_S = 120.0  # longest a skipped pre-stage waits for its neighbours' pre-stages
# A synthesis refused device memory tries this many times in all, pausing 0.5 s, then 1 s: a
# neighbour's fallback under the mutex holds the card for about one GPU region (~1.6 s at 2^27)
SYNTH_OOM_TRIES = 3
SYNTH_OOM_PAUSE_S = 0.5
# A fallback refused its a, b, c (policy.fallback_tries > 1) pauses 0.5, 1, 2 s between tries,
# holding the mutex: 3.5 s outlast what a neighbour does on the device outside the mutex at
# 2^27 (its exact check ~0.2 s, its next synthesis 0.6-2.1 s; docs/performance-notes.md). On
# the H200 at 16 GiB such a neighbour's live blocks kept a stream-ordered pool chunk from
# being reused: 5.5 GB reserved and unused, and the fallback's third 4 GiB array refused.
FALLBACK_OOM_PAUSE_S = 0.5


class PartitionFailed(Exception):
    """An attempt that could not complete; ``oom`` tells whether the fallback may help."""

    def __init__(self, message: str, oom: bool) -> None:
        super().__init__(message)
        self.oom = oom


@dataclass
class Attempt:
    """Bookkeeping of one attempt: phase times, pool blocks, pinned bytes, mutex timings."""

    proof: int
    partition: int
    attempt: int
    phases_ms: dict[str, float] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    pinned: int = 0
    holds_prestage: bool = False
    wait_ns: int = 0
    hold_ns: int = 0
    prestage: str = "none"  # until the pre-stage decision (a failed synthesis never gets one)
    prestage_reason: str | None = None
    forced: bool = False
    verified: bool | None = None
    scalars_block: Block | None = None  # the aux scalars on the device (CUDA runner)
    abc_at_tau: tuple[int, int, int] | None = None  # A, B, C at tau, for the check (CUDA)
    device_sums: dict[str, int] | None = None  # per query <k, s>, for the check (CUDA)
    lane: int | None = None  # telemetry worker of the phases (a look-ahead synthesis lane)


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
    """Runs partitions for one worker (``worker`` is its index within ``device``)."""

    # Where the pre-stage buffers (d_a, d_bc) come from: plain cudaMalloc/cudaFree, as in the
    # seed, on the modeled devices; the CUDA runner draws them from CuPy's caching pool.
    prestage_pool = "raw"
    # Whether a checked partition's sums are taken on the device, inside its own GPU region
    # (phases check_inputs and check_sums; the CUDA runner); else the host checks everything
    # after the release, from H's coefficients.
    checks_on_device = False

    def __init__(
        self,
        ctx: RunContext,
        device: Device,
        worker: int,
        mutex: threading.Lock,
        gate: DeviceGate | None = None,
    ) -> None:
        self.ctx = ctx
        self.device = device
        self.worker = worker
        self.mutex = mutex
        self.gate = gate or DeviceGate()
        self.bus = ctx.bus

    # -- the whole partition ------------------------------------------------------------------

    def run(self, proof: int, partition: int) -> PartitionResult:
        """Synthesise, then attempt; on failure recover and retry once on the fallback path."""
        return self.complete(self.prepare(proof, partition))

    def prepare(self, proof: int, partition: int, lane: int | None = None) -> Prepared:
        """The synthesis phase alone (the look-ahead runs it on another thread while this
        worker's previous partition completes; ``lane`` is then the telemetry worker its
        phases are drawn on). A synthesis failure is kept for :meth:`complete` to report."""
        att = Attempt(proof, partition, 0, lane=lane)
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

    # -- one attempt --------------------------------------------------------------------------

    def _attempt(self, att: Attempt, w: Witness, retry: bool) -> None:
        dev, fp = self.device, self.ctx.footprint
        held = False
        t_acquired = 0
        try:
            with self._phase(att, "prestage"), self.gate.decide:
                if retry:
                    decision = Decision("fallback", "retry on the fallback path after a failure")
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
                self._alloc_event(att, "prestage", self.prestage_pool, fp.prestage, decision)
                if decision.status == "ok":
                    dev.pin(w.abc_bytes)  # cudaHostRegister of a, b, c for async upload
                    att.pinned += w.abc_bytes
                    how = (
                        "a, b, c already in the worker's pinned pool"
                        if w.pinned
                        else "register a, b, c for the upload stream"
                    )
                    pinned = Decision("ok", how)
                    self._alloc_event(att, "host_register", "host", w.abc_bytes, pinned)
                    d_a = self._malloc(att, fp.u, self.prestage_pool, "prestage")
                    d_bc = self._malloc(att, 2 * fp.u, self.prestage_pool, "prestage")
                    self.ctx.sample(dev)
                self.gate.commit(self.worker, self._gpu_extra(w, decision.status == "ok"))
            prestaged = att.prestage == "ok"
            if prestaged:
                with self._phase(att, "upload"):
                    a = dev.upload(w.a, d_a, pinned=w.pinned)
                    b = dev.upload(w.b, d_bc, pinned=w.pinned)
                    c = dev.upload(w.c, d_bc, offset=int(w.b.nbytes), pinned=w.pinned)
            with self._phase(att, "mutex_wait"):
                t0 = time.monotonic_ns()
                if att.prestage == "skip":
                    # Memory was short: the fallback's working set (a, b, c under the mutex)
                    # may only fit once the neighbours' pre-staged buffers are gone. Taking
                    # the mutex before them OOMed every such partition on a 16 GiB H200.
                    self.gate.wait_no_prestage(SKIP_WAIT_S)
                self.mutex.acquire()
                held = True
                t_acquired = time.monotonic_ns()
                att.wait_ns = t_acquired - t0
                self._mutex_event(att, "acquire", t_acquired)
            if not prestaged:
                with self._phase(att, "fallback_upload"):
                    # the pre-stage blocks a neighbour (or this worker) gave back while this
                    # one waited sit in the caching pool, and the CUDA runner's pinned fallback
                    # takes a, b, c from the stream-ordered pool without a policy trim
                    self._reclaim_cache(att, 3 * fp.u + fp.margin, "prestage")
                    d_a, d_bc, a, b, c = self._fallback_upload_tries(att, w)
            # A checked partition's device sums run inside its own region. Taken outside
            # (during its upload, after its release) they ran beside another worker's MSMs
            # and stretched them by ~200 ms (H200, 2026-11-29, db942e6; docs/performance-notes.md,
            # "Engine on CUDA").
            device_check = self.checks_on_device and self._verifies(att)
            if device_check:
                with self._phase(att, "check_inputs"):
                    self._inputs_on_device(att, a, b, c)
            with self._phase(att, "h_step"):
                h = self.ctx.backend.h_step(a, b, c)  # stays on the device for msm_h
                del b, c
                self._free(att, d_bc)
            if prestaged:
                self._reclaim_cache(att, self._region_need(w), "msm_scratch")
            results: dict[str, np.ndarray] = {}
            scalars = self._msm_scalars(att, w, h)
            for q in QUERIES:
                self._before_msm(q)
                with self._phase(att, MSM_PHASES[q]):
                    scratch = self._malloc(att, fp.msm[q], "async", "msm_scratch")
                    res = self.ctx.backend.msm(self.ctx.srs.points[q], scalars[q])
                    results[q] = res
                    self._free(att, scratch)
            if device_check:
                with self._phase(att, "check_sums"):
                    att.device_sums = self._device_sums(att, w, h)
            with self._phase(att, "copy_back"):
                results = {q: dev.download(r) for q, r in results.items()}
                # H leaves the device only for a host check: its copy dies with d_a below
                host_check = self._verifies(att) and not device_check
                h = self._h_for_check(h) if host_check else None
                # the last views of d_a and the scalars: a stream-ordered block (fallback path)
                # goes back to the pool only when no array refers to it, and ``a`` otherwise
                # kept d_a's 4 GiB (2^27) reserved through verify, outside the mutex
                del scalars, a
                self._free(att, d_a)
                self._free_scalars(att)
                self._prestage_done(att)
                self.gate.uncommit(self.worker)
            t_release = time.monotonic_ns()
            att.hold_ns = t_release - t_acquired
            held = False
            self.mutex.release()
            self._mutex_event(att, "release", t_release)
            self.ctx.sample(dev)
            with self._phase(att, "verify"):
                att.verified = self._verify(att, w, h, results)
            with self._phase(att, "release"):
                self._release(att)
        except DeviceOOM as exc:
            if exc.site == "prestage" and att.prestage == "ok":
                att.prestage = "fallback"
                att.prestage_reason = f"{exc.pool} allocation of {exc.requested} bytes refused"
            self._fault_oom(att, exc)
            raise PartitionFailed(f"OOM: {exc}", oom=True) from None
        except PartitionFailed:
            raise
        except Exception as exc:
            self._fault_exception(att, exc)
            raise PartitionFailed(f"{type(exc).__name__}: {exc}", oom=False) from None
        finally:
            if held:
                t_release = time.monotonic_ns()
                att.hold_ns = t_release - t_acquired
                self.mutex.release()
                self._mutex_event(att, "release", t_release)
            self._release(att)

    def _fallback_upload_tries(self, att: Attempt, w: Witness) -> tuple:
        """:meth:`_fallback_upload`, tried up to ``policy.fallback_tries`` times: after a
        refusal (an ``oom`` fault with the pool state) this try's blocks go back, the worker's
        own streams are synchronised, the pools trimmed, and it pauses before the next try.
        Each try starts from nothing, so what a refusal leaves cannot add up."""
        tries = int(getattr(self.ctx.policy, "fallback_tries", 1))
        for k in range(tries):
            first = len(att.blocks)
            try:
                return self._fallback_upload(att, w)
            except DeviceOOM as exc:
                if k + 1 == tries:
                    raise
                self._fault_oom(att, exc)
            for blk in att.blocks[first:]:
                self.device.free(blk)
            del att.blocks[first:]
            self.device.synchronize()
            self.device.trim()
            time.sleep(FALLBACK_OOM_PAUSE_S * (1 << k))
        raise AssertionError("unreachable")

    def _fallback_upload(self, att: Attempt, w: Witness) -> tuple:
        """The non-pre-staged path, under the mutex: a/b/c buffers from the stream-ordered
        pool (which can reuse the MSM scratch it keeps reserved), filled chunk by chunk
        through a pinned staging buffer sized to the budget."""
        dev, fp = self.device, self.ctx.footprint
        decision = self.ctx.policy.fallback_chunk(dev, fp, 3 * fp.u)
        chunk = int(decision.chunk or fp.u)
        self._alloc_event(att, "prestage", "async", 3 * fp.u + chunk, decision)
        d_a = self._malloc(att, fp.u, "async", "prestage")
        d_b = self._malloc(att, fp.u, "async", "prestage")
        d_c = self._malloc(att, fp.u, "async", "prestage")
        staging = self._malloc(att, chunk, "async", "prestage")
        dev.pin(chunk)
        att.pinned += chunk
        self.ctx.sample(dev)
        out = [
            dev.upload(src, blk, chunk=chunk) for src, blk in ((w.a, d_a), (w.b, d_b), (w.c, d_c))
        ]
        self._free(att, staging)
        dev.unpin(chunk)
        att.pinned -= chunk
        return d_a, [d_b, d_c], out[0], out[1], out[2]

    # -- hooks a device-specific runner overrides (engine.cuda_pipeline) ----------------------

    def _synthesize_tries(self, att: Attempt) -> Witness:
        """The witness, or PartitionFailed. A synthesis refused device memory (a neighbour's
        fallback or retry may hold nearly the whole card) tries again after a pause, with
        ``tries`` telling the CUDA runner to use smaller chunks: the witness depends only on
        the partition's seed, so the same one comes out."""
        cfg = self.ctx.config
        for tries in range(SYNTH_OOM_TRIES):
            rng = partition_rng(cfg.seed, att.proof, att.partition)
            try:
                return self._synthesize(rng, tries)
            except DeviceOOM as exc:
                self._fault_oom(att, exc)
                if tries + 1 == SYNTH_OOM_TRIES:
                    raise PartitionFailed(f"synthesis: {exc}", False) from None
                time.sleep(SYNTH_OOM_PAUSE_S * (tries + 1))
            except Exception as exc:  # nothing to retry without a witness
                self._fault_exception(att, exc)
                raise PartitionFailed(f"synthesis: {type(exc).__name__}: {exc}", False) from None
        raise AssertionError("unreachable")

    def _synthesize(self, rng: Any, tries: int = 0) -> Witness:
        """The synthetic witness (``tries``: earlier attempts refused device memory)."""
        cfg = self.ctx.config
        return synthesize(cfg.domain_log, self.ctx.sizes, cfg.witness_profile, rng)

    def _scalars(self, w: Witness, h: Any) -> dict[str, Any]:
        """Each MSM's scalars: H's coefficients, and prefixes of the aux witness z."""
        s = self.ctx.sizes
        return {"h": h, "l": w.z[: s.l], "a": w.z[: s.a], "b_g1": w.z[: s.b_g1]}

    def _msm_scalars(self, att: Attempt, w: Witness, h: Any) -> dict[str, Any]:
        """The scalars as the MSMs read them (here: where the witness is)."""
        return self._scalars(w, h)

    def _before_msm(self, query: str) -> None:
        """Called before each MSM is launched (a CUDA runner waits for its scalars here)."""

    def _free_scalars(self, att: Attempt) -> None:
        """Give back what :meth:`_msm_scalars` allocated."""

    def _inputs_on_device(self, att: Attempt, a: Any, b: Any, c: Any) -> None:
        """A checked partition's sums of a, b, c, before the H step overwrites them (only
        with ``checks_on_device``)."""

    def _device_sums(self, att: Attempt, w: Witness, h: Any) -> dict[str, int]:
        """A checked partition's sums after its MSMs, for :meth:`_exact_checks`: each query's
        <scalars, secrets> (only with ``checks_on_device``)."""
        raise NotImplementedError("a runner with checks_on_device provides the device sums")

    def _h_for_check(self, h: Any) -> Any:
        """What the check needs of H before its device copy is freed: here the coefficients
        on the host."""
        return self.device.download(h)

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

    def _verify(
        self, att: Attempt, w: Witness, h: Any, results: dict[str, np.ndarray]
    ) -> bool | None:
        """Exact identities (known SRS secrets): the H step, then every MSM."""
        if not self._verifies(att):
            return None
        return self._exact_checks(att, w, h, self._scalars(w, h), results)

    def _exact_checks(
        self,
        att: Attempt,
        w: Witness,
        h: Any,
        scalars: dict[str, Any],
        results: dict[str, np.ndarray],
    ) -> bool:
        """The checks of ``kernels.cpu.srs`` on the host (the CPU reference's speed)."""
        from kernels.cpu.srs import check_h_identity, check_msm_identity
        from kernels.layout import fr_from_limbs, g1_from_limbs

        srs = self.ctx.srs
        ok = check_h_identity(
            fr_from_limbs(w.a),
            fr_from_limbs(w.b),
            fr_from_limbs(w.c),
            fr_from_limbs(h, montgomery=False),
            srs.tau,
        )
        for q in QUERIES:
            ks = fr_from_limbs(scalars[q], montgomery=False)
            ok = ok and check_msm_identity(srs.secrets(q), ks, g1_from_limbs(results[q])[0])
        return bool(ok)

    # -- memory helpers -----------------------------------------------------------------------

    def _malloc(self, att: Attempt, nbytes: int, pool: str, site: str) -> Block:
        blk = self.device.malloc(nbytes, pool, site)
        att.blocks.append(blk)
        return blk

    def _free(self, att: Attempt, blk: Block | list[Block]) -> None:
        for b in blk if isinstance(blk, list) else [blk]:
            self.device.free(b)

    def _gpu_extra(self, w: Witness, prestaged: bool) -> int:
        """What this partition may still allocate inside the GPU region once it waits for the
        mutex (``Footprint.gpu_extra``; the CUDA runner adds its scalars block): the ledger
        that other workers' pre-stage decisions leave free (``DeviceGate``)."""
        return self.ctx.footprint.gpu_extra(prestaged)

    def _region_need(self, w: Witness) -> int:
        """Device bytes the GPU region still allocates after the H step: the largest MSM
        scratch and the margin (the CUDA runner adds the scalars block)."""
        fp = self.ctx.footprint
        return fp.msm_max + fp.margin

    def _reclaim_cache(self, att: Attempt, need: int, site: str) -> None:
        """Ask the policy whether the pre-stage blocks in a caching pool must go back to the
        driver for the next ``need`` bytes of stream-ordered allocations at ``site`` (after
        the H step: d_bc, for the MSMs; before a fallback: whatever pre-stage blocks were
        given back meanwhile, for its a, b, c; ``reclaim_cache`` in ``engine.allocator``); a
        trim is an ``alloc`` event."""
        if self.prestage_pool != "sync":
            return  # a plain cudaFree already gave them back
        decision = self.ctx.policy.reclaim_cache(self.device, need)
        if decision is not None:
            self._alloc_event(att, site, "sync", need, decision)

    def _release(self, att: Attempt) -> None:
        """Everything the attempt holds goes back. The gate's bookkeeping comes back even
        when a free raises (freeing a cached block first synchronises the worker's streams,
        which raise after a failed kernel): a pre-stage left counted would keep a neighbour's
        fallback waiting for ``SKIP_WAIT_S`` and its recovery for ten minutes."""
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

    def _where(self, att: Attempt) -> dict[str, int]:
        return {
            "proof": att.proof,
            "partition": att.partition,
            "worker": self.worker,
            "device": self.device.index,
        }

    @contextmanager
    def _phase(self, att: Attempt, name: str):
        where = self._where(att)
        lane = where if att.lane is None else {**where, "worker": att.lane}
        self.bus.emit("phase_begin", **lane, phase=name)
        t0 = time.monotonic_ns()
        timer = self._gpu_timer(name)
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

    def _gpu_timer(self, phase: str) -> Any:
        """Device time of a phase (an object with start() and stop() -> ms), or None: the
        modeled device has none; ``engine.cuda_pipeline`` times its kernel phases."""
        return None

    def _mutex_event(self, att: Attempt, action: str, at_ns: int) -> None:
        """Stamped with the instant the lock was taken or given back (not the emit time), so
        the hold intervals in the stream are exact."""
        hold = att.hold_ns if action == "release" else 0
        t = at_ns - self.bus.clock.t0
        where = self._where(att)
        self.bus.emit_at(t, "mutex", **where, wait_ns=att.wait_ns, hold_ns=hold, action=action)

    def _alloc_event(self, att: Attempt, site: str, pool: str, requested: int, d: Decision) -> None:
        fields: dict[str, Any] = {"reason": d.reason, "pools": self.device.sample()}
        if d.free is not None:
            fields["free"] = d.free
        if d.margin is not None:
            fields["margin"] = d.margin
        self.bus.emit(
            "alloc",
            **self._where(att),
            site=site,
            pool=pool,
            requested=int(requested),
            decision=d.status,
            **fields,
        )
        self.ctx.sample(self.device)

    def _fault_exception(self, att: Attempt, exc: Exception) -> None:
        injected = {"injected": True} if getattr(exc, "injected", False) else {}
        self.bus.emit(
            "fault",
            kind="exception",
            message=f"{type(exc).__name__}: {exc}",
            **self._where(att),
            **injected,
        )

    def _fault_oom(self, att: Attempt, exc: DeviceOOM) -> None:
        injected = {"injected": True} if getattr(exc, "injected", False) else {}
        self.bus.emit(
            "fault",
            kind="registration" if exc.site == "host_register" else "oom",
            message=str(exc),
            **self._where(att),
            site=exc.site,
            requested=int(exc.requested),
            pools=exc.pools,
            **injected,
        )
        self.ctx.sample(self.device)

    def _done(
        self, att: Attempt, ok: bool, failure: str | None = None, will_retry: bool = False
    ) -> None:
        self.bus.emit(
            "partition_done",
            **self._where(att),
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

"""What a backend does to one partition: the steps, as documented interfaces.

Why protocols: the order of a partition (phases, the mutex, the pre-stage decision, faults,
the retry) is the same on every backend and lives in one driver,
``provetop.engine.partition.pipeline``;
only *how* some steps are carried out differs. :class:`PartitionOps` names the steps every
backend takes, and each backend implements them once: ``provetop.engine.partition.cpu`` (the cpu
backend on the modeled device) and ``provetop.engine.partition.cuda`` (CuPy and our kernels on a
real
device). Steps only a device with streams has (checks in the region, the H block's hand-over,
the one pass, copies in flight, pinned pools) are protocols of their own that a backend
implements or leaves out: the driver asks once (:class:`OptionalSteps`) and runs the partition
without those it lacks, so no backend answers a step with a no-op. The driver never asks
which implementation it has; an implementation never calls back into the driver, it acts
through the :class:`WorkerScope` the driver lends it.

Who emits what: the driver emits every ``phase_begin``/``phase_end``, ``mutex`` and
``partition_done`` event and the ``fault`` of a failed step; a step emits only ``alloc``
events for its own allocation decisions (with a ``memory`` sample, through the scope), and
``registration`` faults for host buffers it could not register. A step reports a refused
allocation by raising :class:`provetop.engine.devices.base.DeviceOOM` and anything else by raising
any
exception: the driver turns both into the attempt's fault and its retry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from provetop.engine.devices.base import Block, Device, DeviceOOM, PhaseTimer
from provetop.engine.memory.allocator import Decision
from provetop.engine.memory.handover import Handover
from provetop.engine.memory.plan import MemoryPlan
from provetop.engine.partition.context import RunContext
from provetop.engine.spec.workload import Witness

__all__ = [
    "MSM_PHASES",
    "AsyncCopies",
    "Attempt",
    "DeviceChecks",
    "HandoverSteps",
    "OnePass",
    "OptionalSteps",
    "PartitionOps",
    "PhaseTimer",
    "PinnedPools",
    "WorkerScope",
]

# The phase of each query's MSM, in pipeline order (``provetop.engine.spec.srs.QUERIES``).
MSM_PHASES = {"h": "msm_h", "l": "msm_l", "a": "msm_a", "b_g1": "msm_b_g1"}


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
    scalars_block: Block | None = None  # the aux scalars on the device (CUDA ops)
    abc_at_tau: tuple[int, int, int] | None = None  # A, B, C at tau, for the check (CUDA)
    device_sums: dict[str, int] | None = None  # per query <k, s>, for the check (CUDA)
    lane: int | None = None  # telemetry worker of the phases (a look-ahead synthesis lane)


class WorkerScope:
    """One worker's view of the run: the run context, its device and its index, and the
    bookkeeping every step shares. An allocation made here is recorded on the attempt (so the
    driver's release gives it back whatever fails), and an event carries the worker's
    coordinates; the driver and the ops both act through this one object, so an ``alloc``
    event or a ``fault`` looks the same whichever of them made it."""

    def __init__(self, ctx: RunContext, device: Device, worker: int) -> None:
        self.ctx = ctx
        self.device = device
        self.worker = worker
        self.bus = ctx.bus

    def where(self, att: Attempt) -> dict[str, int]:
        return {
            "proof": att.proof,
            "partition": att.partition,
            "worker": self.worker,
            "device": self.device.index,
        }

    def malloc(self, att: Attempt, nbytes: int, pool: str, site: str) -> Block:
        """A block the attempt holds until its release (or an earlier :meth:`free`)."""
        blk = self.device.malloc(nbytes, pool, site)
        att.blocks.append(blk)
        return blk

    def free(self, att: Attempt, blk: Block | list[Block]) -> None:
        """Give back one block or several early (the release frees them again: a no-op)."""
        for b in blk if isinstance(blk, list) else [blk]:
            self.device.free(b)

    def alloc_event(self, att: Attempt, site: str, pool: str, requested: int, d: Decision) -> None:
        """An ``alloc`` event with the pool state, then a ``memory`` sample."""
        fields: dict[str, Any] = {"reason": d.reason, "pools": self.device.sample()}
        if d.free is not None:
            fields["free"] = d.free
        if d.margin is not None:
            fields["margin"] = d.margin
        self.bus.emit(
            "alloc",
            **self.where(att),
            site=site,
            pool=pool,
            requested=int(requested),
            decision=d.status,
            **fields,
        )
        self.ctx.sample(self.device)

    def fault_exception(self, att: Attempt, exc: Exception) -> None:
        injected = {"injected": True} if getattr(exc, "injected", False) else {}
        self.bus.emit(
            "fault",
            kind="exception",
            message=f"{type(exc).__name__}: {exc}",
            **self.where(att),
            **injected,
        )

    def fault_oom(self, att: Attempt, exc: DeviceOOM) -> None:
        injected = {"injected": True} if exc.injected else {}
        self.bus.emit(
            "fault",
            kind="registration" if exc.site == "host_register" else "oom",
            message=str(exc),
            **self.where(att),
            site=exc.site,
            requested=int(exc.requested),
            pools=exc.pools,
            **injected,
        )
        self.ctx.sample(self.device)


class PartitionOps(Protocol):
    """The steps of one partition that every backend takes, in the order the driver
    (``provetop.engine.partition.pipeline.PartitionRunner``) calls them. One instance per worker,
    built
    from its :class:`WorkerScope`; it may keep state across that worker's partitions.

    Steps that only some backends have are optional protocols of their own
    (:class:`DeviceChecks`, :class:`HandoverSteps`, :class:`OnePass`, :class:`AsyncCopies`,
    :class:`PinnedPools`): the driver asks once which of them the ops take
    (:class:`OptionalSteps`) and runs the partition without the others, so a backend
    implements only the steps it has."""

    prestage_pool: str
    """Where the pre-stage buffers (d_a, d_bc) come from: ``raw`` (plain cudaMalloc/cudaFree,
    as in the seed) or ``sync`` (a caching pool; the driver then asks the policy whether the
    cached blocks must go back before the region's stream-ordered allocations)."""

    checks_on_device: bool
    """Whether a checked partition's sums are taken on the device inside its own GPU region
    (phases ``check_inputs`` and ``check_sums``: the ops then implement
    :class:`DeviceChecks`); else the host checks everything after the release, from H's
    coefficients."""

    h_step_async: bool
    """Whether :meth:`h_step` returns once the step is queued on a device, so that a
    neighbour's synthesis can wait on the host until it is
    (``provetop.engine.memory.h_step_fence``)."""

    def synthesize(self, rng: Any, tries: int = 0) -> Witness:
        """The partition's witness from its ``rng`` (phase ``synthesis``). ``tries`` counts
        earlier refusals of device memory: the driver pauses and asks again, and a device
        witness is then made in smaller chunks; the same witness must come out."""
        ...

    def phase_timer(self, phase: str) -> PhaseTimer | None:
        """Device time of ``phase`` (its ``phase_end`` then carries ``gpu_ms``), or None."""
        ...

    def gpu_extra(self, w: Witness, prestaged: bool) -> int:
        """Device bytes this partition may still allocate inside its GPU region once it waits
        for the mutex: its entry in the ledger that neighbours' pre-stage decisions leave
        free (``DeviceGate.commit``)."""
        ...

    def region_need(self, w: Witness) -> int:
        """Device bytes the GPU region still allocates after the H step (the cache reclaim's
        need on the pre-staged path)."""
        ...

    def fallback_upload(self, att: Attempt, w: Witness) -> tuple[Block, list[Block], Any, Any, Any]:
        """The non-pre-staged path, under the mutex (phase ``fallback_upload``, one try):
        a, b, c on the device. Returns (d_a, the blocks of b and c, a, b, c). Emits the
        ``alloc`` event of its decision; a refusal raises ``DeviceOOM`` (the driver frees this
        try's blocks and may try again)."""
        ...

    def h_step(self, a: Any, b: Any, c: Any) -> Any:
        """H's coefficients from a, b, c (phase ``h_step``); H stays on the device for
        ``msm_h`` and the check."""
        ...

    def h_step_streamed(self, att: Attempt, w: Witness, plan: MemoryPlan) -> tuple[Block, Any]:
        """The H step of a streamed plan (``provetop.engine.memory.plan``: one or two device slots;
        phase ``h_step``, under the mutex, no pre-stage): a, b, c go up from the witness one at
        a time. Emits the ``alloc`` event of its slots (site ``h_slots``). Returns (the block
        holding H, H)."""
        ...

    def msm_scalars(self, att: Attempt, w: Witness, h: Any) -> dict[str, Any]:
        """Each MSM's scalars as the MSMs read them: H (unless ``h`` is None: a plan that
        puts the aux scalars up only after H's memory is given back), and prefixes of the aux
        witness z (a device copy may be started here: :meth:`AsyncCopies.wait_for_scalars`
        orders it)."""
        ...

    def msm_scratch(self, att: Attempt, nbytes: int) -> Block:
        """The planned scratch of one MSM (site ``msm_scratch``), given back by the driver
        after the MSM. Injected OOMs at that site must fire here."""
        ...

    def msm(self, query: str, scalars: Any) -> Any:
        """One MSM over the query's SRS points (phases ``msm_h``, ``msm_l``, ``msm_a``,
        ``msm_b_g1``); the result may stay on the device until ``copy_back``."""
        ...

    def verify(self, att: Attempt, w: Witness, h: Any, results: dict[str, Any]) -> bool:
        """The exact identities of a checked partition (phase ``verify``, after the release,
        outside the mutex): the H step, then every MSM. ``h`` is H's host copy, or None when
        the device summed it."""
        ...


@runtime_checkable
class DeviceChecks(Protocol):
    """A checked partition's sums taken on the device inside its own region (ops with
    ``checks_on_device``): taken outside it, they ran beside another worker's MSMs."""

    def check_inputs(self, att: Attempt, a: Any, b: Any, c: Any) -> None:
        """A, B, C at tau from a, b, c (into ``att.abc_at_tau``), before the H step
        overwrites them (phase ``check_inputs``)."""
        ...

    def check_h(self, att: Attempt, h: Any) -> int:
        """<h, tau^i>, taken before H's memory is given back (H's block handed over, or a
        plan with the aux scalars after H; phase ``check_sums``)."""
        ...

    def check_sums(self, att: Attempt, w: Witness, h: Any) -> dict[str, int]:
        """Each query's <scalars, secrets> after the MSMs, for ``verify`` (phase
        ``check_sums``); H's only when ``h`` is not None (else :meth:`check_h` took it)."""
        ...


@runtime_checkable
class HandoverSteps(Protocol):
    """H's block handed to the next partition's a (``provetop.engine.memory.handover``): the taker's
    a goes up into the rows the giver's MSM pass has finished reading, while it waits for the
    mutex."""

    def take_offer(self, att: Attempt, w: Witness, handover: Handover) -> None:
        """On the fallback path, before waiting for the mutex: claim the running pass's H
        block for this partition's a; ``fallback_upload`` adopts it."""
        ...

    def offer_h(self, att: Attempt, block: Block, h: Any, handover: Handover) -> None:
        """Before the one pass of a partition that reads H nowhere after it: offer H's block
        to the next partition's a, rows as the pass is done with them."""
        ...

    def close_offer(self, att: Attempt) -> bool:
        """The region ends (or the attempt fails): True when the offered block now belongs
        to the taker, and is no longer this attempt's to free."""
        ...


@runtime_checkable
class OnePass(Protocol):
    """Streamed MSMs run in one interleaved pass (phase ``msm_interleaved``), their copies
    hidden under H's sums."""

    def msm_together(self) -> list[str]:
        """The queries of the one pass (H first), or none: each MSM in its own phase."""
        ...

    def msm_many(self, queries: list[str], scalars: dict[str, Any]) -> dict[str, Any]:
        """The MSMs of ``queries`` in one pass, results by query."""
        ...


@runtime_checkable
class AsyncCopies(Protocol):
    """Copies that run on a stream beside the kernels (the aux scalars' upload, b and c
    under the H step, a hand-over's rows): the driver orders each MSM after its scalars and
    drains them before it frees anything they write into."""

    def wait_for_scalars(self, query: str) -> None:
        """Before each MSM's phase begins: the MSM of ``query`` may only start once its
        scalars are on the device."""
        ...

    def free_scalars(self, att: Attempt) -> None:
        """Give back what ``msm_scalars`` allocated (at ``copy_back``, inside the region)."""
        ...

    def drain_uploads(self, att: Attempt) -> None:
        """First step of every release (success or failure): wait, in stream order, for any
        copy still writing one of the attempt's blocks, so the driver may free them. Must not
        free anything itself."""
        ...


@runtime_checkable
class PinnedPools(Protocol):
    """Host buffers that live as long as the worker (pinned witness pools)."""

    def detach_pools(self) -> list[Any]:
        """The worker-lifetime host buffers, handed over when the worker stops (the run
        frees them at its close); the ops keep none."""
        ...


@dataclass(frozen=True)
class OptionalSteps:
    """Which optional steps a worker's ops take, asked once when its driver is built; each
    is the ops themselves, typed as that protocol, or None."""

    checks: DeviceChecks | None = None
    handover: HandoverSteps | None = None
    one_pass: OnePass | None = None
    copies: AsyncCopies | None = None
    pools: PinnedPools | None = None

    @classmethod
    def of(cls, ops: PartitionOps) -> OptionalSteps:
        """The optional steps of ``ops``. A flag that promises steps the ops lack
        (``checks_on_device``) is refused here, not mid-partition."""
        if ops.checks_on_device and not isinstance(ops, DeviceChecks):
            raise TypeError(f"{type(ops).__name__}: checks_on_device without DeviceChecks")
        return cls(
            checks=ops if ops.checks_on_device and isinstance(ops, DeviceChecks) else None,
            handover=ops if isinstance(ops, HandoverSteps) else None,
            one_pass=ops if isinstance(ops, OnePass) else None,
            copies=ops if isinstance(ops, AsyncCopies) else None,
            pools=ops if isinstance(ops, PinnedPools) else None,
        )

"""The partition's steps on the cpu backend and the modeled device
(``provetop.engine.partition.ops``).

Why these are the reference: the witness is made with numpy on the host, a, b, c are uploaded
into modeled blocks, the arithmetic is the exact CPU backend, and the checks are the exact
identities of ``provetop.kernels.cpu.srs`` on the host after the release. The CUDA ops fall back on
these wherever a device lacks what they need (a modeled device in the tests).
"""

from __future__ import annotations

from typing import Any

from provetop.engine.devices.base import Block
from provetop.engine.memory.allocator import Decision
from provetop.engine.memory.plan import OPERAND_BYTES, MemoryPlan
from provetop.engine.partition.ops import Attempt, PhaseTimer, WorkerScope
from provetop.engine.spec.srs import QUERIES
from provetop.engine.spec.workload import QuerySizes, Witness, synthesize
from provetop.kernels.cpu.srs import check_h_identity, check_msm_identity
from provetop.kernels.layout import fr_from_limbs, g1_from_limbs


class CpuPartition:
    """:class:`provetop.engine.partition.ops.PartitionOps` for the cpu backend on a modeled device:
    the steps every backend takes, and none of the optional ones (its checks run on the host
    after the release, its H step is over when it returns, its copies are synchronous and
    its MSMs have no copies to hide)."""

    # plain cudaMalloc/cudaFree, as in the seed: the modeled device's pre-stage buffers
    prestage_pool = "raw"
    # the host checks everything after the release, from H's coefficients
    checks_on_device = False
    h_step_async = False  # the host's H step is done when it returns

    def __init__(self, scope: WorkerScope) -> None:
        self.scope = scope
        self.ctx = scope.ctx
        self.device = scope.device

    def synthesize(self, rng: Any, tries: int = 0) -> Witness:
        """The synthetic witness (``tries``: earlier attempts refused device memory)."""
        cfg = self.ctx.config
        return synthesize(cfg.domain_log, self.ctx.sizes, cfg.witness_profile, rng)

    def phase_timer(self, phase: str) -> PhaseTimer | None:
        """The modeled device has no device time."""
        return None

    def gpu_extra(self, w: Witness, prestaged: bool) -> int:
        """``Footprint.gpu_extra``: the largest MSM scratch (and a, b, c on the fallback)."""
        return self.ctx.footprint.gpu_extra(prestaged)

    def region_need(self, w: Witness) -> int:
        """The largest MSM scratch and the margin."""
        fp = self.ctx.footprint
        return fp.msm_max + fp.margin

    def fallback_upload(self, att: Attempt, w: Witness) -> tuple[Block, list[Block], Any, Any, Any]:
        """a/b/c buffers from the stream-ordered pool (which can reuse the MSM scratch it
        keeps reserved), filled chunk by chunk through a pinned staging buffer sized to the
        budget."""
        dev, fp, scope = self.device, self.ctx.footprint, self.scope
        decision = self.ctx.policy.fallback_chunk(dev, fp, 3 * fp.u)
        chunk = int(decision.chunk or fp.u)
        scope.alloc_event(att, "prestage", "async", 3 * fp.u + chunk, decision)
        d_a = scope.malloc(att, fp.u, "async", "prestage")
        d_b = scope.malloc(att, fp.u, "async", "prestage")
        d_c = scope.malloc(att, fp.u, "async", "prestage")
        staging = scope.malloc(att, chunk, "async", "prestage")
        dev.pin(chunk)
        att.pinned += chunk
        self.ctx.sample(dev)
        out = [
            dev.upload(src, blk, chunk=chunk) for src, blk in ((w.a, d_a), (w.b, d_b), (w.c, d_c))
        ]
        scope.free(att, staging)
        dev.unpin(chunk)
        att.pinned -= chunk
        return d_a, [d_b, d_c], out[0], out[1], out[2]

    def h_step(self, a: Any, b: Any, c: Any) -> Any:
        return self.ctx.backend.h_step(a, b, c)

    def h_step_streamed(self, att: Attempt, w: Witness, plan: MemoryPlan) -> tuple[Block, Any]:
        """The modeled device's share of a streamed plan: its slots (and the one-slot plan's
        operand buffer) from the stream-ordered pool, so the model counts what the CUDA plan
        holds; H itself from the host backend, as on the resident path."""
        dev, fp, scope = self.device, self.ctx.footprint, self.scope
        free, _total = dev.mem_info()
        extra = min(fp.u, OPERAND_BYTES) if plan.slots == 1 else 0
        reason = f"the H step through {plan.name}, a, b, c one at a time from the host"
        decision = Decision("fallback", reason, free=free, margin=fp.margin)
        scope.alloc_event(att, "h_slots", "async", plan.slots * fp.u + extra, decision)
        blocks = [scope.malloc(att, fp.u, "async", "h_slots") for _ in range(plan.slots)]
        if extra:
            blocks.append(scope.malloc(att, extra, "async", "h_slots"))
        self.ctx.sample(dev)
        h = self.ctx.backend.h_step(w.a, w.b, w.c)
        scope.free(att, blocks[1:])
        return blocks[0], h

    def msm_scalars(self, att: Attempt, w: Witness, h: Any) -> dict[str, Any]:
        """The scalars where the witness is."""
        out = host_scalars(self.ctx.sizes, w, h)
        if h is None:
            del out["h"]
        return out

    def msm_scratch(self, att: Attempt, nbytes: int) -> Block:
        """The planned scratch, allocated from the stream-ordered pool (the model's MSM uses
        none of its own)."""
        return self.scope.malloc(att, nbytes, "async", "msm_scratch")

    def msm(self, query: str, scalars: Any) -> Any:
        return self.ctx.backend.msm(self.ctx.srs.points[query], scalars)

    def verify(self, att: Attempt, w: Witness, h: Any, results: dict[str, Any]) -> bool:
        """The checks of ``provetop.kernels.cpu.srs`` on the host (the CPU reference's speed)."""

        srs = self.ctx.srs
        scalars = host_scalars(self.ctx.sizes, w, h)
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


def host_scalars(sizes: QuerySizes, w: Witness, h: Any) -> dict[str, Any]:
    """Each MSM's scalars: H's coefficients, and prefixes of the aux witness z."""
    return {"h": h, "l": w.z[: sizes.l], "a": w.z[: sizes.a], "b_g1": w.z[: sizes.b_g1]}

"""How a partition gets its device memory: the partition's footprint, and the two policies.

``naive`` reproduces the seed (cuzk "Phase 9"): pre-stage buffers come from plain cudaMalloc
outside the mutex with no check and no trim, while MSM scratch comes from the stream-ordered
pool, which keeps it reserved afterwards. From the second partition on, cudaMalloc can be
refused although the two pools together hold enough free memory: the phantom OOM.

``aware`` is the fix: synchronise, trim the pools, ask the driver what is free, pre-stage only
when the buffers fit with a margin, and otherwise take the fallback path (under the mutex,
buffers from the stream-ordered pool, a/b/c uploaded in chunks sized to what is left).

Footprint model (bytes, u = n * 32 = one of a, b, c):
- pre-stage: d_a (u) and d_bc (2u) from ``raw`` cudaMalloc, host a/b/c pinned (3u);
- H step runs in place; d_bc is freed after it, H's coefficients stay in d_a;
- each MSM: scratch from the ``async`` pool = a batch of points and scalars
  (min(m, MSM_BATCH) * (96 + 32)), the sorted digits (batch * windows * 4) and the XYZZ
  buckets (windows * 2^(w-1) * 192), with the reference MSM's window size w;
- fallback: d_a, d_b, d_c from the ``async`` pool plus one upload chunk (device + pinned host).
"""

from __future__ import annotations

from dataclasses import dataclass

from provetop.engine.devices.base import Device
from provetop.engine.spec.workload import FR_BYTES, G1_AFFINE_BYTES, QuerySizes
from provetop.kernels.cpu.msm import default_window_bits, num_windows

MSM_BATCH = 1 << 22  # points uploaded per MSM batch
XYZZ_BYTES = 4 * 48
MIN_CHUNK = 4096  # smallest upload chunk the fallback uses
MARGIN_DIVISOR = 24  # cuzk kept 512 MiB on a 12 GiB pre-stage


def msm_scratch_bytes(points: int) -> int:
    """Device scratch of one G1 MSM of ``points`` points (see the module docstring)."""

    w = default_window_bits(points)
    windows = num_windows(w)
    batch = min(points, MSM_BATCH)
    return (
        batch * (G1_AFFINE_BYTES + FR_BYTES)
        + batch * windows * 4
        + windows * (1 << (w - 1)) * XYZZ_BYTES
    )


@dataclass(frozen=True)
class Footprint:
    """The device bytes one partition asks for, by purpose."""

    u: int  # one of a, b, c
    msm: dict[str, int]  # query -> scratch bytes
    margin: int
    # the streamed queries' MSMs run in one pass (provetop.engine.memory.stream_plan), 0 where they
    # do not
    together: int = 0

    @property
    def prestage(self) -> int:
        return 3 * self.u

    @property
    def msm_max(self) -> int:
        return max(max(self.msm.values()), self.together)

    def gpu_extra(self, prestaged: bool) -> int:
        """Bytes a partition may still take inside the GPU region beyond what it holds when
        it starts waiting for the mutex: MSM scratch after a pre-stage; on the fallback path
        a/b/c plus an upload chunk, then d_a plus MSM scratch. Other workers' pre-stage
        decisions leave this much free (see ``DeviceGate``)."""
        if prestaged:
            return self.msm_max
        return max(4 * self.u, self.u + self.msm_max)


def footprint(domain_log: int, sizes: QuerySizes, margin: int | None = None) -> Footprint:
    u = (1 << domain_log) * FR_BYTES
    msm = {q: msm_scratch_bytes(m) for q, m in sizes.as_dict().items()}
    if margin is None:
        margin = max(512, (3 * u) // MARGIN_DIVISOR)
    return Footprint(u=u, msm=msm, margin=margin)


def phantom_capacity(fp: Footprint, device: Device) -> int:
    """The modeled capacity of the ``phantom`` preset: just enough for one partition on either
    path (pre-stage with its margin, or d_a plus the largest MSM scratch, or the fallback's
    working set), so that naive's second pre-stage is refused while the stream-ordered pool
    holds the first partition's MSM scratch, and aware (which trims first) always fits."""
    r = device.round
    u = r(fp.u)
    prestage = u + r(2 * fp.u) + fp.margin
    msm = u + r(fp.msm_max)
    fallback = 3 * u + r(MIN_CHUNK)
    capacity = max(prestage, msm, fallback) + 512
    if capacity - r(fp.msm_max) >= u + r(2 * fp.u):
        raise ValueError("this domain's MSM scratch is too small to show the phantom OOM")
    return capacity


@dataclass
class Decision:
    """The outcome of a pre-stage or fallback sizing decision (an ``alloc`` event)."""

    status: str  # ok | skip | fallback
    reason: str | None = None
    free: int | None = None
    margin: int | None = None
    forced: bool = False
    released: int = 0  # bytes a trim gave back before deciding
    chunk: int | None = None


class NaivePolicy:
    """The seed's behaviour: never look, never trim."""

    name = "naive"
    fallback_tries = 1  # a refused fallback allocation fails the attempt (the seed's way)

    def prestage(self, device: Device, fp: Footprint, forced: bool, reserved: int = 0) -> Decision:
        if forced:
            return Decision("fallback", "forced by the operator", forced=True)
        return Decision("ok", "pre-stage without checking free memory")

    def fallback_chunk(self, device: Device, fp: Footprint, working: int) -> Decision:
        return Decision("fallback", "whole arrays, no budget", chunk=fp.u)

    def reclaim_cache(self, device: Device, need: int) -> Decision | None:
        """Never: what the caching pool keeps stays there (the phantom)."""
        return None


class AwarePolicy:
    """Synchronise, trim, query, decide with a margin (cuzk's fix)."""

    name = "aware"
    # A refused fallback allocation pauses and tries again inside the attempt (see
    # ``PartitionRunner._fallback_upload_tries``): the fallback's a, b, c take 12 of the 14.2 GB
    # a 16 GiB card leaves, so a neighbour's short-lived blocks can refuse it, and the retry
    # after recovery met the same neighbour (naive16 on the H200).
    fallback_tries = 4

    def _free_after_trim(self, device: Device) -> tuple[int, int]:
        device.synchronize()
        released = device.trim()
        free, _total = device.mem_info()
        return free, released

    def prestage(self, device: Device, fp: Footprint, forced: bool, reserved: int = 0) -> Decision:
        """``reserved``: what workers already committed to the GPU region may still take
        (their MSM scratch, a fallback's buffers); a pre-stage must leave it free."""
        if forced:
            return Decision("fallback", "forced by the operator", forced=True, margin=fp.margin)
        free, released = self._free_after_trim(device)
        need = fp.prestage
        if free >= need + fp.margin + reserved:
            return Decision("ok", None, free=free, margin=fp.margin, released=released)
        others = f" + {reserved} reserved for other workers' GPU region" if reserved else ""
        reason = f"skip_vram: free {free} < need {need} + margin {fp.margin}{others}"
        return Decision("skip", reason, free=free, margin=fp.margin, released=released)

    def reclaim_cache(self, device: Device, need: int) -> Decision | None:
        """After a pre-stage block went back to the caching pool inside the GPU region (or
        before a fallback's a, b, c): when the region's next stream-ordered allocations
        (``need`` bytes) no longer fit in what the driver reports free, empty that cache.
        Without it, on a 16 GiB H200, the first pre-staged partition's scalars block (4.2 GB)
        was refused while CuPy's cache held the partition's own freed d_bc (8.6 GB): the
        phantom OOM, from the other allocator's side. Only a short card pays for the trim
        (cudaFree waits for the device)."""
        free, _total = device.mem_info()
        if free >= need:
            return None
        released = device.trim(("sync",))
        if not released:  # nothing cached (a retry after its recovery's trim): no event
            return None
        after, _total = device.mem_info()
        reason = f"caching pool emptied: free {free} < {need} for the next stream-ordered blocks"
        return Decision("trim", reason, free=after, released=released)

    def fallback_chunk(self, device: Device, fp: Footprint, working: int) -> Decision:
        free, released = self._free_after_trim(device)
        budget = free - fp.margin - working
        # the device-side staging chunk: never more than one array, never below MIN_CHUNK
        chunk = min(fp.u, max(min(MIN_CHUNK, fp.u), budget))
        chunk -= chunk % FR_BYTES
        reason = f"chunks of {chunk} bytes from a budget of {max(0, budget)}"
        return Decision(
            "fallback", reason, free=free, margin=fp.margin, released=released, chunk=chunk
        )


def make_policy(name: str) -> NaivePolicy | AwarePolicy:
    if name == "naive":
        return NaivePolicy()
    if name == "aware":
        return AwarePolicy()
    raise ValueError(f"unknown allocator {name!r}")


class LazyAwarePolicy(AwarePolicy):
    """Aware, but a pre-stage that fits in what the driver reports free needs no trim: the
    policy of a CUDA run. Trimming is not free on a real device: the calling worker waits for
    its own streams, a ``free_all_blocks`` costs cudaFree calls (each waits for the whole
    device). The cuzk two-worker regression (32.1 -> 41.0 s/proof) came from trims that made
    one worker wait for the other's kernels; here a pre-stage that fits is decided from
    ``cudaMemGetInfo`` alone."""

    def prestage(self, device: Device, fp: Footprint, forced: bool, reserved: int = 0) -> Decision:
        if not forced:
            free, _total = device.mem_info()
            if free >= fp.prestage + fp.margin + reserved:
                return Decision("ok", "fits without a trim", free=free, margin=fp.margin)
        return super().prestage(device, fp, forced, reserved)

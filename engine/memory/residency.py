"""Where the SRS lives on a real device: decided by the memory budget, visible in telemetry.

Why a decision and not a rule: a 32 GiB sector's G1 queries are ~38 GiB of points. On an H200
they fit next to two workers' partitions; on a 16 GiB card (or an H200 capped to 16 GiB with
``--device-memory``) they cannot, and the MSM must stream them from pinned host memory
(``provetop.kernels.cuda.msm.msm_host_points``, two device chunk buffers, copies overlapped with the
sums). The choice is per query, largest first, against what the workers still need; each one
is an ``alloc`` event with site ``srs`` (decision ``ok`` = on the device, ``fallback`` = pinned
host, with the reason and the free bytes it was based on).

The budget (bytes that must stay free for the partitions, ``partition_need``): every worker
may hold a pre-stage (3u) at once, the one in the GPU region also its MSM scratch and, when
points are streamed, two chunk buffers; plus the allocator's margin.
"""

from __future__ import annotations

from dataclasses import dataclass

from provetop.engine.memory.allocator import Footprint

G1_AFFINE_BYTES = 96


@dataclass(frozen=True)
class Placement:
    """One query's residency decision."""

    query: str
    where: str  # "device" | "host"
    nbytes: int
    free: int
    need: int
    reason: str


def partition_need(fp: Footprint, workers: int, stream_chunk_bytes: int) -> int:
    """Device bytes the partitions may need at once (see the module docstring)."""
    return workers * fp.prestage + fp.msm_max + 2 * stream_chunk_bytes + fp.margin


def plan_residency(
    sizes: dict[str, int], free: int, fp: Footprint, workers: int, stream_chunk_bytes: int
) -> list[Placement]:
    """Per query (largest first): on the device while ``free - need`` still holds it, else
    pinned host. Pure, so the rule is tested without a GPU."""
    need = partition_need(fp, workers, stream_chunk_bytes)
    left = free
    out = []
    for q, m in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        nbytes = int(m) * G1_AFFINE_BYTES
        if left - need >= nbytes:
            reason = f"on the device: {left} free - {need} for the partitions >= {nbytes}"
            out.append(Placement(q, "device", nbytes, left, need, reason))
            left -= nbytes
        else:
            reason = (
                f"pinned host, streamed to the MSM: {left} free - {need} for the partitions "
                f"< {nbytes}"
            )
            out.append(Placement(q, "host", nbytes, left, need, reason))
    return out

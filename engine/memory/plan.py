"""Which way a partition goes through a device, chosen from the device's memory at start-up.

Why a plan and not only a policy: the aware policy decides, partition by partition, whether
the pre-stage fits beside what the neighbours hold; its fallback still needs a, b and c on
the device at once (3 x 4 GiB at 2^27). A card of 8 or 12 GiB never has that, so every
partition there used to be lost to OOMs. The H step is linear up to one pointwise product,
so it can go through the device one or two polynomials at a time
(``provetop.kernels.cuda.h_streamed``); the plan says how many, and whether the aux scalars (z, 4.2
GB
at 2^27) go up beside H (during ``msm_h``) or after H's memory is given back:

- ``resident`` (3 slots): today's path, a pre-stage outside the mutex or the fallback;
- ``two slots``: no pre-stage; under the mutex a and b in two device slots, c through the
  second one; 2 x 4 GiB at 2^27;
- ``one slot``: no pre-stage; one device slot and a page-locked host scratch of the same
  size (A' and A'B' wait on the host); 4 GiB at 2^27.

A device too small for the one-slot plan is refused at start-up with one line naming the
device memory it would need (:class:`PlanError`). Only the aware allocator plans: naive is
the seed's behaviour, kept as the demonstration of its OOMs.

Bytes a region needs (``u`` = one of a, b, c; ``z`` = the aux scalars on the device, 0 where
the backend keeps them on the host; ``msm`` = each query's MSM scratch, with its two chunk
buffers when its points are streamed; ``margin`` = the allocator's margin):

- H step: resident ``3u`` (pre-staged or uploaded whole), two slots ``2u``, one slot
  ``u + OPERAND``;
- MSMs with z beside H: ``u + z + max(msm)`` (H stays until the region ends: its check sum
  is taken last; ``max(msm)`` counts the streamed queries run in one pass, ``together``,
  which only a plan with z beside H uses); with z after H: ``max(u + msm[h], z + max(msm of
  l, a, b_g1))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provetop.base.units import fmt_bytes
from provetop.engine.memory.allocator import Footprint
from provetop.engine.spec.workload import FR_BYTES
from provetop.kernels.cuda.h_streamed import OPERAND_CHUNK

# The one-slot plan's device buffer for the host operand of its product and difference:
# the streamed H step's OPERAND_CHUNK rows of one Fr each (128 MiB)
OPERAND_BYTES = OPERAND_CHUNK * FR_BYTES
SLOT_NAMES = {3: "resident", 2: "two slots", 1: "one slot"}


class PlanError(ValueError):
    """No plan fits the device: the message is the one line the CLI prints."""


@dataclass(frozen=True)
class MemoryPlan:
    """How one device's partitions use it (see the module docstring)."""

    slots: int  # 3 = resident (pre-stage or fallback), 2 or 1 = streamed H step
    z_with_h: bool  # the aux scalars go up beside H (during msm_h), else after H is freed
    need: int  # device bytes free the plan needs (margin included, released tables counted)
    free: int  # device bytes free when the plan was chosen
    reason: str
    release_tables: bool = False  # drop the NTT twiddle table after each H step

    @property
    def name(self) -> str:
        return SLOT_NAMES[self.slots]

    @property
    def streamed(self) -> bool:
        """Whether the H step goes through fewer than three device slots (no pre-stage)."""
        return self.slots < 3


RESIDENT = MemoryPlan(3, True, 0, 0, "resident: a, b, c on the device (pre-stage or fallback)")


def _h_step_bytes(slots: int, fp: Footprint) -> int:
    if slots == 3:
        return 3 * fp.u
    if slots == 2:
        return 2 * fp.u
    return fp.u + min(fp.u, OPERAND_BYTES)


def _msm_bytes(fp: Footprint, z: int) -> tuple[int, int]:
    """(bytes with z beside H, bytes with z after H)."""
    aux = max((v for q, v in fp.msm.items() if q != "h"), default=0)
    beside = fp.u + z + fp.msm_max
    after = max(fp.u + fp.msm.get("h", 0), z + aux)
    return beside, after


def _options(fp: Footprint, z: int, tables: int) -> list[tuple[int, bool, bool, int]]:
    """Every (slots, z beside H, release tables, free bytes needed), fastest first. Only a
    streamed plan may drop the twiddle table between its H step and its MSMs (``tables``
    bytes: the H step needs it, the MSMs do not)."""
    beside, after = _msm_bytes(fp, z)
    out = []
    for slots in (3, 2, 1):
        h = _h_step_bytes(slots, fp) + fp.margin
        for z_with_h, msm in ((True, beside + fp.margin), (False, after + fp.margin)):
            out.append((slots, z_with_h, False, max(h, msm)))
            if slots < 3 and tables:
                out.append((slots, z_with_h, True, max(h, msm - tables)))
    return out


def choose_plan(
    free: int, fp: Footprint, z: int = 0, tables: int = 0, *, device: str = "device"
) -> MemoryPlan:
    """The fastest plan whose region fits in ``free`` bytes: resident, then two slots, then
    one slot; z beside H where that fits; the twiddle table kept where that fits.
    :class:`PlanError` when none does."""
    for slots, z_with_h, release, need in _options(fp, z, tables):
        if need <= free:
            where = "beside H" if z_with_h else "after H"
            extra = "; the twiddle table dropped after the H step" if release else ""
            reason = (
                f"{SLOT_NAMES[slots]}: needs {fmt_bytes(need)} of {fmt_bytes(free)} free "
                f"(aux scalars {where}{extra})"
            )
            return MemoryPlan(slots, z_with_h, need, free, reason, release)
    raise PlanError(
        f"{device}: {fmt_bytes(free)} free, but the smallest plan (the H step one polynomial at "
        f"a time) needs {fmt_bytes(smallest_need(fp, z, tables))} for a partition of this size"
    )


def reclaimable(free: int, pools: dict[str, Any]) -> int:
    """``free`` plus what the two pools keep cached (a trim gives it back): the memory a
    plan may count on, from a device's ``sample()``."""
    cached = int(pools.get("sync_cached", 0))
    cached += max(0, int(pools.get("async_reserved", 0)) - int(pools.get("async_used", 0)))
    return free + cached


def plan_need(slots: int, fp: Footprint, z: int = 0, tables: int = 0) -> tuple[int, bool]:
    """(free bytes, z beside H) of the cheapest variant of the plan with ``slots``."""
    need, z_with_h = min((n, zw) for sl, zw, _rel, n in _options(fp, z, tables) if sl == slots)
    return need, z_with_h


def smallest_need(fp: Footprint, z: int = 0, tables: int = 0) -> int:
    """Free device bytes the cheapest plan needs: one slot's (every other plan holds at least
    as much at once)."""
    return plan_need(1, fp, z, tables)[0]


def minimum_capacity(capacity: int, free: int, fp: Footprint, z: int = 0, tables: int = 0) -> int:
    """Device memory (what ``--device-memory`` asks for) at which the cheapest plan fits,
    given that a device of ``capacity`` bytes has ``free`` bytes free for the partitions."""
    return capacity - free + smallest_need(fp, z, tables)

"""The heal's rule: when trimming stream-ordered pools makes an allocation fit, and whose.

One rule, read in three places: the injection library applies its first half to its own
process before a plain or a stream-ordered allocation (``kernels/cuda/src/inject/``, with
``PROVETOP_TRACE_HEAL``; before a stream-ordered one, the pool it comes from is left alone);
``provetop trace --heal`` applies the second half across processes when a library asks
(``KIND_HEAL_REQUEST``); and every out-of-memory fault of a trace is labelled with it, healing
or not, so the operator reads which case the refusal was:

- ``fits``: the driver said there was room (the refusal had another cause: fragmentation, a
  limit of the allocator, a request the driver rounds up beyond what was free);
- ``phantom``: it would have fitted had the pools given back their reserved-but-unused bytes:
  the phantom OOM, which ``--heal`` removes;
- ``short``: it would not have fitted even then: the card is full of memory in use.

Why a granule: a plain cuMemAlloc takes whole 2 MiB pages (the driver's large-page size for
device memory on the GPUs provetop supports), so an ask of a few bytes over a page boundary
needs the next page; cuMemGetInfo's free bytes are counted in the same pages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

GRANULE = 2 << 20  # see the module docstring

Case = Literal["fits", "phantom", "short"]
K = TypeVar("K")


def need_bytes(requested: int) -> int:
    """The device memory a plain allocation of ``requested`` bytes takes: whole granules."""
    return -(-max(0, int(requested)) // GRANULE) * GRANULE


@dataclass(frozen=True)
class Verdict:
    """What the rule says of one plain allocation, from the device's memory at that instant."""

    case: Case
    need: int  # bytes the allocation takes (need_bytes)
    free: int  # the driver's free bytes (cuMemGetInfo)
    unused: int  # reserved-but-unused bytes of the pools considered

    @property
    def heal(self) -> bool:
        """True when trimming those pools would make the allocation fit."""
        return self.case == "phantom"

    def words(self) -> str:
        """The case in one clause, for a fault's message."""
        if self.case == "fits":
            return "the driver reported room for it (not a phantom)"
        if self.case == "phantom":
            return (
                "trimming the stream-ordered pools would have made it fit "
                "(the phantom; --heal does that)"
            )
        return "it would not have fitted even with every stream-ordered pool trimmed"


def verdict(requested: int, free: int, unused: int) -> Verdict:
    """The rule for one process's own pools (``unused``: their reserved-but-unused bytes)."""
    need = need_bytes(requested)
    if need <= free:
        case: Case = "fits"
    elif free + unused >= need:
        case = "phantom"
    else:
        case = "short"
    return Verdict(case, need, free, max(0, unused))


def peers_to_trim(requested: int, free: int, peers: Mapping[K, int]) -> list[K]:
    """Which other processes' pools to trim so that an allocation of ``requested`` bytes fits
    beside ``free`` (the asking process has trimmed its own already): the peers with the most
    reserved-but-unused bytes first, as few as make it fit; none when even all of them would
    not (trimming then only costs them their reserve, for nothing)."""
    need = need_bytes(requested)
    if need <= free:
        return []
    chosen: list[K] = []
    total = free
    for key, unused in sorted(peers.items(), key=lambda kv: kv[1], reverse=True):
        if unused <= 0:
            break
        chosen.append(key)
        total += unused
        if total >= need:
            return chosen
    return []

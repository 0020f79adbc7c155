"""H's block passed from one partition's MSM pass to the next partition's a (``Handover``).

Why: on a card where the pre-stage has no room (16 GiB at 2^27), the next partition's a
(4 GiB) went up under the mutex, ~90 ms of the region with the GPU idle. The one MSM pass
reads H's scalars chunk by chunk, and after a chunk's accumulation those rows of H's block
are never read again. So the worker waiting for the mutex copies its a into exactly those
rows while the pass still runs, each range after the event that marks its last read, and
takes the whole block over when the pass ends: its region then starts with a already (or
nearly) on the device, and the link carries a in the pass's idle moments.

The protocol, per device (one GPU region at a time, so at most one offer is open):
- the giver ``open``s an offer for its H block before the pass, and reports each row range
  the pass is done with (``read``: rows and a CUDA event recorded after their last reader);
- a waiting worker ``take``s the open offer with a copier into its block (it queues the
  copy of rows lo..hi of its own a after an event, on its own upload stream): ranges read
  before it came are copied at once, later ones as the giver reports them; a claim made
  while no offer is open (the giver is still in its H step) meets the next offer;
- the giver ``close``s the offer as its region ends, successful or not: with a taker, the
  block is the taker's from then on (with the ranges copied so far and the giver's final
  event, after which the taker copies the rest itself); without one the giver frees it;
- a taker that fails before its region, or whose claim met no offer, ``withdraw``s: it
  stops receiving ranges, and the giver's free waits for the copies already queued.

Only for two workers a device: the block a claim receives is held from the giver's release
to the taker's region, which must be the next region (a third worker's region could find
4 GiB fewer than its plan). Backend-neutral: events and copies are opaque here (the CUDA ops
supply them), and a block is the device's :class:`~provetop.engine.devices.base.Block`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from provetop.engine.devices.base import Block

# A backend's marker that work is done (a CUDA event): only passed on, never looked into here
Event = object
Copier = Callable[[int, int, Event], None]  # (lo, hi, event): queue rows lo..hi after event


@dataclass
class Taker:
    """A waiting worker's claim on an offer: what was copied, and (after ``close``) the block
    with the giver's final event."""

    bind: Callable[[Block], Copier]  # the copier into a given block
    rows: int
    owner: int = -1  # the claiming worker
    copy: Copier | None = None  # bound to the offer's block once the claim meets an offer
    covered: list[tuple[int, int]] = field(default_factory=list)
    block: Block | None = None  # set when the giver's region ends with this claim standing
    final: Event | None = None  # the giver's last event on the block
    withdrawn: bool = False
    stalled: bool = False  # a copy could not be queued: the rest waits for the adoption
    settled: bool = False  # adopted in the taker's region, or withdrawn
    drained: Event | None = None  # on withdrawal: an event after the taker's last queued copy

    def uncovered(self) -> list[tuple[int, int]]:
        """Row ranges of [0, rows) no copy has been queued for, in order."""
        gaps, at = [], 0
        for lo, hi in sorted(self.covered):
            if lo > at:
                gaps.append((at, lo))
            at = max(at, hi)
        if at < self.rows:
            gaps.append((at, self.rows))
        return gaps


@dataclass
class Offer:
    """One giver's block and the row ranges its pass is done with."""

    block: Block
    rows: int
    read: list[tuple[int, int, Event]] = field(default_factory=list)
    taker: Taker | None = None
    closed: bool = False


class Handover:
    """The per-device meeting point of a giver's H block and the next worker's a."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._offer: Offer | None = None
        self._pending: Taker | None = None  # a claim made while no offer was open
        self._handed: Taker | None = None  # a handed-over block not yet in its taker's region

    def open(self, block: Block, rows: int) -> Offer:
        """Offer ``block`` (``rows`` rows of H) for the pass about to run; a claim made while
        no offer was open (the taker came during the H step) meets it here. An offer left
        open by an earlier region (its close never came) loses its taker first."""
        with self._lock:
            if self._offer is not None and self._offer.taker is not None:
                self._offer.taker.withdrawn = True
            offer = Offer(block, rows)
            self._offer = offer
            pending, self._pending = self._pending, None
            if pending is not None and not pending.withdrawn and pending.rows <= rows:
                pending.copy = pending.bind(block)
                offer.taker = pending
            return offer

    def read(self, offer: Offer, lo: int, hi: int, event: Event) -> None:
        """The giver's pass is done with rows lo..hi once ``event`` completes."""
        with self._lock:
            if offer.closed:
                return
            offer.read.append((lo, hi, event))
            taker = offer.taker
            if taker is None or taker.copy is None or taker.withdrawn:
                return
            if not taker.stalled and lo < taker.rows:
                _forward(taker, lo, min(hi, taker.rows), event)

    def take(self, bind: Callable[[Block], Copier], rows: int, owner: int = -1) -> Taker | None:
        """Claim the open offer, or the next one to open if none is: ``bind(block)`` gives
        the copier into the offer's block, and the ranges already read are copied at once.
        None when the open offer is taken already, its block has fewer than ``rows`` rows,
        or another claim is waiting."""
        with self._lock:
            offer = self._offer
            taker = Taker(bind, rows, owner)
            if offer is None or offer.closed:
                if self._pending is not None and not self._pending.withdrawn:
                    return None
                self._pending = taker
                return taker
            if offer.taker is not None or offer.rows < rows:
                return None
            taker.copy = bind(offer.block)
            for lo, hi, event in offer.read:
                if lo < rows and not taker.stalled:
                    _forward(taker, lo, min(hi, rows), event)
            offer.taker = taker
            return taker

    def close(self, offer: Offer, final: Event) -> tuple[bool, Event | None]:
        """The giver's region ends: (True, None) when the block is now the taker's (the giver
        must not free it); (False, event) when the giver keeps it, with the event its free
        must wait for (a withdrawn taker's last copy into the block) or None."""
        with self._lock:
            offer.closed = True
            if self._offer is offer:
                self._offer = None
            taker = offer.taker
            if taker is None:
                return False, None
            if taker.withdrawn:
                return False, taker.drained
            taker.block, taker.final = offer.block, final
            self._handed = taker
            return True, None

    def withdraw(self, taker: Taker, drain: Callable[[], Event]) -> Block | None:
        """A taker gives up its claim (its attempt ended before its region): no more ranges
        come to it. ``drain`` records, on the taker's upload stream, an event after its last
        copy into the block (called under the lock, so no copy can be queued after it); the
        giver's free waits for that event. Returns the block if the giver had already handed
        it over (the taker then frees it itself, in the order of its own streams), else None."""
        with self._lock:
            taker.withdrawn = True
            if self._pending is taker:
                self._pending = None
            block, taker.block = taker.block, None
            if block is None:
                taker.drained = drain()
            self._settle(taker)
            return block

    def adopted(self, taker: Taker) -> None:
        """The taker's region has the block: the next region may be anyone's."""
        with self._lock:
            self._settle(taker)

    def _settle(self, taker: Taker) -> None:
        taker.settled = True
        if self._handed is taker:
            self._handed = None
        self._lock.notify_all()

    def owed_elsewhere(self, worker: int) -> Taker | None:
        """For a worker that has just taken the mutex: the claim of another worker whose
        handed-over block still waits for that worker's region, or None. The mutex is not
        fair: a worker whose next witness is ready could take it back at once and run its
        region 4 GiB short, so it releases the mutex and waits (:meth:`wait_settled`)."""
        with self._lock:
            taker = self._handed
            if taker is None or taker.owner == worker:
                return None
            return taker

    def wait_settled(self, taker: Taker, timeout: float) -> bool:
        """Wait (without the mutex) up to ``timeout`` s for ``taker``'s block to be adopted
        or withdrawn; True if it was."""
        with self._lock:
            return self._lock.wait_for(lambda: taker.settled, timeout)


def _forward(taker: Taker, lo: int, hi: int, event: Event) -> None:
    """Queue one range's copy for the taker. A copy that cannot be queued must not fail the
    giver's pass (it runs on the giver's thread): the taker stops receiving ranges and copies
    what is not covered itself once it adopts the block (``Taker.uncovered``)."""
    copy = taker.copy
    if copy is None:  # a claim not yet bound to a block
        return
    try:
        copy(lo, hi, event)
    except Exception:
        taker.stalled = True
        return
    taker.covered.append((lo, hi))

"""Per-device bookkeeping that lets a partition's retry recover (``DeviceGate``).

Why its own module: the gate is shared by every worker of one device and outlives any one
partition; the driver (``provetop.engine.partition.pipeline``) counts pre-stages in and out and
commits its
ledger entries here, and a worker recovering from a failure waits here for its neighbours'
pre-staged buffers to go.
"""

from __future__ import annotations

import threading

from provetop.engine.memory.h_step_fence import HStepFence
from provetop.engine.memory.handover import Handover


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
        # H's block passed from the running pass to the next partition's a
        self.handover = Handover()
        # a neighbour's synthesis held behind the running region's H step
        self.h_step = HStepFence()

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

"""The neighbour's synthesis held behind the running region's H step (``HStepFence``).

Why: with two workers a device, a worker starts its next synthesis the moment its own GPU
region ends, which is when the other worker's region begins: its fallback upload (host calls
under the mutex), then its H step. The synthesis's Python launch loop takes the GIL from the
holder's host steps (the fallback upload took 10-20 ms beside it against 3-7 alone on a 16 GiB
H200), and its kernels and copies share the device with the H step (313 ms against 301 alone).
A synthesis that starts then waits on the host until the holder has queued its H step, and no
longer: waiting on the GPU for the H step to finish as well moved the synthesis beside the MSM
pass, which measured worse (the pass +25-35 ms; bench/notes/pipeline.md, 64f4703).

The same holds for a checked partition's host check, which runs in Python right after its
region (11-18 ms of the GIL): it waits too, so the next holder's fallback upload does not.

The difficulty is the order: the synthesis starts before the next holder has even taken the
mutex, so a worker announces that it wants the mutex (``want``), and a synthesis that starts
while a region is wanted or running but its H step not yet queued waits on the host, briefly,
for the holder to say that its H step is queued (``queued``). Backend-neutral: only ops whose H
step returns once queued on a device fence at all.
"""

from __future__ import annotations

import threading

# The longest a synthesis waits on the host for the holder's H step to be queued: the holder
# queues it within its fallback upload (~10 ms) or, on a checked partition, after the input
# checks (~0.4 s at 2^27 on an H200); past this the synthesis goes ahead unfenced.
QUEUE_WAIT_S = 1.5


class HStepFence:
    """Per device: which worker wants or holds the GPU region, and whether the holder's H step
    is queued. Every method is cheap and never raises."""

    def __init__(self, wait_s: float = QUEUE_WAIT_S) -> None:
        self.wait_s = wait_s
        self._cv = threading.Condition()
        self._wanting: set[int] = set()
        self._holder: int | None = None
        self._queued = False  # the holder's H step is queued (or it has none to wait for)

    def want(self, worker: int) -> None:
        """``worker`` is about to wait for the mutex: its region's H step comes next."""
        with self._cv:
            self._wanting.add(worker)

    def acquired(self, worker: int, fenced: bool) -> None:
        """``worker`` holds the region; ``fenced`` False (a streamed H step) lets every
        synthesis go ahead at once."""
        with self._cv:
            self._wanting.discard(worker)
            self._holder, self._queued = worker, not fenced
            self._cv.notify_all()

    def queued(self, worker: int) -> None:
        """The holder's H step is queued."""
        with self._cv:
            if self._holder == worker:
                self._queued = True
                self._cv.notify_all()

    def released(self, worker: int) -> None:
        """``worker`` gave the region back (or never got it: an attempt that failed)."""
        with self._cv:
            self._wanting.discard(worker)
            if self._holder == worker:
                self._holder, self._queued = None, False
            self._cv.notify_all()

    def wait_queued(self, timeout: float | None = None) -> bool:
        """Host work starting now (a synthesis, a host check) waits, at most ``timeout`` (by
        default the fence's ``wait_s``), while a region is wanted or held without its H step
        queued. False when the wait ran out (the work then goes ahead unfenced)."""
        if timeout is None:
            timeout = self.wait_s
        with self._cv:

            def settled() -> bool:
                if self._holder is not None:
                    return self._queued
                return not self._wanting

            return self._cv.wait_for(settled, timeout)

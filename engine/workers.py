"""Workers and the intake of partitions.

Why this shape (cuzk's): each device has W worker threads that share one mutex covering only
the GPU region, so one worker synthesises and pre-stages while another computes. The
scheduler hands out (proof, partition) pairs in order, keeps at most ``concurrency`` proofs in
flight, and can be paused (no new partitions start; running ones finish) or stopped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Scheduler:
    """Hands out partitions; tracks proofs in flight and their completion."""

    def __init__(self, proofs: int, partitions: int, concurrency: int) -> None:
        self.proofs = proofs
        self.partitions = partitions
        self.concurrency = concurrency
        self._cv = threading.Condition()
        self._next_proof = 0
        self._next_partition = 0
        self._remaining: dict[int, int] = {}  # proof -> partitions not finished
        self._failed: dict[int, bool] = {}
        self._t_start: dict[int, int] = {}
        self.paused = False
        self.stopped = False
        self.completed: list[tuple[int, bool]] = []

    def next(self) -> tuple[int, int] | None:
        """Block until a partition may start; None when there is nothing more to do."""
        with self._cv:
            while True:
                if self.stopped or self._next_proof >= self.proofs:
                    return None
                if not self.paused:
                    starting = self._next_partition == 0
                    if not starting or len(self._remaining) < self.concurrency:
                        proof, part = self._next_proof, self._next_partition
                        if starting:
                            self._remaining[proof] = self.partitions
                            self._failed[proof] = False
                            self._t_start[proof] = time.monotonic_ns()
                        self._next_partition += 1
                        if self._next_partition >= self.partitions:
                            self._next_proof += 1
                            self._next_partition = 0
                        return proof, part
                self._cv.wait(0.5)

    def finish(self, proof: int, ok: bool) -> tuple[bool, bool, float] | None:
        """Record one finished partition; when it completes its proof return
        (proof completed, proof ok, wall ms)."""
        with self._cv:
            self._remaining[proof] -= 1
            self._failed[proof] = self._failed[proof] or not ok
            result = None
            if self._remaining[proof] == 0:
                del self._remaining[proof]
                wall = (time.monotonic_ns() - self._t_start.pop(proof)) / 1e6
                proof_ok = not self._failed.pop(proof)
                self.completed.append((proof, proof_ok))
                result = (True, proof_ok, wall)
            self._cv.notify_all()
            return result

    def pause(self) -> None:
        with self._cv:
            self.paused = True
            self._cv.notify_all()

    def resume(self) -> None:
        with self._cv:
            self.paused = False
            self._cv.notify_all()

    def stop(self) -> None:
        with self._cv:
            self.stopped = True
            self._cv.notify_all()

    @property
    def all_dispatched(self) -> bool:
        with self._cv:
            return self._next_proof >= self.proofs


def worker_loop(
    scheduler: Scheduler,
    run_partition: Callable[[int, int], bool],
    on_finish: Callable[[int, bool, float], None],
    on_error: Callable[[int, int, Exception], None] | None = None,
) -> None:
    """One worker thread: take partitions until the scheduler says there are none left."""
    while True:
        job = scheduler.next()
        if job is None:
            return
        proof, partition = job
        ok = False
        try:
            ok = run_partition(proof, partition)
        except Exception as exc:  # a bug in one partition must not kill the worker
            if on_error is not None:
                on_error(proof, partition, exc)
        finally:
            done = scheduler.finish(proof, ok)
            if done is not None:
                on_finish(proof, done[1], done[2])

"""Workers and the intake of partitions.

Why this shape (cuzk's): each device has W worker threads that share one mutex covering only
the GPU region, so one worker synthesises and pre-stages while another computes. The
scheduler hands out (proof, partition) pairs in order, keeps at most ``concurrency`` proofs in
flight, and can be paused (no new partitions start; running ones finish) or stopped.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

COMPLETED_KEPT = 1000  # completed proofs Scheduler.completed keeps (the newest)


class Scheduler:
    """Hands out partitions; tracks proofs in flight and their completion."""

    def __init__(
        self,
        proofs: int,
        partitions: int,
        concurrency: int,
        duration_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``duration_s``: no proof starts once this many seconds have passed since the first
        partition was handed out (the proofs started finish); ``proofs`` stays the cap."""
        self.proofs = proofs
        self.duration_s = duration_s
        self._clock = clock
        self._t0: float | None = None  # when the first partition was handed out
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
        self._requeued: deque[tuple[int, int]] = deque()  # partitions of dead workers

    def next(self, cancelled: Callable[[], bool] | None = None) -> tuple[int, int] | None:
        """Block until a partition may start; None when there is nothing more to do, or once
        ``cancelled()`` is true (checked at least every 0.5 s: a look-ahead claim whose
        worker is dying must not wait for a proof slot that only its own requeue can free)."""
        with self._cv:
            while True:
                if self.stopped or (cancelled is not None and cancelled()):
                    return None
                if self._requeued and not self.paused:
                    return self._requeued.popleft()
                if self._next_proof >= self.proofs and not self._requeued:
                    return None  # (a requeued partition waits out a pause: it is not done)
                if self._out_of_time():
                    self.proofs = self._next_proof  # the run is as long as its time: done
                    self._cv.notify_all()
                    continue
                if not self.paused:
                    starting = self._next_partition == 0
                    if self._t0 is None:
                        self._t0 = self._clock()
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

    def _out_of_time(self) -> bool:
        """Whether the run's time is up, at a proof boundary (a proof started runs whole)."""
        if self.duration_s is None or self._t0 is None or self._next_partition != 0:
            return False
        return self._clock() - self._t0 >= self.duration_s

    @property
    def proofs_started(self) -> int:
        """Proofs whose first partition was handed out (all of them once intake is over)."""
        with self._cv:
            return self._next_proof + (self._next_partition > 0)

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
                if len(self.completed) > 2 * COMPLETED_KEPT:  # bounded over a long run
                    del self.completed[:COMPLETED_KEPT]
                result = (True, proof_ok, wall)
            self._cv.notify_all()
            return result

    def requeue(self, proof: int, partition: int) -> None:
        """Hand a started partition out again (its worker died before finishing it)."""
        with self._cv:
            self._requeued.append((proof, partition))
            self._cv.notify_all()

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
        """Every partition handed out (a requeued one waiting to go again is not)."""
        with self._cv:
            return self._next_proof >= self.proofs and not self._requeued


@dataclass
class WorkerSlot:
    """What the supervisor knows of one worker thread: the partition it holds (``job``),
    the one it claimed ahead and has not started (``ahead``, look-ahead only), whether it
    returned normally (``exited``) or died (``died``: the exception)."""

    device: int
    worker: int
    job: tuple[int, int] | None = None
    ahead: tuple[int, int] | None = None
    ahead_requeued: tuple[int, int] | None = None  # set at a death: ``ahead``, handed back
    exited: bool = False
    died: BaseException | None = None


def worker_loop(
    scheduler: Scheduler,
    run_partition: Callable[[int, int], bool],
    on_finish: Callable[[int, bool, float], None],
    on_error: Callable[[int, int, Exception], None] | None = None,
    slot: WorkerSlot | None = None,
) -> None:
    """One worker thread: take partitions until the scheduler says there are none left.
    An exception from a partition fails that partition; anything that unwinds the thread
    itself (a BaseException) leaves the partition in ``slot.job`` for the supervisor."""
    slot = slot or WorkerSlot(-1, -1)
    try:
        while True:
            job = scheduler.next()
            if job is None:
                slot.exited = True
                return
            slot.job = job
            _run_one(scheduler, job, partial(run_partition, *job), on_finish, on_error, slot)
    except BaseException as exc:  # the thread dies; the supervisor replaces it
        slot.died = exc


def _run_one(
    scheduler: Scheduler,
    job: tuple[int, int],
    run: Callable[[], bool],
    on_finish: Callable[[int, bool, float], None],
    on_error: Callable[[int, int, Exception], None] | None,
    slot: WorkerSlot,
) -> None:
    """Run one partition held in ``slot.job`` and account for it. An Exception fails only
    that partition; a BaseException unwinds the worker with the job still in the slot."""
    proof, partition = job
    ok = False
    try:
        ok = run()
    except Exception as exc:  # a bug in one partition must not kill the worker
        if on_error is not None:
            try:
                on_error(proof, partition, exc)
            except Exception:  # nor may its report: the partition is still accounted below
                pass
    slot.job = None
    done = scheduler.finish(proof, ok)
    if done is not None:
        on_finish(proof, done[1], done[2])


class _AheadThread:
    """The one thread a look-ahead worker prepares its partitions on, for the worker's whole
    life. One thread, not one per partition: a thread's CUDA streams and events are made at
    its first use, and on the H200 creating CUDA events waited for the running kernel
    (bench/notes/pipeline.md, "the busy fraction", H200 runs of 2026-11-29)."""

    def __init__(self, slot: WorkerSlot) -> None:
        self._queue: queue.SimpleQueue[_Ahead | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._loop, name=f"ahead-d{slot.device}-w{slot.worker}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while True:
            claim = self._queue.get()
            if claim is None:
                return
            claim.run_here()
            # not held while waiting for the next: a claim's result holds its partition (on
            # CUDA, views of a pinned witness pool), which a dead worker must let go of
            del claim

    def submit(self, claim: _Ahead) -> None:
        self._queue.put(claim)

    def stop(self) -> None:
        """End the thread and wait for it. Every claim submitted was waited for already, so
        the thread is idle and ends at once; waiting makes sure it holds nothing of this
        worker life (the last claim, its prepared partition, the runner through ``prepare``)
        when the supervisor starts the replacement, which it does as soon as the worker
        thread ends: at the CUDA run's 0.5 ms switch interval the helper could still be
        between setting a claim's result and dropping it."""
        self._queue.put(None)
        self._thread.join()


class _Ahead:
    """One claim of the next partition, prepared on the worker's :class:`_AheadThread`.

    ``result()`` gives (job, prepared, error) or None when the scheduler ran dry; an
    Exception from ``prepare`` is the error (that partition fails), a BaseException that
    would have unwound a worker thread is too (the worker re-raises it). ``cancel()`` makes a
    claim that has not started preparing hand the job back untouched."""

    def __init__(
        self,
        scheduler: Scheduler,
        prepare: Callable[[int, int], Any],
        slot: WorkerSlot,
        thread: _AheadThread,
    ):
        self._scheduler = scheduler
        self._prepare = prepare
        self._slot = slot
        self._lock = threading.Lock()
        self._cancelled = False
        self._result: tuple[tuple[int, int], Any, BaseException | None] | None = None
        self._failure: BaseException | None = None
        self._done = threading.Event()
        thread.submit(self)

    def run_here(self) -> None:
        """Run the claim on the calling (look-ahead) thread; whatever happens, ``result()``
        returns: a failure outside ``prepare`` is raised there, on the worker's thread."""
        try:
            self._run()
        except BaseException as exc:
            self._failure = exc
        finally:
            self._done.set()

    def _run(self) -> None:
        job = self._scheduler.next(lambda: self._cancelled)
        if job is None:
            return
        with self._lock:
            self._slot.ahead = job
            if self._cancelled:
                return
        try:
            self._result = (job, self._prepare(*job), None)
        except BaseException as exc:  # handed to the worker thread, which decides
            self._result = (job, None, exc)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True

    def result(self) -> tuple[tuple[int, int], Any, BaseException | None] | None:
        self._done.wait()
        if self._failure is not None:
            raise self._failure
        return self._result


def lookahead_loop(
    scheduler: Scheduler,
    prepare: Callable[[int, int], Any],
    complete: Callable[[Any], bool],
    on_finish: Callable[[int, bool, float], None],
    on_error: Callable[[int, int, Exception], None] | None = None,
    slot: WorkerSlot | None = None,
) -> None:
    """:func:`worker_loop` with a look-ahead of one partition: while ``complete`` runs the
    current partition (upload, mutex, GPU region, checks), another thread claims the next
    one and runs ``prepare`` (its synthesis). A worker's host cycle then overlaps its own GPU
    region instead of only the neighbour's (docs/architecture.md, "look-ahead").

    Death: if this thread unwinds, the claimed-ahead partition (``slot.ahead``) is settled
    first (a claim not yet being prepared is cancelled, a preparation is waited for), so
    the supervisor hands both partitions out again and none is lost."""
    slot = slot or WorkerSlot(-1, -1)
    ahead: _Ahead | None = None
    thread: _AheadThread | None = None
    try:
        # inside the try: a thread that cannot start is this worker's death, in slot.died
        thread = _AheadThread(slot)
        ahead = _Ahead(scheduler, prepare, slot, thread)
        while True:
            current = ahead.result()
            ahead = None
            if current is None:
                slot.exited = True
                return
            job, prepared, err = current
            slot.job, slot.ahead = job, None
            if err is not None and not isinstance(err, Exception):
                raise err  # it would have killed a worker: it kills this one
            ahead = _Ahead(scheduler, prepare, slot, thread)

            def run(prepared: Any = prepared, err: BaseException | None = err) -> bool:
                if err is not None:
                    raise err
                return complete(prepared)

            _run_one(scheduler, job, run, on_finish, on_error, slot)
    except BaseException as exc:  # the thread dies; the supervisor replaces it
        if ahead is not None:
            ahead.cancel()
            try:
                ahead.result()
            except BaseException:  # the worker is dying of ``exc`` already
                pass
        slot.died = exc
    finally:
        if thread is not None:
            thread.stop()


class SupervisorError(RuntimeError):
    """Workers that cannot start were given up on, and partitions were left undone."""


class Supervisor:
    """Starts the worker threads and watches them: a thread that ends without the scheduler
    having run dry died, so its partition is handed out again (at most ``max_requeues`` times;
    then it is reported failed) and a replacement thread takes its place. ``on_died(slot,
    requeued)`` reports the death (a ``worker_died`` fault).

    A worker that dies ``max_idle_deaths`` times in a row holding no partition cannot start
    at all (its runner cannot be built, say): it is not replaced again, where it would be
    replaced every ``poll_s`` for ever. The others carry on; :meth:`run` raises
    :class:`SupervisorError` if none is left to finish the work."""

    def __init__(
        self,
        scheduler: Scheduler,
        on_died: Callable[[WorkerSlot, bool], None],
        on_finish: Callable[[int, bool, float], None],
        max_requeues: int = 2,
        poll_s: float = 0.05,
        max_idle_deaths: int = 3,
    ) -> None:
        self.scheduler = scheduler
        self.on_died = on_died
        self.on_finish = on_finish
        self.max_requeues = max_requeues
        self.poll_s = poll_s
        self.max_idle_deaths = max_idle_deaths
        self._workers: list[tuple[threading.Thread, WorkerSlot, Callable[..., Any], str]] = []
        self._requeues: dict[tuple[int, int], int] = {}
        self._idle_deaths: dict[str, int] = {}
        self.replaced = 0
        self.given_up: list[str] = []  # "name: why" of each worker not replaced again

    def add(self, name: str, device: int, worker: int, target: Callable[[WorkerSlot], Any]) -> None:
        """Start ``target(slot)`` on a new thread (``target`` runs :func:`worker_loop` or
        :func:`lookahead_loop`)."""
        slot = WorkerSlot(device, worker)
        thread = threading.Thread(target=target, args=(slot,), name=name, daemon=True)
        thread.start()
        self._workers.append((thread, slot, target, name))

    def run(self) -> None:
        """Block until every worker has returned normally, replacing those that die."""
        while self._workers:
            self._workers[0][0].join(self.poll_s)
            for entry in list(self._workers):
                thread, slot, target, name = entry
                if thread.is_alive():
                    continue
                self._workers.remove(entry)
                if slot.exited:
                    continue
                if slot.ahead is not None:  # claimed ahead, never started: not its killer
                    self.scheduler.requeue(*slot.ahead)
                    slot.ahead_requeued, slot.ahead = slot.ahead, None
                requeued = False
                if slot.job is not None:
                    n = self._requeues.get(slot.job, 0) + 1
                    self._requeues[slot.job] = n
                    if n <= self.max_requeues:
                        self.scheduler.requeue(*slot.job)
                        requeued = True
                    else:
                        done = self.scheduler.finish(slot.job[0], False)
                        if done is not None:
                            self.on_finish(slot.job[0], done[1], done[2])
                self.on_died(slot, requeued)
                held = slot.job is not None or slot.ahead_requeued is not None
                idle = 0 if held else self._idle_deaths.get(name, 0) + 1
                self._idle_deaths[name] = idle
                if slot.died is not None:
                    # its traceback holds the dead thread's frames (the runner: on CUDA its
                    # pinned witness pools) in a cycle through this slot that only a full
                    # collection breaks; free them before the replacement makes its own
                    slot.died = slot.died.with_traceback(None)
                if idle >= self.max_idle_deaths:
                    why = repr(slot.died) if slot.died is not None else "no exception"
                    self.given_up.append(f"{name}: died {idle} times before any partition ({why})")
                    continue
                self.replaced += 1
                self.add(name, slot.device, slot.worker, target)
        if self.given_up and not self.scheduler.all_dispatched:
            raise SupervisorError(
                "no worker left to finish the run; given up on " + "; ".join(self.given_up)
            )

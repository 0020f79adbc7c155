"""Progress of a long start-up step: done/total, rate and ETA as ``progress`` events.

Why: before the first partition a run makes its SRS (seconds on the cpu backend at 2^15,
minutes at porep-32g without a GPU) and, on CUDA, pins a witness pool per worker (17 GB,
several seconds each). Without a figure the dashboard and the engine's stderr said only
"starting" for all that time, and an operator could not tell a slow start from a hung one.

Why the stop check lives here too: each step calls :meth:`Progress.advance` between its chunks,
so the same call that reports a chunk ends the step (:class:`Stopped`) when the run was asked
to stop. A stop during the SRS then ends the run within one chunk, not at the end of the SRS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

EMIT_INTERVAL_S = 0.5  # at most two events a second per step (the last one always goes out)


class Stopped(Exception):
    """The step ended early because the run was asked to stop."""


class Emit(Protocol):
    """``emit(kind, **fields)``: the bus's (``provetop.engine.telemetry.bus.Bus.emit``)."""

    def __call__(self, kind: str, /, **fields: Any) -> object: ...


class Progress:
    """One step's counter. ``emit(kind, **fields)`` is the bus's emit; ``stop``: returns True
    once the run is stopping (checked at every :meth:`advance`); ``where``: device/worker."""

    def __init__(
        self,
        emit: Emit,
        task: str,
        label: str,
        total: int,
        unit: str,
        *,
        stop: Callable[[], bool] | None = None,
        interval: float = EMIT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        **where: int,
    ) -> None:
        self.emit, self.task, self.label, self.unit = emit, task, label, unit
        self.total = max(0, int(total))
        self.done = 0
        self.stop = stop
        self.interval = interval
        self.clock = clock
        self.where = where
        self.start = clock()
        self._last: float | None = None
        self._sent = -1  # ``done`` of the last event sent
        self._lock = threading.Lock()
        self._finished = False
        self._send(self.start)

    def check(self) -> None:
        """Raise :class:`Stopped` when the run is stopping."""
        if self.stop is not None and self.stop():
            raise Stopped(f"{self.label}: stopped at {self.done} of {self.total} {self.unit}")

    def advance(self, n: int) -> None:
        """Count ``n`` more units done; emit when the interval has passed; then the stop
        check (so the last chunk's figure is out before the step ends)."""
        with self._lock:
            self.done = min(self.total, self.done + max(0, int(n)))
            now = self.clock()
            if self._last is None or now - self._last >= self.interval:
                self._send(now)
        self.check()

    def set(self, done: int) -> None:
        """Set the units done (a callback that reports a running total)."""
        self.advance(max(0, int(done)) - self.done)

    def finish(self) -> None:
        """The step is complete: one last event with done = total."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self.done = self.total
            if self._sent != self.total:  # the last report may have said it already
                self._send(self.clock())

    def _send(self, now: float) -> None:
        self._last, self._sent = now, self.done
        elapsed = max(0.0, now - self.start)
        fields: dict[str, Any] = {
            "task": self.task,
            "label": self.label,
            "done": self.done,
            "total": self.total,
            "unit": self.unit,
            "elapsed_s": round(elapsed, 3),
        }
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            fields["rate"] = round(rate, 3)
            fields["eta_s"] = round((self.total - self.done) / rate, 3)
        self.emit("progress", **fields, **self.where)

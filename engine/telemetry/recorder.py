"""The recorder's own thread: every event reaches the recording file without waiting on clients.

Why a thread of its own: the bus's dispatcher also folds the live state, builds what a joining
client is sent and fills every client's queue, under the bus lock. When the recording was
written from there, a connect/close storm (each new client's snapshot built under that lock)
held back the recording for as long as the storm lasted, and a SIGKILL then lost all of it
instead of one flush interval. Here ``Bus.publish`` hands each event to this queue and to the
dispatcher's in one step (same order in both), and only this thread calls ``write``.
"""

from __future__ import annotations

import enum
import queue
import threading
from typing import Any, Protocol


class Stop(enum.Enum):
    """What a queue's reader ends at (a sentinel with a type)."""

    STOP = enum.auto()


_STOP = Stop.STOP


class Writer(Protocol):
    """What a recorder is: ``provetop.recordings.writer.RecordingWriter``, or a test's stand-in."""

    def write(self, event: dict[str, Any]) -> object: ...


class RecorderThread:
    """Feeds ``writer.write(event)`` from an unbounded queue on one thread.

    The writer's own errors are its business (``RecordingWriter`` reports a disk error once
    through its ``on_error``); anything it raises here is kept in ``errors`` (at most 10) and
    the thread goes on, so a broken recording never stops the run."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.errors: list[str] = []
        self._q: queue.SimpleQueue[dict[str, Any] | Stop] = queue.SimpleQueue()
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="telemetry-recorder", daemon=True)
        self._thread.start()

    def put(self, event: dict[str, Any]) -> None:
        with self._pending_lock:
            self._pending += 1
            self._idle.clear()
        self._q.put(event)

    def pending(self) -> int:
        """Events handed over and not yet written."""
        with self._pending_lock:
            return self._pending

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event handed over so far has been written; False on timeout."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the thread."""
        self._q.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            event = self._q.get()
            if event is _STOP:
                return
            try:
                self.writer.write(event)
            except Exception as exc:  # noqa: BLE001 (a broken disk must not stop the run)
                if len(self.errors) < 10:
                    self.errors.append(str(exc))
            finally:
                with self._pending_lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.set()

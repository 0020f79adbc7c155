"""``provetop trace --cuzk-log LOG``: a cuzk run's partitions on the same time axis as its pools.

cuzk's log says what each partition did and when (``provetop.sources.cuzk``); the trace says what
the
pools held. Both are put on the trace's clock: the converter's events are on cuzk's own clock
(t = 0 at the wall time the converter anchors from the log's tracing timestamps, or, until one
comes, the program's start), so each is shifted by that anchor less the trace's own. The
converter's ``hello`` and ``engine_state`` are dropped: the trace has its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from provetop.sources.cuzk.convert import Converter
from provetop.sources.cuzk.follow import open_follower
from provetop.sources.protocol import THREAD_PREFIX

POLL_S = 0.2  # how often the log is read: events reach the dashboard at most this late
_OWN = ("hello", "engine_state")


class CuzkLog:
    def __init__(
        self,
        path: str,
        publish: Callable[[dict[str, Any]], None],
        *,
        trace_wall_ns: int,
        started_wall_ns: int,
        workers_per_device: int = 2,
    ) -> None:
        self.path = path
        self.publish = publish
        self.trace_wall_ns = trace_wall_ns
        self.converter = Converter(workers_per_device=workers_per_device, wall_ns=started_wall_ns)
        self._follower = open_follower(path, from_start=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"{THREAD_PREFIX}cuzk-log", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _shift(self, events: list[dict[str, Any]]) -> None:
        anchor = self.converter.wall_anchor_ns or self.trace_wall_ns
        offset = anchor - self.trace_wall_ns
        for e in events:
            if e.get("k") in _OWN:
                continue
            self.publish({**e, "t": max(0, int(e["t"]) + offset)})

    def _run(self) -> None:
        while not self._stop.is_set():
            lines = self._follower.poll()
            events: list[dict[str, Any]] = []
            for line in lines:
                events += self.converter.feed_line(line)
            if not lines:
                anchor = self.converter.wall_anchor_ns or self.trace_wall_ns
                events += self.converter.advance(max(0, time.time_ns() - anchor))
            self._shift(events)
            self._stop.wait(POLL_S)

    def stop(self) -> None:
        """Read what is left, release every held event, stop."""
        self._stop.set()
        self._thread.join(timeout=5)
        events: list[dict[str, Any]] = []
        for line in self._follower.poll() + self._follower.close():
            events += self.converter.feed_line(line)
        events += self.converter.flush(final=False)
        self._shift(events)

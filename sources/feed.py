"""Events from a list, played into a sink: the source of the snapshot tests, the benchmarks and
adapters that load everything first.

It behaves like a live source (``run`` blocks and delivers batches) so the dashboard under test
takes the same path as with an engine, only without a socket.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from provetop.sources.errors import SourceError
from provetop.sources.protocol import BATCH_SECONDS, Sink, names_its_thread

__all__ = ["FeedSource"]


class FeedSource:
    """Events from a list (tests, snapshots, benchmarks, adapters that pre-load): delivered in
    one batch, or at ``rate`` events per second of wall time in batches. Read-only."""

    def __init__(
        self,
        events: list[dict[str, Any]],
        *,
        label: str = "feed",
        rate: float | None = None,
        loop: bool = False,
    ) -> None:
        self.events = events
        self.label = label
        self.rate = rate
        self.loop = loop
        self.read_only = True
        self.delivered = 0
        self._closed = threading.Event()

    @names_its_thread
    def run(self, sink: Sink) -> None:
        sink.status(self, "connected", "info")
        if self.rate is None:
            sink.events(self, list(self.events))
            self.delivered = len(self.events)
            self._closed.wait()
            return
        start = time.monotonic()
        i = 0
        offset = 0
        span = (self.events[-1]["t"] + 1) if self.events else 1
        while not self._closed.is_set():
            due = int((time.monotonic() - start) * self.rate)
            batch = []
            while i < due:
                j = i % len(self.events)
                if j == 0 and i > 0:
                    if not self.loop:
                        break
                    offset += span
                event = self.events[j]
                if offset and event["k"] != "hello":
                    event = {**event, "t": event["t"] + offset}
                elif offset:
                    i += 1
                    continue
                batch.append(event)
                i += 1
            if batch:
                sink.events(self, batch)
                self.delivered += len(batch)
            if not self.loop and i >= len(self.events):
                self._closed.wait()
                break
            self._closed.wait(BATCH_SECONDS)

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        raise SourceError("this source is read-only")

    def close(self) -> None:
        self._closed.set()

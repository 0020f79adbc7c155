"""The engine's ``/metrics`` endpoint: the metrics fold on its own bus subscriber thread.

Why a subscriber and not a bus listener: a listener runs on the bus's dispatcher thread, so a
slow fold would delay the recorder and every client. A subscriber has its own bounded queue,
exactly as a socket client does; the fold reads it on its own thread, and a scrape only copies
the fold's numbers under a short lock (``provetop.recordings.prometheus``).
"""

from __future__ import annotations

import threading

from provetop.engine.telemetry.bus import Bus, Subscription
from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.prometheus.http_server import MetricsServer

QUEUE = 1_000_000  # events the fold may fall behind by before it is told it missed some


class EngineMetrics:
    """Subscribe to ``bus`` at construction (before ``hello``), serve on ``address``."""

    def __init__(self, bus: Bus, address: str) -> None:
        self.fold = MetricsFold()
        self.server = MetricsServer(self.fold.render, address)
        self._sub: Subscription = bus.subscribe("metrics", QUEUE, counted=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-fold", daemon=True)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> str:
        """Start the fold and the HTTP server; the bound URL. OSError when it cannot bind."""
        url = self.server.start()
        self._thread.start()
        return url

    def _run(self) -> None:
        while not self._stop.is_set():
            event = self._sub.get(timeout=0.5)
            if event is None:
                if self._sub.closed and not self._sub.pending():
                    return
                continue
            try:
                self.fold.apply(event)
            except Exception:  # a malformed event must not stop the metrics
                pass

    def close(self) -> None:
        """Fold what is queued, stop folding and serving. Idempotent."""
        self._sub.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._stop.set()
        self.server.close()

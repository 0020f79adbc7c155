"""Run event sources with no screen: for a host where only the metrics endpoint is read.

Why: an operator with fifty cuzk hosts scrapes them from Prometheus and has no terminal open on
any of them; ``provetop watch --cuzk-log F --metrics :9400 --no-ui`` follows the prover's log
and feeds the metrics fold without loading the dashboard. Status changes go to stderr as one
line each, as a service manager's journal expects.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, TextIO

from provetop.sources.protocol import THREAD_PREFIX, EventSource


class StatusLines:
    """A sink that drops the events (the source's own hook has folded them) and writes each
    status change as one line."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out

    def events(self, source: EventSource, batch: list[dict[str, Any]]) -> None:
        pass

    def status(self, source: EventSource, text: str, level: str = "info") -> None:
        self.out.write(f"{source.label}: {text}\n")
        self.out.flush()


def run_headless(sources: list[EventSource], out: TextIO = sys.stderr) -> int:
    """Run every source until each has ended, or until SIGINT/SIGTERM closes them all (a
    stop that was asked for is a success: exit code 0, as a service manager expects)."""
    sink = StatusLines(out)
    stop = threading.Event()

    def close_all(_signum: int = 0, _frame: Any = None) -> None:
        stop.set()
        for source in sources:
            source.close()

    previous = {s: signal.signal(s, close_all) for s in (signal.SIGINT, signal.SIGTERM)}
    threads = [
        threading.Thread(target=s.run, args=(sink,), name=f"{THREAD_PREFIX}{s.label}", daemon=True)
        for s in sources
    ]
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        close_all()
    return 0  # every source ended, or the stop that was asked for

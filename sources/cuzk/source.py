"""A live cuzk daemon as a provetop event source, for the dashboard (read-only).

``CuzkSource(log="-"|path, status_url=...)`` follows the daemon's log (``tail -F`` semantics, or
standard input) and polls its ``/status`` endpoint, converts both on one background thread and
hands out provetop telemetry events: by polling (:meth:`CuzkSource.poll`, non-blocking, for a
UI timer), by iterating (:meth:`CuzkSource.events`, blocking) or through a callback (called on
the source's thread). The first event is ``hello`` with ``source="cuzk"`` and
``read_only=True``; cuzk cannot be controlled from provetop, so :meth:`CuzkSource.command`
always refuses.

While the log is quiet the source advances the converter's clock from wall time, so events held
back for ordering (``provetop.sources.cuzk.convert``) are released within about a second.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from provetop.recordings.schema import MS
from provetop.sources.cuzk.convert import Converter
from provetop.sources.cuzk.follow import Follower, open_follower
from provetop.sources.cuzk.status import StatusPoller, StatusResult, fetch_status, status_url
from provetop.sources.errors import SourceError
from provetop.sources.protocol import BATCH_SECONDS, THREAD_PREFIX, names_its_thread

Events = list[dict[str, Any]]


class CuzkSource:
    """See the module docstring. Thread-safe: one internal thread converts; any thread may
    call :meth:`poll`, :meth:`events`, :meth:`stats` and :meth:`stop`."""

    source = "cuzk"
    read_only = True

    def __init__(
        self,
        log: str | None = None,
        status_url: str | None = None,
        *,
        status_interval: float = 1.0,
        poll_interval: float = 0.2,
        from_start: bool = True,
        workers_per_device: int = 2,
        on_events: Callable[[Events], object] | None = None,
        reopen_tty: bool = True,
    ) -> None:
        if log is None and status_url is None:
            raise ValueError("a cuzk source needs a log, a status URL or both")
        self.log = log
        self.status_url = status_url
        self.status_interval = status_interval
        self.poll_interval = max(0.01, poll_interval)
        self.from_start = from_start
        self.on_events = on_events
        self.reopen_tty = reopen_tty  # log "-": give fd 0 back to the terminal for the TUI
        self.converter = Converter(
            workers_per_device=workers_per_device,
            wall_ns=time.time_ns(),
            config={"log": log, "status_url": status_url},
            status_drives=False if log is not None else None,
        )
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._out: deque[dict[str, Any]] = deque()
        self._status_q: queue.Queue[StatusResult] = queue.Queue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}cuzk", daemon=True)
        self._poller: StatusPoller | None = None
        self._follower: Follower | None = None
        self._mark: tuple[int, float] | None = None  # (clock, monotonic) at the last TIMELINE
        self._timeline_seen = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> CuzkSource:
        if self.log is not None:
            self._follower = open_follower(
                self.log, from_start=self.from_start, reopen_tty=self.reopen_tty
            )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following and polling; events already converted stay available to poll()."""
        self._stop.set()
        self._wake.set()
        if self._poller is not None:
            self._poller.stop()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)

    def __enter__(self) -> CuzkSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- consuming ------------------------------------------------------------------------------

    def poll(self, max_events: int | None = None) -> Events:
        """Events converted since the last call (non-blocking)."""
        with self._lock:
            n = len(self._out) if max_events is None else min(max_events, len(self._out))
            return [self._out.popleft() for _ in range(n)]

    def events(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Blocking iterator; ends when the source stops (or stdin ends) and all is handed out,
        or when nothing arrives for ``timeout`` seconds."""
        while True:
            with self._ready:
                if not self._out and not self._done:
                    self._ready.wait(timeout)
                if not self._out:
                    return
                batch = list(self._out)
                self._out.clear()
            yield from batch

    # -- the EventSource protocol (sources/protocol.py) -----------------------------------------

    @property
    def label(self) -> str:
        """Short name for the dashboard's source list."""
        if self.log is not None:
            return f"cuzk:{'stdin' if self.log == '-' else self.log.rsplit('/', 1)[-1]}"
        return f"cuzk:{self.status_url}"

    @names_its_thread
    def run(self, sink: Any) -> None:
        """Deliver batches to ``sink.events(self, batch)`` and state changes to
        ``sink.status(self, text, level)`` until :meth:`close` (or the end of stdin). Starts the
        source if needed; blocks, so the app runs it in a worker thread."""
        if not self._thread.is_alive() and not self._done:
            self.start()
        sink.status(self, "following cuzk (read-only)", "info")
        said: tuple[str, int] = ("", 0)
        while True:
            with self._ready:
                if not self._out and not self._done:
                    self._ready.wait(BATCH_SECONDS)
                batch = list(self._out)
                self._out.clear()
                done = self._done
            if batch:
                sink.events(self, batch)
            stats = self.stats()
            bad = sum(stats.get(k, 0) for k in ("unknown", "malformed", "truncated"))
            now = (stats["status_state"], bad)
            if now != said:
                said = now
                if now[0] == "down":
                    sink.status(self, "cuzk status endpoint down", "warn")
                elif bad:
                    sink.status(self, f"cuzk: {bad} log lines not understood", "warn")
            if done and not batch:
                sink.status(self, "cuzk log ended" if not self._stop.is_set() else "closed")
                return

    def close(self) -> None:
        self.stop()

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        """cuzk takes no commands: raises :class:`provetop.sources.errors.SourceError`."""
        raise SourceError("cuzk is read-only: provetop cannot control it")

    def command(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """cuzk takes no commands from provetop: always refused."""
        return {"ok": False, "cmd": cmd, "args": args or {}, "error": "cuzk source is read-only"}

    def stats(self) -> dict[str, Any]:
        """Line and event counts, the last unknown lines, follower and status state."""
        with self._lock:
            conv, follower = self.converter, self._follower
            return {
                **dict(conv.stats),
                "unknown_samples": list(conv.unknown_samples),
                "rotations": follower.rotations if follower is not None else 0,
                "truncations": follower.truncations if follower is not None else 0,
                "status_state": conv.status_state,
                "jobs": conv.proofs,
            }

    @property
    def status(self) -> dict[str, Any] | None:
        """The latest ``/status`` snapshot (host memory budget, counters, queue depth...)."""
        with self._lock:
            return self.converter.latest_status

    # -- the conversion thread ------------------------------------------------------------------

    def _publish(self, events: Events) -> None:
        if not events:
            return
        with self._ready:
            self._out.extend(events)
            self._ready.notify_all()
        if self.on_events is not None:
            self.on_events(events)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._ready:
                self._done = True
                self._ready.notify_all()

    def _loop(self) -> None:
        if self.status_url is not None:
            first = fetch_status(status_url(self.status_url), timeout=1.0)
            self._status_q.put(first)
            self._poller = StatusPoller(
                self.status_url, self._on_status, interval=self.status_interval
            )
            if self._stop.is_set():
                return
            self._poller.start()
            if first.ok:
                with self._lock:
                    self.converter.learn_status(first.snapshot or {})
        with self._lock:
            hello = self.converter.begin()
        self._publish(hello)
        while not self._stop.is_set():
            events: Events = []
            busy = False
            if self._follower is not None:
                lines = self._follower.poll()
                busy = bool(lines)
                with self._lock:
                    for line in lines:
                        events += self.converter.feed_line(line)
                    for line in self._follower.take_partial():
                        events += self.converter.feed_line(line, truncated=True)
            while True:
                try:
                    result = self._status_q.get_nowait()
                except queue.Empty:
                    break
                with self._lock:
                    if result.ok:
                        events += self.converter.feed_status(result.snapshot)
                    else:
                        events += self.converter.feed_status_error(result.error or "error")
            with self._lock:
                events += self._tick(busy)
            self._publish(events)
            if self._follower is not None and self._follower.eof:
                with self._lock:
                    events = self.converter.flush(final=True)
                self._publish(events)
                return
            self._wake.wait(self.poll_interval)
            self._wake.clear()
        with self._lock:
            events = self.converter.flush(final=False)
        self._publish(events)

    def _on_status(self, result: StatusResult) -> None:
        self._status_q.put(result)
        self._wake.set()

    def _tick(self, busy: bool) -> Events:
        """Advance the clock from wall time since the last TIMELINE line (caller holds the
        lock), so a quiet log still releases what the converter holds back."""
        conv = self.converter
        if not conv.timeline_seen:
            return conv.drain()
        now = time.monotonic()
        seen = conv.stats["timeline"]
        if self._mark is None or seen != self._timeline_seen:
            self._timeline_seen = seen
            self._mark = (conv.clock, now)
            return conv.drain()
        clock, since = self._mark
        return conv.advance(clock + int((now - since) * 1e3) * MS)

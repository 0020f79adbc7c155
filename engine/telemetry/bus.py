"""The telemetry bus: workers emit, the recorder gets everything, clients get what they can.

Why a bus with one dispatcher thread: a worker must never wait on a slow disk or a slow
dashboard, so ``emit`` only validates the event and puts it on two unbounded queues, in one
step so both see the same order: the recorder's (:mod:`provetop.engine.telemetry.recorder`, its own
thread:
the
recording never waits on the dispatcher, the bus lock or any client) and the dispatcher's. The
dispatcher thread then, in order:

1. (nothing for the recorder: it has its own thread);
2. folds it into the live :class:`~provetop.recordings.state.State` (what ``provetop run`` draws),
   which keeps a window (:data:`LIVE_WINDOW`: the newest finished partitions, a minute of
   timeline and memory samples, the newest faults and markers) plus running totals; what
   leaves the window is only in the recording, so the engine's memory does not grow with
   the run;
3. appends it to the retained recent events. Every ``retain // 2`` events the dispatcher
   takes a snapshot of the live state (outside the bus lock: it is the state's only writer)
   and drops the events before the previous one, so a client joining late gets ``hello``, the
   previous snapshot and the events since (between ``retain // 2`` and ``retain``), and ends
   with exactly the live state. The snapshot is one shared object for every client, and the
   retained events are kept in immutable chunks (:data:`RETAIN_CHUNK`) that every joining
   client shares: a connect copies references to ~20 chunks and the unfinished one, not the
   history, so the bus lock is held for microseconds whatever the run's length;
4. puts it on each subscriber's bounded queue; a subscriber that falls behind loses the oldest
   queued events and is sent one ``lag`` event counting them before the next event it gets.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from provetop.engine.telemetry.recorder import RecorderThread, Stop, Writer
from provetop.recordings.schema import make
from provetop.recordings.state import TRIM_EVERY, State, Window

_STOP = Stop.STOP
LIVE_WINDOW = Window()  # see provetop.recordings.state.Window and docs/reliability.md
# Retained events are kept in immutable chunks of this many: a joining client gets references
# to them (and the chunks' encodings are cached by the server for every client) instead of a
# copy of the whole history under the bus lock
RETAIN_CHUNK = 1024
# Every this many events the dispatcher counts each subscriber's lag and clears the log's
# slots every subscriber has read (Bus._scan): O(subscribers) per scan, not per event
SCAN_EVERY = 1024


class Clock:
    """Monotonic nanoseconds since the engine started, with the wall-clock anchor of t = 0."""

    def __init__(self) -> None:
        self.t0 = time.monotonic_ns()
        self.wall_ns = time.time_ns()

    def now(self) -> int:
        return time.monotonic_ns() - self.t0


class Subscription:
    """One client's view of the stream: a cursor into the bus's one log of live events, with
    lag accounting.

    Why a cursor and not a queue per client: the dispatcher used to put every event on every
    subscriber's queue (a lock and a notify each), and with 64 clients that read nothing the
    fan-out was half of the engine's GIL time (py-spy, cpu backend, 2026-12-07); the log is
    appended to once per event, whatever the number of clients. A client sees at most
    ``maxlen`` of the newest live events; when it falls further behind, the oldest are skipped
    and the next event it gets is preceded by one ``lag`` event counting them. The initial
    events (hello, snapshot, retained history) come first and are never skipped."""

    def __init__(self, bus: Bus, maxlen: int, name: str, counted: bool = True) -> None:
        self.bus = bus
        self.name = name
        self.counted = counted  # a client in ``counters`` (the engine's own metrics fold: no)
        self.maxlen = maxlen
        # hello, snapshot and the retained history, served before the live events and never
        # skipped: the bus's own immutable chunks of it (shared by every client, not copied),
        # taken in order; ``_ipos`` is the position in the first one
        self._initial: deque[tuple[dict[str, Any], ...]] = deque()
        self._ipos = 0
        # the live part, under the bus's lock: the sequence number of the next event to take,
        # events skipped and not yet told (a ``lag`` event before the next one), the event
        # held back behind that lag event, and (once closed) where the stream ends
        self._cursor = 0
        self._lag = 0
        self._held: dict[str, Any] | None = None
        self._end: int | None = None
        # set by a socket writer once the initial events are on the wire (not just taken)
        self.initial_sent = threading.Event()
        self.missed = 0
        self.closed = False

    def _put_initial(self, parts: list[tuple[dict[str, Any], ...]]) -> None:
        """(Under the bus's lock.)"""
        self._initial = deque(part for part in parts if part)
        self._ipos = 0

    def _next_initial(self, most: int) -> tuple[dict[str, Any], ...]:
        """(Under the bus's lock) up to ``most`` initial events, never across two chunks: a
        whole chunk is returned as the bus's own tuple, so the server's encoded-chunk cache
        finds it for every client."""
        if not self._initial:
            return ()
        first = self._initial[0]
        if self._ipos == 0 and len(first) <= most:
            part = first
        else:
            part = first[self._ipos : self._ipos + most]
        self._ipos += len(part)
        if self._ipos >= len(first):
            self._initial.popleft()
            self._ipos = 0
        return part

    def _catch_up(self) -> None:
        """(Under the bus's lock) skip what fell out of this client's window."""
        bus = self.bus
        start = max(bus._seq - min(self.maxlen, bus._ring_size), 0)
        if self._cursor < start:
            skipped = start - self._cursor
            self._cursor = start
            self._lag += skipped
            self.missed += skipped
            bus.lagged_events += skipped

    def _take_live(self) -> dict[str, Any] | None:
        """(Under the bus's lock) the next live event, a ``lag`` event before it where some
        were skipped, or None."""
        bus = self.bus
        if self._held is not None:
            event, self._held = self._held, None
            return event
        self._catch_up()
        end = bus._seq if self._end is None else self._end
        while True:
            if self._cursor >= end:
                return None
            slot = bus._ring[self._cursor % bus._ring_size]
            self._cursor += 1
            if slot is not None:
                event = slot
                break
            self._lag += 1  # cleared (no scan counts this one): told as missed
            self.missed += 1
        if self._lag:
            lag, self._lag = self._lag, 0
            self._held = event
            return make("lag", bus.clock.now(), missed=lag)
        return event

    def _behind(self) -> int:
        """(Under the bus's lock) live events not yet taken (at most ``maxlen``)."""
        bus = self.bus
        end = bus._seq if self._end is None else self._end
        start = max(bus._seq - min(self.maxlen, bus._ring_size), 0)
        return max(0, end - max(self._cursor, start))

    def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event (a ``lag`` event where some were skipped), or None on timeout or
        once closed and drained."""
        with self.bus._new:
            if self._initial:
                return self._next_initial(1)[0]
            event = self._take_live()
            if event is None and not self.closed and timeout != 0:
                self.bus._new.wait(timeout)
                event = self._take_live()
            return event

    def pending(self) -> int:
        """Events queued and not yet taken."""
        with self.bus._lock:
            initial = sum(len(part) for part in self._initial) - self._ipos
            held = 1 if self._held is not None else 0
            return initial + self._behind() + held + (1 if self._lag and self._behind() else 0)

    def take_initial(self, most: int) -> tuple[dict[str, Any], ...]:
        """Up to ``most`` of the initial events (hello, snapshot, retained history) in one
        step: a joining client's writer takes its thousands of them in slices, not one
        ``get`` (and one lock round) each, which in a connect/close storm was GIL time taken
        from the workers. A slice never spans two of the bus's chunks."""
        with self.bus._lock:
            return self._next_initial(most)

    def drain(self) -> list[dict[str, Any]]:
        """Everything queued now, without waiting."""
        out: list[dict[str, Any]] = []
        while True:
            event = self.get(0)
            if event is None:
                return out
            out.append(event)

    def close(self) -> None:
        with self.bus._new:
            if not self.closed:
                self.closed = True
                self._end = self.bus._seq  # what was published before the close still reads
            self.bus._new.notify_all()
        self.bus._unsubscribe(self)


class Bus:
    """See the module docstring. A recorder is any
    :class:`~provetop.engine.telemetry.recorder.Writer`."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        retain: int = 20000,
        client_queue: int = 50000,
        drop_after: int = 1_000_000,
    ) -> None:
        self.clock = clock or Clock()
        self.retain = retain
        self.client_queue = client_queue
        self.drop_after = drop_after  # a client that missed this many is disconnected
        self.window = LIVE_WINDOW
        self.state = State()  # live state: the window plus running totals
        # what a joining client starts from: the previous snapshot of the live state (shared)
        # and every event since; the newest snapshot becomes it at the next turn
        self._join_snap = make("snapshot", 0, state=self.state.snapshot())
        self._next_snap: dict[str, Any] | None = None
        self._next_at = 0  # chunks of _chunks before the newest snapshot was taken
        # the retained events, oldest first: immutable chunks (shared by every joining client,
        # never copied) and the newest few still being filled (copied on subscribe)
        self._chunks: deque[tuple[dict[str, Any], ...]] = deque()
        self._tail: list[dict[str, Any]] = []
        self._retained_n = 0  # events in _chunks and _tail
        self._since_snap = 0  # retained events after the newest snapshot
        self._since_trim = 0
        self._hello: dict[str, Any] | None = None
        self._subs: list[Subscription] = []
        self._draining: list[Subscription] = []  # closed, still reading their last events
        # the live events every subscriber reads from (Subscription): a ring of the newest
        # ``_ring_size`` (grown to the largest subscriber's maxlen), ``_seq`` the sequence
        # number of the next event; ``_new`` is notified once per event for waiting readers.
        # Slots older than every subscriber's cursor are cleared (SCAN_EVERY), so events are
        # not kept alive for nobody.
        self._ring_size = _ring_size(client_queue)
        self._ring: list[dict[str, Any] | None] = [None] * self._ring_size
        self._seq = 0
        self._cleared = 0  # slots below this sequence number are cleared
        self._since_scan = 0
        self._recorders: list[RecorderThread] = []
        self._publish_lock = threading.Lock()  # the same order on every queue
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self._q: queue.SimpleQueue[dict[str, Any] | Stop] = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._new = threading.Condition(self._lock)
        self.events = 0
        self.lagged_events = 0
        self.dropped_clients = 0
        # more figures for the ``counters`` event (the telemetry listener's), by their owners
        self._counter_sources: list[Callable[[], dict[str, int]]] = []
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="telemetry-bus", daemon=True)
        self._thread.start()

    # -- producing ----------------------------------------------------------------------------

    def emit(self, kind: str, /, **fields: Any) -> dict[str, Any]:
        """Build (validated), stamp and enqueue one event; never blocks."""
        event = make(kind, self.clock.now(), **fields)
        self.publish(event)
        return event

    def emit_at(self, t: int, kind: str, /, **fields: Any) -> dict[str, Any]:
        """Like :meth:`emit` with a time measured by the caller (engine-relative ns)."""
        event = make(kind, int(t), **fields)
        self.publish(event)
        return event

    def publish(self, event: dict[str, Any]) -> None:
        """Enqueue an already built event."""
        with self._pending_lock:
            self._pending += 1
            self._idle.clear()
        with self._publish_lock:
            for rec in self._recorders:
                rec.put(event)
            self._q.put(event)

    def add_recorder(self, recorder: Writer) -> None:
        """Every later event goes to ``recorder.write``, on a thread of its own (add before
        ``hello``)."""
        with self._publish_lock:
            self._recorders = [*self._recorders, RecorderThread(recorder)]

    @property
    def recorder_errors(self) -> list[str]:
        """What the recorders' ``write`` raised (at most 10 each)."""
        return [e for rec in self._recorders for e in rec.errors]

    def add_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call ``fn(event)`` on the dispatcher thread for every event (keep it fast)."""
        with self._lock:
            self._listeners.append(fn)

    # -- consuming ----------------------------------------------------------------------------

    def subscribe(
        self, name: str = "client", maxlen: int | None = None, *, counted: bool = True
    ) -> Subscription:
        """A new subscriber; its queue starts with hello, a snapshot and the retained events.
        ``counted=False``: the engine's own consumer (the metrics fold), not a client, so
        ``counters`` and ``/metrics`` do not count it."""
        sub = Subscription(self, maxlen or self.client_queue, name, counted)
        with self._lock:
            if sub.maxlen > self._ring_size:
                self._grow(_ring_size(sub.maxlen))
            head: tuple[dict[str, Any], ...] = () if self._hello is None else (self._hello,)
            # references to the shared chunks plus a copy of at most RETAIN_CHUNK events:
            # microseconds under the lock, whatever the retained history's length
            sub._put_initial([(*head, self._join_snap), *self._chunks, tuple(self._tail)])
            sub._cursor = self._seq  # live events from the next one on
            self._subs.append(sub)
        return sub

    def _grow(self, size: int) -> None:
        """(Under the lock) a larger ring, keeping the live events still in it."""
        old, old_size = self._ring, self._ring_size
        ring: list[dict[str, Any] | None] = [None] * size
        for seq in range(max(self._cleared, self._seq - old_size), self._seq):
            ring[seq % size] = old[seq % old_size]
        self._ring, self._ring_size = ring, size

    @property
    def retained(self) -> int:
        """Events a joining client is sent after hello and the snapshot."""
        with self._lock:
            return self._retained_n

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
                if sub._behind():
                    self._draining.append(sub)

    @property
    def clients(self) -> int:
        """Subscribers that are clients (the engine's own metrics fold is not one)."""
        with self._lock:
            return sum(1 for sub in self._subs if sub.counted)

    def missed_by_client(self) -> dict[str, int]:
        """Events each connected subscriber was skipped past so far, by name."""
        with self._lock:
            for sub in self._subs:
                sub._catch_up()
            return {sub.name: sub.missed for sub in self._subs}

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event emitted so far has been dispatched and recorded."""
        deadline = time.monotonic() + timeout
        if not self._idle.wait(timeout):
            return False
        return all(rec.flush(max(0.0, deadline - time.monotonic())) for rec in self._recorders)

    def add_counters(self, source: Callable[[], dict[str, int]]) -> None:
        """Fold ``source()`` into every ``counters`` event: a part of the engine that the bus
        does not know (the telemetry listener) reports its own figures this way."""
        with self._lock:
            self._counter_sources.append(source)

    def counters(self) -> dict[str, int]:
        out = {
            "events": self.events,
            "clients": self.clients,
            "dropped_clients": self.dropped_clients,
            "lagged_events": self.lagged_events,
        }
        with self._lock:
            sources = list(self._counter_sources)
        for source in sources:
            out.update(source())
        return out

    def close(self) -> None:
        """Dispatch what is queued, then stop the dispatcher and close the subscribers."""
        self._q.put(_STOP)
        self._thread.join(timeout=30)
        for rec in self._recorders:
            rec.close()
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub.close()

    # -- dispatching --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            event = self._q.get()
            if event is _STOP:
                return
            try:
                self._dispatch(event)
            finally:
                with self._pending_lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.set()

    def _turn(self, snap: dict[str, Any]) -> None:
        """(Under the lock) ``snap`` is the state after every retained event: the previous
        newest snapshot becomes the one clients join from, and the events before it go."""
        self._freeze()  # the snapshot's boundary is a chunk boundary: whole chunks go
        if self._next_snap is not None:
            self._join_snap = self._next_snap
            for _ in range(self._next_at):
                self._retained_n -= len(self._chunks.popleft())
        self._next_snap = snap
        self._next_at = len(self._chunks)
        self._since_snap = 0

    def _freeze(self) -> None:
        """(Under the lock) the tail becomes an immutable chunk."""
        if self._tail:
            self._chunks.append(tuple(self._tail))
            self._tail = []

    def _dispatch(self, event: dict[str, Any]) -> None:
        # the state's only writer is this thread: fold, trim and snapshot outside the lock
        self.state.apply(event)
        self._since_trim += 1
        if self._since_trim >= TRIM_EVERY:
            self._since_trim = 0
            self.state.trim(self.window)
        snap = None
        if event["k"] == "hello":  # clients joining before the first turn start from here
            self._join_snap = make("snapshot", self.state.t, state=_detached(self.state))
        elif self._since_snap + 1 >= max(1, self.retain // 2):
            self.state.trim(self.window)  # the snapshot holds the window, not the run
            snap = make("snapshot", self.state.t, state=_detached(self.state))
        with self._lock:
            self.events += 1
            if event["k"] == "hello":
                self._hello = event
            else:
                self._tail.append(event)
                self._retained_n += 1
                self._since_snap += 1
                if len(self._tail) >= RETAIN_CHUNK:
                    self._freeze()
            if snap is not None:
                self._turn(snap)
            for fn in self._listeners:
                try:
                    fn(event)
                except Exception:  # a listener bug must not stop the run
                    pass
            # once into the log, whatever the number of subscribers (Subscription)
            self._ring[self._seq % self._ring_size] = event
            self._seq += 1
            self._since_scan += 1
            if self._since_scan >= SCAN_EVERY:
                self._since_scan = 0
                self._scan()
            self._new.notify_all()

    def _scan(self) -> None:
        """(Under the lock, every SCAN_EVERY events) count what each subscriber has fallen
        behind by (``lagged_events``, and a client that missed ``drop_after`` is
        disconnected) and clear the slots no subscriber will read again."""
        floor = self._seq
        for sub in list(self._subs):
            sub._catch_up()
            if sub.missed >= self.drop_after:
                self.dropped_clients += 1
                sub.close()
                continue
            floor = min(floor, sub._cursor)
        # closed ones still reading what was published before their close keep theirs
        self._draining = [sub for sub in self._draining if sub._behind()]
        for sub in self._draining:
            floor = min(floor, sub._cursor)
        floor = max(floor, self._seq - self._ring_size)
        # (slots of events older than a ring's length hold newer ones already)
        for seq in range(max(self._cleared, self._seq - self._ring_size), floor):
            self._ring[seq % self._ring_size] = None
        self._cleared = max(self._cleared, floor)


def _ring_size(maxlen: int) -> int:
    """Slots for a subscriber window of ``maxlen`` live events: a power of two, at least
    SCAN_EVERY (slots are cleared a scan at a time)."""
    return 1 << max(int(maxlen), SCAN_EVERY).bit_length()


def _detached(state: State) -> dict[str, Any]:
    """``state.snapshot()`` with its own top-level lists and maps: the snapshot is encoded by
    client threads while this thread goes on appending to (and trimming) the live ones."""
    return {
        k: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v
        for k, v in state.snapshot().items()
    }

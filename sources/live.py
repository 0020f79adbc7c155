"""Where events come from: a live engine's socket, a recording file, or anything else that can
produce schema events (the cuzk adapter plugs in here as a read-only source).

Sources know nothing about Textual. A live source runs a blocking loop (the app runs it in a
thread worker) and hands events to a :class:`Sink` in batches, because handing a UI thousands of
single events per second is what makes dashboards stutter. A replay source is driven by the app's
clock instead: it answers "the state at position p" quickly thanks to checkpoints.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from recordings.state import LogLine, State
from sources.errors import SourceError

BATCH_SECONDS = 0.05  # a live batch is flushed at least this often
BATCH_MAX = 5000  # ... or when it holds this many events
RECONNECT_MIN, RECONNECT_MAX = 0.25, 5.0
KEEP_MAX = 2_000_000  # events kept for "save"; beyond it the oldest half goes (hello stays)


class Sink(Protocol):
    """What a source feeds. Both methods may be called from any thread."""

    def events(self, source: EventSource, batch: list[dict[str, Any]]) -> None: ...

    def status(self, source: EventSource, text: str, level: str = "info") -> None: ...


@runtime_checkable
class EventSource(Protocol):
    """A producer of telemetry events the dashboard can watch.

    ``run`` blocks until :meth:`close` and delivers batches to the sink; a batch starting with
    ``hello`` begins a new session (the app starts a fresh state). ``read_only`` sources refuse
    :meth:`send` with :class:`SourceError`; the app greys their controls out."""

    label: str
    read_only: bool

    def run(self, sink: Sink) -> None: ...

    def close(self) -> None: ...

    def send(self, cmd: str, args: dict[str, Any]) -> int: ...


# ---------------------------------------------------------------------------------------------
# addresses


@dataclass(frozen=True)
class Address:
    kind: str  # "unix" or "tcp"
    path: str = ""
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        return f"unix:{self.path}" if self.kind == "unix" else f"tcp://{self.host}:{self.port}"

    @property
    def short(self) -> str:
        return Path(self.path).name if self.kind == "unix" else f"{self.host}:{self.port}"


def local_engines() -> list[str]:
    """Sockets of engines running on this machine for this user, newest first.

    ``provetop engine`` listens by default in a fresh private directory ``provetop-*`` under
    ``$XDG_RUNTIME_DIR`` (or the temp directory) and prints the path; this finds those sockets
    so ``provetop watch`` without an address attaches to the local engine."""
    import glob
    import stat
    import tempfile

    runtime = os.environ.get("XDG_RUNTIME_DIR")  # where the engine puts it, as it decides
    bases = [runtime if runtime and os.path.isdir(runtime) else tempfile.gettempdir()]
    found: list[tuple[float, str]] = []
    for base in bases:
        for path in glob.glob(os.path.join(base, "provetop-*", "engine.sock")):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
                found.append((st.st_mtime, path))
    return [path for _, path in sorted(found, reverse=True)]


def default_address() -> str | None:
    """The newest local engine socket that accepts a connection, or None."""
    for path in local_engines():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(path)
        except OSError:
            continue
        finally:
            probe.close()
        return path
    return None


def parse_address(text: str) -> Address:
    """``unix:PATH``, a plain path, or ``tcp://HOST:PORT``; raises ValueError otherwise."""
    if text.startswith("tcp://"):
        rest = text[len("tcp://") :]
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"bad TCP address {text!r}: expected tcp://HOST:PORT")
        return Address("tcp", host=host.strip("[]"), port=int(port))
    if text.startswith("unix:"):
        text = text[len("unix:") :]
    if not text:
        raise ValueError("empty address")
    if "://" in text:
        raise ValueError(f"unsupported address {text!r}: use unix:PATH or tcp://HOST:PORT")
    return Address("unix", path=text)


# ---------------------------------------------------------------------------------------------
# live


class LiveSource:
    """A socket client of one engine: connects, authenticates on TCP, reads framed msgpack,
    reconnects with backoff when the engine goes away, and sends control commands.

    Every event received is also kept packed (msgpack bytes) so "save the run" can write what
    this dashboard saw in the recording format, even for a remote engine."""

    def __init__(
        self,
        address: str | Address | None,
        *,
        token: str | None = None,
        keep: bool = True,
        reconnect: bool = True,
    ) -> None:
        # None: the local engine, found again at every attempt (a restarted engine listens
        # in a fresh private directory)
        self.discover = address is None
        if address is None:
            address = default_address() or "unix:(no local engine)"
        self.address = address if isinstance(address, Address) else parse_address(address)
        self.token = token
        self.label = self.address.short
        self.read_only = False
        self.keep = keep
        self.reconnect = reconnect
        self.received: list[bytes] = []
        self.dropped = 0  # events no longer kept for "save" (a very long session)
        self.invalid_events = 0  # events that broke the schema, not passed on
        self.connected = False
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._closed = threading.Event()
        self._next_id = 1

    # -- the loop -----------------------------------------------------------------------------

    def run(self, sink: Sink) -> None:
        delay = RECONNECT_MIN
        while not self._closed.is_set():
            try:
                sock = self._connect()
            except OSError as exc:
                sink.status(self, f"connecting ({exc.strerror or exc})", "warn")
                if not self.reconnect:
                    return
                self._closed.wait(delay)
                delay = min(RECONNECT_MAX, delay * 2)
                continue
            delay = RECONNECT_MIN
            self._sock, self.connected = sock, True
            sink.status(self, "connected", "info")
            reason = self._read(sock, sink)
            self.connected = False
            with self._send_lock:
                self._sock = None
            try:
                sock.close()
            except OSError:
                pass
            if self._closed.is_set():
                break
            sink.status(self, f"disconnected ({reason})", "error")
            if not self.reconnect:
                return
            self._closed.wait(delay)
        sink.status(self, "closed", "info")

    def _connect(self) -> socket.socket:
        if self.discover:
            found = default_address()
            if found is None:
                raise ConnectionRefusedError("no local engine running")
            self.address = parse_address(found)
        addr = self.address
        if addr.kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = addr.path
        else:
            sock = socket.socket(socket.AF_INET6 if ":" in addr.host else socket.AF_INET)
            target = (addr.host, addr.port)
        sock.settimeout(2.0)
        try:
            sock.connect(target)
        except OSError:
            sock.close()
            raise
        sock.settimeout(0.2)
        if addr.kind == "tcp":
            from recordings.framing import encode_frame

            sock.sendall(encode_frame({"k": "auth", "token": self.token or ""}))
        return sock

    def _read(self, sock: socket.socket, sink: Sink) -> str:
        import msgpack

        from recordings.framing import FrameDecoder, FrameError
        from recordings.schema import SchemaError, validate

        decoder = FrameDecoder()
        batch: list[dict[str, Any]] = []
        invalid = 0
        flushed = time.monotonic()
        reason = "closed by the engine"
        while not self._closed.is_set():
            try:
                data = sock.recv(1 << 18)
            except TimeoutError:
                data = None
            except OSError as exc:
                reason = str(exc.strerror or exc)
                break
            if data == b"":
                break
            if data:
                try:
                    decoder.feed(data)
                    for event in decoder.frames():
                        try:  # the state reducer trusts its input: check what a peer sent
                            validate(event)
                        except SchemaError as exc:
                            invalid += 1
                            self.invalid_events += 1
                            if invalid == 1:
                                sink.status(self, f"ignored an invalid event ({exc})", "warn")
                            continue
                        if event.get("k") == "hello":
                            self.read_only = bool(event.get("read_only"))
                            self.label = f"{event.get('engine_id', '?')}@{event.get('host', '?')}"
                            if batch:  # the previous session's tail first
                                sink.events(self, batch)
                                batch = []
                        batch.append(event)
                        if self.keep:
                            self.received.append(msgpack.packb(event, use_bin_type=True))
                            if len(self.received) > KEEP_MAX:
                                del self.received[1 : KEEP_MAX // 2]
                                self.dropped += KEEP_MAX // 2 - 1
                except FrameError as exc:
                    reason = f"bad frame: {exc}"
                    break
            now = time.monotonic()
            if batch and (data is None or now - flushed >= BATCH_SECONDS or len(batch) > BATCH_MAX):
                sink.events(self, batch)
                batch, flushed = [], now
        if batch:
            sink.events(self, batch)
        return reason

    # -- control ------------------------------------------------------------------------------

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        if self.read_only:
            raise SourceError("this engine is read-only")
        from recordings.framing import encode_frame

        with self._send_lock:
            if self._sock is None:
                raise SourceError("not connected")
            cid = self._next_id
            self._next_id += 1
            frame = encode_frame({"k": "command", "id": cid, "cmd": cmd, "args": args})
            try:
                self._sock.sendall(frame)
            except OSError as exc:
                raise SourceError(f"send failed: {exc}") from exc
        return cid

    def close(self) -> None:
        self._closed.set()
        with self._send_lock:
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def received_events(self) -> Iterable[dict[str, Any]]:
        import msgpack

        for packed in list(self.received):
            yield msgpack.unpackb(packed, raw=False)


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


# ---------------------------------------------------------------------------------------------
# replay


@dataclass
class Checkpoint:
    """A point replay can restart folding from: ``events[:index]`` are in its state, which is
    either a ``State.snapshot()`` dict or loaded on demand (the recording's seek snapshots)."""

    index: int
    t: int
    snapshot: dict[str, Any] | None = None
    load: Callable[[], State] | None = None

    def state(self) -> State:
        if self.load is not None:
            return self.load()
        assert self.snapshot is not None
        return State.from_snapshot(self.snapshot)


def next_point(faults: list[int], markers: list[int], position: int, forward: bool) -> int | None:
    """The first fault or marker time after (or, backwards, before) ``position``, at least
    1 µs away so that repeating the jump moves on instead of landing on the same point."""
    points = sorted(set(faults) | set(markers))
    if forward:
        later = [t for t in points if t > position + 1000]
        return later[0] if later else None
    earlier = [t for t in points if t < position - 1000]
    return earlier[-1] if earlier else None


class ReplaySource:
    """A recording, seekable. ``state_at(p, window)`` returns the state after every event up to
    position ``p`` with history (timeline segments, memory series) covering at least the last
    ``window`` nanoseconds: it starts from the nearest checkpoint before ``p - window`` and
    folds forward. Checkpoints come from the recording's own snapshots when it has them, else
    they are built once in the background."""

    HISTORY_MAX_EVENTS = 200_000  # fold at most this many events per seek (history beyond: cut)

    def __init__(
        self,
        events: list[dict[str, Any]],
        *,
        label: str = "replay",
        truncated: bool = False,
        checkpoints: list[Checkpoint] | None = None,
        path: str | None = None,
    ) -> None:
        self.events = events
        self.label = label
        self.path = path
        self.truncated = truncated
        self.read_only = True
        # running maximum: producers' threads may emit slightly out of order, bisection needs
        # a sorted key, and "the events up to p" means the prefix whose times stay <= p
        self.times = list(accumulate((int(e.get("t", 0)) for e in events), max))
        self.start = self.times[0] if self.times else 0
        self.end = self.times[-1] if self.times else 0
        self.checkpoints: list[Checkpoint] = sorted(checkpoints or [], key=lambda c: c.index)
        self._ck_times = [c.t for c in self.checkpoints]
        self._ck_lock = threading.Lock()
        self.faults = [e["t"] for e in events if e.get("k") == "fault"]
        self.markers = [e["t"] for e in events if e.get("k") == "marker"]
        self.hello = next((e for e in events[:1000] if e.get("k") == "hello"), None)
        self.recording: Any = None

    @classmethod
    def open(cls, path: str | os.PathLike) -> ReplaySource:
        """Read a recording file (the recordings package's reader)."""
        from recordings.reader import open_recording

        rec = open_recording(path)
        source = cls(rec.events, label=Path(path).name, truncated=rec.truncated, path=str(path))
        cks = []
        for ref in rec.snapshots:  # the writer's seek snapshots, loaded only when used
            index = bisect_right(source.times, ref.t)
            cks.append(Checkpoint(index, ref.t, load=lambda t=ref.t: rec.state_at(t)))
        source.set_checkpoints(cks)
        source.recording = rec
        return source

    def set_checkpoints(self, checkpoints: list[Checkpoint]) -> None:
        with self._ck_lock:
            self.checkpoints = sorted(checkpoints, key=lambda c: c.index)
            self._ck_times = [c.t for c in self.checkpoints]

    # -- checkpoints --------------------------------------------------------------------------

    def build_checkpoints(
        self, every_s: float | None = None, stop: threading.Event | None = None
    ) -> None:
        """Fold the whole recording once, keeping a snapshot every ``every_s`` seconds of
        recording time (default: about 200 over the recording, at least 5 s apart)."""
        if self.checkpoints or not self.events:
            return
        import msgpack

        span_s = (self.end - self.start) / 1e9
        every = int((every_s or max(5.0, span_s / 200)) * 1e9)
        state = State()
        next_t = self.start + every
        built: list[Checkpoint] = []
        for i, event in enumerate(self.events):
            if stop is not None and stop.is_set():
                return
            if self.times[i] >= next_t:
                # packed and unpacked: a deep copy (the snapshot shares lists with the state
                # still being folded), in exactly the shape a recorded snapshot has
                snap = msgpack.unpackb(msgpack.packb(state.snapshot()), raw=False)
                built.append(Checkpoint(i, state.t, snap))
                next_t = self.times[i] + every
            state.apply(event)
        self.set_checkpoints(built)

    # -- seeking ------------------------------------------------------------------------------

    def index_at(self, position: int) -> int:
        """How many events happened at or before ``position``."""
        return bisect_right(self.times, position)

    def state_at(self, position: int, window: int) -> tuple[State, int]:
        """(state at ``position`` with ``window`` of history, index of the next event)."""
        target = self.index_at(position)
        with self._ck_lock:
            cks, times = self.checkpoints, self._ck_times
        state = State()
        begin = 0
        j = bisect_right(times, position - window) - 1
        while j >= 0 and cks[j].index > target:
            j -= 1
        if j >= 0:
            state = cks[j].state()
            begin = cks[j].index
            if state.hello is None and self.hello is not None:
                state.hello = self.hello
        if target - begin > self.HISTORY_MAX_EVENTS:  # very wide windows: newest part only
            k = bisect_right(times, self.times[max(0, target - self.HISTORY_MAX_EVENTS)]) - 1
            if k > j and k >= 0 and cks[k].index <= target:
                state = cks[k].state()
                begin = cks[k].index
        state.fold(self.events[begin:target])
        return state, target

    def advance(self, state: State, index: int, position: int) -> int:
        """Fold the events after ``index`` up to ``position`` into ``state``; the new index."""
        target = self.index_at(position)
        if target > index:
            state.fold(self.events[index:target])
        return max(index, target)

    def next_point(self, position: int, forward: bool) -> int | None:
        """The next (or previous) fault or marker time from ``position``."""
        return next_point(self.faults, self.markers, position, forward)

    # EventSource-compatible surface (the app drives replay itself)
    def run(self, sink: Sink) -> None:  # pragma: no cover - replay is driven by the app
        sink.status(self, "loaded", "info")

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        raise SourceError("controls are not available in replay")

    def close(self) -> None:
        pass


def log_line(state: State, t: int, level: str, text: str) -> None:
    """Add a dashboard-side line (connection, control sent) to a state's event log."""
    state.log.append(LogLine(t, level, text))


__all__ = [
    "Address",
    "Checkpoint",
    "EventSource",
    "FeedSource",
    "LiveSource",
    "ReplaySource",
    "Sink",
    "SourceError",
    "default_address",
    "local_engines",
    "log_line",
    "parse_address",
]

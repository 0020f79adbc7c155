"""A live engine as an event source: the dashboard's (or a script's) view of one engine's socket.

:class:`LiveSource` wraps :class:`provetop.sources.client.EngineClient` with what a long-running
reader
needs and a one-shot client does not: reconnecting with backoff when the engine goes away (and,
for the local engine, finding it again: a restarted engine listens in a fresh private
directory), checking every event against the schema before the state reducer sees it (a peer
may be broken or hostile), handing events to a :class:`provetop.sources.protocol.Sink` in batches,
and
keeping what it received so "save the run" can write it as a recording.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable
from typing import Any

import msgpack

from provetop.recordings.address import Address, parse_address
from provetop.recordings.framing import FrameError
from provetop.recordings.schema import SchemaError, validate
from provetop.sources.client import EngineClient
from provetop.sources.discovery import default_address
from provetop.sources.errors import SourceError
from provetop.sources.protocol import BATCH_MAX, BATCH_SECONDS, Sink, names_its_thread

__all__ = ["KEEP_MAX", "LiveSource"]

RECONNECT_MIN, RECONNECT_MAX = 0.25, 5.0
CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 0.2  # a read waits at most this long, so batches flush and close() is seen
KEEP_MAX = 2_000_000  # events kept for "save"; beyond it the oldest half goes (hello stays)


class LiveSource:
    """One engine, read until :meth:`close`: connects (on TCP with the auth frame, ``token`` or
    empty), reads framed msgpack, reconnects with backoff when the engine goes away, and sends
    control commands.

    ``address`` None (or ``unix``): the newest local engine, looked up again at every attempt.
    Every event received is also kept packed (msgpack bytes) when ``keep``, so "save the run"
    can write what this reader saw in the recording format, even for a remote engine."""

    def __init__(
        self,
        address: str | Address | None,
        *,
        token: str | None = None,
        keep: bool = True,
        reconnect: bool = True,
    ) -> None:
        if not isinstance(address, Address):
            address = parse_address(address)
        self.discover = address.default
        if self.discover:
            address = parse_address(default_address() or "unix:(no local engine)")
        self.address = address
        self.token = token
        self.label = self.address.short
        self.read_only = False
        self.keep = keep
        self.reconnect = reconnect
        self.received: list[bytes] = []
        self.dropped = 0  # events no longer kept for "save" (a very long session)
        self.invalid_events = 0  # events that broke the schema, not passed on
        self.connected = False
        self.ever_connected = False  # a source that never got through is "unreachable"
        self.failures = 0  # connection attempts failed in a row
        self.retry_at: float | None = None  # time.monotonic() of the next attempt, while waiting
        self._client: EngineClient | None = None
        self._send_lock = threading.Lock()
        self._closed = threading.Event()
        self._ids = itertools.count(1)  # command ids, unique across reconnections

    # -- the loop -------------------------------------------------------------------------------

    @names_its_thread
    def run(self, sink: Sink) -> None:
        """Deliver batches to ``sink`` until :meth:`close` (or the first failure, without
        ``reconnect``). Blocks: the dashboard runs it in a thread worker."""
        delay = RECONNECT_MIN
        while not self._closed.is_set():
            try:
                client = self._connect()
            except OSError as exc:
                self.failures += 1
                self.retry_at = time.monotonic() + delay if self.reconnect else None
                # never reached: "unreachable" (the dashboard quits when it is its only
                # source); reached before: it went away and is being waited for
                state = "reconnecting" if self.ever_connected else "unreachable"
                level = "warn" if self.ever_connected else "error"
                sink.status(self, f"{state} ({exc.strerror or exc})", level)
                if not self.reconnect:
                    return
                self._closed.wait(delay)
                delay = min(RECONNECT_MAX, delay * 2)
                continue
            delay = RECONNECT_MIN
            self.failures, self.retry_at, self.ever_connected = 0, None, True
            self._client, self.connected = client, True
            sink.status(self, "connected", "info")
            reason = self._read(client, sink)
            self.connected = False
            with self._send_lock:
                self._client = None
            client.close()
            if self._closed.is_set():
                break
            sink.status(self, f"disconnected ({reason})", "error")
            if not self.reconnect:
                return
            self._closed.wait(delay)
        sink.status(self, "closed", "info")

    def _connect(self) -> EngineClient:
        if self.discover:
            found = default_address()
            if found is None:
                raise ConnectionRefusedError("no local engine running")
            self.address = parse_address(found)
        token = (self.token or "") if self.address.kind == "tcp" else None
        return EngineClient(self.address, token=token, timeout=CONNECT_TIMEOUT_S)

    def _read(self, client: EngineClient, sink: Sink) -> str:
        """Read until the connection ends or :meth:`close`; the reason it ended, in words."""
        batch: list[dict[str, Any]] = []
        invalid = 0
        flushed = time.monotonic()
        reason = "closed by the engine"
        while not self._closed.is_set():
            try:
                frames = client.read(READ_TIMEOUT_S)
            except OSError as exc:
                reason = str(exc.strerror or exc)
                break
            except FrameError as exc:
                reason = f"bad frame: {exc}"
                break
            if frames is None:
                break
            for event in frames:
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
                    self._keep(event)
            now = time.monotonic()
            if batch and (not frames or now - flushed >= BATCH_SECONDS or len(batch) > BATCH_MAX):
                sink.events(self, batch)
                batch, flushed = [], now
        if batch:
            sink.events(self, batch)
        return reason

    def _keep(self, event: dict[str, Any]) -> None:
        self.received.append(msgpack.packb(event, use_bin_type=True))
        if len(self.received) > KEEP_MAX:
            del self.received[1 : KEEP_MAX // 2]
            self.dropped += KEEP_MAX // 2 - 1

    # -- control --------------------------------------------------------------------------------

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        """Send a control command; its id. :class:`SourceError` when the engine is read-only,
        not connected, or the send fails."""
        if self.read_only:
            raise SourceError("this engine is read-only")
        with self._send_lock:
            if self._client is None:
                raise SourceError("not connected")
            try:
                return self._client.command(cmd, args, cid=next(self._ids))
            except OSError as exc:
                raise SourceError(f"send failed: {exc}") from exc

    def close(self) -> None:
        self._closed.set()
        with self._send_lock:
            if self._client is not None:
                self._client.shutdown()

    def received_events(self) -> Iterable[dict[str, Any]]:
        """What was received (and kept), decoded again, in order."""
        for packed in list(self.received):
            yield msgpack.unpackb(packed, raw=False)

"""The one client of the engine's telemetry socket: connect, authenticate, read events, send
commands.

Why one: the dashboard's live source, the tests, ``bench/load_clients.py`` and any script need
the same few steps (the address syntax of :mod:`provetop.recordings.address`, the TCP auth frame,
framed
msgpack with the decoder's bounds, command ids), and two copies had drifted apart. This module
does no reconnecting, batching or schema checks: :class:`provetop.sources.live.LiveSource` adds
those
for the dashboard.

    with EngineClient("unix:/run/user/1000/provetop-x/engine.sock") as client:
        for event in client.events():
            ...
"""

from __future__ import annotations

import errno
import itertools
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

from provetop.recordings.address import Address, parse_address
from provetop.recordings.framing import FrameDecoder, FrameError, encode_frame

__all__ = ["EngineClient", "RECV_BYTES"]

RECV_BYTES = 1 << 18  # bytes asked of the socket per read


class EngineClient:
    """Connected to ``address`` (``unix:PATH``, a path, or ``tcp://HOST:PORT``, as
    ``provetop engine`` prints it). With ``token``, the first frame sent is the TCP auth frame
    (the engine closes a TCP connection without it). ``timeout`` bounds the connect and, until
    a read passes its own, every read. Raises ``OSError`` when the engine cannot be reached and
    :class:`provetop.recordings.address.AddressError` (a ``ValueError``) for a malformed address;
    the
    default ``unix`` address names no socket, so a caller resolves it first
    (:func:`provetop.sources.discovery.default_address`)."""

    def __init__(
        self, address: str | Address, token: str | None = None, timeout: float = 10.0
    ) -> None:
        self.address = address if isinstance(address, Address) else parse_address(address)
        if self.address.default:
            raise ValueError("the default address 'unix' names no socket: give unix:PATH")
        self.sock = _connect(self.address, timeout)
        self.decoder = FrameDecoder()
        self._broken: FrameError | None = None
        self._ids = itertools.count(1)
        if token is not None:
            self.send({"k": "auth", "token": token})

    # -- sending --------------------------------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> None:
        """Send one frame (a map; :class:`provetop.recordings.framing.FrameError` if it cannot be
        one)."""
        self.sock.sendall(encode_frame(frame))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (tests of the engine's defences against broken framing)."""
        self.sock.sendall(data)

    def command(
        self, cmd: str, args: dict[str, Any] | None = None, *, cid: int | None = None
    ) -> int:
        """Send a control command; return its id (match it against ``control`` events). Ids
        count from 1 per client unless ``cid`` is given (a caller numbering across
        reconnections)."""
        if cid is None:
            cid = next(self._ids)
        self.send({"k": "command", "id": cid, "cmd": cmd, "args": args or {}})
        return cid

    # -- receiving ------------------------------------------------------------------------------

    def read(self, timeout: float | None = None) -> list[dict[str, Any]] | None:
        """One read of the socket: the frames it completed (``[]`` when nothing, or only part
        of a frame, arrived within ``timeout``); None when the engine closed the connection.
        Raises :class:`provetop.recordings.framing.FrameError` on broken framing, after returning
        the
        frames complete before it (the connection is then unusable), and ``OSError`` on
        socket errors."""
        if self._broken is not None:
            raise self._broken
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(RECV_BYTES)
        except TimeoutError:
            return []
        if not data:
            return None
        frames: list[dict[str, Any]] = []
        try:
            self.decoder.feed(data)
            frames.extend(self.decoder.frames())
        except FrameError as exc:
            if not frames:
                raise
            self._broken = exc  # the frames before the break first; the error on the next read
        return frames

    def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event; None when the engine closed the connection. ``TimeoutError`` when
        nothing arrives within ``timeout`` (the constructor's by default)."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(RECV_BYTES)
            if not data:
                return None
            self.decoder.feed(data)

    def events(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Events until the connection closes."""
        while True:
            event = self.next_event(timeout)
            if event is None:
                return
            yield event

    # -- closing --------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Wake a read blocked in another thread (it sees the connection closed)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect(address: Address, timeout: float) -> socket.socket:
    """A connected socket within ``timeout``. On a Unix socket whose backlog is full (an
    engine pacing a storm of connections), it waits its turn, as a TCP connect does.

    Why not ``settimeout`` before ``connect`` there: that makes the socket non-blocking, and
    Linux then fails a Unix connect at once (EAGAIN) while the backlog is full. Instead the
    connect blocks, bounded by ``SO_SNDTIMEO`` (which Linux applies to a Unix connect's wait
    for room), and is tried again until the deadline."""
    if address.kind == "tcp":
        family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect((address.host, address.port))
        except OSError:
            sock.close()
            raise
        return sock
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        left = max(0.001, deadline - time.monotonic())
        try:
            secs = int(left)
            sock.setsockopt(
                socket.SOL_SOCKET,
                socket.SO_SNDTIMEO,
                struct.pack("ll", secs, int((left - secs) * 1e6)),
            )
            sock.connect(address.path)
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.EAGAIN, errno.EINPROGRESS, errno.EINTR):
                raise
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{address.path}: the engine's backlog stayed full for {timeout:g} s"
                ) from None
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(0.1, pause * 2)
            continue
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 0))
        sock.settimeout(timeout)  # reads and writes from now on, as before
        return sock

"""A minimal client of the engine's socket: connect, read events, send commands.

Why here: tests, ``provetop watch`` and scripts all need the same few lines (framing, TCP
auth, command ids), and the protocol is the engine's; the dashboard can use this or its own.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator
from typing import Any

from recordings.framing import FrameDecoder, encode_frame


class EngineClient:
    """Connected to ``address`` ("unix:PATH" or "tcp://HOST:PORT", as ``Engine.address``)."""

    def __init__(self, address: str, token: str | None = None, timeout: float = 10.0) -> None:
        if address.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = address[5:]
        elif address.startswith("tcp://"):
            host, _, port = address[6:].rpartition(":")
            host = host.strip("[]")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self.sock = socket.socket(family, socket.SOCK_STREAM)
            target = (host, int(port))
        else:
            raise ValueError(f"not an engine address: {address!r}")
        self.sock.settimeout(timeout)
        self.sock.connect(target)
        self.decoder = FrameDecoder()
        self._ids = itertools.count(1)
        if token is not None:
            self.send({"k": "auth", "token": token})

    def send(self, frame: dict[str, Any]) -> None:
        self.sock.sendall(encode_frame(frame))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, cmd: str, args: dict[str, Any] | None = None) -> int:
        """Send a control command; return its id (match it against ``control`` events)."""
        cid = next(self._ids)
        self.send({"k": "command", "id": cid, "cmd": cmd, "args": args or {}})
        return cid

    def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event; None when the engine closed the connection. socket.timeout when
        nothing arrives within ``timeout`` (the constructor's by default)."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(65536)
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

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The project's own client waits its turn on a Unix socket whose backlog is full (it failed
at once with EAGAIN: a timeout set before ``connect()`` made the socket non-blocking)."""

from __future__ import annotations

import socket
import threading

import pytest

from provetop.sources.client import EngineClient


def _full_listener(path: str) -> tuple[socket.socket, list[socket.socket]]:
    """A listening socket that accepts nothing, its backlog filled by other connections."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    fillers = []
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            return server, fillers
        fillers.append(s)


def test_the_client_waits_for_room_in_a_full_unix_backlog(tmp_path):
    path = str(tmp_path / "e.sock")
    server, fillers = _full_listener(path)
    outcome: list[object] = []
    started = threading.Event()

    def connect() -> None:
        started.set()
        try:
            outcome.append(EngineClient(f"unix:{path}", timeout=30.0))
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    started.wait()
    worker.join(0.3)  # the old client had failed by now (EAGAIN at once)
    assert not outcome, f"the client gave up on a full backlog: {outcome}"
    conns = [server.accept()[0] for _ in range(len(fillers) + 1)]  # room: the queue drains
    worker.join(30)
    assert outcome and isinstance(outcome[0], EngineClient), outcome
    outcome[0].close()
    for s in [*conns, *fillers, server]:
        s.close()


def test_a_backlog_that_stays_full_fails_at_the_clients_own_deadline(tmp_path):
    path = str(tmp_path / "e.sock")
    server, fillers = _full_listener(path)
    try:
        with pytest.raises(TimeoutError, match="backlog stayed full"):
            EngineClient(f"unix:{path}", timeout=0.3)
    finally:
        for s in [*fillers, server]:
            s.close()

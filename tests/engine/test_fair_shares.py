"""Fair shares: idle clients cannot lock the operator out of the telemetry socket, slow-loris
connections cannot keep scrapes off /metrics, and every connection's commands come out of one
budget (ten connections at 90 commands a second each, all under the per-connection cap, took
a third of the run's partitions/s). The cost figures are in ``provetop bench flood``."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import provetop.engine.telemetry.server as server_mod
import provetop.recordings.prometheus.http_server as http_mod
from provetop.engine.telemetry.server import Budget
from provetop.recordings.prometheus.http_server import MetricsServer
from provetop.sources.client import EngineClient
from tests.engine.test_socket_security import _engine


def test_idle_clients_are_evicted_oldest_first_for_the_operator(monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_CLIENTS", 4)
    monkeypatch.setattr(server_mod, "IDLE_EVICT_S", 0.2)
    engine = _engine(held=True)
    engine.start()
    path = engine.address[5:]
    try:
        idle = []
        for _ in range(3):  # connect and never read
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(path)
            idle.append(s)
        reader = EngineClient(engine.address)  # a dashboard: reads along
        got: list[dict] = []
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                frames = reader.read(timeout=0.05)
                if frames is None:
                    return
                got.extend(frames)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        time.sleep(0.4)  # past IDLE_EVICT_S for the idle ones
        with EngineClient(engine.address) as operator:  # the 5th at a cap of 4
            assert operator.next_event(timeout=5)["k"] == "hello"
        assert engine.server.evicted_idle >= 1
        closed = 0
        for s in idle:  # an evicted one reads to its end within a second; the others never
            s.settimeout(0.2)
            deadline = time.monotonic() + 1.0
            try:
                while time.monotonic() < deadline:
                    if not s.recv(1 << 20):
                        closed += 1
                        break
            except (TimeoutError, OSError):
                pass
        assert closed >= 1  # an idle one made room
        stop.set()
        thread.join(5)
        assert got and got[0]["k"] == "hello" and thread.ident  # the reader kept its slot
        assert not reader.sock._closed
        reader.close()
        for s in idle:
            s.close()
    finally:
        engine.backend.release()
        engine.close()


def test_the_command_budget_is_shared_by_every_connection(monkeypatch):
    """Twenty commands go at once (the burst), then one every 1/rate whoever sends them."""
    now = [1000.0]
    waits: list[float] = []
    monkeypatch.setattr(server_mod.time, "monotonic", lambda: now[0])

    class Closed:
        def wait(self, seconds: float) -> bool:
            waits.append(seconds)
            return False

    budget = Budget(20, 20)
    for _ in range(20):
        assert budget.take(Closed())  # type: ignore[arg-type]
    assert waits == []
    for _ in range(10):  # from as many connections as you like: one line
        budget.take(Closed())  # type: ignore[arg-type]
    assert [round(w, 6) for w in waits] == [round(0.05 * (i + 1), 6) for i in range(10)]
    assert budget.waited == 10
    now[0] += 60.0  # after a quiet minute the burst is back
    waits.clear()
    budget.take(Closed())  # type: ignore[arg-type]
    assert waits == []


def test_slow_loris_connections_cannot_keep_scrapes_off_metrics(monkeypatch):
    monkeypatch.setattr(http_mod, "REQUEST_DEADLINE_S", 30.0)  # only eviction makes room here
    server = MetricsServer(lambda: b"up 1\n", "127.0.0.1:0")
    server.start()
    try:
        loris = []
        for _ in range(http_mod.MAX_THREADS):  # every slot held by a trickled request
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            loris.append(s)
        time.sleep(0.2)  # their handlers are waiting for the rest of the headers
        ok = 0
        for _ in range(5):
            with urllib.request.urlopen(server.url, timeout=5) as resp:
                ok += resp.read() == b"up 1\n"
        assert ok == 5
        for s in loris:
            s.close()
    finally:
        server.close()

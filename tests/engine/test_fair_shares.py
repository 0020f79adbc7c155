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
from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.prometheus.http_server import MetricsServer
from provetop.sources.client import EngineClient
from tests.engine.test_socket_security import _engine, _until


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
            now[0] += seconds  # the clock moves while a command waits
            return False

    def take(budget: Budget) -> None:  # one command, its whole wait into ``waits``
        start = now[0]
        assert budget.take(Closed())  # type: ignore[arg-type]
        waits.append(now[0] - start)

    budget = Budget(20, 20)
    for _ in range(20):
        take(budget)
    assert waits == [0.0] * 20
    waits.clear()
    for _ in range(10):  # from as many connections as you like: one line (sent at once,
        now[0] = 1000.0  # so each waits for the turns taken before it)
        take(budget)
    assert [round(w, 6) for w in waits] == [round(0.05 * (i + 1), 6) for i in range(10)]
    assert budget.waited == 10
    now[0] += 60.0  # after a quiet minute the burst is back
    waits.clear()
    take(budget)
    assert waits == [0.0]


def test_a_command_waiting_for_its_turn_is_given_up_when_its_sender_hangs_up(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(server_mod.time, "monotonic", lambda: now[0])

    class Closed:
        def wait(self, seconds: float) -> bool:
            now[0] += seconds
            return False

    budget = Budget(2, 1)  # a turn every 0.5 s: a wait of several polls
    assert budget.take(Closed())  # type: ignore[arg-type]  # the burst
    asked: list[float] = []

    def gone() -> bool:
        asked.append(now[0])
        return len(asked) == 2  # hangs up during the second poll of its wait

    assert not budget.take(Closed(), gone)  # type: ignore[arg-type]
    assert budget.abandoned == 1
    assert len(asked) == 2 and asked[1] - asked[0] <= server_mod.HANGUP_POLL_S + 1e-9
    start = now[0]  # its turn was given back: the next one waits no longer than it would have
    assert budget.take(Closed())  # type: ignore[arg-type]
    assert now[0] - start <= 1 / 2 + 1e-9


def test_a_flooder_that_hung_up_leaves_no_queue_behind():
    """A client that sent a flood of commands and hung up: what it left queued goes with its
    connection, instead of being served at the budget's pace long after it left (holding a
    slot and the budget's turns: after a flood of markers, 20 connections' leftovers held
    every slot for minutes and the next clients, the operator too, were refused)."""
    engine = _engine(held=True)
    engine.start()
    try:
        watcher = EngineClient(engine.address)
        assert watcher.next_event(timeout=10)["k"] == "hello"
        flooder = EngineClient(engine.address)
        for n in range(90):  # under the per-connection cap; at 20/s: 3.5 s of turns
            flooder.command("marker", {"name": f"flood{n}"})
        time.sleep(0.3)  # the burst is served, the rest wait in line
        flooder.close()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and len(engine.server._conns) > 1:
            time.sleep(0.02)
        assert len(engine.server._conns) == 1  # the watcher's alone
        assert engine.server.budget.abandoned == 1
        counters = engine.bus.counters()
        assert counters["hung_up_dropped"] == 1 and counters["paced_commands"] >= 1
        fold = MetricsFold()
        fold.apply({"k": "counters", "t": 1, **counters})  # what /metrics folds
        assert "provetop_telemetry_hung_up_dropped_total 1.0" in fold.render().decode()
        with EngineClient(engine.address) as operator:
            operator.command("marker", {"name": "operator"})
            seen, found = _until(
                watcher, lambda e: e["k"] == "marker" and e.get("name") == "operator", 5.0
            )
        assert found is not None
        flooded = [e for e in seen if e["k"] == "marker" and e["name"].startswith("flood")]
        assert len(flooded) < 45  # the burst and a few turns, not the 90 it sent
        watcher.close()
    finally:
        engine.backend.release()
        engine.close()


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

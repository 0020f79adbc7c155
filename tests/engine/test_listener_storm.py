"""What a connect/close storm costs the engine: the listener accepts at most ``accept_rate``
new connections a second after a burst (the storm waits in the kernel's backlog instead of
taking the workers' time; every connection is still served, none refused for the pace), and
connections are served by reader threads that are kept, not one new thread each."""

from __future__ import annotations

import socket
import time

from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.engine.settings.tuning import Tuning
from provetop.engine.telemetry import server as server_mod
from provetop.engine.telemetry.bus import Bus


def _connect_and_read(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(path)
        return bool(s.recv(1))
    finally:
        s.close()


def _serve(rate: float, connections: int) -> tuple[float, int, list[bool]]:
    bus = Bus(retain=100)
    server = server_mod.TelemetryServer(bus, lambda *a: None, lambda *a: None)
    server.accept_rate = rate
    try:
        path = server.start()[len("unix:") :]
        t0 = time.monotonic()
        got = [_connect_and_read(path) for _ in range(connections)]
        return time.monotonic() - t0, server.paced_accepts, got
    finally:
        server.close()
        bus.close()


def _client_pace(connections: int = 20) -> float:
    """Connections a second this machine's client makes (connect, read one byte, close) with
    no pacing at all: on a loaded 2-core machine it fell below 40 a second, so a pace of 40
    paced almost nothing (2 of 20) and the test failed for the machine, not the listener."""
    took, _, got = _serve(1e9, connections)
    assert all(got)
    return connections / max(took, 1e-6)


def test_a_storm_is_accepted_at_the_pace_after_the_burst():
    # a pace a quarter of what the client can do here (at most 40 a second), so that every
    # connection past the burst has to wait for it, however slow the machine is
    burst = server_mod.ACCEPT_BURST
    rate = min(40.0, _client_pace() / 4)
    took, paced, got = _serve(rate, burst + 20)
    assert all(got)  # every connection served, the paced ones later
    assert paced >= 15
    assert took >= 20 / rate * 0.8, took  # 20 past the burst at the pace, at least


def test_the_listener_counters_ride_the_counters_event_to_metrics():
    """What the listener counted (paced accepts, reader threads) is in every ``counters``
    event the bus makes, and so on /metrics (the fold of those events)."""
    from provetop.recordings.prometheus.fold import MetricsFold

    bus = Bus(retain=100)
    server = server_mod.TelemetryServer(bus, lambda *a: None, lambda *a: None)
    server.accept_rate = 40.0
    try:
        path = server.start()[len("unix:") :]
        assert all(_connect_and_read(path) for _ in range(server_mod.ACCEPT_BURST + 5))
        counters = bus.counters()
        assert counters["paced_accepts"] == server.paced_accepts >= 3
        assert counters["reader_threads"] >= 1 and counters["refused_clients"] == 0
        fold = MetricsFold()
        fold.apply({"k": "counters", "t": 1, **counters})
        text = fold.render().decode()
        assert f"provetop_telemetry_paced_accepts_total {float(counters['paced_accepts'])}" in text
        assert "provetop_telemetry_reader_threads " in text
    finally:
        server.close()
        bus.close()


def test_the_burst_is_not_paced_and_zero_turns_the_pace_off():
    took, paced, got = _serve(40.0, server_mod.ACCEPT_BURST - 2)
    assert all(got) and paced == 0
    took, paced, got = _serve(0, server_mod.ACCEPT_BURST + 20)
    assert all(got) and paced == 0


def test_the_engine_takes_its_pace_from_the_tuning_record(tmp_path):
    cfg = from_preset("ci", proofs=1, verify="never")
    engine = Engine(
        cfg,
        tuning=Tuning.from_env({"PROVETOP_ACCEPT_RATE": "7"}),
        listen=f"unix:{tmp_path / 'e.sock'}",
    )
    try:
        assert engine.server is not None and engine.server.accept_rate == 7.0
    finally:
        engine.close()


def test_connections_one_after_another_reuse_their_reader_thread():
    bus = Bus(retain=100)
    server = server_mod.TelemetryServer(bus, lambda *a: None, lambda *a: None)
    server.accept_rate = 0
    try:
        path = server.start()[len("unix:") :]
        for _ in range(40):
            assert _connect_and_read(path)
            time.sleep(0.01)  # its reader sees the close and waits for the next one
        assert server._readers.started <= 4, server._readers.started
    finally:
        server.close()
        bus.close()


def test_idle_readers_end_and_a_closed_server_keeps_none():
    bus = Bus(retain=100)
    server = server_mod.TelemetryServer(bus, lambda *a: None, lambda *a: None)
    server._readers._idle_s = 0.2
    try:
        path = server.start()[len("unix:") :]
        assert _connect_and_read(path)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and server._readers.alive:
            time.sleep(0.05)
        assert server._readers.alive == 0  # the idle reader ended on its own
        assert _connect_and_read(path)  # and the next connection starts another
        assert server._readers.started == 2
    finally:
        server.close()
        bus.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and server._readers.alive:
        time.sleep(0.05)
    assert server._readers.alive == 0


def test_a_reader_is_named_after_the_client_it_serves():
    """A stack dump names whose connection a reader thread is serving."""
    import threading

    seen: list[str] = []
    gate = threading.Event()

    def serve(conn, name, drop=False):
        seen.append(threading.current_thread().name)
        gate.set()

    readers = server_mod._Readers(serve, 5.0, lambda msg: None)
    readers.run((None, "client-7"))
    assert gate.wait(5)
    readers.close()
    assert seen == ["telemetry-reader-1:client-7"]

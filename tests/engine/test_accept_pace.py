"""The listener accepts at most ``accept_rate`` new connections a second after a burst: a
connect/close storm waits in the kernel's backlog instead of taking the workers' time, and
every connection is still served (none refused for the pace)."""

from __future__ import annotations

import socket
import time

from engine import server as server_mod
from engine.bus import Bus
from engine.config import from_preset
from engine.runner import Engine
from engine.tuning import Tuning


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


def test_a_storm_is_accepted_at_the_pace_after_the_burst():
    burst, rate = server_mod.ACCEPT_BURST, 40.0
    took, paced, got = _serve(rate, burst + 20)
    assert all(got)  # every connection served, the paced ones later
    assert paced >= 15
    assert took >= 20 / rate * 0.8, took  # 20 past the burst at 40/s: ~0.5 s at least


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

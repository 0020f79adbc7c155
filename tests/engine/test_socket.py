"""Telemetry through a real socket: late clients, control commands, refusals, auth, lag."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import asdict

import pytest

from provetop.engine.partition.testing import GatedBackend
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.engine.telemetry.bus import Bus
from provetop.kernels.backends import get_backend
from provetop.recordings.reader import open_recording
from provetop.recordings.state import State
from provetop.sources.client import EngineClient


def _engine(tmp_path=None, gated=False, **kw):
    overrides = {k: kw.pop(k) for k in list(kw) if k not in ("read_only", "listen", "token_file")}
    cfg = from_preset("ci", **overrides)
    backend = GatedBackend(get_backend("cpu")) if gated else None
    record = tmp_path / "r.pvtrec" if tmp_path is not None else None
    return Engine(cfg, backend=backend, record=record, **kw)


def _read_until(client, pred, timeout=30.0):
    """Events up to and including the first one for which pred is true."""
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        e = client.next_event(timeout=deadline - time.monotonic())
        assert e is not None, "engine closed the connection"
        out.append(e)
        if pred(e):
            return out
    raise AssertionError("timed out waiting for an event")


def _ack(cid):
    return lambda e: e["k"] == "control" and e["id"] == cid


def _read_quiet(client, quiet=0.5):
    out = []
    while True:
        try:
            e = client.next_event(timeout=quiet)
        except TimeoutError:
            return out
        if e is None:
            return out
        out.append(e)


def test_late_client_gets_the_full_state(tmp_path):
    engine = _engine(proofs=2)
    engine.bus.retain = 40  # most of the run reaches the client only through the snapshot
    engine.start()
    try:
        path = engine.address[5:]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert engine.wait(60)
        engine.bus.flush()
        with EngineClient(engine.address) as client:
            events = _read_quiet(client)
        assert [e["k"] for e in events[:2]] == ["hello", "snapshot"]
        assert len(events) <= 2 + 40 + 5
        state = State().fold(events)
        live = engine.state
        assert state.totals() == live.totals()
        assert state.totals()["partitions_verified"] == 4
        assert {k: asdict(r) for k, r in state.partitions.items()} == {
            k: asdict(r) for k, r in live.partitions.items()
        }
        assert state.hello["engine_id"] == engine.engine_id
        assert state.engine_state == "done"
    finally:
        engine.close()
    assert not os.path.exists(path)


def test_control_commands_take_effect(tmp_path):
    engine = _engine(tmp_path, gated=True, partitions=3, workers_per_device=1)
    gate = engine.backend
    gate.hold()
    engine.start()
    try:
        client = EngineClient(engine.address)
        assert gate.wait_entered(1)  # partition 0 is inside its GPU region
        c1 = client.command("force_fallback", {"device": 0, "on": True})
        c2 = client.command("pause")
        c3 = client.command("marker", {"name": "before resume"})
        seen = _read_until(client, _ack(c3))
        acks = {e["id"]: e for e in seen if e["k"] == "control"}
        assert all(acks[c]["ok"] for c in (c1, c2, c3))
        gate.release()
        # partition 0 finishes; the intake is paused, so partition 1 does not start
        seen = _read_until(client, lambda e: e["k"] == "partition_done" and e["partition"] == 0)
        assert seen[-1]["prestage"] == "ok" and seen[-1]["forced"] is False
        time.sleep(0.5)
        c4 = client.command("resume")
        seen = _read_until(client, _ack(c4))
        started = [e for e in seen if e["k"] == "phase_begin" and e["partition"] == 1]
        assert not started, "a partition started while paused"
        seen = _read_until(client, lambda e: e["k"] == "partition_done" and e["partition"] == 1)
        done = seen[-1]
        assert done["prestage"] == "fallback" and done["forced"] is True and done["ok"]
        assert done["verified"] is True
        c5 = client.command("force_fallback", {"device": 0, "on": False})
        c6 = client.command("trim", {"device": 0})
        seen = _read_until(client, _ack(c6))
        assert {e["id"]: e["ok"] for e in seen if e["k"] == "control"}[c5]
        assert engine.wait(60)
        client.close()
    finally:
        engine.close()
    state = open_recording(tmp_path / "r.pvtrec").state()
    assert [name for _t, name in state.markers] == ["before resume"]
    assert state.totals()["partitions_verified"] == 3
    assert [c["cmd"] for c in state.controls] == [
        "force_fallback",
        "pause",
        "marker",
        "resume",
        "force_fallback",
        "trim",
    ]


@pytest.mark.parametrize(
    "frame, error",
    [
        ({"k": "command", "id": 7, "cmd": "explode"}, "unknown command"),
        ({"k": "command", "cmd": "pause"}, "'id'"),
        ({"k": "command", "id": 8, "cmd": "marker", "args": {}}, "name"),
        ({"k": "command", "id": 9, "cmd": "force_fallback", "args": {"device": 5}}, "no device"),
        ({"k": "command", "id": 10, "cmd": "force_fallback", "args": {"on": "yes"}}, "'on'"),
        ({"k": "command", "id": 11, "cmd": "pause", "args": [1]}, "args"),
        ({"k": "hello"}, "k='command'"),
    ],
)
def test_malformed_commands_are_refused_and_the_engine_keeps_running(frame, error):
    engine = _engine(gated=True, workers_per_device=1)
    engine.backend.hold()
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            client.send(frame)
            seen = _read_until(client, lambda e: e["k"] == "control")
            ack = seen[-1]
            assert ack["ok"] is False and error in ack["error"]
            assert ack["id"] == frame.get("id", -1) if isinstance(frame.get("id"), int) else -1
            engine.backend.release()
            assert engine.wait(60) and engine.ok
    finally:
        engine.close()


def test_broken_framing_closes_only_that_connection():
    engine = _engine(gated=True, workers_per_device=1)
    engine.backend.hold()
    engine.start()
    try:
        bad = EngineClient(engine.address)
        good = EngineClient(engine.address)
        bad.send_raw(b"\xff\xff\xff\xff")  # a length far above the frame limit
        seen = _read_until(bad, lambda e: e["k"] == "control")
        assert seen[-1]["ok"] is False and "bad frame" in seen[-1]["error"]
        assert _read_quiet(bad, 2.0) is not None  # then the connection ends
        with pytest.raises(OSError):
            for _ in range(50):
                bad.send({"k": "command", "id": 1, "cmd": "pause"})
                time.sleep(0.02)
        engine.backend.release()
        assert engine.wait(60) and engine.ok
        cid = good.command("marker", {"name": "still here"})
        assert _read_until(good, _ack(cid))[-1]["ok"]
        good.close()
    finally:
        engine.close()


def test_stop_command_ends_intake():
    engine = _engine(gated=True, partitions=4, workers_per_device=1)
    engine.backend.hold()
    engine.start()
    try:
        client = EngineClient(engine.address)
        assert engine.backend.wait_entered(1)
        cid = client.command("stop")
        _read_until(client, _ack(cid))
        engine.backend.release()
        assert engine.wait_for_stop(10) and engine.wait(60)
        engine.bus.flush()
        assert len(engine.state.partitions) == 1 and not engine.ok
        assert engine.state.engine_state == "done"
        client.close()
    finally:
        engine.close()


def test_read_only_refuses_control():
    engine = _engine(read_only=True)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            hello = client.next_event()
            assert hello["k"] == "hello" and hello["read_only"] is True
            cid = client.command("pause")
            ack = _read_until(client, _ack(cid))[-1]
            assert ack["ok"] is False and "read-only" in ack["error"]
        assert engine.wait(60) and engine.ok
    finally:
        engine.close()


def test_tcp_needs_the_token(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-123\n")
    token_file.chmod(0o600)
    engine = _engine(listen="tcp://127.0.0.1:0", token_file=str(token_file))
    engine.start()
    try:
        assert engine.address.startswith("tcp://127.0.0.1:")
        with EngineClient(engine.address, token="wrong-token-456") as client:
            assert client.next_event(timeout=5) is None  # closed without a word
        with EngineClient(engine.address) as client:  # no auth frame at all
            client.send({"k": "command", "id": 1, "cmd": "pause"})
            assert client.next_event(timeout=5) is None
        with EngineClient(engine.address, token="s3cret-token-123") as client:
            assert client.next_event(timeout=5)["k"] == "hello"
        assert engine.wait(60)
    finally:
        engine.close()


def test_slow_client_lags_and_is_told_how_much():
    bus = Bus()
    bus.emit("marker", name="before")
    assert bus.flush()  # dispatched: it is part of the retained history
    sub = bus.subscribe("slow", maxlen=5)
    recorded = []

    class Rec:
        def write(self, e):
            recorded.append(e)

    bus.add_recorder(Rec())
    for i in range(20):
        bus.emit("marker", name=f"m{i}")
    assert bus.flush()
    got = sub.drain()
    assert [e["k"] for e in got[:2]] == ["snapshot", "marker"]  # initial events kept
    assert got[1]["name"] == "before"
    assert got[2] == {**got[2], "k": "lag", "missed": 15}
    assert [e["name"] for e in got[3:]] == [f"m{i}" for i in range(15, 20)]
    assert len(recorded) == 20  # the recorder got everything
    assert bus.lagged_events == 15
    bus.close()


def test_a_slow_socket_client_is_told_what_it_missed_and_the_recording_has_everything(tmp_path):
    engine = _engine(tmp_path, proofs=3)
    engine.server.send_buffer = 4096
    engine.bus.client_queue = 10
    client = None
    engine.start()
    try:
        client = EngineClient(engine.address)  # connected, but reads nothing until the end
        assert engine.wait(60)
        engine.bus.flush()
        events = _read_quiet(client, 1.0)
        total = engine.bus.events
    finally:
        if client is not None:
            client.close()
        engine.close()
    lags = [e for e in events if e["k"] == "lag"]
    assert lags and all(e["missed"] > 0 for e in lags)
    got = [e for e in events if e["k"] not in ("lag", "snapshot")]
    assert len(got) + sum(e["missed"] for e in lags) == total
    assert engine.bus.lagged_events == sum(e["missed"] for e in lags)
    state = State().fold(events)
    assert state.lagged == sum(e["missed"] for e in lags)
    rec = open_recording(tmp_path / "r.pvtrec")
    assert rec.complete and rec.state().totals()["partitions_verified"] == 6


def test_a_client_that_never_reads_holds_back_no_other_client():
    """One thread writes for every connection: a socket that is full must cost only its own
    writes (sent without blocking), never another client's stream."""
    engine = _engine(proofs=10**6, verify="never")
    engine.server.send_buffer = 4096
    stuck = reader = None
    engine.start()
    try:
        stuck = EngineClient(engine.address)  # connected, never reads
        time.sleep(1.0)  # its socket is full by now: its initial events alone are far more
        reader = EngineClient(engine.address)
        start = time.monotonic()
        first = _read_until(reader, lambda e: e["k"] == "snapshot", timeout=10)
        done = _read_until(reader, lambda e: e["k"] == "partition_done", timeout=10)
        assert first[0]["k"] == "hello" and done
        # live events keep coming to the reader while the stuck client is still connected
        seen = {e["k"] for e in _read_until(reader, lambda e: e["k"] == "memory", timeout=10)}
        assert time.monotonic() - start < 10 and seen
        assert engine.server._outs[stuck_conn(engine)].buf  # the stuck one has bytes waiting
    finally:
        for c in (stuck, reader):
            if c is not None:
                c.close()
        engine.stop()
        engine.close()


def stuck_conn(engine):
    """The oldest connection the writer serves (the client that never reads)."""
    return next(iter(engine.server._outs))

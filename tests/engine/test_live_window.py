"""Bounded live state: the engine keeps a window plus running totals (what leaves it is only in
the recording); late-join snapshots are one shared object of bounded size; the server's threads
stay within its connection cap during a connect/close storm."""

from __future__ import annotations

import socket
import threading
import time

import provetop.engine.telemetry.bus as bus_mod
import provetop.engine.telemetry.server as server_mod
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.engine.telemetry.bus import Bus
from provetop.recordings.reader import fold_recording
from provetop.recordings.state import State, Window
from tests.recordings.fixtures import make_run

SMALL = Window(rows=12, history_ns=2 * 10**9, items=6)


def test_a_trimmed_state_keeps_the_window_and_exact_totals():
    events = make_run(partitions=40, workers=2, devices=2, proofs=6, seed=11)
    whole = State().fold(events)
    live = State()
    for i, e in enumerate(events):
        live.apply(e)
        if i % 50 == 0:
            live.trim(SMALL)
    live.trim(SMALL)
    assert live.totals() == whole.totals()
    finished = [r for r in live.partitions.values() if r.ok is not None]
    assert len(finished) <= SMALL.rows * 5 // 4 and len(whole.partitions) > 100
    assert len(live.attempts) <= SMALL.rows * 5 // 4
    assert len(live.faults) <= SMALL.items * 5 // 4 and len(live.proofs_done) <= 8
    for segs in live.segments.values():
        assert all(s.end >= live.t - SMALL.history_ns for s in segs[1:])
    for series in live.series.values():
        assert series.t[0] >= live.t - SMALL.history_ns
    # a client adopting the trimmed state's snapshot gets the same totals
    assert State.from_snapshot(live.snapshot()).totals() == whole.totals()
    # and a state that was never trimmed snapshots exactly as before
    assert "trimmed" not in whole.snapshot()


def test_the_live_engine_keeps_a_window_and_the_recording_keeps_everything(tmp_path, monkeypatch):
    monkeypatch.setattr(bus_mod, "LIVE_WINDOW", SMALL)
    monkeypatch.setattr(bus_mod, "TRIM_EVERY", 50)
    cfg = from_preset("ci", proofs=40, verify="never", partitions=2)
    engine = Engine(cfg, listen=False, record=tmp_path / "w.pvtrec")
    engine.start()
    try:
        assert engine.wait(120)
    finally:
        engine.close()
    live = engine.state
    _rec, recorded = fold_recording(tmp_path / "w.pvtrec")
    assert recorded.totals()["partitions_ok"] == 80
    assert len(live.partitions) <= SMALL.rows * 5 // 4 + 2
    mine, theirs = live.totals(), recorded.totals()
    for key in ("proofs_done", "partitions", "partitions_ok", "faults", "attempts"):
        assert mine[key] == theirs[key], key


def test_late_join_snapshots_are_shared_and_built_outside_subscribe():
    bus = Bus(retain=100)
    try:
        for e in make_run(partitions=30, workers=2, proofs=3, seed=5):
            bus.publish(e)
        assert bus.flush(10)
        a, b = bus.subscribe("a"), bus.subscribe("b")
        snap_a, snap_b = a._initial[0][1], b._initial[0][1]
        assert snap_a["k"] == "snapshot" and snap_a is snap_b  # one object for every client
        assert sum(len(part) for part in a._initial) <= 2 + 100 == 2 + bus.retain
        joined = State().fold(a.drain())
        assert joined.totals() == bus.state.totals()
        a.close()
        b.close()
    finally:
        bus.close()


def test_joining_clients_share_the_encoded_initial_chunks(monkeypatch):
    """Clients joining from the same snapshot are sent the same slices of initial events,
    each encoded once: with a per-event cache smaller than the retained history, every
    connection of a storm re-encoded most of it."""
    encoded = []
    real = server_mod.encode_frame

    def counting(event):
        encoded.append(id(event))
        return real(event)

    monkeypatch.setattr(server_mod, "encode_frame", counting)
    monkeypatch.setattr(server_mod, "INITIAL_SLICE", 64)
    bus = Bus(retain=1000)
    server = server_mod.TelemetryServer(bus, lambda *a: None, lambda *a: None)
    try:
        for e in make_run(partitions=30, workers=2, proofs=3, seed=5):
            bus.publish(e)
        assert bus.flush(10)
        streams = []
        for name in ("a", "b", "c"):
            sub = bus.subscribe(name)
            chunks = []
            while part := sub.take_initial(server_mod.INITIAL_SLICE):
                chunks.append(server._encode_chunk(part))
            assert sub.get(0) is None  # every initial event went out in the chunks
            streams.append(chunks)
            sub.close()
        assert len(streams[0]) > 2
        assert all(x is y for x, y in zip(streams[0], streams[1], strict=True))
        assert all(x is y for x, y in zip(streams[0], streams[2], strict=True))
        assert len(encoded) == len(set(encoded))  # each event encoded once for all three
        frames = b"".join(streams[0])
        assert frames == b"".join(real(e) for e in bus.subscribe("d").drain())
    finally:
        bus.close()


def test_server_threads_stay_within_the_connection_cap_during_a_storm(monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_CLIENTS", 4)
    engine = Engine(from_preset("ci", proofs=1000, verify="never"), record=None)
    engine.start()
    path = engine.address[len("unix:") :]
    # the run starts its workers and the sampler after the SRS is made: count from once the
    # engine's own threads have settled, or they would be counted as connection threads
    deadline, base, since = time.monotonic() + 10, threading.active_count(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < 0.5:
        time.sleep(0.05)
        if threading.active_count() != base:
            base, since = threading.active_count(), time.monotonic()
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], threading.active_count())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
            except OSError:
                pass
            s.close()
    finally:
        stop.set()
        sampler.join()
        engine.stop()
        engine.close()
    # each served connection holds one thread (its reader; one thread writes for all of them),
    # the sampler is one more
    assert peak[0] - base <= 4 + 1 + 2, (base, peak[0])

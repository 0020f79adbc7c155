"""Dashboard sources: addresses, the live socket client (against a real framed server), and
replay seeking, which must land on exactly the state a full fold gives."""

from __future__ import annotations

import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from provetop.recordings.framing import FrameDecoder, encode_frame
from provetop.recordings.schema import validate
from provetop.recordings.state import State
from provetop.sources.errors import SourceError
from provetop.sources.feed import FeedSource
from provetop.sources.live import LiveSource
from provetop.sources.replay_memory import ReplaySource
from provetop.sources.synthetic import generate
from tests.sources.helpers import Collect, close_listener


def test_synthetic_events_follow_the_schema():
    events = generate(devices=2, duration_s=8, seed=random.randrange(1 << 30))
    for event in events:
        validate(event)
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    state = State().fold(events)
    assert state.totals()["partitions_ok"] > 0
    assert state.totals()["ooms"] >= 1


class FakeEngine:
    """A framed-msgpack server speaking the engine's wire protocol: sends ``events`` to each
    client, records the frames clients send, answers commands with ``control`` events."""

    def __init__(self, path: str, events: list[dict], token: str | None = None) -> None:
        self.path, self.events, self.token = path, events, token
        self.received: list[dict] = []
        self.connections = 0
        if path.startswith("tcp:"):
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        else:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.bind(path)
            self.address = f"unix:{path}"
        self.sock.listen(4)
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, name="fake-engine", daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        for event in self.events:
            conn.sendall(encode_frame(event))
        decoder = FrameDecoder()
        while True:
            try:
                data = conn.recv(4096)
            except OSError:
                return
            if not data:
                return
            decoder.feed(data)
            for frame in decoder.frames():
                self.received.append(frame)
                if frame.get("k") == "command":
                    ack = {
                        "k": "control",
                        "t": 1,
                        "id": frame["id"],
                        "cmd": frame["cmd"],
                        "args": frame["args"],
                        "ok": True,
                    }
                    conn.sendall(encode_frame(ack))

    def drop_clients(self):
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass
        self.conns.clear()

    def close(self):
        close_listener(self.sock, self.thread)
        self.drop_clients()


@pytest.fixture
def sock_dir():
    with tempfile.TemporaryDirectory(prefix="pt-") as d:
        yield d


def test_live_source_receives_batches_sends_commands_and_reconnects(sock_dir):
    events = generate(devices=1, duration_s=3, seed=random.randrange(1 << 30))
    server = FakeEngine(os.path.join(sock_dir, "e.sock"), events)
    source = LiveSource(server.address)
    sink = Collect()
    thread = threading.Thread(target=source.run, args=(sink,), daemon=True)
    thread.start()
    try:
        assert sink.wait(lambda: len(sink.flat()) >= len(events))
        assert sink.flat() == events  # every event, in order, unchanged
        assert len(sink.batches) < len(events) / 10  # batched, not one call per event
        assert "connected" in sink.statuses
        assert source.label == f"{events[0]['engine_id']}@{events[0]['host']}"
        cid = source.send("marker", {"name": "m"})
        assert sink.wait(lambda: any(e.get("k") == "control" for e in sink.flat()))
        ack = [e for e in sink.flat() if e.get("k") == "control"][0]
        assert ack["id"] == cid and ack["cmd"] == "marker"
        assert server.received[-1] == {
            "k": "command",
            "id": cid,
            "cmd": "marker",
            "args": {"name": "m"},
        }
        # the engine goes away: the client says so and comes back by itself
        server.drop_clients()
        assert sink.wait(lambda: any(s.startswith("disconnected") for s in sink.statuses))
        assert sink.wait(lambda: server.connections == 2 and sink.statuses[-1] == "connected")
        assert sink.wait(lambda: len(sink.flat()) >= 2 * len(events) + 1)
        assert len(list(source.received_events())) == len(sink.flat())
    finally:
        source.close()
        server.close()
        thread.join(5)
    assert not thread.is_alive()


def test_live_source_tcp_sends_the_token_first():
    events = generate(devices=1, duration_s=1)
    server = FakeEngine("tcp:", events[:5])
    source = LiveSource(server.address, token="s3cret-token")
    sink = Collect()
    thread = threading.Thread(target=source.run, args=(sink,), daemon=True)
    thread.start()
    try:
        assert sink.wait(lambda: len(sink.flat()) >= 5)
        deadline = time.time() + 5
        while not server.received and time.time() < deadline:
            time.sleep(0.01)
        assert server.received[0] == {"k": "auth", "token": "s3cret-token"}
    finally:
        source.close()
        server.close()
        thread.join(5)


def test_read_only_sources_refuse_commands(sock_dir):
    events = generate(devices=1, duration_s=1, read_only=True)
    server = FakeEngine(os.path.join(sock_dir, "r.sock"), events[:3])
    source = LiveSource(server.address)
    sink = Collect()
    thread = threading.Thread(target=source.run, args=(sink,), daemon=True)
    thread.start()
    try:
        assert sink.wait(lambda: len(sink.flat()) >= 3)
        assert source.read_only
        with pytest.raises(SourceError):
            source.send("pause", {})
    finally:
        source.close()
        server.close()
        thread.join(5)
    with pytest.raises(SourceError):
        FeedSource([]).send("pause", {})


def test_unreachable_engine_is_retried_not_fatal(sock_dir):
    source = LiveSource(os.path.join(sock_dir, "nobody.sock"))
    sink = Collect()
    thread = threading.Thread(target=source.run, args=(sink,), daemon=True)
    thread.start()
    try:
        assert sink.wait(lambda: len(sink.statuses) >= 2)
        # never reached: "unreachable" each time, with the failed tries and the next one counted
        assert all(s.startswith("unreachable") for s in sink.statuses)
        assert source.failures >= 2 and not source.ever_connected
    finally:
        source.close()
        thread.join(5)
    assert not thread.is_alive()


def _current(state: State) -> dict:
    """The parts of a state that must not depend on how it was reached."""
    snap = state.snapshot()
    snap.pop("events")  # a seek folds fewer events than a full replay
    return snap


@pytest.mark.parametrize("with_checkpoints", [False, True])
def test_replay_seek_equals_full_fold(with_checkpoints):
    rng = random.Random()
    events = generate(
        devices=2, duration_s=40, seed=rng.randrange(1 << 30), markers=((12.5, "a"), (30.0, "b"))
    )
    replay = ReplaySource(events)
    if with_checkpoints:
        replay.build_checkpoints(every_s=5)
        assert len(replay.checkpoints) >= 6
    for _ in range(6):
        position = rng.randrange(replay.start, replay.end)
        window = int(rng.choice([2, 10, 30]) * 1e9)
        state, index = replay.state_at(position, window)
        expect = State().fold(e for e in events if e["t"] <= position)
        assert index == sum(1 for e in events if e["t"] <= position)
        assert _current(state) == _current(expect)
        # history covers the window: every finished segment inside it is there
        for lane, segs in expect.segments.items():
            inside = [(s.start, s.end) for s in segs if s.start >= position - window]
            have = {(s.start, s.end) for s in state.segments.get(lane, [])}
            assert set(inside) <= have
        # and playing on from there gives the same as folding further
        later = min(replay.end, position + int(3e9))
        index = replay.advance(state, index, later)
        expect.fold(e for e in events if position < e["t"] <= later)
        assert _current(state) == _current(expect)
    assert replay.next_point(replay.start, True) == min(replay.faults + replay.markers)
    assert replay.next_point(int(31e9), True) in replay.faults + [None]
    assert replay.next_point(int(30.5e9), False) == int(30e9)


def test_replay_from_a_recording_file_uses_its_snapshots(tmp_path: Path):
    from provetop.recordings.writer import RecordingWriter

    events = generate(devices=1, duration_s=30, seed=random.randrange(1 << 30))
    path = tmp_path / "run.pvtrec"
    writer = RecordingWriter(path, snapshot_every_s=5)
    for event in events:
        writer.write(event)
    writer.close()
    replay = ReplaySource.open(path)
    assert len(replay.events) == len(events)
    assert len(replay.checkpoints) >= 4 and not replay.truncated
    position = int(22.3e9)
    state, _ = replay.state_at(position, int(5e9))
    expect = State().fold(e for e in events if e["t"] <= position)
    assert _current(state) == _current(expect)


def test_file_replay_seeks_lazily_and_lands_on_the_full_fold(tmp_path: Path):
    from provetop.recordings.writer import RecordingWriter
    from provetop.sources.replay import FileReplaySource, open_replay

    rng = random.Random()
    events = generate(
        devices=2, duration_s=30, seed=rng.randrange(1 << 30), markers=((7.5, "x"), (21.0, "y"))
    )
    path = tmp_path / "run.pvtrec"
    writer = RecordingWriter(path, snapshot_every_s=3)
    for event in events:
        writer.write(event)
    writer.close()
    source = open_replay(path)
    assert isinstance(source, FileReplaySource)
    assert (source.start, source.end) == (events[0]["t"], events[-1]["t"])
    source.prepare()
    assert source.markers == [e["t"] for e in events if e["k"] == "marker"]
    assert source.faults == [e["t"] for e in events if e["k"] == "fault"]
    cases = [(source.start + int(2.5e9), int(12e9))]  # before the first snapshot, too
    cases += [
        (rng.randrange(source.start, source.end), int(rng.choice([1, 4, 12]) * 1e9))
        for _ in range(5)
    ]
    for position, window in cases:
        state, offset = source.state_at(position, window)
        expect = State().fold(e for e in events if e["t"] <= position)
        assert _current(state) == _current(expect)
        for lane, segs in expect.segments.items():
            inside = {(s.start, s.end) for s in segs if s.start >= position - window}
            assert inside <= {(s.start, s.end) for s in state.segments.get(lane, [])}
        later = min(source.end, position + int(2e9))
        source.advance(state, offset, later)
        expect.fold(e for e in events if position < e["t"] <= later)
        assert _current(state) == _current(expect)
    source.close()
    # a recording cut short (no index) is read by the tolerant full reader instead
    cut = tmp_path / "cut.pvtrec"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    fallback = open_replay(cut)
    assert not isinstance(fallback, FileReplaySource) and fallback.truncated
    assert 0 < len(fallback.events) < len(events)


def test_watch_finds_the_local_engine_again_after_a_restart(tmp_path, monkeypatch):
    from provetop.engine.run.runner import Engine
    from provetop.engine.settings.config import from_preset
    from provetop.sources.discovery import default_address

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # only this test's engines

    def start():
        eng = Engine(from_preset("ci", backend="cpu", proofs=100_000), listen=None, record=None)
        eng.start()
        return eng

    first = start()
    source = LiveSource(None)
    sink = Collect()
    thread = threading.Thread(target=source.run, args=(sink,), daemon=True)
    thread.start()
    try:
        assert default_address() == first.address.removeprefix("unix:")
        assert sink.wait(lambda: any(e.get("engine_id") == first.engine_id for e in sink.flat()))
        first.stop("restart")
        first.close()
        second = start()
        try:
            assert sink.wait(
                lambda: any(e.get("engine_id") == second.engine_id for e in sink.flat()), 20
            )
            assert any(s.startswith("disconnected") for s in sink.statuses)
        finally:
            second.stop("test over")
            second.close()
    finally:
        source.close()
        thread.join(5)

"""The dashboard's side of the socket against a broken or hostile engine: the live source never
raises, never hands the state reducer an event that breaks the schema, and says what happened.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import threading
import time

import pytest

from provetop.recordings.framing import HEADER, FrameDecoder, encode_frame
from provetop.recordings.state import State
from provetop.sources.live import LiveSource
from tests.sources.helpers import close_listener
from tests.tui.helpers import pilot_test, tap


class HostileEngine:
    """A Unix socket that sends ``payload`` to every client, then holds the connection."""

    def __init__(self, path: str, payload: bytes) -> None:
        self.path = path
        self.payload = payload
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.connections = 0
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, name="hostile-engine", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.conns.append(conn)
            try:
                conn.sendall(self.payload)
            except OSError:
                pass

    def close(self) -> None:
        close_listener(self.sock)
        for c in self.conns:  # (AnsweringEngine's accept thread may be reading one)
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.thread.join(5)


class FoldingSink:
    """Folds every batch into a State, as the dashboard does; records statuses and errors."""

    def __init__(self) -> None:
        self.state = State()
        self.got: list[dict] = []
        self.statuses: list[str] = []
        self.errors: list[BaseException] = []

    def events(self, source, batch):
        for e in batch:
            self.got.append(e)
            try:
                self.state.apply(e)
            except BaseException as exc:  # what would crash the dashboard
                self.errors.append(exc)

    def status(self, source, text, level="info"):
        self.statuses.append(text)


def _hello():
    return {
        "k": "hello",
        "t": 0,
        "schema": 1,
        "engine_id": "hostile",
        "host": "h",
        "version": "x",
        "source": "provetop",
        "backend": "cpu",
        "modeled": True,
        "devices": [],
        "config": {},
        "wall_ns": 0,
        "read_only": False,
    }


def _watch(payload: bytes, until, timeout: float = 10.0):
    with tempfile.TemporaryDirectory(prefix="pt-") as d:
        server = HostileEngine(os.path.join(d, "e.sock"), payload)
        source = LiveSource(f"unix:{server.path}")
        sink = FoldingSink()
        thread = threading.Thread(target=source.run, args=(sink,), daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + timeout
            while not until(sink, server) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert until(sink, server), (sink.statuses, sink.got[:5])
        finally:
            source.close()
            server.close()
            thread.join(5)
        assert not thread.is_alive()
        return source, sink, server


def test_events_that_break_the_schema_are_ignored_not_folded():
    bad = [
        {"k": "phase_begin", "t": 5},  # missing fields
        {"k": "control", "t": 6, "id": "x", "cmd": 3, "args": [], "ok": "yes"},
        {"k": "memory", "t": 7, "device": "a"},
        {"k": "no_such_kind", "t": 8},
        {"k": "marker", "t": True, "name": "bool time"},
        {"k": "hello", "t": 9},  # a hello without its fields
    ]
    random.shuffle(bad)
    good = {"k": "marker", "t": 10, "name": "after the junk"}
    payload = b"".join(encode_frame(e) for e in [_hello(), *bad, good])
    source, sink, _ = _watch(payload, lambda s, _srv: any(e.get("t") == 10 for e in s.got))
    assert sink.errors == []
    assert [e["k"] for e in sink.got] == ["hello", "marker"]
    assert source.invalid_events == len(bad)
    assert any(s.startswith("ignored an invalid event") for s in sink.statuses)
    assert [name for _t, name in sink.state.markers] == ["after the junk"]


@pytest.mark.parametrize(
    "garbage",
    [
        HEADER.pack(0xFFFFFFFF),  # a 4 GiB frame announced
        HEADER.pack((16 << 20) + 1) + b"\x00" * 64,
        HEADER.pack(3) + b"\x93\x01\x02",  # an array, not a map
        HEADER.pack(41) + b"\x81\xa1x" + b"\x91" * 37 + b"\x80",  # nested too deep
        HEADER.pack(2) + b"\xc1\xc1",  # msgpack's never-used byte
        HEADER.pack(9) + b"\x81\xa1t\xd6\xff\x00\x00\x00\x01",  # a timestamp extension
    ],
)
def test_broken_framing_disconnects_with_a_reason_and_reconnects(garbage):
    payload = encode_frame(_hello()) + garbage
    source, sink, server = _watch(payload, lambda s, srv: srv.connections >= 2)
    assert sink.errors == []
    assert any(s.startswith("disconnected (bad frame:") for s in sink.statuses), sink.statuses
    assert all(e["k"] == "hello" for e in sink.got)


class AnsweringEngine(HostileEngine):
    """Sends hello, then answers the first command it receives with ``reply(id)``."""

    def __init__(self, path: str, reply) -> None:
        self.reply = reply
        super().__init__(path, encode_frame(_hello()))

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            try:
                conn.sendall(self.payload)
                decoder = FrameDecoder()
                while True:
                    data = conn.recv(65536)
                    if not data:
                        break
                    decoder.feed(data)
                    for frame in decoder.frames():
                        if frame.get("k") == "command":
                            conn.sendall(encode_frame(self.reply(frame["id"])))
            except OSError:
                pass


@pilot_test
async def test_engine_text_is_never_markup_in_the_dashboard():
    """A control acknowledgement whose text looks like Textual markup ("[/]" would crash the
    renderer, "[@click=app.quit]" would become an action) is shown literally."""
    from provetop.tui.app import ProvetopApp

    evil = "[/][@click=app.quit]x[/]"

    def reply(cid: int) -> dict:
        return {
            "k": "control",
            "t": 1,
            "id": cid,
            "cmd": evil,
            "args": {},
            "ok": False,
            "error": evil,
        }

    with tempfile.TemporaryDirectory(prefix="pt-") as d:
        server = AnsweringEngine(os.path.join(d, "e.sock"), reply)
        app = ProvetopApp([LiveSource(f"unix:{server.path}")])
        try:
            async with app.run_test(size=(100, 30)) as pilot:
                for _ in range(100):
                    await pilot.pause(0.05)
                    if app.views and app.views[0].state.hello is not None:
                        break
                await tap(pilot, "P")
                for _ in range(100):
                    await pilot.pause(0.05)
                    if app._notifications:
                        break
                shown = [n for n in app._notifications if evil in n.message]
                assert shown, [n.message for n in app._notifications]
                # Headless runs do not draw toasts, so check what drawing would do: the text
                # must be taken literally, never parsed as markup (which raises on "[/]").
                assert all(n.markup is False for n in shown)
                assert app.is_running
        finally:
            server.close()

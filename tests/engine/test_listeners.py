"""The listening sockets against clients that try to lock them: a handshake trickled byte by
byte, a crowd of unauthenticated connections, a command pipelined behind the auth frame, and
accept() failing because the process ran out of file descriptors.

See docs/reliability.md (Listeners) for the table these tests back.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import threading
import time

import provetop.engine.telemetry.server as server_mod
from provetop.engine.partition.testing import GatedBackend
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.backends import get_backend
from provetop.recordings.framing import HEADER, FrameDecoder, encode_frame
from provetop.recordings.reader import open_recording
from provetop.sources.client import EngineClient

TOKEN = "listener-test-token-0123456789"


def _engine(tmp_path, **kw):
    backend = GatedBackend(get_backend("cpu"))
    backend.hold()
    cfg = from_preset("ci", workers_per_device=1)
    return Engine(cfg, backend=backend, record=tmp_path / "l.pvtrec", **kw)


def _tcp_engine(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    return _engine(tmp_path, listen="tcp://127.0.0.1:0", token_file=str(token_file))


def _finish(engine):
    engine.backend.release()
    assert engine.wait(60)
    assert engine.ok


def _raw(engine) -> socket.socket:
    host, port = engine.address[len("tcp://") :].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def _closed(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_trickled_handshake_is_cut_at_the_deadline_not_renewed_per_byte(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "AUTH_TIMEOUT_S", 0.8)
    monkeypatch.setattr(server_mod, "AUTH_FAIL_DELAY_S", 0.01)
    engine = _tcp_engine(tmp_path)
    engine.start()
    try:
        frame = encode_frame({"k": "auth", "token": TOKEN})
        sock = _raw(engine)
        t0 = time.monotonic()
        closed = False
        for byte in frame[:-1]:  # one byte every 0.2 s: each recv is well inside 0.8 s
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            if _closed(sock, 0.2):
                closed = True
                break
            if time.monotonic() - t0 > 5:
                break
        took = time.monotonic() - t0
        sock.close()
        assert closed, "a trickled handshake kept its slot"
        assert took < 0.8 + 1.0, took
        _finish(engine)
    finally:
        engine.close()


def test_a_crowd_of_unauthenticated_connections_cannot_keep_the_token_out(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_CLIENTS", 8)
    monkeypatch.setattr(server_mod, "AUTH_RESERVE", 2)
    monkeypatch.setattr(server_mod, "AUTH_TIMEOUT_S", 60.0)
    engine = _tcp_engine(tmp_path)
    engine.start()
    crowd = []
    try:
        for _ in range(12):  # silent: they would hold their slots for the whole minute
            crowd.append(_raw(engine))
        time.sleep(0.3)
        for _ in range(3):  # three operators in a row, each gets in
            with EngineClient(engine.address, token=TOKEN) as client:
                assert client.next_event(timeout=5)["k"] == "hello"
        assert engine.server.evicted_handshakes > 0
        with engine.server._lock:
            assert len(engine.server._handshaking) <= 8 - 2
        _finish(engine)
    finally:
        for sock in crowd:
            sock.close()
        engine.close()


def test_a_right_token_gets_in_within_a_second_while_wrong_tokens_flood(tmp_path):
    """Each failure held a server-wide lock for 1 s: a queue of wrong tokens delayed a right
    one by a second per failure ahead of it. Now a failure delays only its own connection."""
    engine = _tcp_engine(tmp_path)
    engine.start()
    stop = threading.Event()
    sent = [0]
    wrong = encode_frame({"k": "auth", "token": "x" * len(TOKEN)})

    def flood():
        while not stop.is_set():
            try:
                sock = _raw(engine)
                sock.sendall(wrong)
                sent[0] += 1
                sock.close()  # the engine's answer is not awaited: as fast as it takes them
            except OSError:
                time.sleep(0.001)

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.5)
        waits = []
        for _ in range(5):
            t0 = time.monotonic()
            with EngineClient(engine.address, token=TOKEN) as client:
                assert client.next_event(timeout=5)["k"] == "hello"
            waits.append(time.monotonic() - t0)
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(10)
        assert max(waits) < 1.0, waits
        assert engine.server.auth_failures >= 20, (engine.server.auth_failures, sent)
        _finish(engine)
    finally:
        stop.set()
        engine.close()
    refused = [e for e in open_recording(tmp_path / "l.pvtrec").events if e["k"] == "control"]
    # recorded at most once a second however many guesses (a few seconds of flood)
    assert 1 <= len(refused) <= 10, len(refused)
    assert sum(1 for e in refused if "failures since the last report" in e["error"]) >= 1


def test_a_command_in_the_same_write_as_the_auth_frame_is_answered(tmp_path):
    engine = _tcp_engine(tmp_path)
    engine.start()
    try:
        sock = _raw(engine)
        command = {"k": "command", "id": 7, "cmd": "marker", "args": {"name": "pipelined"}}
        sock.sendall(encode_frame({"k": "auth", "token": TOKEN}) + encode_frame(command))
        decoder = FrameDecoder()
        deadline = time.monotonic() + 10
        ack = None
        while ack is None and time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = sock.recv(65536)
            assert data, "closed without answering"
            decoder.feed(data)
            for frame in decoder.frames():
                if frame.get("k") == "control" and frame.get("id") == 7:
                    ack = frame
        sock.close()
        assert ack is not None and ack["ok"], ack
        _finish(engine)
    finally:
        engine.close()


@contextlib.contextmanager
def _out_of_descriptors():
    """Fill the process's file descriptor table (with a lowered soft limit) until open()
    fails with EMFILE; give everything back afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 32, hard))
    held = []
    try:
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_accept_errors_are_survived_reported_and_the_socket_keeps_serving(tmp_path):
    engine = _engine(tmp_path)
    engine.start()
    try:
        path = engine.address[len("unix:") :]
        waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # its fd exists already
        with _out_of_descriptors():
            waiting.connect(path)  # queued by the kernel; accept() now fails with EMFILE
            time.sleep(0.5)
        assert engine.server.accept_errors > 0
        waiting.settimeout(10)
        decoder = FrameDecoder()
        decoder.feed(waiting.recv(65536))
        assert next(decoder.frames())["k"] == "hello"  # served once descriptors came back
        waiting.close()
        with EngineClient(engine.address) as client:  # and the next one too
            assert client.next_event(timeout=5)["k"] == "hello"
        _finish(engine)
    finally:
        engine.close()
    faults = [e for e in open_recording(tmp_path / "l.pvtrec").events if e["k"] == "fault"]
    listener = [e for e in faults if e.get("site") == "listener"]
    assert listener and "accept() failed" in listener[0]["message"]
    assert any("accepts again" in e["message"] for e in listener)
    assert len(listener) == 2  # one report per run of failures, not one per retry


def test_a_closed_listener_leaves_no_accept_thread_behind():
    """close() must wake the thread blocked in accept(): on Linux closing the socket alone
    does not, and every listener closed in a long-lived process would leave one behind."""
    from provetop.engine.telemetry.bus import Bus

    def accept_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "telemetry-accept"}

    for listen in (None, "tcp://127.0.0.1:0"):
        before = accept_threads()
        bus = Bus(retain=10)
        token = TOKEN if listen else None
        server = server_mod.TelemetryServer(
            bus, lambda *a: None, lambda *a: None, listen=listen, token=token
        )
        server.start()
        deadline = time.monotonic() + 5
        while not accept_threads() - before and time.monotonic() < deadline:
            time.sleep(0.01)
        mine = accept_threads() - before
        assert len(mine) == 1, listen
        server.close()
        bus.close()
        for t in mine:
            t.join(5)
            assert not t.is_alive(), f"accept thread still blocked after close ({listen})"


def test_a_reader_waiting_to_deliver_a_refusal_ends_when_the_listener_closes(tmp_path):
    """A client refused for a bad frame gets its refusal before its connection closes: the
    reader waits up to 2 s for the writer. If the listener closes meanwhile the writer has
    stopped, so the wait must end with it, not outlive the engine's close by those 2 s."""
    from provetop.engine.telemetry.bus import Bus

    bus = Bus(retain=10)
    refused = threading.Event()
    server = server_mod.TelemetryServer(
        bus,
        lambda *a: None,
        lambda *a: refused.set(),
        listen=f"unix:{tmp_path / 'r.sock'}",
    )
    server.send_buffer = 4096
    server.start()
    before = {t for t in threading.enumerate() if t.name.startswith("telemetry-reader")}
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(server.socket_path)
    try:
        for i in range(3000):  # more than the two socket buffers: the writer has to wait
            bus.emit("marker", name=f"m{i:04d}-" + "x" * 100)
        assert bus.flush(10)
        client.sendall(HEADER.pack(server_mod.CLIENT_MAX_FRAME + 1))  # a frame too long
        assert refused.wait(10)
        readers = {
            t for t in threading.enumerate() if t.name.startswith("telemetry-reader")
        } - before
        assert readers, "no reader served the connection"
        t0 = time.monotonic()
        server.close()
        for t in readers:
            t.join(5)
            assert not t.is_alive()
        assert time.monotonic() - t0 < 1.0, "the reader waited out its drain timeout"
    finally:
        client.close()
        bus.close()

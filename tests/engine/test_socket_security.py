"""The engine's socket against hostile or careless clients: file modes, TCP authentication and
its throttle, read-only engines, oversized and deeply nested commands, command floods, and
the promise that no command makes the engine write anywhere.

See docs/security.md for the threat model these tests back.
"""

from __future__ import annotations

import os
import random
import socket
import stat
import string
import threading
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import provetop.engine.telemetry.server as server_mod
from provetop.engine.partition.testing import GatedBackend
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.backends import get_backend
from provetop.recordings.framing import HEADER, encode_frame
from provetop.recordings.reader import open_recording
from provetop.recordings.schema import CONTROL_COMMANDS
from provetop.sources.client import EngineClient

TOKEN = "".join(random.choices(string.ascii_letters + string.digits, k=24))


def _engine(tmp_path=None, *, held=False, **kw):
    backend = GatedBackend(get_backend("cpu")) if held else None
    if held:
        backend.hold()
    record = tmp_path / "sec.pvtrec" if tmp_path is not None else None
    cfg = from_preset("ci", workers_per_device=1)
    return Engine(cfg, backend=backend, record=record, **kw)


def _tcp_engine(tmp_path, **kw):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    return _engine(tmp_path, listen="tcp://127.0.0.1:0", token_file=str(token_file), **kw)


def _until(client, pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        e = client.next_event(timeout=max(0.01, deadline - time.monotonic()))
        if e is None:
            return seen, None
        seen.append(e)
        if pred(e):
            return seen, e
    raise AssertionError("timed out")


def _ack(cid):
    return lambda e: e["k"] == "control" and e["id"] == cid


def _refusal(e):
    return e["k"] == "control" and not e["ok"]


def _closed_within(client, timeout, events=None):
    """True when the engine closes the connection within ``timeout``; events read before
    that go to ``events`` (when it is given, they must be none)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            e = client.next_event(timeout=max(0.01, deadline - time.monotonic()))
            if e is None:
                return True
            if events is not None:
                events.append(e)
                assert not events, f"got an event before authenticating: {e}"
    except TimeoutError:
        return False
    except OSError:  # reset: the engine closed with our bytes unread
        return True
    return False


def _finish(engine):
    if isinstance(engine.backend, GatedBackend):
        engine.backend.release()
    assert engine.wait(60)
    assert engine.ok, "the engine was disturbed"


# -- Unix socket ------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_unix_socket_is_private_whatever_the_umask(tmp_path, umask, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    old = os.umask(umask)
    try:
        engine = _engine()
        engine.start()
    finally:
        os.umask(old)
    try:
        path = engine.address.removeprefix("unix:")
        st_sock, st_dir = os.stat(path), os.stat(os.path.dirname(path))
        assert stat.S_ISSOCK(st_sock.st_mode)
        assert stat.S_IMODE(st_sock.st_mode) == 0o600
        assert stat.S_IMODE(st_dir.st_mode) == 0o700
        assert st_sock.st_uid == st_dir.st_uid == os.getuid()
        assert os.path.dirname(os.path.dirname(path)) == str(tmp_path)
        _finish(engine)
    finally:
        engine.close()
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_explicit_unix_path_gets_mode_0600_and_is_never_overwritten(tmp_path):
    path = tmp_path / "mine.sock"
    old = os.umask(0)
    try:
        engine = _engine(listen=f"unix:{path}")
        engine.start()
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        _finish(engine)
    finally:
        engine.close()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    with pytest.raises(Exception, match="already exists"):
        _engine(listen=f"unix:{victim}").start()
    assert victim.read_text() == "keep me"


# -- TCP --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["tcp://0.0.0.0:0", "tcp://192.168.1.10:0", "tcp://[::]:0", "tcp://example.com:0"],
)
def test_tcp_only_on_loopback(tmp_path, spec):
    from provetop.engine.run.runner import EngineError

    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "token").chmod(0o600)
    with pytest.raises(EngineError, match="loopback"):
        Engine(from_preset("ci"), listen=spec, token_file=str(tmp_path / "token"))


def test_tcp_needs_a_token_file_with_a_real_token(tmp_path):
    from provetop.engine.run.runner import EngineError

    with pytest.raises(EngineError, match="token-file"):
        Engine(from_preset("ci"), listen="tcp://127.0.0.1:0")
    (tmp_path / "short").write_text("abc\n")
    (tmp_path / "short").chmod(0o600)
    with pytest.raises(EngineError, match="at least 8"):
        Engine(from_preset("ci"), listen="tcp://127.0.0.1:0", token_file=str(tmp_path / "short"))


def test_the_default_is_a_unix_socket_never_tcp():
    engine = _engine()
    engine.start()
    try:
        assert engine.address.startswith("unix:") and engine.server.kind == "unix"
        _finish(engine)
    finally:
        engine.close()


def test_token_is_compared_in_constant_time_and_a_failure_is_delayed(tmp_path, monkeypatch):
    calls = []
    real = server_mod.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(server_mod.hmac, "compare_digest", spy)
    engine = _tcp_engine(tmp_path, held=True)
    engine.start()
    try:
        wrong = TOKEN[:-1] + ("x" if TOKEN[-1] != "x" else "y")  # differs in the last byte
        t0 = time.monotonic()
        with EngineClient(engine.address, token=wrong) as client:
            assert _closed_within(client, 10)
        waited = time.monotonic() - t0
        assert waited >= server_mod.AUTH_FAIL_DELAY_S * 0.95, waited
        t0 = time.monotonic()
        with EngineClient(engine.address, token=TOKEN) as client:
            assert client.next_event(timeout=5)["k"] == "hello"
        assert time.monotonic() - t0 < server_mod.AUTH_FAIL_DELAY_S  # success is not delayed
        assert calls == [(wrong.encode(), TOKEN.encode()), (TOKEN.encode(), TOKEN.encode())]
        assert engine.server.auth_failures == 1
        _finish(engine)
    finally:
        engine.close()
    rec = open_recording(tmp_path / "sec.pvtrec")
    refused = [e for e in rec.events if e["k"] == "control" and not e["ok"]]
    assert len(refused) == 1 and "authentication failed" in refused[0]["error"]
    assert TOKEN not in str(rec.events) and wrong not in str(rec.events)


def test_parallel_guesses_each_wait_the_delay_without_holding_up_each_other(tmp_path, monkeypatch):
    """Every wrong guess is answered (closed) only after the delay, and the delay is its own:
    a lock held through it serialised the guesses and, with them, a right token behind them."""
    monkeypatch.setattr(server_mod, "AUTH_FAIL_DELAY_S", 0.5)
    engine = _tcp_engine(tmp_path, held=True)
    engine.start()
    guesses = 5
    try:
        waited = []

        def guess(i):
            t0 = time.monotonic()
            with EngineClient(engine.address, token=f"guess-{i:04d}-{random.random()}") as c:
                assert _closed_within(c, 20)
                waited.append(time.monotonic() - t0)

        threads = [threading.Thread(target=guess, args=(i,)) for i in range(guesses)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(waited) == guesses
        assert min(waited) >= 0.5 * 0.95, waited  # no answer before the delay
        assert max(waited) < 0.5 * (guesses - 1), waited  # not one after the other
        assert engine.server.auth_failures == guesses
        _finish(engine)
    finally:
        engine.close()


@pytest.mark.parametrize(
    "first",
    [
        HEADER.pack(1 << 20),  # announces a 1 MiB frame: refused from the header alone
        HEADER.pack(16 << 20) + b"\x00" * 100,
        encode_frame({"k": "auth", "token": TOKEN + "x" * 70000})[:4] + b"\x81",
        encode_frame({"k": "auth", "token": 12345678}),
        encode_frame({"k": "command", "id": 1, "cmd": "pause"}),
        encode_frame({"k": "auth", "token": {"nested": [[[[[]]]]]}}),
        b"\xff" * 8,
    ],
)
def test_bad_first_frames_on_tcp_get_nothing_and_the_engine_goes_on(tmp_path, first, monkeypatch):
    monkeypatch.setattr(server_mod, "AUTH_FAIL_DELAY_S", 0.05)
    engine = _tcp_engine(tmp_path, held=True)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            client.send_raw(first)
            assert _closed_within(client, 10, events=[])  # closed, not a single event
        assert engine.server.auth_failures == 1
        with EngineClient(engine.address, token=TOKEN) as client:
            assert client.next_event(timeout=5)["k"] == "hello"
        _finish(engine)
    finally:
        engine.close()


def test_a_silent_tcp_client_is_dropped_after_the_auth_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "AUTH_TIMEOUT_S", 0.3)
    monkeypatch.setattr(server_mod, "AUTH_FAIL_DELAY_S", 0.05)
    engine = _tcp_engine(tmp_path, held=True)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            t0 = time.monotonic()
            assert client.next_event(timeout=10) is None
            assert time.monotonic() - t0 < 5
        _finish(engine)
    finally:
        engine.close()


# -- control ----------------------------------------------------------------------------------


def test_read_only_engine_refuses_every_command_and_changes_nothing(tmp_path):
    engine = _engine(tmp_path, held=True, read_only=True)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            args = {
                "force_fallback": {"device": 0, "on": True},
                "trim": {"device": 0},
                "marker": {"name": "x"},
            }
            for cmd in CONTROL_COMMANDS:
                cid = client.command(cmd, args.get(cmd, {}))
                _seen, ack = _until(client, _ack(cid))
                assert ack["ok"] is False and "read-only" in ack["error"], ack
        assert not engine.scheduler.paused and not engine.scheduler.stopped
        assert not engine.controls.is_forced(0)
        _finish(engine)
    finally:
        engine.close()
    state = open_recording(tmp_path / "sec.pvtrec").state()
    assert state.markers == [] and state.totals()["fallbacks"] == 0


def test_oversized_command_frame_is_refused_and_only_that_client_is_cut(tmp_path):
    engine = _engine(held=True)
    engine.start()
    try:
        good = EngineClient(engine.address)
        bad = EngineClient(engine.address)
        big = encode_frame(
            {"k": "command", "id": 1, "cmd": "marker", "args": {"name": "x" * 70000}}
        )
        assert len(big) > server_mod.CLIENT_MAX_FRAME
        bad.send_raw(big[:8])  # the header is enough to refuse it
        _seen, ack = _until(bad, _refusal)
        assert "bad frame" in ack["error"] and str(server_mod.CLIENT_MAX_FRAME) in ack["error"]
        assert _closed_within(bad, 5)
        cid = good.command("marker", {"name": "still here"})
        assert _until(good, _ack(cid))[1]["ok"]
        good.close()
        _finish(engine)
    finally:
        engine.close()


def test_large_but_legal_frames_get_an_error_reply_and_the_connection_stays(tmp_path):
    engine = _engine(held=True)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            n = random.randint(50000, 60000)
            cases = [
                ("marker", {"name": "m" * n}, "1 to 200 characters"),
                ("pause", {"junk": [{}] * (n // 2)}, "takes no arguments"),
                ("trim", {"device": "x" * n}, "must be an integer"),
                ("force_fallback", {"device": 0, "on": [True] * n}, "'on' must be"),
            ]
            for cmd, args, error in cases:
                cid = client.command(cmd, args)
                _seen, ack = _until(client, _ack(cid))
                assert ack["ok"] is False and error in ack["error"], ack
                # the refusal echoes a bounded summary, never the payload
                assert len(msgpack.packb(ack)) < 2048
            cid = client.command("marker", {"name": "after the big ones"})
            assert _until(client, _ack(cid))[1]["ok"]
        _finish(engine)
    finally:
        engine.close()


def test_decoded_command_memory_is_bounded(tmp_path):
    """A frame of 64 KiB of empty maps decodes to ~4 MiB of Python objects; the engine reads
    one frame at a time per connection, so peak memory stays within a fixed bound."""
    import tracemalloc

    engine = _engine(held=True)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            payload = {"k": "command", "id": 1, "cmd": "pause", "args": {"a": [{}] * 65000}}
            frame = encode_frame(payload)
            assert len(frame) <= server_mod.CLIENT_MAX_FRAME + 4
            tracemalloc.start()
            try:
                for i in range(4):
                    payload["id"] = i
                    client.send(payload)
                    _until(client, _ack(i))
                _cur, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        print(f"peak traced memory {peak / 2**20:.1f} MiB")
        assert peak < 32 << 20
        _finish(engine)
    finally:
        engine.close()


@pytest.mark.parametrize("depth", [33, 40, 200, 10000])
def test_deeply_nested_commands_are_refused(depth):
    engine = _engine(held=True)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            inner = b"\x91" * depth + b"\x80"  # arrays nested `depth` deep around an empty map
            body = b"\x84\xa1k\xa7command\xa2id\x01\xa3cmd\xa5pause\xa4args\x81\xa1x" + inner
            client.send_raw(HEADER.pack(len(body)) + body)
            _seen, ack = _until(client, _refusal)
            assert "nested deeper" in ack["error"]
        _finish(engine)
    finally:
        engine.close()


def test_a_command_flood_cuts_that_client_only(tmp_path):
    engine = _engine(held=True)
    engine.start()
    try:
        calm = EngineClient(engine.address)
        flood = EngineClient(engine.address)
        burst = b"".join(
            encode_frame({"k": "command", "id": i, "cmd": "marker", "args": {"name": f"m{i}"}})
            for i in range(server_mod.MAX_COMMANDS_PER_S * 3)
        )
        try:
            flood.send_raw(burst)
        except OSError:
            pass
        _seen, ack = _until(flood, lambda e: _refusal(e) and "commands in one second" in e["error"])
        assert _closed_within(flood, 5)
        engine.bus.flush()
        markers = [t for t in engine.state.markers]
        assert len(markers) <= server_mod.MAX_COMMANDS_PER_S
        cid = calm.command("marker", {"name": "calm"})
        assert _until(calm, _ack(cid))[1]["ok"]
        calm.close()
        _finish(engine)
    finally:
        engine.close()


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=40)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_frames = st.fixed_dictionaries(
    {},
    optional={
        "k": st.sampled_from(["command", "auth", "hello"]) | _values,
        "id": st.integers(-(2**63), 2**63) | _values,
        "cmd": st.sampled_from(list(CONTROL_COMMANDS)) | _values,
        "args": st.dictionaries(
            st.sampled_from(["device", "on", "name", "x"]) | st.text(max_size=8),
            _values,
            max_size=4,
        )
        | _values,
    },
)


@settings(
    max_examples=int(os.environ.get("PROVETOP_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(frame=_frames)
def test_any_command_frame_gets_exactly_one_answer(fuzz_engine, frame):
    """Wrong types, unknown names, odd values: the engine answers with one ``control`` event
    (schema-valid), never raises, and an accepted command carries only checked values."""
    engine = fuzz_engine
    ack = engine._on_frame(frame, "fuzz")
    assert ack["k"] == "control" and isinstance(ack["ok"], bool)
    if ack["ok"]:
        assert ack["cmd"] in CONTROL_COMMANDS
        for key, value in ack["args"].items():
            assert key in ("device", "on", "name")
            assert isinstance(value, int | bool) or (key == "name" and len(value) <= 200)
    else:
        assert ack["cmd"] in (*CONTROL_COMMANDS, "?")
        assert len(ack["error"]) < 300 and "\n" not in ack["error"]
        assert len(msgpack.packb(ack)) < 4096


@pytest.fixture(scope="module")
def fuzz_engine():
    """One engine for every fuzzed frame, never started (commands only), closed after the
    module: an engine's bus runs a thread from its construction on."""
    engine = Engine(from_preset("ci"), listen=False)
    yield engine
    engine.close()


def test_no_command_makes_the_engine_open_a_file(tmp_path, monkeypatch):
    """Markers with path-like names are labels: the engine opens no file for any command."""
    import builtins
    import io

    engine = _engine(tmp_path, held=True)
    engine.start()
    opened = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *a, **kw):
        opened.append(file)
        return real_open(file, *a, **kw)

    def spy_os_open(path, *a, **kw):
        opened.append(path)
        return real_os_open(path, *a, **kw)

    names = ["../../../etc/passwd", "/tmp/x", "a/b", "..", "~/.bashrc", "C:\\w", "%s%n"]
    before = set(os.listdir(tmp_path))
    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    try:
        with EngineClient(engine.address) as client:
            for name in names:
                cid = client.command("marker", {"name": name})
                assert _until(client, _ack(cid))[1]["ok"]
            for cmd, args in [("trim", {"device": 0}), ("pause", {}), ("resume", {})]:
                cid = client.command(cmd, args)
                assert _until(client, _ack(cid))[1]["ok"]
        engine.bus.flush()
    finally:
        monkeypatch.undo()
    assert opened == []
    assert set(os.listdir(tmp_path)) == before
    _finish(engine)
    engine.close()
    state = open_recording(tmp_path / "sec.pvtrec").state()
    assert [name for _t, name in state.markers] == names


def test_many_connections_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_CLIENTS", 4)
    engine = _engine(held=True)
    engine.start()
    try:
        clients = [EngineClient(engine.address) for _ in range(4)]
        for c in clients:
            assert c.next_event(timeout=5)["k"] == "hello"
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.settimeout(5)
        extra.connect(engine.address[5:])
        assert extra.recv(1) == b""  # closed at accept
        extra.close()
        assert engine.server.refused_clients == 1
        clients.pop().close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # a freed slot is served again
            with EngineClient(engine.address) as c:
                try:
                    if c.next_event(timeout=1) is not None:
                        break
                except TimeoutError:
                    pass
        else:
            raise AssertionError("no slot came free")
        for c in clients:
            c.close()
        _finish(engine)
    finally:
        engine.close()


_chunks = st.lists(
    st.binary(max_size=300)
    | st.builds(
        lambda frame, cut: encode_frame(frame)[:cut],
        _frames,
        st.integers(0, 10**6),
    )
    | st.builds(lambda n: HEADER.pack(n), st.integers(0, 2**32 - 1)),
    max_size=8,
)


@settings(
    max_examples=int(os.environ.get("PROVETOP_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(chunks=_chunks)
def test_any_byte_stream_is_framed_with_the_servers_limits_or_refused(fuzz_engine, chunks):
    """The server's read path without the socket: its decoder limits, then the engine's
    command handler. Only FrameError may come out (the server turns it into a refusal and
    closes that connection); the decoder never holds more than its bound."""
    from provetop.recordings.framing import HEADER_SIZE, FrameDecoder, FrameError

    decoder = FrameDecoder(
        max_buffer=server_mod.CLIENT_MAX_FRAME + HEADER_SIZE + server_mod.RECV_BYTES,
        max_frame=server_mod.CLIENT_MAX_FRAME,
    )
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            assert decoder.buffered <= decoder.max_buffer
            for frame in decoder.frames():
                ack = fuzz_engine._on_frame(frame, "fuzz")
                assert ack["k"] == "control"
    except FrameError as exc:
        assert str(exc) and "\n" not in str(exc)


def test_a_token_file_other_users_can_read_is_refused(tmp_path):
    from provetop.engine.run.runner import EngineError

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    with pytest.raises(EngineError, match="chmod 600"):
        Engine(from_preset("ci"), listen="tcp://127.0.0.1:0", token_file=str(token_file))

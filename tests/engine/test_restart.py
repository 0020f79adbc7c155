"""Starting again after a crash: a stale Unix socket (its engine was killed) is replaced, a live
one is refused in one line and left alone, and a start that fails leaves no recording that
would read back as a complete run."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from provetop.engine.run.runner import Engine, EngineError
from provetop.engine.settings.config import from_preset
from provetop.sources.client import EngineClient


def _engine(tmp_path, sock, name="r.pvtrec"):
    cfg = from_preset("ci", workers_per_device=1)
    return Engine(cfg, listen=f"unix:{sock}", record=tmp_path / name)


def _stale_socket(path) -> None:
    """What an engine killed with SIGKILL leaves: a bound socket file nobody listens on."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_stale_socket_is_replaced_at_start(tmp_path):
    sock = tmp_path / "e.sock"
    _stale_socket(sock)
    engine = _engine(tmp_path, sock)
    engine.start()
    try:
        with EngineClient(engine.address) as client:
            assert client.next_event(timeout=5)["k"] == "hello"
        assert engine.wait(60) and engine.ok
    finally:
        engine.close()
    assert not sock.exists()


def test_a_live_socket_is_refused_in_one_line_and_left_alone(tmp_path):
    sock = tmp_path / "e.sock"
    first = _engine(tmp_path, sock, "first.pvtrec")
    first.start()
    try:
        second = _engine(tmp_path, sock, "second.pvtrec")
        with pytest.raises(EngineError) as info:
            second.start()
        message = str(info.value)
        assert "another engine is listening" in message and "\n" not in message
        # the failed start left no recording behind (it would read back as a complete run)
        assert not (tmp_path / "second.pvtrec").exists()
        with EngineClient(first.address) as client:  # the first engine still serves
            assert client.next_event(timeout=5)["k"] == "hello"
        assert first.wait(60) and first.ok
    finally:
        first.close()
    assert (tmp_path / "first.pvtrec").exists()


def test_anything_else_at_the_path_is_never_touched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    engine = _engine(tmp_path, victim)
    with pytest.raises(EngineError, match="already exists"):
        engine.start()
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "r.pvtrec").exists()

"""A cuzk ``/status`` endpoint that redirects the poller away or trickles its headers, and saved
status snapshots that nest too deep, are FIFOs or are absurdly large (``import-cuzk``)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

import provetop.commands.import_cuzk as import_cuzk
from provetop.cli import main
from provetop.sources.cuzk.status import fetch_status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuzk"


class _Raw:
    """A TCP server answering every connection with ``answer(conn)`` on its own thread."""

    def __init__(self, answer):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._answer = answer
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            conn.recv(4096)
            self._answer(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()


def _body(conn, payload=b'{"uptime_secs": 1}'):
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
    conn.sendall(head + payload)


def test_a_redirect_to_another_host_is_not_followed():
    elsewhere = _Raw(_body)  # "another host": another port of loopback stands in for it
    mover = _Raw(
        lambda c: c.sendall(
            f"HTTP/1.1 302 Found\r\nLocation: http://localhost:{elsewhere.port}/status\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        )
    )
    try:
        result = fetch_status(f"http://127.0.0.1:{mover.port}/status", timeout=2.0)
        assert not result.ok and "another host" in result.error, result
        assert elsewhere.hits == 0
    finally:
        mover.close()
        elsewhere.close()


def test_a_redirect_on_the_same_host_and_port_is_followed():
    def answer(conn):
        if server.hits == 1:
            conn.sendall(b"HTTP/1.1 301 Moved\r\nLocation: /status2\r\nContent-Length: 0\r\n\r\n")
        else:
            _body(conn)

    server = _Raw(answer)
    try:
        result = fetch_status(f"http://127.0.0.1:{server.port}/status", timeout=2.0)
        assert result.ok and result.snapshot == {"uptime_secs": 1}, result
    finally:
        server.close()


def test_headers_trickled_a_byte_at_a_time_are_cut_at_the_deadline():
    """Each header byte came well inside the per-read timeout, so the poll waited for every
    one of them (a 1 s fetch held 79 s); the deadline now covers the headers too."""
    stop = threading.Event()

    def trickle(conn):
        for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 10_000:
            if stop.is_set():
                return
            conn.sendall(bytes([byte]))
            time.sleep(0.05)

    server = _Raw(trickle)
    try:
        start = time.monotonic()
        result = fetch_status(f"http://127.0.0.1:{server.port}/status", timeout=0.5)
        took = time.monotonic() - start
        assert not result.ok and "no complete response" in result.error, result
        assert took < 0.5 + 1.5, took  # the deadline, not 10,000 bytes x 50 ms
    finally:
        stop.set()
        server.close()


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "daemon.log"
    shutil.copy(FIXTURES / "daemon.log", path)
    return path


def _run(args, capsys):
    code = main(["import-cuzk", *map(str, args)])
    return code, capsys.readouterr().err


def test_deeply_nested_status_snapshots_are_refused_in_one_line(log, tmp_path, capsys):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    (snaps / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    code, err = _run([str(log), "--status-snapshots", str(snaps), "-o", tmp_path / "o"], capsys)
    assert code == 0 and "Traceback" not in err and "RecursionError" not in err, err
    assert "deep.json: JSON nested deeper than 32 levels" in err


def test_a_fifo_named_json_is_refused_at_once_not_waited_on(log, tmp_path, capsys):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    os.mkfifo(snaps / "pipe.json")
    (snaps / "good.json").write_text(json.dumps({"uptime_secs": 1}))
    done: list[tuple[int, str]] = []
    worker = threading.Thread(
        target=lambda: done.append(
            _run([str(log), "--status-snapshots", str(snaps), "-o", str(tmp_path / "o")], capsys)
        ),
        daemon=True,
    )
    worker.start()
    worker.join(30)
    if worker.is_alive():  # release the blocked open, so the test process can end
        fd = os.open(snaps / "pipe.json", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("import-cuzk blocked on a FIFO among the status snapshots")
    code, err = done[0]
    assert code == 0 and "pipe.json: is a FIFO, not a regular file" in err, err


def test_status_snapshots_are_capped_in_size(log, tmp_path, capsys, monkeypatch):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    big = json.dumps({"uptime_secs": 1, "pad": "x" * 5000})
    for i in range(4):
        (snaps / f"{i}.json").write_text(big)
    monkeypatch.setattr(import_cuzk, "MAX_BODY", 4096)  # one file over the limit per file
    code, err = _run([str(log), "--status-snapshots", str(snaps), "-o", tmp_path / "o"], capsys)
    assert code == 0 and "larger than the 4096-byte limit" in err, err
    monkeypatch.setattr(import_cuzk, "MAX_BODY", 1 << 20)
    monkeypatch.setattr(import_cuzk, "MAX_SNAPSHOT_BYTES", 12_000)  # and all of them together
    code, err = _run([str(log), "--status-snapshots", str(snaps), "-o", tmp_path / "o2"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "bytes of *.json in all" in lines[0], err
    assert not (tmp_path / "o2").exists()

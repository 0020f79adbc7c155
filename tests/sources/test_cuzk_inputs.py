"""Hostile or careless cuzk inputs: ``import-cuzk -o`` pointed at its own input, at an existing
recording or at a directory; a ``/status`` endpoint that nests 100,000 deep, sends too much or
trickles its body; a log line of tens of megabytes without a newline."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time
from pathlib import Path

import pytest

import provetop.sources.cuzk.follow as follow_mod
from provetop.cli import main
from provetop.recordings.framing import encode_frame
from provetop.recordings.reader import open_recording
from provetop.sources.cuzk.convert import Converter
from provetop.sources.cuzk.follow import FileFollower, iter_lines
from provetop.sources.cuzk.status import MAX_BODY, fetch_status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuzk"


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "daemon.log"
    shutil.copy(FIXTURES / "daemon.log", path)
    return path


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("provetop: error:"), err
    return err[0]


def test_output_never_overwrites_the_input_log(log, tmp_path, capsys):
    before = log.read_bytes()
    assert main(["import-cuzk", str(log), "-o", str(log)]) == 2
    assert "is the input log" in _one_line_error(capsys)
    assert main(["import-cuzk", str(log), "-o", str(log), "--force"]) == 2  # not even forced
    _one_line_error(capsys)
    link = tmp_path / "link.pvtrec"
    link.symlink_to(log)
    assert main(["import-cuzk", str(log), "-o", str(link), "--force"]) == 2
    _one_line_error(capsys)
    assert log.read_bytes() == before


def test_an_existing_output_needs_force(log, tmp_path, capsys):
    out = tmp_path / "run.pvtrec"
    out.write_bytes(b"an older recording")
    assert main(["import-cuzk", str(log), "-o", str(out)]) == 2
    assert "--force" in _one_line_error(capsys)
    assert out.read_bytes() == b"an older recording"
    assert main(["import-cuzk", str(log), "-o", str(out), "--force"]) == 0
    assert open_recording(out).complete
    assert not list(tmp_path.glob("*.tmp-*"))


def test_output_to_a_directory_is_one_line(log, tmp_path, capsys):
    assert main(["import-cuzk", str(log), "-o", str(tmp_path)]) == 2
    assert "is a directory" in _one_line_error(capsys)


def _within(seconds, fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still running after {seconds} s"
    return out[0]


def test_a_huge_line_without_newline_is_read_in_bounded_polls(tmp_path, monkeypatch):
    monkeypatch.setattr(follow_mod, "POLL_BYTES", 4 << 20)
    path = tmp_path / "long.log"
    with open(path, "wb") as f:
        f.write(b"first line\n")
        f.write(b"x" * (40 << 20))  # 40 MB, no newline (yet)
    follower = FileFollower(path)
    lines, polls, slowest = [], 0, 0.0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        start = time.monotonic()
        got = _within(5, follower.poll)
        slowest = max(slowest, time.monotonic() - start)
        polls += 1
        lines += got
        if follower._pos >= path.stat().st_size:
            break
    assert slowest < 0.5, slowest  # a quit key is looked at between polls
    assert lines == ["first line"] and polls >= 10
    assert len(follower._buf) == 0 and follower.long_lines == 1
    (cut,) = follower.take_partial()
    assert len(cut) == follow_mod.MAX_LINE
    with open(path, "ab") as f:
        f.write(b"tail of the long line\nnext\n")
    assert follower.poll() == ["next"]  # the rest of the long line is skipped
    follower.close()
    start = time.monotonic()
    got = _within(10, lambda: list(iter_lines(str(path))))
    assert time.monotonic() - start < 5
    assert [line for line, _ in got] == ["first line", "x" * follow_mod.MAX_LINE, "next"]
    assert [complete for _, complete in got] == [True, False, True]


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "deep"

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.mode == "deep":
            body = b"[" * 100_000 + b"]" * 100_000
        elif self.mode == "large":
            body = b'{"x": "' + b"a" * (MAX_BODY + 10) + b'"}'
        else:
            body = json.dumps({"uptime_secs": 1}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.mode == "trickle":
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        else:
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "mode, message",
    [
        ("deep", "nested deeper"),
        ("large", "larger than"),
        ("trickle", "no complete response"),
    ],
)
def test_status_bodies_are_bounded_in_depth_size_and_time(mode, message):
    handler = type("H", (_Handler,), {"mode": mode})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/status"
        start = time.monotonic()
        result = _within(10, lambda: fetch_status(url, timeout=1.0))
        took = time.monotonic() - start
        assert not result.ok and message in result.error, result
        assert took < 2.5, took  # the deadline covers the whole body, not each read
    finally:
        server.shutdown()
        server.server_close()


def test_deep_nesting_is_refused_before_the_json_parser_recurses():
    """json.loads recurses once per level in C and stops only at the interpreter's recursion
    limit; a process that raised the limit (a test framework, a library) then overflowed the C
    stack on 100,000 levels and died (SIGSEGV). The depth is counted first, without parsing."""
    import subprocess
    import sys

    from provetop.sources.cuzk.status import MAX_DEPTH, bracket_depth

    assert bracket_depth(b'{"a": "[[[[", "b": [1, {"c": [2]}]}') == 4
    assert bracket_depth(b'["\\"[[[", {}]') == 2
    assert bracket_depth(b"[" * 100_000 + b"]" * 100_000) == 100_000 > MAX_DEPTH
    code = (
        "import sys, threading, http.server\n"
        "sys.setrecursionlimit(10**6)\n"
        "from provetop.sources.cuzk.status import fetch_status\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        body = b'[' * 200000 + b']' * 200000\n"
        "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
        "        self.end_headers(); self.wfile.write(body)\n"
        "    def log_message(self, *a): pass\n"
        "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
        "threading.Thread(target=s.serve_forever, daemon=True).start()\n"
        "r = fetch_status(f'http://127.0.0.1:{s.server_address[1]}/status')\n"
        "print(r.error)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "nested deeper" in done.stdout


WIDE = 123456789012345678901234567890  # wider than 64 bits: msgpack cannot carry it


def test_integers_wider_than_64_bits_are_counted_as_malformed_never_fatal(log, tmp_path, capsys):
    """Such a number ended ``import-cuzk`` with a FrameError (the recording's msgpack has no
    wider integers): now the value is clamped (or the line refused) and counted."""
    with log.open("a") as f:
        f.write(f"\nTIMELINE,{WIDE},SYNTH_START,28398f9f-4ba7-4ab7-ac05-04a56cc6be18,partition=4\n")
    out = tmp_path / "run.pvtrec"
    assert main(["import-cuzk", str(log), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "out of range" in err, err
    assert open_recording(out).complete

    converter = Converter()
    events = []
    for line in (
        f"TIMELINE,10,SYNTH_START,job,partition={WIDE}",
        f"TIMELINE,20,SYNTH_END,job,partition={WIDE},synth_ms=5",
        f"TIMELINE,22,GPU_START,job,worker={WIDE},partition={WIDE}",
        f"CUZK_TIMING: ntt_ms={WIDE} msm_ms=3",
        f"TIMELINE,40,GPU_END,job,worker={WIDE},partition={WIDE}",
    ):
        events += converter.feed_line(line)
    events += converter.flush()
    for event in events:
        encode_frame(event)  # raised FrameError before
    assert converter.stats["malformed"] >= 3
    assert any("wider than 64 bits" in s for s in converter.unknown_samples)

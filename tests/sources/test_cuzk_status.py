"""The cuzk status endpoint against a real local HTTP server: up, down, invalid answers."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from provetop.sources.cuzk import sim
from provetop.sources.cuzk.source import CuzkSource
from provetop.sources.cuzk.status import StatusPoller, fetch_status, status_url


class FakeCuzk:
    """A status endpoint whose answer the test chooses: a body (str/bytes/obj) or an HTTP code."""

    def __init__(self) -> None:
        self.answer: object = {"uptime_secs": 0.0}
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server API
                owner.hits += 1
                answer = owner.answer
                if isinstance(answer, int):
                    self.send_error(answer)
                    return
                if isinstance(answer, bytes):
                    body = answer
                else:
                    body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def cuzk():
    server = FakeCuzk()
    yield server
    server.close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_status_url_forms():
    assert status_url("127.0.0.1:9821") == "http://127.0.0.1:9821/status"
    assert status_url("http://h:1") == "http://h:1/status"
    assert status_url("http://h:1/debug/status") == "http://h:1/debug/status"


def test_fetch_ok_invalid_non_object_http_error_and_down(cuzk):
    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=1, partitions=2)
    snap = sim.status_snapshot(run, 1500)
    cuzk.answer = snap
    r = fetch_status(status_url(cuzk.url))
    assert r.ok and r.snapshot == snap and r.error is None
    cuzk.answer = b'{"uptime_secs": 1.0, "pipelines": ['  # cut short
    r = fetch_status(status_url(cuzk.url))
    assert not r.ok and r.error.startswith("invalid JSON")
    cuzk.answer = b"\xff\xfe not utf-8"
    assert fetch_status(status_url(cuzk.url)).error.startswith("invalid JSON")
    cuzk.answer = [1, 2, 3]
    assert "not an object" in fetch_status(status_url(cuzk.url)).error
    cuzk.answer = 503
    assert fetch_status(status_url(cuzk.url)).error.startswith("HTTP 503")
    down = fetch_status(f"http://127.0.0.1:{free_port()}/status", timeout=1.0)
    assert not down.ok and down.error.startswith("unreachable")


def test_poller_polls_at_its_interval(cuzk):
    results = []
    poller = StatusPoller(cuzk.url, results.append, interval=0.05).start()
    deadline = time.monotonic() + 5
    while len(results) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    poller.stop()
    assert len(results) >= 4 and all(r.ok for r in results)


def wait_for(source, predicate, seconds=8.0):
    events = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        events += source.poll()
        if predicate(events):
            return events
        time.sleep(0.02)
    raise AssertionError(f"timed out; got {[e['k'] for e in events]}")


def test_source_survives_an_endpoint_that_goes_down_and_answers_garbage(cuzk):
    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=1, partitions=3)
    end = max(c.end for c in run.calls)
    cuzk.answer = sim.status_snapshot(run, 0)
    source = CuzkSource(status_url=cuzk.url, status_interval=0.03, poll_interval=0.01).start()
    try:
        events = wait_for(source, lambda ev: any(e["k"] == "hello" for e in ev))
        assert events[0]["source"] == "cuzk" and events[0]["read_only"]
        cuzk.answer = b"<html>not json</html>"
        events += wait_for(source, lambda ev: any(e["k"] == "fault" for e in ev))
        fault = next(e for e in events if e["k"] == "fault")
        assert fault["kind"] == "source" and "invalid JSON" in fault["message"]
        cuzk.answer = 500
        time.sleep(0.2)
        assert not [e for e in source.poll() if e["k"] == "fault"]  # one fault per outage
        for t in range(0, end + 500, 200):  # the daemon answers again and runs
            cuzk.answer = sim.status_snapshot(run, t)
            time.sleep(0.05)
        events += wait_for(
            source,
            lambda ev: sum(e["k"] == "partition_done" for e in ev) == len(run.calls),
        )
        assert any(e["k"] == "engine_state" and "again" in e.get("reason", "") for e in events)
        assert source.stats()["status_errors"] >= 2
        assert source.status["uptime_secs"] > 0
        assert source.command("pause")["ok"] is False
    finally:
        source.stop()


def test_source_with_the_endpoint_down_from_the_start_reports_it(tmp_path):
    log = tmp_path / "cuzk.log"
    log.write_text("")
    url = f"127.0.0.1:{free_port()}"
    with CuzkSource(str(log), url, status_interval=0.05, poll_interval=0.01) as source:
        events = wait_for(source, lambda ev: any(e["k"] == "fault" for e in ev))
    fault = next(e for e in events if e["k"] == "fault")
    assert fault["kind"] == "source" and "unreachable" in fault["message"]

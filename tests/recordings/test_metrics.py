"""The metrics fold, its table and document, and the HTTP server's defences (real sockets)."""

from __future__ import annotations

import http.client
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from provetop.recordings.prometheus import http_server
from provetop.recordings.prometheus.exposition import render
from provetop.recordings.prometheus.families import COUNTER_FIELDS, METRICS, markdown_table
from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.prometheus.http_server import (
    MetricsAddressError,
    MetricsServer,
    parse_metrics_address,
)
from provetop.recordings.schema import EVENTS
from provetop.recordings.state import State, phantom_bytes, worker_state
from provetop.sources.synthetic import generate

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def families(body: bytes | str) -> dict[str, list]:
    text = body.decode() if isinstance(body, bytes) else body
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_docs_match_the_table():
    regenerate = "regenerate with: python -m provetop.recordings.prometheus.families"
    assert markdown_table() in DOC.read_text(), regenerate


def test_names_follow_prometheus_conventions():
    for spec in METRICS.values():
        assert spec.full_name.startswith("provetop_")
        if spec.kind == "counter":
            assert spec.name.endswith("_total"), spec.name
        else:
            assert not spec.name.endswith("_total"), spec.name
        if spec.kind == "histogram":
            assert spec.name.endswith("_seconds"), spec.name
        if "bytes" in spec.name:
            assert spec.name.endswith("_bytes") or spec.name.endswith("_bytes_per_second")


def test_the_fold_agrees_with_the_reducer_on_a_synthetic_run():
    events = generate(devices=3, workers=2, duration_s=6.0, oom_every=5)
    fold = MetricsFold().fold(events)
    state = State().fold(events)
    fams = families(fold.render())
    done = {(s.labels["device"], s.labels["worker"], s.labels["outcome"]): s.value
            for s in fams["provetop_partitions"] if s.name.endswith("_total")}  # fmt: skip
    assert sum(v for k, v in done.items() if k[2] == "ok") == sum(1 for r in state.attempts if r.ok)
    assert sum(v for k, v in done.items() if k[2] == "failed") == sum(
        1 for r in state.attempts if not r.ok
    )
    phantom = {s.labels["device"]: s.value for s in fams["provetop_phantom_bytes"]}
    for device, sample in state.memory.items():
        assert phantom[str(device)] == phantom_bytes(sample)
    modeled = {s.labels["modeled"] for s in fams["provetop_phantom_bytes"]}
    assert modeled == {"true"}  # the synthetic run is modeled: the label says so
    ooms = sum(s.value for s in fams["provetop_ooms"] if s.name.endswith("_total"))
    assert ooms == state.totals()["ooms"]
    s_per_proof = fams["provetop_seconds_per_proof"][0].value
    assert s_per_proof == pytest.approx(state.s_per_proof())
    waits = [s for s in fams["provetop_mutex_wait_seconds"] if s.name.endswith("_count")]
    assert sum(s.value for s in waits) == len(state.attempts)
    # no NVML on the cpu backend: the gpu metrics are absent, not zero
    assert "provetop_gpu_power_watts" not in fams


PROMETHEUS_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
PROMETHEUS_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def test_every_metric_and_label_name_is_valid_without_escaping():
    # the text writer escapes label values only: the names must need none
    for spec in METRICS.values():
        assert PROMETHEUS_NAME.fullmatch(spec.full_name), spec.full_name
        for label in spec.labels:
            assert PROMETHEUS_LABEL.fullmatch(label) and not label.startswith("__"), label
            assert label != "le", label  # the histograms' own bucket label


def _parsed(body: bytes) -> list[tuple]:
    """Every family as prometheus-client's parser reads it: name, type, help, and the
    samples with their labels in any order."""
    return [
        (f.name, f.type, f.documentation,
         [(s.name, sorted(s.labels.items()), s.value) for s in f.samples])
        for f in text_string_to_metric_families(body.decode())
    ]  # fmt: skip


def test_the_text_writer_reads_as_prometheus_clients_own_exposition():
    odd = 'gpu "a"\\host\nline two ✓'  # a quote, a backslash, a newline, non-ASCII
    events = generate(devices=2, workers=2, duration_s=4.0, oom_every=3)
    for e in events:
        if e["k"] == "hello":
            e["host"] = odd
            e["devices"][0]["name"] = odd
    fold = MetricsFold().fold(events)
    fams = fold.families()
    ours = render(fams)

    class Collector:
        def collect(self):
            return iter(fams)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector())  # type: ignore[arg-type]
    theirs = generate_latest(reg)
    assert ours == theirs  # the same bytes (recordings' pinned outputs include /metrics)
    assert _parsed(ours) == _parsed(theirs)
    assert len(_parsed(ours)) > 20 and sum(len(f[3]) for f in _parsed(ours)) > 1000
    info = families(ours)["provetop_info"][0]
    assert info.labels["host"] == odd


def test_gpu_events_become_gauges_and_missing_fields_stay_absent():
    fold = MetricsFold()
    fold.apply({"k": "gpu", "t": 1, "device": 0, "sm_util_pct": 87, "power_mw": 612_000,
                "temp_c": 61, "pcie_rx_bytes_s": 25_000_000_000})  # fmt: skip
    fams = families(fold.render())
    util = {s.labels["unit"]: s.value for s in fams["provetop_gpu_utilization_ratio"]}
    assert util == {"sm": pytest.approx(0.87)}
    assert fams["provetop_gpu_power_watts"][0].value == pytest.approx(612.0)
    assert fams["provetop_gpu_temperature_celsius"][0].value == 61
    assert "provetop_gpu_fan_ratio" not in fams and "provetop_gpu_power_limit_watts" not in fams
    assert "provetop_gpu_xid_errors" not in fams  # XIDs not reported: absent, never 0
    fold.apply({"k": "gpu", "t": 2, "device": 1, "xid_count": 3, "xid_last": 79})
    xids = {s.labels["device"]: s.value for s in families(fold.render())["provetop_gpu_xid_errors"]}
    assert xids == {"1": 3}


def test_counters_events_become_the_telemetry_metrics_and_the_latest_wins():
    fold = MetricsFold()
    assert not any(n.startswith("provetop_telemetry_") for n in families(fold.render()))
    fold.apply({"k": "counters", "t": 1, "events": 10, "clients": 2, "dropped_clients": 0,
                "lagged_events": 5})  # fmt: skip
    fold.apply({"k": "counters", "t": 2, "events": 20, "clients": 1, "dropped_clients": 1,
                "lagged_events": 7, "paced_accepts": 40, "auth_failures": 3})  # fmt: skip
    fams = families(fold.render())
    assert fams["provetop_telemetry_clients"][0].value == 1
    assert fams["provetop_telemetry_lagged_events"][0].value == 7
    assert fams["provetop_telemetry_paced_accepts"][0].value == 40
    assert fams["provetop_telemetry_auth_failures"][0].value == 3
    assert "provetop_telemetry_refused_connections" not in fams  # not reported: absent


def test_worker_state_follows_the_open_phases():
    assert worker_state("msm_l") == "gpu" and worker_state("mutex_wait") == "waiting"
    assert worker_state("upload") == "prestage" and worker_state("verify") == "finishing"
    fold = MetricsFold()
    where = {"proof": 0, "partition": 0, "worker": 1, "device": 0}
    fold.apply({"k": "phase_begin", "t": 1, **where, "phase": "mutex_wait"})
    states = {s.labels["state"]: s.value for s in families(fold.render())["provetop_worker_state"]}
    assert states["waiting"] == 1 and states["idle"] == 0
    fold.apply({"k": "phase_end", "t": 2, **where, "phase": "mutex_wait", "ok": True})
    states = {s.labels["state"]: s.value for s in families(fold.render())["provetop_worker_state"]}
    assert states["idle"] == 1 and states["waiting"] == 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("9400", ("127.0.0.1", 9400)),
        (":9400", ("127.0.0.1", 9400)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("0.0.0.0:9400", ("0.0.0.0", 9400)),
        ("[::1]:9400", ("::1", 9400)),
        ("http://localhost:9400/", ("localhost", 9400)),
    ],
)
def test_addresses(text, expected):
    assert parse_metrics_address(text) == expected


@pytest.mark.parametrize("text", ["", "x", "host:", "1.2.3.4:99999", "[::1]9400", "a b:1"])
def test_bad_addresses(text):
    with pytest.raises(MetricsAddressError):
        parse_metrics_address(text)


@pytest.fixture
def server():
    calls = []

    def render() -> bytes:
        calls.append(1)
        return b"# TYPE provetop_events_total counter\nprovetop_events_total 1.0\n"

    srv = MetricsServer(render, "127.0.0.1:0")
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def _raw(srv: MetricsServer, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection((srv.host, srv.port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def test_only_get_metrics_is_served(server):
    body = urllib.request.urlopen(server.url, timeout=5).read()
    assert families(body)["provetop_events"][0].value == 1
    for path in ("/", "/metrics/x", "/status", "/../etc/passwd"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5)
        assert exc.value.code == 404
    req = urllib.request.Request(server.url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)
    assert exc.value.code == 405


def test_every_method_is_answered_as_documented(server):
    """docs/metrics.md: GET and HEAD /metrics served (HEAD: the headers, no body); any other
    method 405 with ``Allow: GET, HEAD``; any other path 404, for HEAD too."""
    get = http.client.HTTPConnection(server.host, server.port, timeout=5)
    get.request("GET", "/metrics")
    full = get.getresponse()
    body = full.read()
    head = http.client.HTTPConnection(server.host, server.port, timeout=5)
    head.request("HEAD", "/metrics")
    answer = head.getresponse()
    assert (answer.status, answer.read()) == (200, b"")
    assert answer.getheader("Content-Type") == full.getheader("Content-Type")
    assert int(answer.getheader("Content-Length")) == len(body) > 0
    assert _raw(server, b"HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.0 404")
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "BREW"):
        raw = _raw(server, f"{method} /metrics HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status, _, rest = raw.partition(b"\r\n")
        assert status.startswith(b"HTTP/1.0 405"), (method, status)
        assert b"\r\nAllow: GET, HEAD\r\n" in b"\r\n" + rest, method


def test_huge_request_lines_and_headers_are_refused(server):
    line = _raw(server, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n")
    assert line.startswith(b"HTTP/1.0 414")
    header = b"X-Pad: " + b"b" * 4000 + b"\r\n"
    many = _raw(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + header * 10 + b"\r\n")
    assert many.startswith(b"HTTP/1.0 431")
    assert b"400" in _raw(server, b"garbage\r\n\r\n")  # (HTTP/0.9 style: no status line)


def test_slow_clients_cannot_pin_the_server(server, monkeypatch):
    """More silent or trickling clients than threads: the extra ones are closed at once, the
    rest are cut at their deadline, and a scrape gets through."""
    slow = []
    for i in range(http_server.MAX_THREADS + 4):
        s = socket.create_connection((server.host, server.port), timeout=10)
        if i % 2:
            s.sendall(b"GET /metr")  # a request that never finishes
        slow.append(s)
    t0 = time.monotonic()
    while True:  # the first scrape may be refused while all threads are taken
        try:
            conn = http.client.HTTPConnection(server.host, server.port, timeout=2)
            conn.request("GET", "/metrics")
            assert conn.getresponse().status == 200
            break
        except (OSError, http.client.HTTPException):
            assert time.monotonic() - t0 < http_server.DEADLINE_S + 3, "scrape never answered"
            time.sleep(0.1)
    assert time.monotonic() - t0 < http_server.DEADLINE_S + 3
    for s in slow:
        s.close()


def test_every_counters_field_has_its_metric():
    """A figure the listener adds to the ``counters`` event is served on /metrics too (three
    once went without a series): every field but the event count is read by one metric."""
    fields = set(EVENTS["counters"]) - {"events"}  # events_total counts every event already
    assert sorted(COUNTER_FIELDS.values()) == sorted(fields)
    assert set(COUNTER_FIELDS) <= set(METRICS)

"""``/metrics`` of a running engine, scraped over real HTTP while partitions run: counters only
grow, phantom bytes match the recording's pool events, and neither a client flooding the
telemetry socket nor bad HTTP clients stall the scrape or the run."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.recordings.address import parse_address
from provetop.recordings.framing import encode_frame
from provetop.recordings.reader import open_recording
from provetop.recordings.state import phantom_bytes


def scrape(url: str, timeout: float = 5.0) -> dict[tuple[str, tuple], float]:
    body = urllib.request.urlopen(url, timeout=timeout).read().decode()
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def monotone(samples: dict) -> dict:
    """The samples that may only grow: counters and histogram buckets, sums and counts."""
    return {
        k: v
        for k, v in samples.items()
        if k[0].endswith(("_total", "_bucket", "_count", "_sum")) and "created" not in k[0]
    }


def partitions_done(samples: dict) -> float:
    return sum(v for k, v in samples.items() if k[0] == "provetop_partitions_total")


def test_scraped_while_running_counters_grow_and_phantom_matches_the_recording(tmp_path):
    record = tmp_path / "run.pvtrec"
    cfg = from_preset("phantom", backend="cpu", proofs=3)
    engine = Engine(cfg, listen=False, record=record, metrics="127.0.0.1:0")
    engine.start()
    url = engine.metrics_url
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/metrics")
    scrapes, in_flight = [], 0
    try:
        while not engine.done:
            scrapes.append(scrape(url))
            in_flight += 0 < partitions_done(scrapes[-1]) and not engine.done
            time.sleep(0.05)
        engine.wait(60)
        engine.bus.flush()
        deadline = time.monotonic() + 5
        while engine.metrics._sub.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        final = scrape(url)
    finally:
        engine.close()
    scrapes.append(final)
    assert in_flight >= 1, "no scrape saw the run in flight"
    for before, after in zip(scrapes, scrapes[1:], strict=False):
        for key, value in monotone(before).items():
            assert monotone(after).get(key, 0) >= value, key
    totals = engine.state.totals()
    assert partitions_done(final) == totals["attempts"]
    ok = sum(v for k, v in final.items() if k[0] == "provetop_proofs_total")
    assert ok == totals["proofs_done"] + totals["proofs_failed"]
    # phantom bytes: the last pool picture of each device in the recording
    last: dict[int, dict] = {}
    for event in open_recording(record).events:
        if event["k"] == "memory":
            last[event["device"]] = event
    phantom = {
        dict(k[1])["device"]: v for k, v in final.items() if k[0] == "provetop_phantom_bytes"
    }
    assert phantom == {str(d): float(phantom_bytes(m)) for d, m in last.items()}
    assert {dict(k[1])["modeled"] for k in final if k[0] == "provetop_phantom_bytes"} == {"true"}
    nvml = ("provetop_gpu_power_watts", "provetop_gpu_temperature_celsius")
    assert not any(k[0] in nvml for k in final)  # no NVML on the cpu backend: absent


def _flood(address: str, stop: threading.Event, sent: list[int]) -> None:
    """Command frames as fast as the socket takes them, reconnecting when dropped."""
    path = parse_address(address).path
    frame = encode_frame({"k": "command", "id": 1, "cmd": "marker", "args": {"name": "x"}})
    junk = encode_frame({"k": "nonsense", "pad": "y" * 60_000})
    while not stop.is_set():
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                s.connect(path)
                while not stop.is_set():
                    s.sendall(frame * 20 + junk)
                    sent[0] += 21
        except OSError:
            time.sleep(0.01)


def test_the_endpoint_answers_while_a_client_floods_the_socket_and_bad_clients_hang_on():
    cfg = from_preset("ci", backend="cpu", proofs=100_000)
    engine = Engine(cfg, listen=None, record=None, metrics="127.0.0.1:0")
    engine.start()
    stop, sent = threading.Event(), [0]
    flooders = [
        threading.Thread(target=_flood, args=(engine.address, stop, sent), daemon=True)
        for _ in range(3)
    ]
    host, port = engine.metrics.server.host, engine.metrics.server.port
    hangers = []
    try:
        for t in flooders:
            t.start()
        for _ in range(12):  # silent and half-request HTTP clients, more than the threads
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            hangers.append(s)
        t0 = time.monotonic()
        latencies, answered, first_done = [], 0, None
        while time.monotonic() - t0 < 4.0:
            start = time.monotonic()
            try:
                samples = scrape(engine.metrics_url, timeout=8)
                answered += 1
                done = partitions_done(samples)
                first_done = done if first_done is None else first_done
            except OSError:  # refused while the bad clients hold every thread
                pass
            latencies.append(time.monotonic() - start)
            time.sleep(0.1)
        assert sent[0] > 100, "the flood did not run"
        assert answered >= 5
        assert max(latencies) < 8
        assert done > first_done, "the run stalled while the endpoint was abused"
    finally:
        stop.set()
        for s in hangers:
            s.close()
        for t in flooders:
            t.join(5)
        engine.stop("test over")
        engine.close()


def test_the_metrics_fold_is_not_counted_as_a_client(tmp_path):
    """The fold is the engine's own bus subscriber: with no client connected, ``counters``
    (and the clients gauge scraped from it) said 1."""
    record = tmp_path / "run.pvtrec"
    engine = Engine(from_preset("ci"), listen=False, record=record, metrics="127.0.0.1:0")
    engine.start()
    try:
        assert engine.wait(120)
        assert engine.bus.clients == 0
        sub = engine.subscribe()  # an in-process client is one
        assert engine.bus.clients == 1
        sub.close()
    finally:
        engine.close()
    counters = [e for e in open_recording(record).events if e["k"] == "counters"]
    assert counters and all(e["clients"] == 0 for e in counters)


def test_the_first_scrape_of_an_engine_has_every_workers_counters_at_zero():
    """Scraped before any partition has finished (the SRS is still being made): each
    announced worker's counters and histograms, every fault kind and both proof outcomes are
    there at 0, so Prometheus's increase() sees their first increments."""
    from provetop.recordings.schema import FAULT_KINDS

    cfg = from_preset("ci", backend="cpu", proofs=1, workers_per_device=2)
    engine = Engine(cfg, listen=False, record=None, metrics="127.0.0.1:0")
    engine.start()
    try:
        deadline = time.monotonic() + 10
        while True:  # the fold has read the hello
            first = scrape(engine.metrics_url)
            if ("provetop_info" in {k[0] for k in first}) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    finally:
        engine.wait(60)
        engine.close()
    counted = {k: v for k, v in monotone(first).items() if "phase_duration" not in k[0]}
    for w in ("0", "1"):
        where = (("device", "0"), ("worker", w))
        assert ("provetop_ooms_total", where) in counted
        assert ("provetop_retries_total", where) in counted
        assert ("provetop_mutex_wait_seconds_count", where) in counted
    kinds = {dict(k[1])["kind"] for k in counted if k[0] == "provetop_faults_total"}
    assert kinds == set(FAULT_KINDS)
    counts = {k: v for k, v in counted.items() if k[0] != "provetop_events_total"}
    if partitions_done(first) == 0:  # scraped before the first count: everything still 0
        assert set(counts.values()) == {0.0}

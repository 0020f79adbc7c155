"""``provetop watch --cuzk-log ... --metrics``: the cuzk adapter's events folded into the same
metrics an engine serves, over real HTTP; and the flag's usage errors."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.prometheus.http_server import MetricsServer
from provetop.recordings.state import State
from provetop.sources.cuzk.source import CuzkSource

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "cuzk" / "daemon.log"


def _watch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "provetop", "watch", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_metrics_without_a_cuzk_source_is_a_usage_error():
    proc = _watch("--metrics", "9400")
    assert proc.returncode == 2 and "provetop engine --metrics" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_bad_metrics_address_is_a_usage_error(tmp_path):
    proc = _watch("--cuzk-log", str(tmp_path / "cuzk.log"), "--metrics", "host:port")
    assert proc.returncode == 2 and "--metrics" in proc.stderr and "Traceback" not in proc.stderr


def test_the_cuzk_adapter_feeds_the_metrics_as_watch_wires_it():
    fold = MetricsFold()
    state = State()
    server = MetricsServer(fold.render, "127.0.0.1:0")
    server.start()
    source = CuzkSource(str(LOG), reopen_tty=False, on_events=fold.fold).start()
    try:
        deadline = time.monotonic() + 20
        events = []
        while time.monotonic() < deadline:
            events += source.poll()
            if any(e["k"] == "engine_state" and e["state"] == "done" for e in events):
                break
            if len([e for e in events if e["k"] == "proof_done"]) >= 2:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        events += source.poll()
        state.fold(events)
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
    finally:
        source.stop()
        server.close()
    fams = {f.name: f.samples for f in text_string_to_metric_families(body)}
    info = fams["provetop_info"][0].labels
    assert info["source"] == "cuzk"
    decisions: dict[str, float] = {}
    for s in fams["provetop_prestage_decisions"]:
        if s.name.endswith("_total"):
            decisions[s.labels["outcome"]] = decisions.get(s.labels["outcome"], 0) + s.value
    attempts = [r for r in state.attempts]
    assert sum(decisions.values()) == len(attempts)
    assert decisions.get("fallback", 0) == sum(1 for r in attempts if r.prestage == "fallback")
    assert "provetop_phantom_bytes" not in fams  # cuzk logs no pool figures: absent


def test_no_ui_needs_metrics():
    proc = _watch("--cuzk-log", str(LOG), "--no-ui")
    assert proc.returncode == 2 and "--no-ui" in proc.stderr and "--metrics" in proc.stderr


def test_no_ui_serves_the_cuzk_metrics_without_a_screen_and_stops_on_sigterm():
    """A headless host: ``watch --no-ui`` follows the log, serves /metrics over real HTTP, and
    a SIGTERM (a service manager's stop) ends it with code 0, no traceback."""
    import signal

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "provetop",
            "watch",
            "--cuzk-log",
            str(LOG),
            "--metrics",
            "127.0.0.1:0",
            "--no-ui",
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("metrics on http://"), line + proc.stderr.read()
        url = line.split()[-1]
        done = 0.0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and done == 0:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if s.name == "provetop_partitions_total":
                        done += s.value
            time.sleep(0.2)
        assert done > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()

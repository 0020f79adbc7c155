"""Long start-up steps report their progress and end early on a stop.

The SRS at n = 2^15 on the cpu backend takes about 4.5 s on one core (longer on a loaded
2-core CI machine): long enough that a stop during it is a stop during the SRS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provetop.commands.engine import PROGRESS_PREFIX, progress_printer
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import EngineConfig
from provetop.engine.telemetry.progress import Progress, Stopped
from provetop.recordings.progress import progress_line
from provetop.recordings.schema import validate

SLOW_SRS_LOG = 15  # ~104 k SRS points
STOP_LIMIT_S = 2.0
ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_emits_at_most_every_interval_and_always_the_last():
    events: list[dict] = []
    clock = FakeClock()
    p = Progress(lambda k, **f: events.append(f), "srs", "SRS", 100, "points", clock=clock)
    for _ in range(10):
        clock.now += 0.1
        p.advance(10)
    p.finish()
    dones = [e["done"] for e in events]
    assert dones[0] == 0 and dones[-1] == 100
    # 1 s in steps of 0.1 s at 0.5 s a report: the start, one at 0.5 s, the finish
    assert len(events) == 3, dones
    assert dones == sorted(dones)
    assert all(e["done"] <= e["total"] for e in events)
    assert events[1]["rate"] == pytest.approx(100.0) and events[1]["eta_s"] == pytest.approx(0.5)


def test_progress_says_the_end_once():
    events: list[dict] = []
    p = Progress(lambda k, **f: events.append(f), "srs", "SRS", 10, "points", interval=0)
    p.advance(10)
    p.finish()
    assert [e["done"] for e in events] == [0, 10]


def test_progress_never_passes_its_total():
    events: list[dict] = []
    p = Progress(lambda k, **f: events.append(f), "srs", "SRS", 10, "points", interval=0)
    p.advance(7)
    p.advance(7)
    assert [e["done"] for e in events] == [0, 7, 10]


def test_progress_raises_stopped_once_the_run_stops():
    stop = [False]
    p = Progress(lambda k, **f: None, "srs", "SRS", 10, "points", stop=lambda: stop[0])
    p.advance(1)
    stop[0] = True
    with pytest.raises(Stopped):
        p.advance(1)


def test_progress_line_says_rate_and_eta_then_done():
    e = {"label": "SRS", "done": 23_600, "total": 104_300, "unit": "points"}
    assert progress_line({**e, "rate": 23_200.0, "eta_s": 3.5}) == (
        "SRS: 23.6 k/104.3 k points (23 %), 23.2 k points/s, ETA 3.5 s"
    )
    assert progress_line({**e, "done": 104_300, "elapsed_s": 4.5}).endswith("done in 4.5 s")
    pin = {"label": "pin", "done": 2e9, "total": 17e9, "unit": "bytes", "rate": 5e9}
    assert progress_line({**pin, "eta_s": 3.0}) == "pin: 2.0/17.0 GB (12 %), 5.0 GB/s, ETA 3.0 s"


def test_printer_writes_a_line_a_second_at_most_and_the_last(tmp_path):
    clock = FakeClock()
    out = (tmp_path / "err").open("w+")
    on_event = progress_printer(out, clock=clock)
    base = {"k": "progress", "task": "srs", "label": "SRS", "total": 100, "unit": "points"}
    for i in range(10):  # two events a second for 5 s
        clock.now = i * 0.5
        on_event({**base, "done": i * 10, "elapsed_s": clock.now})
    on_event({**base, "done": 100, "elapsed_s": 5.0})
    on_event({"k": "memory"})  # other events are not its business
    out.seek(0)
    lines = out.read().splitlines()
    assert all(line.startswith(PROGRESS_PREFIX) for line in lines)
    assert len(lines) == 4, lines  # t = 2, 3, 4 (nothing before 2 s) and the last
    assert lines[0].startswith(PROGRESS_PREFIX + "SRS: 40/100") and "done in" in lines[-1]


def test_printer_says_nothing_of_a_short_step(tmp_path):
    out = (tmp_path / "err").open("w+")
    on_event = progress_printer(out)
    base = {"k": "progress", "task": "srs", "label": "SRS", "total": 10, "unit": "points"}
    on_event({**base, "done": 0, "elapsed_s": 0.0})
    on_event({**base, "done": 10, "elapsed_s": 1.5})
    out.seek(0)
    assert out.read() == ""


def test_a_stop_during_the_srs_ends_the_engine_within_2_s():
    engine = Engine(EngineConfig(domain_log=SLOW_SRS_LOG, seed=1), listen=False)
    sub = engine.subscribe("test")
    events: list[dict] = []
    engine.start()
    try:
        deadline = time.monotonic() + 30
        while not any(e["k"] == "progress" and e["done"] > 0 for e in events):
            assert time.monotonic() < deadline, "no progress reported"
            events += sub.drain()
            time.sleep(0.05)
        t0 = time.monotonic()
        engine.stop("test")
        assert engine.wait(STOP_LIMIT_S), "the engine did not stop within 2 s during the SRS"
        assert time.monotonic() - t0 < STOP_LIMIT_S
    finally:
        engine.close()
    events += sub.drain()
    progress = [e for e in events if e["k"] == "progress"]
    for e in progress:
        validate(e)
    dones = [e["done"] for e in progress]
    assert dones == sorted(dones) and all(e["done"] <= e["total"] for e in progress)
    assert dones[-1] < progress[-1]["total"], "the SRS was finished, not stopped"
    assert not any(e["k"] == "phase_begin" for e in events)  # no partition ever started
    states = [e["reason"] for e in events if e["k"] == "engine_state" and e["state"] == "done"]
    assert states == ["stopped before every proof was done"]
    assert engine.error is None
    assert engine.state.progress == {}  # the reducer forgot the stopped step


def test_a_finished_srs_reports_done_equal_to_total_and_one_log_line():
    from tests.engine.run_helper import run_engine

    engine, events = run_engine(EngineConfig(domain_log=5, seed=1))
    progress = [e for e in events if e["k"] == "progress"]
    assert progress[-1]["done"] == progress[-1]["total"] == sum(engine.sizes.as_dict().values())
    assert [e["done"] for e in progress] == sorted(e["done"] for e in progress)
    lines = [line.text for line in engine.state.log if line.text.startswith("SRS:")]
    assert len(lines) == 1 and "done in" in lines[0]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child")
def test_sigint_to_provetop_engine_during_the_srs_exits_within_2_s():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "provetop", "engine", "--domain-log", str(SLOW_SRS_LOG)]
        + ["--no-record", "--exit-when-done"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        # Python installs its Ctrl-C handler only when SIGINT is not ignored at start, and a
        # suite started in the background (`.ci/run &` in a script) passes SIGINT ignored on
        # to its children: the child starts as a terminal would start it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert child.stderr is not None
        first = child.stderr.readline()  # the step's first line, 2 s into the SRS
        assert first.startswith(PROGRESS_PREFIX + "SRS: "), first
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        rest = child.stderr.read()
        child.wait(10)
        took = time.monotonic() - t0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0
    assert took < STOP_LIMIT_S, f"provetop engine took {took:.1f} s to stop during the SRS"
    lines = [first, *rest.splitlines()]
    assert "done in" not in rest, "the SRS ran to its end"
    assert len([x for x in lines if x.startswith(PROGRESS_PREFIX)]) <= 3  # ~1 a second

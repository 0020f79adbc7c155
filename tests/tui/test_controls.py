"""Every dashboard control against a REAL engine on the cpu backend, through its socket: the
key is pressed in the dashboard, the engine receives the command, acknowledges it, and its
behaviour changes (forced fallback on the next partitions, intake paused and resumed, pools
trimmed, a marker in the stream); "save" writes a readable recording; a read-only engine greys
every control out and receives nothing."""

from __future__ import annotations

import time

import pytest
from textual.widgets import Input

from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.recordings.reader import open_recording
from provetop.recordings.state import phantom_bytes
from provetop.sources.live import LiveSource
from provetop.tui.app import ProvetopApp
from provetop.tui.screens import ConfirmPrompt, MarkerPrompt
from tests.engine.run_helper import serving_engine
from tests.tui.helpers import pilot_test, tap, until


@pytest.fixture
def engine():
    with serving_engine() as eng:  # many proofs: the run outlasts the test, which stops it
        yield eng


@pytest.fixture
def read_only_engine():
    eng = Engine(
        from_preset("ci", backend="cpu", proofs=100_000), listen=None, record=None, read_only=True
    )
    eng.start()
    yield eng
    eng.stop("test over")
    eng.close()


def _acks(app: ProvetopApp, cmd: str) -> list[dict]:
    return [c for c in app.view.state.controls if c["cmd"] == cmd and c["ok"]]


def _engine_acks(engine: Engine, cmd: str) -> list[dict]:
    engine.bus.flush(5.0)
    return [c for c in engine.state.controls if c["cmd"] == cmd and c["ok"]]


async def _started_after(pilot, app: ProvetopApp, count: int = 3) -> list:
    """The first ``count`` finished attempts of partitions whose rows appeared after now
    (they began after the acknowledgement the caller just saw, so the change applies)."""
    known = set(app.view.state.partitions)
    newer = lambda: [  # noqa: E731
        r for r in app.view.state.attempts if (r.proof, r.partition) not in known
    ]
    await until(pilot, lambda: len(newer()) >= count)
    return newer()[:count]


@pilot_test
async def test_every_control_reaches_the_engine_and_changes_it(engine, tmp_path):
    app = ProvetopApp([LiveSource(engine.address)], save_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.view.conn == "connected")
        await until(pilot, lambda: app.view.state.totals()["partitions_ok"] >= 2)
        for action in ("force_fallback", "pause_intake", "trim", "marker", "save"):
            assert app.check_action(action, ()) is True
        app.timeline.focus()

        # F: forced pre-stage fallback on device 0 -> the next partitions fall back, forced
        await tap(pilot, "F")
        await until(pilot, lambda: _acks(app, "force_fallback"))
        ack = _acks(app, "force_fallback")[0]
        assert ack["args"] == {"device": 0, "on": True}
        assert _engine_acks(engine, "force_fallback")[0]["id"] == ack["id"]
        assert engine.controls.is_forced(0)
        later = await _started_after(pilot, app)  # partitions begun after the ack
        assert all(r.prestage == "fallback" and r.forced for r in later)
        await tap(pilot, "F")  # and back
        await until(pilot, lambda: len(_acks(app, "force_fallback")) == 2)
        assert not engine.controls.is_forced(0)
        later = await _started_after(pilot, app)
        assert all(r.prestage == "ok" and not r.forced for r in later)

        # P: pause intake -> no new partition starts; P again: resume
        await tap(pilot, "P")
        await until(pilot, lambda: app.view.state.engine_state == "paused")
        assert engine.scheduler.paused
        # a partition already handed to a worker may still start: wait until the count settles
        started, last = len(app.view.state.partitions), -1
        while started != last:
            last = started
            await pilot.pause(0.8)
            started = len(app.view.state.partitions)
        time.sleep(0.6)
        await pilot.pause(0.3)
        assert len(app.view.state.partitions) == started

        # T asks first (it cannot be undone; T terminates a process in nvitop): n sends nothing
        await tap(pilot, "T")
        assert isinstance(app.screen, ConfirmPrompt)
        await tap(pilot, "n")
        assert not isinstance(app.screen, ConfirmPrompt)
        assert not any(line.text.startswith("sent trim") for line in app.view.state.log)
        # T, y (while paused, so nothing refills the pools): trim -> no phantom memory left
        await tap(pilot, "T", "y")
        await until(pilot, lambda: _acks(app, "trim"))
        t_ack = _acks(app, "trim")[0]["t"]
        await until(
            pilot,
            lambda: any(
                t >= t_ack
                for t in app.view.state.series.get(0, []).t  # type: ignore[union-attr]
            ),
        )
        assert phantom_bytes(app.view.state.memory[0]) == 0
        assert _engine_acks(engine, "trim")

        await tap(pilot, "P")
        await until(pilot, lambda: app.view.state.engine_state == "running")
        await until(pilot, lambda: len(app.view.state.partitions) > started)
        assert not engine.scheduler.paused

        # M: a named marker, in the engine's stream and in the dashboard
        await tap(pilot, "M")
        assert isinstance(app.screen, MarkerPrompt)
        app.screen.query_one(Input).value = "from-pilot"
        await tap(pilot, "enter")
        await until(pilot, lambda: any(n == "from-pilot" for _, n in app.view.state.markers))
        engine.bus.flush(5.0)
        assert any(n == "from-pilot" for _, n in engine.state.markers)

        # S: save what the dashboard received, as a recording the reader accepts
        before = app.view.state.events
        await tap(pilot, "S")
        await until(pilot, lambda: bool(app.saved))
        rec = open_recording(app.saved[0])
        assert rec.events[0]["k"] == "hello" and rec.hello["engine_id"] == engine.engine_id
        assert len(rec.events) >= before
        assert any(e["k"] == "marker" and e["name"] == "from-pilot" for e in rec.events)
        # every control is in the event log with its acknowledgement
        log = "\n".join(line.text for line in app.view.state.log)
        for cmd in ("force_fallback", "pause", "resume", "trim", "marker"):
            assert f"sent {cmd}" in log and f"control {cmd}" in log


@pilot_test
async def test_read_only_engine_greys_controls_out(read_only_engine):
    engine = read_only_engine
    app = ProvetopApp([LiveSource(engine.address)])
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.view.state.hello is not None)
        await until(pilot, lambda: app.view.conn == "connected")
        for action in ("force_fallback", "pause_intake", "trim", "marker"):
            assert app.check_action(action, ()) is None  # shown, greyed
        await tap(pilot, "F", "P", "T", "M")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, MarkerPrompt)
        engine.bus.flush(5.0)
        assert engine.state.controls == []  # nothing was sent
        assert not engine.controls.is_forced(0) and not engine.scheduler.paused
        assert "read-only" in app.header.render().plain

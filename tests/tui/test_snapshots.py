"""Snapshot tests of the main screen, live and in replay, at 80x24, 120x40, 160x48 and 200x60,
and after a resize in each direction (the layout must be the one of the new size); the device
health panel (key 5) with recorded-style H200 samples at 80x24 and 160x48; ``provetop top``'s
GPU monitor (those samples, no pipeline) and a replay at a fault (``n``: the pools the fault
carried, centred under the cursor) at 80x24 and 160x48; a trace's replay (no pipeline: the
timeline's memory lanes) at 80x24 and 160x48.

The app is fed one fixed synthetic run (tests/tui/helpers.py) with the live clock off, so the
picture depends only on the events. Update the SVGs after an intended change with
``pytest tests/tui/test_snapshots.py --snapshot-update`` and look at them."""

from __future__ import annotations

from pathlib import Path

import pytest

from provetop.recordings.reader import open_recording
from provetop.sources.feed import FeedSource
from provetop.tui.app import ProvetopApp
from tests.tui.gpu_samples import h200_samples
from tests.tui.helpers import fed, fixed_events, live_app, replay_app, tap, until

TRACE = Path(__file__).resolve().parents[2] / "recordings/samples/h100-trace-torch-cupy.pvtrec"
SIZES = [(80, 24), (120, 40), (160, 48), (200, 60)]
RESIZES = [((160, 48), (80, 24)), ((80, 24), (160, 48))]


def _id(size) -> str:
    return f"{size[0]}x{size[1]}"


@pytest.mark.parametrize("size", SIZES, ids=_id)
def test_live_main_screen(snap_compare, size):
    events = fixed_events(20)
    app = live_app(events)

    async def ready(pilot):
        await fed(pilot, app, len(events))

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES, ids=_id)
def test_replay_main_screen(snap_compare, size):
    events = fixed_events(40)
    app = replay_app(events, position_s=15.0)

    async def ready(pilot):
        await until(pilot, lambda: app.replay is not None)
        app.redraw()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("sizes", RESIZES, ids=lambda s: f"{_id(s[0])}-to-{_id(s[1])}")
def test_live_main_screen_after_resize(snap_compare, sizes):
    first, then = sizes
    events = fixed_events(20)
    app = live_app(events)

    async def ready(pilot):
        await pilot.resize_terminal(*first)
        await fed(pilot, app, len(events))
        await pilot.resize_terminal(*then)
        await pilot.pause(0.2)
        app.redraw()
        await pilot.pause()

    assert snap_compare(app, terminal_size=first, run_before=ready)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=_id)
def test_device_health_panel(snap_compare, size):
    events = h200_samples(fixed_events(20))
    app = live_app(events)

    async def ready(pilot):
        await fed(pilot, app, len(events))
        await tap(pilot, "5")
        app.redraw()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=ready)


class _Monitor(FeedSource):
    """A fed source that is the machine's GPU monitor (as ``provetop top``'s NVML source)."""

    monitor = True


def _monitor_events() -> list[dict]:
    """The H200 samples of the fixed run under the GPU monitor's hello (no pipeline events)."""
    events = [e for e in h200_samples(fixed_events(20)) if e["k"] in ("hello", "gpu")]
    hello = dict(events[0], source="nvml", backend="nvml", engine_id="nvml-snapshot")
    hello["config"] = {"monitor": "nvml", "interval_s": 1.0, "driver": "580.159.04"}
    return [hello, *events[1:]]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=_id)
def test_top_monitor_screen(snap_compare, size):
    events = _monitor_events()
    app = ProvetopApp([_Monitor(events, label="gpus@snapshot")], live_clock=False)

    async def ready(pilot):
        await fed(pilot, app, len(events))

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=_id)
def test_replay_at_a_fault(snap_compare, size):
    events = fixed_events(40)
    app = replay_app(events, position_s=1.0)

    async def ready(pilot):
        await until(pilot, lambda: app.replay is not None)
        while not app.view.state.faults or app.pinned is None:  # n until a fault, not a marker
            await pilot.press("n")
        app.redraw()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=_id)
def test_replay_of_a_trace(snap_compare, size):
    app = replay_app(open_recording(TRACE).events, position_s=7.0)

    async def ready(pilot):
        await until(pilot, lambda: app.replay is not None)
        app.redraw()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=ready)

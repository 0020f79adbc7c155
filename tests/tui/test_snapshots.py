"""Snapshot tests of the main screen, live and in replay, at 80x24 and 160x48.

The app is fed one fixed synthetic run (tests/tui/helpers.py) with the live clock off, so the
picture depends only on the events. Update the SVGs after an intended change with
``pytest tests/tui/test_snapshots.py --snapshot-update`` and look at them."""

from __future__ import annotations

import pytest

from tests.tui.helpers import fed, fixed_events, live_app, replay_app, until

SIZES = [(80, 24), (160, 48)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_live_main_screen(snap_compare, size):
    events = fixed_events(20)
    app = live_app(events)

    async def ready(pilot):
        await fed(pilot, app, len(events))

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_replay_main_screen(snap_compare, size):
    events = fixed_events(40)
    app = replay_app(events, position_s=15.0)

    async def ready(pilot):
        await until(pilot, lambda: app.replay is not None)
        app.redraw()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=ready)

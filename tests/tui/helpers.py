"""Shared helpers of the dashboard tests: a fixed synthetic run, and waiting for a fed app."""

from __future__ import annotations

import asyncio
import functools
import time

from provetop.sources.feed import FeedSource
from provetop.sources.replay_memory import ReplaySource
from provetop.sources.synthetic import generate
from provetop.tui.app import ProvetopApp

SEED = 20261129  # the snapshot tests need one fixed run; other tests draw fresh seeds


def fixed_events(duration_s: float = 20.0, devices: int = 2) -> list[dict]:
    return generate(
        devices=devices,
        duration_s=duration_s,
        seed=SEED,
        markers=((6.0, "warm"), (14.0, "after trim")),
    )


def live_app(events: list[dict], **kw) -> ProvetopApp:
    """A live-mode app fed ``events`` at once by a read-only source, with the live clock off
    so the picture depends only on the events."""
    return ProvetopApp([FeedSource(events, label="synthetic")], live_clock=False, **kw)


def replay_app(events: list[dict], position_s: float | None = None) -> ProvetopApp:
    start = None if position_s is None else int(position_s * 1e9)
    source = ReplaySource(events, label="synthetic.pvtrec")
    source.build_checkpoints(every_s=5)  # up front, so the picture does not depend on timing
    return ProvetopApp(replay=source, autoplay=False, start_at=start)


async def until(pilot, predicate, timeout: float = 20.0) -> None:
    """Let the app run until ``predicate()`` holds (or fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the dashboard")
        await pilot.pause(0.05)
        await asyncio.sleep(0)


async def fed(pilot, app: ProvetopApp, count: int) -> None:
    """Wait until the first view has folded ``count`` events, then draw once."""
    await until(pilot, lambda: bool(app.views) and app.views[0].state.events >= count)
    app.redraw()
    await pilot.pause()


def pilot_test(fn):
    """Run an ``async def`` test with asyncio (no pytest plugin needed); fixtures still work."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return run


async def tap(pilot, *keys: str) -> None:
    """Press keys without Pilot's wait for an idle screen, which never comes while a live
    engine streams events (Pilot.press then waits out its timeout on every key)."""
    for key in keys:
        pilot.app.simulate_key(key)
        await pilot.pause(0.05)

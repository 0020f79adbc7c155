"""Save an SVG screenshot of the dashboard watching a real engine run (docs/screenshot.svg).

Run it from the repository root (``PYTHONPATH=.`` makes this checkout's packages the ones
imported, whatever is installed)::

    PYTHONPATH=. python tools/screenshot.py docs/screenshot.svg [--seconds 4]

It runs the README's quick start, :data:`QUICK_START` (``provetop run --preset demo``): its
flags go through provetop's own parser into the engine's configuration, the engine starts
in-process (the cpu backend where no GPU is usable, as for a new user), and the dashboard
attaches through the engine's socket at 160x48 as ``provetop run`` would, waits for the first
fallback, adds a marker, lets it run a few seconds and saves the screen. The SVG names the
command in a comment, and ``tests/test_readme_quick_start.py`` checks that the README's quick
start is that command, so the two cannot drift.

With ``--top`` it saves ``provetop top`` instead (docs/screenshot-top.svg): the local GPUs
monitor, with NVML replaced by the tests' fake ``pynvml`` replaying recorded-style readings of
two H200s (``tests/fixtures/nvml/``; not read from a card, and the caption says so), then the
same cpu engine started after it and attached by discovery, the monitor shown again (``e``).

Why a script here and not a module of the product: it is the one place that runs the engine and
the dashboard in one process. The dashboard may not import the engine (the layers of
docs/architecture.md, checked by ``lint-imports``), and nothing the product imports needs this.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

from provetop.cli import build_parser
from provetop.engine.run.options import config_from_args
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.sources.live import LiveSource
from provetop.sources.nvml import NvmlSource
from provetop.tui.app import ProvetopApp
from tests.sources.fake_pynvml import FakeNvml

# The README's quick start; the screenshot is of this command.
QUICK_START = ("provetop", "run", "--preset", "demo")
COMMENT = "<!-- " + " ".join(QUICK_START) + " -->"


def quick_start_config():  # type: ignore[no-untyped-def]
    """The engine configuration of :data:`QUICK_START`, through provetop's parser."""
    return config_from_args(build_parser().parse_args(list(QUICK_START[1:])))


async def _shoot(out: str, seconds: float, size: tuple[int, int]) -> None:
    engine = Engine(quick_start_config(), listen=None, record=None)
    engine.start()
    try:
        app = ProvetopApp([LiveSource(engine.address)])
        async with app.run_test(size=size) as pilot:
            deadline = time.monotonic() + 60
            while not (app.views and app.view.state.totals()["fallbacks"] >= 1):
                if time.monotonic() > deadline + 240:
                    raise SystemExit("the engine produced no fallback")
                await pilot.pause(0.1)
            app.send_command("marker", {"name": "screenshot"})
            await pilot.pause(seconds)
            app.timeline.focus()
            app.redraw()
            await pilot.pause(0.3)
            app.save_screenshot(filename=out)
        _name_the_command(out)
    finally:
        engine.stop("screenshot taken")
        engine.close()


def _name_the_command(out: str) -> None:
    text = open(out).read()
    head, _, rest = text.partition(">")  # after the opening tag of the SVG
    with open(out, "w") as f:
        f.write(head + ">\n" + COMMENT + rest)


async def _shoot_top(out: str, seconds: float, size: tuple[int, int]) -> None:
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="shot-")  # only this engine
    sys.modules["pynvml"] = FakeNvml()  # recorded-style readings, not a card
    app = ProvetopApp([NvmlSource(interval=0.5)], discover=True, panel="health")
    async with app.run_test(size=size) as pilot:
        deadline = time.monotonic() + 30
        while len(app.views[0].state.gpu) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("the monitor produced no samples")
            await pilot.pause(0.1)
        config = from_preset("ci", backend="cpu", proofs=400, workers_per_device=2)
        engine = Engine(config, listen=None, record=None)
        engine.start()
        try:
            while len(app.views) < 2 or app.views[1].state.hello is None:
                if time.monotonic() > deadline + 30:
                    raise SystemExit("the engine was not attached")
                await pilot.pause(0.1)
            await pilot.pause(seconds)
            app.selected = 0  # the monitor again, the engine in the header
            app.redraw()
            await pilot.pause(0.3)
            app.save_screenshot(filename=out)
        finally:
            engine.stop("screenshot taken")
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the SVG file to write")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--size", default="160x48", help="terminal size, COLUMNSxROWS")
    parser.add_argument("--top", action="store_true", help="provetop top (replayed NVML)")
    args = parser.parse_args()
    columns, rows = (int(n) for n in args.size.lower().split("x"))
    shoot = _shoot_top if args.top else _shoot
    asyncio.run(shoot(args.out, args.seconds, (columns, rows)))


if __name__ == "__main__":
    main()

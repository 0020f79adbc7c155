"""Save an SVG screenshot of the dashboard watching a real engine run (docs/screenshot.svg).

Run it from the repository root (``PYTHONPATH=.`` makes this checkout's packages the ones
imported, whatever is installed)::

    PYTHONPATH=. python tools/screenshot.py docs/screenshot.svg [--seconds 4]

It starts the engine in-process on the cpu backend (two modeled devices at the ``phantom``
preset's capacity, two workers each, the memory-aware allocator, so pre-stage skips and
fallbacks show), attaches the dashboard through the engine's socket at 160x48 as ``provetop
watch`` would, adds a marker, lets it run a few seconds and saves the screen.

Why a script here and not a module of the product: it is the one place that runs the engine and
the dashboard in one process. The dashboard may not import the engine (the layers of
docs/architecture.md, checked by ``lint-imports``), and nothing the product imports needs this.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from engine.config import from_preset
from engine.runner import Engine
from sources.live import LiveSource
from tui.app import ProvetopApp


async def _shoot(out: str, seconds: float, size: tuple[int, int]) -> None:
    config = from_preset(
        "phantom", backend="cpu", proofs=400, devices=(0, 1), workers_per_device=2,
        allocator="aware",
    )  # fmt: skip
    engine = Engine(config, listen=None, record=None)
    engine.start()
    try:
        app = ProvetopApp([LiveSource(engine.address)])
        async with app.run_test(size=size) as pilot:
            deadline = time.monotonic() + 60
            while not (app.views and app.view.state.totals()["partitions_ok"] >= 6):
                if time.monotonic() > deadline:
                    raise SystemExit("the engine produced no partitions")
                await pilot.pause(0.1)
            app.send_command("marker", {"name": "screenshot"})
            await pilot.pause(seconds)
            app.timeline.focus()
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
    args = parser.parse_args()
    columns, rows = (int(n) for n in args.size.lower().split("x"))
    asyncio.run(_shoot(args.out, args.seconds, (columns, rows)))


if __name__ == "__main__":
    main()

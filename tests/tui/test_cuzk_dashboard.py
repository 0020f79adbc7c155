"""The dashboard on a cuzk source: CuzkSource plugged into the app like any live source."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from provetop.sources.cuzk import sim
from provetop.sources.cuzk.source import CuzkSource
from provetop.tui.app import ProvetopApp
from provetop.tui.widgets.header import Header
from provetop.tui.widgets.partitions import PartitionsTable
from provetop.tui.widgets.timeline import Timeline
from tests.tui.helpers import fed, pilot_test

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuzk"


@pilot_test
async def test_dashboard_follows_a_cuzk_log(tmp_path):
    log = tmp_path / "daemon.log"
    shutil.copy(FIXTURES / "daemon.log", log)
    source = CuzkSource(str(log), poll_interval=0.01)
    app = ProvetopApp([source], live_clock=False)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await fed(pilot, app, 100)
            state = app.views[0].state
            assert state.hello["source"] == "cuzk"
            table = app.query_one(PartitionsTable)
            assert table.row_count == len(state.partitions) > 0
            header = app.query_one(Header).render().plain
            assert "read-only" in header
            text = "\n".join(strip.text for strip in app.query_one(Timeline)._rows)
            assert "gpu0 GPU" in text
            # CPU synthesis slots are named as such, not as GPU workers 100, 101, ...
            base = state.hello["config"]["synth_worker_base"]
            synth_lanes = [k for k in state.lanes() if k[0] == "worker" and k[2] >= base]
            if synth_lanes:
                assert "synth 0" in text and f"w{base}" not in text
    finally:
        source.close()


@pilot_test
async def test_dashboard_on_a_fresh_modeled_run(tmp_path):
    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=2, partitions=4)
    log = tmp_path / "daemon.log"
    log.write_text(run.text())
    source = CuzkSource(str(log), poll_interval=0.01)
    app = ProvetopApp([source], live_clock=False)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await fed(pilot, app, 50)
            state = app.views[0].state
            await pilot.pause(0.3)
            app.redraw()
            await pilot.pause()
            assert sum(1 for p in state.partitions.values() if p.ok) == len(run.calls)
            assert app.query_one(PartitionsTable).row_count == len(run.calls)
    finally:
        source.close()

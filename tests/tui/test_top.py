"""``provetop top``: the local GPUs (a fake ``pynvml`` replaying recorded-style readings, not a
card) drawn by the health panel, and an engine started after the dashboard attached to it
without a restart; without NVML the panel says so and the app still waits for engines."""

from __future__ import annotations

import pytest

import provetop.base.nvml as nvml_module
import provetop.tui.app as app_module
from provetop.sources.nvml import NvmlSource
from provetop.tui.app import ProvetopApp
from provetop.tui.widgets.health import HealthPanel
from tests.engine.run_helper import serving_engine
from tests.sources.fake_pynvml import FakeNvml, MissingNvml
from tests.tui.helpers import pilot_test, until


@pytest.fixture(autouse=True)
def fresh_nvml(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # only this test's engines
    nvml_module.reset()
    yield
    nvml_module.reset()


def _text(app) -> str:
    panel = app.query_one(HealthPanel)
    console = app.console
    lines = console.render_lines(panel.render(), console.options.update_width(panel.size.width))
    return "\n".join("".join(seg.text for seg in line) for line in lines)


def _top() -> ProvetopApp:
    return ProvetopApp([NvmlSource(interval=0.1)], discover=True, panel="health")


@pilot_test
async def test_top_shows_the_local_gpus_then_attaches_an_engine_started_later(monkeypatch):
    FakeNvml().install(monkeypatch)
    monkeypatch.setattr(app_module, "ENDED_KEEP_S", 0.5)
    app = _top()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: len(app.views[0].state.gpu) == 2)
        app.redraw()
        await pilot.pause()
        assert app.query_one("#health-box").display
        text = _text(app)
        assert "gpu0 NVIDIA H200" in text and "gpu1 NVIDIA H200" in text
        assert "/ 700 W" in text and "XID 0" in text and "memory " in text
        assert "fan" not in text  # recorded as not supported
        assert len(app.views) == 1
        with serving_engine() as engine:
            await until(pilot, lambda: len(app.views) == 2, timeout=30)
            view = app.views[1]
            await until(pilot, lambda: view.state.hello is not None)
            assert view.state.hello["engine_id"] == engine.engine_id
            assert app.selected == 1  # the engine is shown; e goes back to the GPUs
            await until(pilot, lambda: view.state.totals()["partitions_ok"] > 0, timeout=30)
            await pilot.press("e")
            assert app.view is app.views[0]
            await pilot.pause(2.5)  # another discovery round: the engine is not added twice
            assert len(app.views) == 2
            await pilot.press("e")
            assert app.view is view
        # the engine has ended: it goes off the list after ENDED_KEEP_S, the GPUs are shown
        await until(pilot, lambda: view.conn == "disconnected", timeout=30)
        assert any("off the list in" in line.text for line in view.state.log)
        await until(pilot, lambda: len(app.views) == 1, timeout=10)
        assert app.selected == 0 and app.view is app.views[0]


@pilot_test
async def test_without_nvml_the_panel_says_so_and_waits_for_engines(monkeypatch):
    MissingNvml().install(monkeypatch)
    app = _top()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.views[0].state.hello is not None)
        app.redraw()
        await pilot.pause()
        text = _text(app)
        assert "no NVIDIA GPU visible to NVML" in text and "waiting for engines" in text
        assert "Shared Library Not Found" in " ".join(text.split())
        assert not app.views[0].state.gpu
        assert app.is_running  # no engine and no GPU: still waiting

"""``provetop top``: the local GPUs (a fake ``pynvml`` replaying recorded-style readings, not a
card) filling the screen, a block per GPU and the process table, with no pipeline panel or
key; an engine started after the dashboard attached without a restart, its memory view shown
once; without NVML the monitor says so and still waits for engines; ``--once`` and ``--json``
print the GPUs and the pools of attached engines without a GPU too; the host figures of a
process from ``/proc``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import provetop.base.nvml as nvml_module
import provetop.tui.app as app_module
from provetop.sources.nvml import NvmlSource
from provetop.sources.procstat import ProcStat, provetop_kind
from provetop.tui.app import ProvetopApp
from provetop.tui.widgets.gpu_monitor import GpuMonitor
from provetop.tui.widgets.processes import SORTS, ProcessTable, header, sort_rows
from tests.engine.run_helper import serving_engine
from tests.sources.fake_pynvml import FakeNvml, MissingNvml
from tests.tui.helpers import pilot_test, until


@pytest.fixture(autouse=True)
def fresh_nvml(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # only this test's engines
    nvml_module.reset()
    yield
    nvml_module.reset()


ROOT = Path(__file__).resolve().parents[2]


def _text(app, widget=GpuMonitor) -> str:
    panel = app.query_one(widget)
    console = app.console
    lines = console.render_lines(panel.render(), console.options.update_width(panel.size.width))
    return "\n".join("".join(seg.text for seg in line) for line in lines)


def _top(**kw) -> ProvetopApp:
    return ProvetopApp([NvmlSource(interval=0.1)], discover=True, **kw)


@pilot_test
async def test_top_shows_the_local_gpus_then_attaches_an_engine_started_later(monkeypatch):
    FakeNvml().install(monkeypatch)
    monkeypatch.setattr(app_module, "ENDED_KEEP_S", 0.5)
    app = _top()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: len(app.views[0].state.gpu) == 2)
        app.redraw()
        await pilot.pause()
        # the GPUs fill the screen; no timeline, partitions or events, no pipeline key
        assert app.query_one("#monitor").display and not app.query_one("#main").display
        text = _text(app)
        assert "gpu0 NVIDIA H200" in text and "gpu1 NVIDIA H200" in text
        assert "/ 700 W" in text and "XID 0" in text and "memory " in text
        assert "SM util" in text and text.splitlines()[0].startswith("history")
        assert "fan" not in text  # recorded as not supported
        for action in ("force_fallback", "pause_intake", "trim", "marker", "save"):
            assert app.check_action(action, ()) is False  # not offered, not even greyed
        table = _text(app, ProcessTable)
        assert "%CPU" in table and "%MEM" in table and "TIME" in table and "4242" in table
        header = app.header.render().plain
        assert "GPUs of " in header and "read-only" not in header and "nvml" not in header
        assert len(app.views) == 1
        with serving_engine() as engine:
            await until(pilot, lambda: len(app.views) == 2, timeout=30)
            view = app.views[1]
            await until(pilot, lambda: view.state.hello is not None)
            assert view.state.hello["engine_id"] == engine.engine_id
            assert app.selected == 1  # the engine is shown; e goes back to the GPUs
            await until(pilot, lambda: view.state.totals()["partitions_ok"] > 0, timeout=30)
            app.redraw()
            await pilot.pause()
            assert app.query_one("#main").display and not app.query_one("#monitor").display
            assert app.top_right == "memory-box"  # its memory, not device health
            connected = [line for line in view.state.log if line.text.endswith(": connected")]
            assert len(connected) == 1, [line.text for line in view.state.log]
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
        assert "none" not in app.header.render().plain
        assert "Shared Library Not Found" in " ".join(text.split())
        assert not app.views[0].state.gpu
        assert app.is_running  # no engine and no GPU: still waiting


def _top_once(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("PROVETOP_FAKE_NVML", None)
    return subprocess.run(
        [sys.executable, "-m", "provetop", "top", *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=ROOT,
    )  # fmt: skip


def test_top_once_without_a_gpu_says_so_and_prints_the_attached_engine(tmp_path):
    with serving_engine() as engine:
        done = _top_once(tmp_path, "--once")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert sum("no NVIDIA GPU visible to NVML" in line for line in lines) == 1
        assert any(f"engine {engine.engine_id}" in line for line in lines), done.stdout
        assert any(line.strip().startswith("gpu0: PHANTOM") for line in lines), done.stdout
        report = json.loads(_top_once(tmp_path, "--json").stdout)
        assert report["nvml"]["error"] and report["gpus"] == []
        (attached,) = report["attached"]
        assert attached["id"] == engine.engine_id and attached["pools"][0]["lane"] == "gpu0"
    assert _top_once(tmp_path, "--only", "x").returncode == 2


def test_the_monitor_filters_gpus_and_processes(monkeypatch):
    FakeNvml().install(monkeypatch)

    @pilot_test
    async def check():
        app = _top(only={1}, pids={31337})
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: len(app.views[0].state.gpu) == 2)
            app.redraw()
            await pilot.pause()
            text = _text(app)
            assert "gpu1 NVIDIA H200" in text and "gpu0 NVIDIA H200" not in text
            assert "4242" not in _text(app, ProcessTable)

    check()


def test_the_process_table_sorts_as_nvitop_missing_values_last():
    rows = [
        (1, {"pid": 30, "used": 5 << 30, "cpu_pct": 3.0, "user": "b", "command": "z"}),
        (0, {"pid": 20, "used": 9 << 30, "user": "a", "command": "y"}),  # no /proc figures
        (0, {"pid": 10, "used": 1 << 30, "cpu_pct": 90.0, "user": "c", "command": "x"}),
        (1, {"pid": 40, "used": 5 << 30, "cpu_pct": 3.0}),  # another PID namespace
    ]

    def pids(column: str, reverse: bool = False) -> list[int]:
        return [p["pid"] for _, p in sort_rows(rows, column, reverse)]

    assert pids("GPU MEM") == [20, 30, 40, 10]  # largest first; equal ones by GPU, then pid
    assert pids("GPU MEM", True) == [10, 30, 40, 20]
    assert pids("%CPU") == [10, 30, 40, 20] and pids("%CPU", True) == [30, 40, 10, 20]
    assert pids("PID") == [10, 20, 30, 40] and pids("GPU") == [10, 20, 30, 40]
    assert pids("USER") == [20, 30, 10, 40] and pids("COMMAND", True) == [30, 20, 10, 40]
    for column in SORTS:  # the arrow never moves a column: COMMAND starts where it did
        assert header(column).index("COMMAND") == header().index("COMMAND") == 60
        assert header(column, True).index("COMMAND") == 60


def test_o_cycles_the_process_tables_sort_and_o_shifted_reverses_it(monkeypatch):
    FakeNvml().install(monkeypatch)

    @pilot_test
    async def check():
        app = _top()
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: len(app.views[0].state.gpu) == 2)
            app.redraw()
            await pilot.pause()
            table = app.query_one(ProcessTable)
            await pilot.press("tab")  # from the GPU blocks to the process table
            assert app.focused is table
            assert table.sort_column == "GPU MEM" and "GPU MEM▼" in _text(app, ProcessTable)
            await pilot.press("o")
            assert table.sort_column == "%CPU" and "%CPU▼" in _text(app, ProcessTable)
            await pilot.press("O")
            assert table.sort_reverse and "%CPU▲" in _text(app, ProcessTable)
            for _ in SORTS:
                await pilot.press("o")
            assert table.sort_column == "%CPU" and not table.sort_reverse  # round the columns

    check()


def test_a_process_host_figures_from_proc():
    stat = ProcStat()
    mine = stat.info(os.getpid())
    assert mine["run_s"] >= 0 and 0 < mine["mem_pct"] < 100 and mine["cpu_pct"] >= 0
    assert stat.info(2**22 + 12345) == {}  # no such pid: nothing invented
    assert provetop_kind("/usr/bin/python3 -m provetop engine --preset demo") == "engine"
    assert provetop_kind("provetop trace -- ./prover") == "trace"
    assert provetop_kind("python3 train.py") is None


def test_top_once_prints_a_traced_process_pools(tmp_path, monkeypatch):
    """A traced process (``provetop trace``; its stand-in program speaks the injection
    library's protocol, there is no GPU here) attaches like an engine: its lanes' pools."""
    from provetop.trace.session import TraceOptions, TraceSession

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    stop = tmp_path / "stop"
    monkeypatch.setenv("STANDIN_STOP", str(stop))
    fake_lib = tmp_path / "lib.so"
    fake_lib.write_bytes(b"")
    command = [sys.executable, "-m", "tests.trace.standin_program", "hold"]
    session = TraceSession(TraceOptions(command=command, library=fake_lib, record=None))
    session.start()
    try:
        assert session.address
        report: dict = {}
        for _ in range(40):  # until its first sample reached the trace's state
            report = json.loads(_top_once(tmp_path, "--json").stdout)
            if report["attached"] and report["attached"][0]["pools"]:
                break
        (trace,) = report["attached"]
        assert trace["kind"] == "trace" and trace["pools"][0]["lane"].startswith("gpu0 pid ")
        text = _top_once(tmp_path, "--once").stdout
        assert "  trace " in text and "    gpu0 pid " in text and "PHANTOM" in text
    finally:
        stop.touch()
        session.wait()
        session.close()

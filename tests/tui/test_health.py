"""The device health panel, fed recorded-style H200 ``gpu`` samples (tests/tui/gpu_samples.py,
not read from a card), and the cpu backend's one line."""

from __future__ import annotations

import provetop.recordings.state as state_module
from provetop.recordings.state import State
from provetop.sources.synthetic import generate
from provetop.tui.widgets.health import (
    CPU_MESSAGE,
    HealthPanel,
    figures,
    history_rows,
    process_rows,
)
from tests.tui.gpu_samples import H200_POWER_LIMIT_MW, h200_samples
from tests.tui.helpers import fed, fixed_events, live_app, pilot_test, tap


def _text(app) -> str:
    panel = app.query_one(HealthPanel)
    console = app.console
    lines = console.render_lines(panel.render(), console.options.update_width(panel.size.width))
    return "\n".join("".join(seg.text for seg in line) for line in lines)


def test_figures_show_only_what_the_gpu_reported():
    sample = {"sm_util_pct": 93, "power_mw": 655_000, "power_limit_mw": H200_POWER_LIMIT_MW}
    plain = [chunk.plain for chunk in figures(sample)]
    assert plain == ["SM 93 %", "power 655 W / 700 W", "XID n/a"]
    assert figures({}) == []
    xids = [c.plain for c in figures({"temp_c": 50, "xid_count": 2, "xid_last": 79})]
    assert xids == ["temp 50 °C", "XID 2 (last 79)"]
    assert figures({"temp_c": 50, "xid_count": 0})[-1].plain == "XID 0"
    memory = figures({"mem_used": 3 << 30, "mem_total": 141 << 30})[0].plain
    assert memory == "memory 3.00 GiB / 141.00 GiB"
    full = " ".join(c.plain for c in figures({"fan_pct": 35, "ecc_uncorrected": 2, "temp_c": 64}))
    assert "fan 35 %" in full and "2 uncorrected" in full and "64 °C" in full


def test_history_lines_up_with_the_window():
    """A sample at ``t`` describes the second before it: the dip measured at 5 s is drawn over
    4-5 s, columns 16-19 of 40 over a 10 s window; after the last sample the row is blank."""
    samples = [{"t": s * 1_000_000_000, "sm_util_pct": 0 if s == 5 else 100} for s in range(1, 9)]
    (row, scale) = history_rows(samples, 0, 10_000_000_000, 40 + 9)
    cells = row.plain[9:]
    assert len(cells) == 40 and scale.plain == "full scale:  utilisation 100 %"
    assert cells[16:20] == "____" and set(cells[:16] + cells[20:32]) == {"█"}
    assert cells[32:].strip() == ""


async def _show_health(pilot, app, events) -> None:
    """Feed the events, then key 5 (the health panel) and one redraw."""
    await fed(pilot, app, len(events))
    assert not app.query_one("#health-box").display
    await tap(pilot, "5")
    app.redraw()
    await pilot.pause()


@pilot_test
async def test_key_5_shows_the_panel_with_h200_figures_at_160x48():
    events = h200_samples(fixed_events())
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await _show_health(pilot, app, events)
        assert app.query_one("#health-box").display and not app.query_one("#memory-box").display
        text = _text(app)
        assert "gpu0 NVIDIA H200" in text and "gpu1 NVIDIA H200" in text
        assert "/ 700 W" in text and "SM 1980 / mem 2619 MHz" in text
        assert "SM util" in text and "PCIe rx" in text and "power" in text
        assert "fan" not in text  # an SXM module reports none: not invented
        assert "◆   4242 prover" in text and "provetop engine · python3 -m" in text
        assert "  31337 –" in text
        await tap(pilot, "2")
        await pilot.pause()
        assert app.query_one("#memory-box").display and not app.query_one("#health-box").display


@pilot_test
async def test_the_cpu_backend_says_there_is_no_gpu_at_80x24():
    events = generate(devices=1, duration_s=4, seed=3)
    app = live_app(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await fed(pilot, app, len(events))
        await tap(pilot, "5")
        app.redraw()
        await pilot.pause()
        assert app.query_one("#health-box").display
        assert _text(app).strip() == CPU_MESSAGE
        await tap(pilot, "x")
        assert app.screen.maximized is app.query_one("#health-box")


def test_the_reducer_keeps_a_bounded_history(monkeypatch):
    monkeypatch.setattr(state_module, "GPU_HISTORY", 5)
    state = State()
    for s in range(12):
        state.apply({"k": "gpu", "t": s, "device": 0, "temp_c": 40 + s})
    assert [e["t"] for e in state.gpu_history[0]] == [7, 8, 9, 10, 11]
    assert state.gpu[0]["temp_c"] == 51
    snap = State.from_snapshot(state.snapshot())
    state.apply({"k": "snapshot", "t": 12, "state": snap.snapshot()})
    assert len(state.gpu_history[0]) == 5 and state.gpu[0]["temp_c"] == 51


def test_process_rows_mark_the_engine_and_end_long_commands():
    procs = [
        {"pid": 7, "used": 1 << 30, "user": "ops", "command": "x" * 200},
        {"pid": 4242, "used": 60 << 30, "user": "prover", "command": "python3 -m provetop"},
    ]
    rows = [r.plain for r in process_rows(procs, 4242, 60)]
    assert rows[1].startswith("◆   4242 prover") and "60.00 GiB" in rows[1]
    assert rows[2].endswith("…") and len(rows[2]) == 60
    assert process_rows([], 1, 60)[0].plain == "no compute processes"


def test_a_device_not_selected_fits_one_row_in_the_brief_form():
    from rich.text import Text

    from provetop.tui.widgets.health import one_row

    sample = {
        "sm_util_pct": 97,
        "mem_used": 80 << 30,
        "mem_total": 141 << 30,
        "power_mw": 655_000,
        "power_limit_mw": H200_POWER_LIMIT_MW,
        "temp_c": 61,
        "sm_clock_mhz": 1980,
        "xid_count": 0,
    }
    row = one_row(Text("gpu1 NVIDIA H200"), sample, 200)
    assert row.plain == (
        "gpu1 NVIDIA H200  SM 97 % · memory 80.00 GiB / 141.00 GiB · power 655 W / 700 W"
        " · temp 61 °C"
    )  # no clocks, and no XID while there is none
    assert "XID 3" in one_row(Text("gpu1"), {**sample, "xid_count": 3}, 200).plain
    cut = one_row(Text("gpu1 NVIDIA H200"), sample, 40)
    assert cut.cell_len == 40 and cut.plain.endswith("…")


@pilot_test
async def test_two_gpus_at_80x24_fit_the_box_without_scrolling():
    events = h200_samples(fixed_events())
    app = live_app(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await _show_health(pilot, app, events)
        box = app.query_one("#health-box")
        assert box.display
        text = _text(app)
        lines = text.splitlines()
        other = [line for line in lines if line.startswith("gpu1")]
        assert len(other) == 1 and "SM " in other[0] and "power" in other[0]
        assert "SM util" in text  # the selected device keeps its history
        assert "2 processes  ◆4242 " in text  # the processes on one row
        assert box.max_scroll_y == 0, (box.max_scroll_y, text)

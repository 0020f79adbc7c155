"""The dashboard never contradicts itself: at a fault the memory panel shows the pools that
fault carried, at its time, with the fault centred under the cursor; numbers in paths and
names stay digits; OOMs have a history row of their own; the header keeps the OOM and
fallback counts at 80 columns; the pre-stage reason reads whole; every panel follows a zoom
after the run. Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

from provetop.recordings.state import State, phantom_bytes
from provetop.tui.app import ProvetopApp
from provetop.tui.logtext import humanise
from provetop.tui.style import clock, size
from provetop.tui.widgets.header import Header, HeaderInfo, pack
from provetop.tui.widgets.memory import MemoryPanel, history
from tests.tui.helpers import fed, fixed_events, live_app, pilot_test, tap, until

ROOT = Path(__file__).resolve().parents[2]
NAIVE16 = ROOT / "recordings" / "samples" / "h200-porep32g-naive16.pvtrec"
MIB = 1 << 20


def _panel_text(app: ProvetopApp) -> str:
    panel = app.query_one(MemoryPanel)
    console = app.console
    width = max(20, panel.size.width)
    lines = console.render_lines(panel.render(), console.options.update_width(width))
    return " ".join("".join(s.text for s in line) for line in lines)


@pilot_test
async def test_n_shows_the_pools_the_fault_carried_centred_under_the_cursor():
    app = ProvetopApp(replay_path=str(NAIVE16), autoplay=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.replay is not None)
        await pilot.press("n")
        await pilot.pause(0.2)
        fault = next(f for f in app.view.state.faults if f["kind"] == "oom")
        assert app.timeline.cursor_t == fault["t"]
        assert app.timeline.window_end - app.timeline.span // 2 == fault["t"]  # centred
        assert app.timeline.selected_lane == ("worker", fault["device"], fault["worker"])
        text = " ".join(_panel_text(app).split())
        assert f"at {clock(fault['t'])}: OOM gpu0 w1's pools" in text
        assert f"PHANTOM {size(phantom_bytes(fault['pools']))}" in text  # the log's figure
        assert f"cudaMemGetInfo free {size(fault['pools']['driver_free'])}" in text
        app.timeline._key = None
        app.timeline._build()
        detail = app.timeline._rows[len(app.timeline.visible_lanes()) + 1].text
        assert detail.startswith(f"● ✖ OOM at {clock(fault['t'])}"), detail
        await pilot.press("space")  # playing again: the newest sample, labelled with its time
        await pilot.pause(0.2)
        app.redraw()
        assert "OOM gpu0 w1's pools" not in _panel_text(app)
        assert "sample " in _panel_text(app)


@pilot_test
async def test_a_selected_log_line_shows_its_pools_and_follow_lets_go():
    events = fixed_events(20)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        fault = next(f for f in app.view.state.faults if f.get("pools"))
        log = app.eventlog
        index = next(i for i, e in enumerate(log.entries) if fault in e.events)
        log.focus()
        log.cursor = index + 1
        await tap(pilot, "up")
        app.redraw()
        await pilot.pause()
        assert app.pinned is not None and app.pinned.t == fault["t"]
        assert f"at {clock(fault['t'])}" in _panel_text(app)
        assert app.timeline.cursor_t == fault["t"] and not app.timeline.follow
        await tap(pilot, "end")
        app.redraw()
        assert app.pinned is None and app.timeline.follow


def test_numbers_in_paths_and_names_stay_digits():
    for text in (
        "saved 12 events to 20261206-101500-engine-saved.pvtrec",
        "saved 12 events to 20261206.pvtrec",
        "saved 12 events to /data/provetop/20261206/run.pvtrec",
        "engine 12345678 on host-20261206",
        "gpu0:12345678 answered",
    ):
        assert humanise(text) == text
    assert humanise("free 7471104.") == "free 7.1 MiB."
    assert humanise("(driver free 7471104)") == "(driver free 7.1 MiB)"


def test_ooms_have_their_own_history_row_and_the_phantom_stays_readable():
    state = State()
    faults = [{"kind": "oom", "t": t * 10**8, "device": 0} for t in range(100)]
    for t in range(100):
        state.apply(
            {"k": "memory", "t": t * 10**8, "device": 0, "async_reserved": (t % 7) * MIB,
             "async_used": 0, "sync_used": 0, "sync_cached": 0, "driver_free": MIB}
        )  # fmt: skip
    rows = history(state.series[0], faults, 0, 0, 10**10, 60, 16 * MIB)
    by_label = {r.plain.split()[0]: r.plain for r in rows}
    assert "✖" not in by_label["phantom"]
    assert set(by_label["phantom"][8:49]) - {" "} <= set("▁▂▃▄▅▆▇█_")
    assert by_label["OOM"].count("✖") > 30 and by_label["OOM"].rstrip().endswith("100")


def test_the_header_keeps_ooms_and_fallbacks_at_80_columns():
    state = State().fold(fixed_events(20))
    totals = state.totals()
    assert totals["ooms"] and totals["fallbacks"]
    header = Header()
    info = HeaderInfo(state, "live", [("engine", "connected")], elapsed_ns=state.t)
    line = pack(header._progress(info), 80).plain
    assert f"OOM {totals['ooms']}" in line and f"fallbacks {totals['fallbacks']}" in line


@pilot_test
async def test_the_pre_stage_reason_reads_whole_at_160x48():
    events = fixed_events(20)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        table = app.table
        row = next(r for r in reversed(app.view.state.partitions.values()) if r.prestage_reason)
        table.cursor = list(app.view.state.partitions).index((row.proof, row.partition))
        table._follow = False
        detail = table.detail()
        assert row.prestage_reason in detail and "…" not in detail
        last = table.render_line(table.size.height - 1).text
        assert last.rstrip() == detail


@pilot_test
async def test_the_memory_history_follows_a_zoom_after_the_run():
    events = fixed_events(20)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        app.timeline.focus()
        await tap(pilot, "minus", "minus")
        await pilot.pause(0.5)  # a few refresh ticks; no event arrives
        end = app.timeline.window_end
        assert app.memory.window == (end - app.timeline.span, end)

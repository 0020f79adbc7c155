"""The dashboard driven by Pilot over synthetic runs: every panel draws the reducer's state,
every key does what the help screen says, replay seeks land where they should."""

from __future__ import annotations

import random

from rich.style import Style

from provetop.recordings.state import State
from provetop.sources.synthetic import generate
from provetop.tui.screens import HelpScreen, MarkerPrompt
from provetop.tui.style import FAILURE_COLOUR
from provetop.tui.widgets.header import Header
from provetop.tui.widgets.memory import MemoryPanel, bar, parts
from provetop.tui.widgets.partitions import PartitionsTable, cells, sort_value
from provetop.tui.widgets.timeline import ZOOMS_NS, Timeline
from tests.tui.helpers import fed, fixed_events, live_app, pilot_test, replay_app, until


def test_memory_parts_add_up_to_the_card():
    rng = random.Random()
    gib = 1 << 30
    for _ in range(50):
        a_used, s_used = rng.randrange(0, 3 * gib), rng.randrange(0, 3 * gib)
        sample = {
            "async_used": a_used,
            "async_reserved": a_used + rng.randrange(0, 4 * gib),
            "sync_used": s_used,
            "sync_cached": rng.randrange(0, 4 * gib),
            "ballast": rng.choice([0, gib]),
            "driver_free": rng.randrange(0, 2 * gib),
        }
        other = rng.randrange(0, gib)
        total = sum(v for k, v in sample.items() if k != "async_used") + other
        sample["driver_total"] = total
        p = parts(sample)
        assert sum(v for k, v in p.items() if k != "total") == total
        assert p["async_free"] == sample["async_reserved"] - a_used
        width = rng.randrange(10, 120)
        cells = bar(sample, width)
        assert cells.cell_len == width


@pilot_test
async def test_live_panels_draw_the_reduced_state():
    events = generate(devices=2, duration_s=12, seed=random.randrange(1 << 30))
    expect = State().fold(events)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        state = app.view.state
        assert state.totals() == expect.totals()
        table = app.query_one(PartitionsTable)
        assert table.row_count == len(expect.partitions)
        header = app.query_one(Header).render().plain
        assert f"proofs {expect.totals()['proofs_done']}" in header
        assert "modeled" in header and "read-only" in header
        timeline = app.query_one(Timeline)
        assert len(timeline.visible_lanes()) == len(expect.lanes()) == 8
        text = "\n".join(strip.text for strip in timeline._rows)
        assert "gpu1 GPU" in text and "gpu0 w1" in text
        memory = app.query_one(MemoryPanel).render()
        assert "PHANTOM" in str(getattr(memory, "renderables", [""])[2])


@pilot_test
async def test_timeline_keys_zoom_cursor_lanes_follow():
    events = fixed_events(12)
    app = live_app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        await fed(pilot, app, len(events))
        timeline = app.query_one(Timeline)
        timeline.focus()
        span = timeline.span
        await pilot.press("plus")
        assert timeline.span < span
        for _ in range(len(ZOOMS_NS) + 2):
            await pilot.press("minus")
        assert timeline.span == ZOOMS_NS[-1] == int(3600e9)
        for _ in range(len(ZOOMS_NS) + 2):
            await pilot.press("plus")
        assert timeline.span == ZOOMS_NS[0] == int(0.1e9)
        await pilot.press("minus", "minus", "minus", "minus", "minus", "minus")  # 5 s
        assert timeline.follow
        await pilot.press("left")
        assert not timeline.follow and timeline.cursor_t is not None
        await pilot.press("down", "down")
        assert timeline.lane_index == 2 and timeline.selected_lane == ("gpu", 0)
        await pilot.press("down", "down", "down")
        assert timeline.selected_device == 1
        # the detail row names the segment under the cursor
        await pilot.press("up", "up", "up", "up")
        lane = timeline.selected_lane
        cursor = timeline.cursor_t
        seg = next(
            (s for s in app.view.state.segments.get(lane, []) if s.start <= cursor <= s.end),
            None,
        )
        timeline._key = None
        timeline._build()
        detail = timeline._rows[len(timeline.visible_lanes()) + 1].text
        if seg is not None:
            assert seg.phase in detail and f"proof {seg.proof}" in detail
        await pilot.press("shift+left")
        assert timeline.window_end < app.view.state.t
        await pilot.press("g")
        assert all(lane[0] == "gpu" for lane in timeline.visible_lanes())
        await pilot.press("g", "l")
        assert timeline.follow and timeline.cursor_t is None


@pilot_test
async def test_help_palette_theme_and_panels():
    events = fixed_events(5)
    app = live_app(events)
    async with app.run_test(size=(100, 30)) as pilot:
        await fed(pilot, app, len(events))
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        theme = app.theme
        await pilot.press("t")
        assert app.theme != theme
        await pilot.press("3")
        assert app.focused is app.query_one("#partitions")
        assert app.compact and not app.query_one("#partitions").has_class("-hidden")
        assert app.query_one("#log").has_class("-hidden")
        await pilot.press("o")
        assert app.query_one(PartitionsTable).sort_column == "proof"
        await pilot.press("4")
        assert app.focused is app.query_one("#log")
        await pilot.press("x")
        assert app.screen.maximized is app.query_one("#log")
        await pilot.press("x")
        assert app.screen.maximized is None
        # controls are greyed for a read-only source; the palette leaves them out
        assert app.check_action("force_fallback", ()) is None
        assert app.check_action("replay_toggle", ()) is False
        from provetop.tui.commands import ACTIONS, _enabled

        titles = [title for action, title, _ in ACTIONS if _enabled(app, action)]
        assert "Toggle forced pre-stage fallback" not in titles and "Zoom in" in titles
        span = app.query_one(Timeline).span
        await pilot.press("ctrl+p")
        await pilot.press(*"zoom out")
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one(Timeline).span > span


@pilot_test
async def test_partitions_sort_and_failures_highlighted():
    events = fixed_events(20)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        table = app.query_one(PartitionsTable)
        table.focus()
        await pilot.press("o", "o", "o", "o", "o", "o")  # proof part where status prestage wait
        assert table.sort_column == "wait"
        waits = [sort_value(table.row_at(i), "wait") for i in range(table.row_count)]
        assert waits == sorted(waits)
        await pilot.press("O")
        waits = [sort_value(table.row_at(i), "wait") for i in range(table.row_count)]
        assert waits == sorted(waits, reverse=True)
        retried = [i for i in range(table.row_count) if table.text_at(i, "status") == "retried ok"]
        assert retried, "the synthetic run retries OOMed partitions"
        # a failed attempt is drawn in red, with its reason
        failed = [r for r in State().fold(events).attempts if r.ok is False]
        assert failed
        row_cells = cells(failed[0])
        assert row_cells[3] == ("FAILED", f"bold {FAILURE_COLOUR}")
        assert failed[0].failure in row_cells[4][0]
        strip = table._row_strip(failed[0], Style())
        assert any(
            seg.style and seg.style.color and seg.style.color.name == FAILURE_COLOUR
            for seg in strip
        )
        await pilot.press("up", "up", "home")
        assert table.cursor == 0
        await pilot.click(PartitionsTable, offset=(3, 1))  # the "proof" header (inside the border)
        assert table.sort_column == "proof"


@pilot_test
async def test_replay_keys():
    events = fixed_events(60)
    app = replay_app(events, position_s=10)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.replay is not None)
        r = app.replay
        assert r.position == int(10e9) and not r.playing
        expect = State().fold(e for e in events if e["t"] <= r.position)
        assert app.view.state.totals() == expect.totals()
        await pilot.press("full_stop")
        assert r.position == int(15e9)
        await pilot.press("comma", "comma")
        assert r.position == int(5e9)
        await pilot.press("greater_than_sign")
        assert r.position == r.source.end
        await pilot.press("home")
        assert r.position == r.source.start
        await pilot.press("n")
        first = min(r.source.faults + r.source.markers)
        half = app.timeline.span // 2  # folded half a window past the point: it is centred
        assert r.position == first + half and app.timeline.cursor_t == first
        await pilot.press("n", "p")
        assert r.position == first + half and app.timeline.cursor_t == first
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert r.speed == 4.0
        for _ in range(5):
            await pilot.press("left_square_bracket")
        assert r.speed == 0.25
        for _ in range(8):
            await pilot.press("right_square_bracket")
        assert r.speed == 16.0
        start = r.position
        await pilot.press("space")
        assert r.playing
        await until(pilot, lambda: r.position > start + int(3e9))
        await pilot.press("space")
        assert not r.playing
        stopped = r.position
        expect = State().fold(e for e in events if e["t"] <= stopped)
        assert app.view.state.totals() == expect.totals()
        # controls are greyed in replay
        for action in ("force_fallback", "pause_intake", "trim", "marker", "save"):
            assert app.check_action(action, ()) is None
        await pilot.press("end")
        await pilot.press("M")
        assert not isinstance(app.screen, MarkerPrompt)


@pilot_test
async def test_watching_two_engines_switches_with_e():
    from provetop.sources.feed import FeedSource
    from provetop.tui.app import ProvetopApp

    one = generate(devices=1, duration_s=4, seed=random.randrange(1 << 30))
    two = generate(devices=2, duration_s=6, seed=random.randrange(1 << 30))
    two[0] = {**two[0], "engine_id": "second", "host": "other-host"}
    app = ProvetopApp(
        [FeedSource(one, label="first"), FeedSource(two, label="second")], live_clock=False
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await until(
            pilot,
            lambda: all(
                v.state.events == len(e) for v, e in zip(app.views, (one, two), strict=True)
            ),
        )
        app.redraw()
        assert app.check_action("next_engine", ()) is True
        assert app.view.state.totals() == State().fold(one).totals()
        assert "▸first" in app.header.render().plain
        await pilot.press("e")
        assert app.view.state.totals() == State().fold(two).totals()
        assert "▸second" in app.header.render().plain
        assert len(app.timeline.visible_lanes()) == 8
        await pilot.press("e")
        assert app.selected == 0


@pilot_test
async def test_replay_zoom_out_brings_the_history_in_view():
    events = fixed_events(60)
    app = replay_app(events, position_s=50)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.replay is not None)
        app.timeline.focus()
        await pilot.press("minus")  # 30 s -> 1 min: more history than the seek folded
        await until(pilot, lambda: app.replay.window >= app.timeline.span)
        lane = ("worker", 0, 0)
        first = min(s.start for s in app.view.state.segments[lane])
        left_edge = max(0, app.replay.position - app.timeline.span)
        assert first <= left_edge + int(2e9)  # segments from the window's left edge on


def test_the_header_shows_a_running_start_up_step():
    from provetop.recordings.schema import make
    from provetop.recordings.state import State
    from provetop.tui.widgets.header import HeaderInfo

    state = State()
    state.apply(
        make(
            "progress",
            1,
            task="srs",
            label="SRS",
            done=23_600,
            total=104_300,
            unit="points",
            elapsed_s=1.0,
            rate=23_200.0,
            eta_s=3.5,
        )  # fmt: skip
    )
    line = "".join(t.plain for _, t in Header()._progress(HeaderInfo(state, "live", [])))
    assert "SRS: 23.6 k/104.3 k points (23 %), 23.2 k points/s, ETA 3.5 s" in line

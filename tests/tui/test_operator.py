"""What an operator relies on, driven by Pilot: the layout follows every resize, no event line
is cut (wrapped on words, one line per decision, sizes as MiB/GiB, a line's full events on
enter), the memory panel's figures and legend uncut at every size, the keys that misbehaved
(ctrl+c, 2 then x, P after done), and a watched address that cannot be reached."""

from __future__ import annotations

import re

import pytest

from provetop.recordings.state import LogLine, State
from provetop.sources.live import LiveSource
from provetop.tui.app import ProvetopApp
from provetop.tui.logtext import LogFolder, humanise
from provetop.tui.screens import EventScreen
from provetop.tui.widgets.eventlog import EventLog
from provetop.tui.widgets.header import Header
from provetop.tui.widgets.memory import LEGENDS, MemoryPanel
from tests.tui.helpers import fed, fixed_events, live_app, pilot_test, until

SIZES = [(80, 24), (120, 40), (160, 48), (200, 60)]
GIB = 1 << 30


def test_byte_counts_become_sizes():
    text = "chunks of 1048576 bytes from a budget of 17179766784 (driver free 512)"
    assert humanise(text) == "chunks of 1.0 MiB from a budget of 16.00 GiB (driver free 512 B)"
    assert humanise("proof 12345678 partition 3") == "proof 12345678 partition 3"


def _fallback_events() -> list[dict]:
    pools = {"async_reserved": 2 * GIB, "async_used": GIB, "sync_cached": GIB, "driver_free": 0}
    where = {"proof": 3, "partition": 1, "worker": 0, "device": 0}
    return [
        {
            "k": "fault",
            "t": 10,
            "kind": "oom",
            "message": "out of memory: raw allocation of 4096 bytes for prestage",
            "requested": 4096,
            "pools": pools,
            **where,
        },
        {
            "k": "partition_done",
            "t": 11,
            "ok": False,
            "attempt": 0,
            "prestage": "fallback",
            "failure": "OOM",
            "will_retry": True,
            "phases_ms": {},
            "gpu_total_ms": 0.0,
            "mutex_wait_ms": 0.0,
            **where,
        },
        {
            "k": "alloc",
            "t": 12,
            "site": "prestage",
            "pool": "raw",
            "requested": 6144,
            "decision": "fallback",
            "reason": "retry on the fallback path after a failure",
            **where,
        },
        {
            "k": "alloc",
            "t": 13,
            "site": "prestage",
            "pool": "async",
            "requested": 8192,
            "decision": "fallback",
            "reason": "whole arrays, no budget",
            **where,
        },
        {
            "k": "partition_done",
            "t": 14,
            "ok": True,
            "attempt": 1,
            "prestage": "fallback",
            "prestage_reason": "retry",
            "phases_ms": {},
            "gpu_total_ms": 1.0,
            "mutex_wait_ms": 0.0,
            **where,
        },
    ]


def test_one_line_per_decision_with_its_events():
    state = State().fold(_fallback_events())
    folder = LogFolder()
    for line in state.log:
        folder.add(line)
    texts = [e.text for e in folder.entries]
    assert len(texts) == 2, texts  # the OOM (and its retry), the fallback
    assert texts[0].startswith("OOM gpu0 w0 proof 3 partition 1") and "4.0 KiB" in texts[0]
    assert "retried on the fallback path" in texts[0] and "phantom 2.00 GiB" in texts[0]
    assert "fallback: retry on the fallback path" in texts[1] and "6.0 KiB requested" in texts[1]
    assert [len(e.events) for e in folder.entries] == [2, 3]


def test_a_handed_over_a_joins_its_partitions_pre_stage_line():
    """The skip (the pre-stage decision) and the hand-over of the previous partition's H
    block to this partition's a are one decision's story: one entry, both events."""
    where = {"proof": 0, "partition": 5, "worker": 1, "device": 0}
    events = [
        {
            "k": "alloc",
            "t": 1,
            "site": "prestage",
            "pool": "sync",
            "requested": 12 << 30,
            "decision": "skip",
            "reason": "skip_vram: free 1 < need 2",
            **where,
        },
        {
            "k": "alloc",
            "t": 2,
            "site": "handover",
            "pool": "async",
            "requested": 4 << 30,
            "decision": "ok",
            "reason": "a went up into the previous partition's H block as its "
            "MSM pass finished with each chunk: 99 of 100 rows before this region",
            **where,
        },
    ]
    state = State().fold(events)
    assert any("handover ok" in line.text for line in state.log)
    folder = LogFolder()
    for line in state.log:
        folder.add(line)
    assert len(folder.entries) == 1
    entry = folder.entries[0]
    assert entry.text.startswith("gpu0 w1 proof 0 partition 5: pre-stage skipped")
    assert entry.text.endswith("→ a went up under the previous partition's MSM pass")
    assert [e["site"] for e in entry.events] == ["prestage", "handover"]


def test_an_event_of_the_run_names_no_worker_or_partition():
    """The SRS's alloc events (CUDA) carry proof, partition and worker -1: they belong to the
    run. The log names the device only, and does not fold them into a partition's line."""
    srs = {
        "k": "alloc",
        "t": 7_000_000_000,
        "device": 0,
        "worker": -1,
        "proof": -1,
        "partition": -1,
        "site": "srs",
        "pool": "host",
        "requested": 12 << 30,
        "decision": "fallback",
        "reason": "h: pinned host, streamed to the MSM",
    }
    folder = LogFolder()
    for line in State().fold([srs]).log:
        folder.add(line)
    assert [e.text for e in folder.entries] == [
        "gpu0: fallback at srs: h: pinned host, streamed to the MSM (12.00 GiB requested)"
    ]


def _words_whole(rows: list[str], entries) -> None:
    """Every word of every entry appears whole on some row (nothing cut mid-word)."""
    words = set()
    for row in rows:
        words.update(row.split())
    for entry in entries:
        for word in entry.text.split():
            assert word in words, f"{word!r} was cut: {rows}"


@pilot_test
async def test_event_log_wraps_on_words_and_rewraps_on_resize():
    events = fixed_events(20)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        log = app.query_one(EventLog)
        long = "forced by the operator " * 6
        app.view.state.log.append(LogLine(app.view.state.t, "warn", long.strip()))
        app.redraw()
        await pilot.pause()
        width = log.scrollable_content_region.width
        assert all(len(row) <= width for row in log.rows_text())
        _words_whole(log.rows_text(), log.entries)
        for size in ((80, 24), (200, 60), (120, 40)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.2)
            await pilot.press("4")
            await pilot.pause(0.1)
            width = log.scrollable_content_region.width
            assert all(len(row.rstrip()) <= width for row in log.rows_text()), size
            _words_whole(log.rows_text(), log.entries)
        # select a line, open its events
        await pilot.press("up", "enter")
        await pilot.pause()
        assert isinstance(app.screen, EventScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, EventScreen)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_memory_figures_and_legend_uncut(size):
    @pilot_test
    async def check():
        events = fixed_events(20)
        app = live_app(events)
        async with app.run_test(size=size) as pilot:
            await fed(pilot, app, len(events))
            await pilot.press("2")
            await pilot.pause(0.1)
            memory = app.query_one(MemoryPanel)
            width = memory.size.width
            console = app.console
            lines = console.render_lines(memory.render(), console.options.update_width(width))
            text = "\n".join("".join(s.text for s in line).rstrip() for line in lines)
            for label in (
                "nvidia-smi used",
                "cudaMemGetInfo free",
                "async used",
                "async reserved-unused",
                "sync used",
                "sync cached",
                "PHANTOM",
            ):
                assert re.search(re.escape(label) + r" [0-9.]+ (B|KiB|MiB|GiB)", text), (
                    label,
                    text,
                )
            assert any(line.strip() in LEGENDS for line in text.splitlines()), text
            history = [line for line in text.splitlines() if line.startswith("phantom ")]
            assert history and set(history[0][8:].split()[0]) - {" "}  # not blank
            if size != (80, 24):  # the grid's top row grows to the panel's height (to 60 %)
                limit = max(10, int(size[1] * 0.6))
                await until(pilot, lambda: bool(app._grid_rows))
                assert int(app._grid_rows[0]) >= min(limit, len(lines)), (app._grid_rows, limit)

    check()


@pilot_test
async def test_resize_both_ways_changes_the_layout():
    events = fixed_events(10)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        assert not app.compact and app.query_one("#log").display
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.2)
        assert app.compact and app.screen.has_class("-compact")
        assert app.query_one("#log").has_class("-hidden")
        await pilot.resize_terminal(160, 48)
        await pilot.pause(0.2)
        assert not app.compact and not app.screen.has_class("-compact")
        assert not any(p.has_class("-hidden") for p in app.panels.values())


@pilot_test
async def test_keys_ctrl_c_and_maximise_memory():
    events = fixed_events(5)
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        await pilot.press("2", "x")
        assert app.screen.maximized is app.query_one("#memory-box")
        await pilot.press("x")
        assert app.screen.maximized is None
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0


@pilot_test
async def test_pause_after_done_is_refused_and_elapsed_is_the_engine_clock():
    events = fixed_events(10)
    events.append({"k": "engine_state", "t": events[-1]["t"] + 1, "state": "done"})
    app = live_app(events)
    async with app.run_test(size=(160, 48)) as pilot:
        await fed(pilot, app, len(events))
        app.action_pause_intake()
        app.redraw()
        await pilot.pause()
        header = app.query_one(Header).render().plain
        assert " done " in header and "paused" not in header
        assert "refused" in app.view.state.log[-1].text
        clock_s = app.view.state.t / 1e9
        assert f"elapsed 0:{clock_s:04.1f}" in header


def test_save_writes_a_pvtrec_in_the_recordings_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    app = ProvetopApp([LiveSource("unix:/nonexistent.sock")])
    assert app.save_dir == tmp_path / "provetop" / "recordings"


@pilot_test
async def test_an_unreachable_only_source_exits_2_fast(tmp_path):
    app = ProvetopApp([LiveSource(f"unix:{tmp_path}/missing.sock")])
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(40):
            if app.return_code is not None:
                break
            await pilot.pause(0.05)
    assert app.return_code == 2

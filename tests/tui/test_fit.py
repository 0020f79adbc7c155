"""Every figure fits without scrolling where the layout promises it: the memory panel with two
devices at 80x24 (compact rows), the partitions table at every size down to 120 columns
(columns abbreviated, then the least important left out)."""

from __future__ import annotations

import pytest

from provetop.tui.widgets.memory import LEGENDS, MemoryPanel
from provetop.tui.widgets.partitions import COLUMNS, DROP_ORDER, column_widths
from tests.tui.helpers import fed, fixed_events, live_app, pilot_test, tap

SIZES = [(80, 24), (120, 40), (160, 48), (200, 60)]


@pilot_test
async def test_two_devices_at_80x24_fit_the_memory_panel_without_scrolling():
    events = fixed_events(20, devices=2)
    app = live_app(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await fed(pilot, app, len(events))
        await tap(pilot, "2")
        app.redraw()
        await pilot.pause(0.2)
        box = app.query_one("#memory-box")
        assert box.max_scroll_y == 0, (box.size, box.virtual_size)
        memory = app.query_one(MemoryPanel)
        console = app.console
        lines = console.render_lines(
            memory.render(), console.options.update_width(memory.size.width)
        )
        text = [("".join(s.text for s in line)).rstrip() for line in lines]
        assert len(text) <= box.size.height
        joined = "\n".join(text)
        for label in ("nvidia-smi used", "cudaMemGetInfo free", "async used",
                      "async reserved-unused", "sync used", "sync cached", "PHANTOM",
                      "largest cudaMalloc"):  # fmt: skip
            assert label in joined, (label, joined)
        assert text[0].startswith("gpu0 ") and any(t.startswith("gpu1 ") for t in text)
        assert any(t.startswith("gpu1 ") and "PHANTOM" in t for t in text)  # the other device
        assert any(t.strip() in LEGENDS for t in text)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_partitions_table_never_scrolls_sideways(size):
    @pilot_test
    async def check():
        events = fixed_events(20)
        app = live_app(events)
        async with app.run_test(size=size) as pilot:
            await fed(pilot, app, len(events))
            await tap(pilot, "3")
            app.redraw()
            await pilot.pause(0.2)
            table = app.query_one("#partitions")
            assert table.max_scroll_x == 0, (table.size, table.virtual_size)
            shown = [c.key for c, w in zip(COLUMNS, table.widths, strict=True) if w]
            assert {"proof", "part", "status", "prestage", "gpu", "verified"} <= set(shown)

    check()


def test_columns_go_in_the_documented_order():
    widths = {w: dict(zip((c.key for c in COLUMNS), column_widths(w), strict=True))
              for w in (140, 100, 90, 79, 66, 60)}  # fmt: skip
    assert all(widths[140][c.key] == c.width for c in COLUMNS if c.key != "prestage")
    assert widths[100]["verified"] == 8 and widths[90]["verified"] == 3  # short form first
    assert widths[90]["upload"] == 7
    gone = [[k for k in DROP_ORDER if widths[w][k] == 0] for w in (90, 79, 66, 60)]
    assert gone == [[], ["upload"], ["upload", "h", "msm"], list(DROP_ORDER)]
    for w in (100, 90, 79, 66, 60):  # what is left fits, the pre-stage column at its minimum
        assert sum(x + 1 for x in widths[w].values() if x) <= w

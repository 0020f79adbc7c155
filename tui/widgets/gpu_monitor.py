"""The machine's GPUs across the whole screen, as nvitop draws them: what ``provetop top``
shows while no engine or traced process is selected.

Why a panel of its own and not the device health panel in the pipeline's grid: with no
pipeline there is no timeline, partition or event to show, and the grid left the GPUs a
quarter of the screen. Here each GPU is a block (title, utilisation and memory bars, every
figure NVML reported) and its history rows run across the full width on the timeline's grid
(the same label width, one column per cell, under one time axis), so the picture and the
pipeline's timeline read the same way. Only what NVML reported is drawn
(:func:`provetop.tui.widgets.health.figures`).
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.widget import Widget

from provetop.recordings.state import State
from provetop.tui.style import FAILURE_COLOUR, clock, size
from provetop.tui.widgets.health import NO_NVML_MESSAGE, figures, history_rows
from provetop.tui.widgets.memory import flow
from provetop.tui.widgets.timeline import LABEL_W, ZOOMS_NS, nice_step

BAR_FULL, BAR_EMPTY = "█", "░"


def meter(label: str, share: float | None, tail: str, width: int, colour: str) -> Text:
    """``SM   ████████░░░░  92 %``: a bar of ``width`` cells filled to ``share`` (0..1)."""
    text = Text(f"{label:<{LABEL_W - 1}} ", style="bold")
    cells = max(4, width - LABEL_W - len(tail) - 1)
    if share is None:
        text.append("–".ljust(cells), style="dim")
    else:
        filled = round(max(0.0, min(1.0, share)) * cells)
        style = colour if share < 0.9 else f"bold {FAILURE_COLOUR}"
        text.append(BAR_FULL * filled, style=style)
        text.append(BAR_EMPTY * (cells - filled), style="dim")
    text.append(" " + tail)
    return text


def axis(start: int, end: int, width: int) -> Text:
    """The time axis over the history rows: the timeline's labels at the timeline's columns."""
    cols = max(4, width - LABEL_W)
    line = [" "] * cols
    span = max(1, end - start)
    step = nice_step(span, max(1, cols // 12))
    t = max(0, math.ceil(start / step) * step)
    while t < end:
        c = int((t - start) / (span / cols))
        label = "┆" + clock(t)
        if c + len(label) <= cols:
            line[c : c + len(label)] = label
        t += step
    return Text(f"{'history':<{LABEL_W - 1}} ", style="bold") + Text("".join(line), style="dim")


class GpuMonitor(Widget, can_focus=True):
    """Every GPU of the machine's monitor view; ``+``/``-`` zoom its history."""

    BINDINGS = [
        Binding("plus,equals_sign", "zoom(-1)", "zoom in"),
        Binding("minus", "zoom(1)", "zoom out"),
    ]
    DEFAULT_CSS = """
    GpuMonitor { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.now = 0
        self.only: set[int] | None = None  # --only: the GPUs shown
        self.zoom: int | None = None  # None: one column per sample until the operator zooms

    def show(self, state: State, now: int) -> None:
        self.state, self.now = state, now
        self.refresh(layout=True)

    @property
    def span(self) -> int:
        if self.zoom is not None:
            return ZOOMS_NS[self.zoom]
        interval = float(((self.state.hello if self.state else None) or {}).get("config", {})
                         .get("interval_s", 1.0))  # fmt: skip
        cols = max(4, self.size.width - LABEL_W)
        want = cols * interval * 1e9
        return next((z for z in ZOOMS_NS if z >= want), ZOOMS_NS[-1])

    def action_zoom(self, step: int) -> None:
        current = self.zoom if self.zoom is not None else ZOOMS_NS.index(self.span)
        self.zoom = max(0, min(len(ZOOMS_NS) - 1, current + step))
        self.refresh(layout=True)

    def devices(self) -> list[int]:
        if self.state is None:
            return []
        return [d for d in sorted(self.state.gpu) if self.only is None or d in self.only]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        console = self.app.console
        lines = console.render_lines(
            self._content(width), console.options.update_width(width), pad=False
        )
        return len(lines)

    def render(self) -> Group | Text:
        return self._content(max(20, self.size.width))

    def _content(self, width: int) -> Group | Text:
        state = self.state
        hello = (state.hello if state else None) or {}
        why = (hello.get("config") or {}).get("nvml_error")
        if why:
            return Text(NO_NVML_MESSAGE.format(why=why), style="bold #d7af00")
        devices = self.devices()
        if state is None or not devices:
            shown = "" if self.only is None else f" among --only {sorted(self.only)}"
            return Text(f"no NVML samples yet{shown}", style="dim")
        names = {int(d.get("index", i)): d for i, d in enumerate(hello.get("devices", []))}
        end = self.now
        start = end - self.span
        out: list[Text] = [axis(start, end, width)]
        for d in devices:
            out.extend(self._block(d, state.gpu[d], names.get(d, {}), start, end, width))
        return Group(*out)

    def _block(
        self, d: int, sample: dict[str, Any], dev: dict[str, Any], start: int, end: int, width: int
    ) -> list[Text]:
        assert self.state is not None
        title = Text(f"gpu{d}", style="bold reverse")
        title.append(f" {dev.get('name', 'GPU')}", style="bold")
        if dev.get("capacity"):
            title.append(f" · {size(dev['capacity'])}")
        wide = width >= 2 * 30 + 2  # the two bars side by side
        half = (width - 2) // 2 if wide else width
        sm = sample.get("sm_util_pct")
        used, total = sample.get("mem_used"), sample.get("mem_total")
        mem_share = used / total if used is not None and total else None
        mem_tail = "–" if used is None else f"{size(used)} / {size(total)}"
        bars = [
            meter(
                "SM",
                None if sm is None else sm / 100,
                f"{sm if sm is not None else '–':>3} %",
                half,
                "#5fd75f",
            ),  # fmt: skip
            meter("memory", mem_share, mem_tail, half, "#5f87ff"),
        ]
        rows = [title]
        if wide:
            rows.append(bars[0] + Text("  ") + bars[1])
        else:
            rows.extend(bars)
        rows.append(flow(figures(sample), width))
        history = history_rows(self.state.gpu_history.get(d, ()), start, end, width)
        rows.extend(history)
        return rows

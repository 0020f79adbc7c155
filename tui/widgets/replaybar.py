"""The replay bar: play state, speed, position over the recording's length, and where the
faults and markers are, so ``n``/``p`` jumps have a visible target."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from provetop.tui.style import FAILURE_COLOUR, MARKER_COLOUR, clock


class ReplayBar(Widget):
    """One line; the app calls :meth:`show` on every replay tick."""

    DEFAULT_CSS = """
    ReplayBar { height: 1; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.position = 0
        self.start = 0
        self.end = 1
        self.speed = 1.0
        self.playing = False
        self.faults: list[int] = []
        self.markers: list[int] = []
        self.truncated = False

    def show(
        self,
        *,
        position: int,
        start: int,
        end: int,
        speed: float,
        playing: bool,
        faults: list[int],
        markers: list[int],
        truncated: bool = False,
    ) -> None:
        self.position, self.start, self.end = position, start, end
        self.speed, self.playing = speed, playing
        self.faults, self.markers, self.truncated = faults, markers, truncated
        self.refresh()

    def render(self) -> Text:
        icon = "▶" if self.playing else "⏸"
        head = (
            f" {icon} {self.speed:g}x  {clock(self.position - self.start)} / "
            f"{clock(self.end - self.start)} "
        )
        tail = " truncated" if self.truncated else ""
        width = max(10, self.size.width - len(head) - len(tail) - 2)
        span = max(1, self.end - self.start)
        cells = ["─"] * width
        styles = ["dim"] * width
        for t in self.faults:
            c = min(width - 1, max(0, int((t - self.start) / span * width)))
            cells[c], styles[c] = "✖", f"bold {FAILURE_COLOUR}"
        for t in self.markers:
            c = min(width - 1, max(0, int((t - self.start) / span * width)))
            cells[c], styles[c] = "▼", f"bold {MARKER_COLOUR}"
        pos = min(width - 1, max(0, int((self.position - self.start) / span * width)))
        for c in range(pos):
            if cells[c] == "─":
                cells[c], styles[c] = "━", "#00afff"
        cells[pos], styles[pos] = "●", "bold"
        text = Text(head, style="bold")
        text.append("[")
        for ch, st in zip(cells, styles, strict=True):
            text.append(ch, style=st)
        text.append("]")
        if tail:
            text.append(tail, style=f"italic {FAILURE_COLOUR}")
        return text

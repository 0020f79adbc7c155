"""The event log: OOMs with the pool state, fallbacks, trims, control actions and connection
events, newest at the bottom. It mirrors ``State.log`` (which the reducer fills) and appends only
the lines it has not shown yet."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from recordings.state import LogLine, State
from tui.style import FAILURE_COLOUR, clock

LEVEL_STYLE = {"info": "", "warn": "#d7af00", "error": f"bold {FAILURE_COLOUR}"}


def line_text(line: LogLine) -> Text:
    text = Text(f"{clock(line.t):>9} ", style="dim")
    text.append(line.text, style=LEVEL_STYLE.get(line.level, ""))
    return text


class EventLog(RichLog):
    """A RichLog fed from the reduced state's log."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, max_lines=2000, wrap=True, markup=False, auto_scroll=True)
        self.state: State | None = None
        self._last: LogLine | None = None

    def show(self, state: State) -> None:
        if state is not self.state:
            self.state, self._last = state, None
            self.clear()
        log = state.log
        if not log or (self._last is not None and log[-1] is self._last):
            return
        new: list[LogLine] = []
        for line in reversed(log):
            if line is self._last:
                break
            new.append(line)
        for line in reversed(new):
            self.write(line_text(line))
        self._last = log[-1]

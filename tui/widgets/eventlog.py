"""The event log: OOMs with the pool state, fallbacks, trims, control actions and connection
events, newest at the bottom, one line per decision (:mod:`provetop.tui.logtext`).

Drawn with the Line API: each entry is wrapped on word boundaries at the panel's width when it
arrives and again on a resize, with the text indented under its time, so no line is ever cut.
``↑``/``↓`` select an entry (following stops), ``enter`` or a click shows its full events,
``end`` or ``escape`` follows the newest again.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from provetop.recordings.state import LogLine, State
from provetop.tui.logtext import Entry, LogFolder
from provetop.tui.style import FAILURE_COLOUR, clock

LEVEL_STYLE = {"info": "", "warn": "#d7af00", "error": f"bold {FAILURE_COLOUR}"}
TIME_W = 10  # "  0:12.3 " and a space: the text is indented under it


class EventLog(ScrollView, can_focus=True):
    """The reduced state's log, folded into entries and wrapped to the panel's width."""

    BINDINGS = [
        Binding("up", "select(-1)", "previous", show=False),
        Binding("down", "select(1)", "next", show=False),
        Binding("pageup", "select(-10)", show=False),
        Binding("pagedown", "select(10)", show=False),
        Binding("home", "select(-1000000)", show=False),
        Binding("end,escape", "follow", "follow", show=False),
        Binding("enter", "open", "details"),
    ]
    DEFAULT_CSS = """
    EventLog { scrollbar-size-vertical: 1; overflow-y: scroll; overflow-x: hidden; }
    """

    class Opened(Message):
        """The operator asked for an entry's full events."""

        def __init__(self, entry: Entry) -> None:
            super().__init__()
            self.entry = entry

    class Selected(Message):
        """The cursor moved to an entry (None: following the newest again): the app shows
        the pool state that entry's events carried beside it, at their time."""

        def __init__(self, entry: Entry | None) -> None:
            super().__init__()
            self.entry = entry

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.folder = LogFolder()
        self.cursor: int | None = None  # index into the entries; None: follow the newest
        self._last: LogLine | None = None
        self._width = 0
        self._wrapped: list[tuple[int, list[Strip]]] = []  # per entry: (version, its rows)
        self._rows: list[tuple[int, Strip]] = []  # (entry index, row) for every row

    # -- data ---------------------------------------------------------------------------------

    @property
    def entries(self) -> list[Entry]:
        return self.folder.entries

    def show(self, state: State) -> None:
        """Take the lines of ``state.log`` not shown yet (all of them for a new state)."""
        if state is not self.state:
            self.state, self._last = state, None
            self.folder = LogFolder()
            self._wrapped, self._rows = [], []
            self.cursor = None
        log = state.log
        if not log or (self._last is not None and log[-1] is self._last):
            return
        new: list[LogLine] = []
        for line in reversed(log):
            if line is self._last:
                break
            new.append(line)
        self._last = log[-1]
        before = len(self.entries)
        dropped = self.folder.dropped
        for line in reversed(new):
            self.folder.add(line)
        self._sync(before, dropped)

    def _sync(self, before: int, dropped: int) -> None:
        """Wrap what changed: new entries, entries whose text grew, all after a drop."""
        cut = self.folder.dropped - dropped
        if cut:
            del self._wrapped[:cut]
            before = max(0, before - cut)
            if self.cursor is not None:
                self.cursor = max(0, self.cursor - cut)
        first = len(self._wrapped)
        for i in range(max(0, before - 16), min(before, len(self._wrapped))):
            if self._wrapped[i][0] != self.entries[i].version:  # a recent entry grew
                first = min(first, i)
        self._rewrap(first, rows_from=0 if cut else None)

    def _rewrap(self, first: int, rows_from: int | None = None) -> None:
        width = self._width = self._text_width()
        del self._wrapped[first:]
        for entry in self.entries[first:]:
            self._wrapped.append((entry.version, self._wrap(entry, width)))
        start = first if rows_from is None else rows_from
        keep = next((j for j, (i, _) in enumerate(self._rows) if i >= start), len(self._rows))
        del self._rows[keep:]
        for i in range(start, len(self._wrapped)):
            self._rows.extend((i, strip) for strip in self._wrapped[i][1])
        self.virtual_size = Size(width, len(self._rows))
        if self.cursor is None:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def _text_width(self) -> int:
        return max(20, self.scrollable_content_region.width)

    def _wrap(self, entry: Entry, width: int) -> list[Strip]:
        console = self.app.console
        body = Text(entry.text, style=LEVEL_STYLE.get(entry.level, ""))
        lines = body.wrap(console, max(10, width - TIME_W), overflow="fold")
        strips = []
        for n, line in enumerate(lines):
            head = Text(f"{clock(entry.t):>9} " if n == 0 else " " * TIME_W, style="dim")
            row = head + line
            strips.append(Strip(row.render(console)))
        return strips or [Strip([])]

    def on_resize(self, event: events.Resize) -> None:
        if self._text_width() != self._width:
            self._width = self._text_width()
            self._wrapped = []
            self._rewrap(0, rows_from=0)

    # -- drawing ------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        width = self.size.width
        index = self.scroll_offset.y + y
        if index >= len(self._rows):
            return Strip.blank(width, base)
        entry, strip = self._rows[index]
        strip = strip.apply_style(base)
        if entry == self.cursor:
            strip = strip.apply_style(Style(reverse=True) if self.has_focus else Style(bold=True))
        return strip.extend_cell_length(width, base).crop(0, width)

    def rows_text(self) -> list[str]:
        """Every row as plain text (for tests)."""
        return [strip.text for _, strip in self._rows]

    # -- interaction --------------------------------------------------------------------------

    def action_select(self, step: int) -> None:
        if not self.entries:
            return
        current = len(self.entries) if self.cursor is None else self.cursor
        self.cursor = max(0, min(len(self.entries) - 1, current + step))
        rows = [j for j, (i, _) in enumerate(self._rows) if i == self.cursor]
        if rows:
            self.scroll_to_region_rows(rows[0], rows[-1])
        self.refresh()
        self.post_message(self.Selected(self.entries[self.cursor]))

    def scroll_to_region_rows(self, top: int, bottom: int) -> None:
        height = max(1, self.size.height)
        y = self.scroll_offset.y
        if top < y:
            self.scroll_to(y=top, animate=False, immediate=True)
        elif bottom >= y + height:
            self.scroll_to(y=max(top, bottom - height + 1), animate=False, immediate=True)

    def action_follow(self) -> None:
        self.cursor = None
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()
        self.post_message(self.Selected(None))

    def action_open(self) -> None:
        if self.cursor is None and self.entries:
            self.cursor = len(self.entries) - 1
            self.refresh()
        if self.cursor is not None:
            self.post_message(self.Opened(self.entries[self.cursor]))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = self.scroll_offset.y + offset.y
        if 0 <= index < len(self._rows):
            self.cursor = self._rows[index][0]
            self.refresh()
            self.post_message(self.Selected(self.entries[self.cursor]))
            self.post_message(self.Opened(self.entries[self.cursor]))

"""The partitions table: one row per (proof, partition), sortable, failures in red; under it
a detail line with the cursor row's pre-stage decision and failure in full (the column cuts a
long reason where the panel is narrow: "skip: anoth…" at 160x48).

Drawn with the Line API rather than DataTable: a busy engine changes a few rows per refresh, and
DataTable re-renders every visible cell whenever any cell changes. Here each row is rendered once
into a Strip and kept until that row's data changes, so a refresh costs the rows that changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from provetop.recordings.state import PartitionRow, State
from provetop.tui.style import FAILURE_COLOUR, ms

MAX_ROWS = 2000  # the most recent partitions shown; summary/export have them all


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    right: bool = True
    short: tuple[str, int] | None = None  # (label, width) when the table is short of room


COLUMNS = (
    Column("proof", "proof", 6),
    Column("part", "part", 5),
    Column("where", "gpu/w", 6, right=False),
    Column("status", "status", 10, right=False),
    Column("prestage", "pre-stage", 18, right=False),
    Column("wait", "wait ms", 8),
    Column("upload", "upload", 7),
    Column("h", "H step", 7),
    Column("msm", "MSM", 7),
    Column("gpu", "GPU", 7),
    Column("verified", "verified", 8, right=False, short=("vfy", 3)),
)
# Where the table is narrower than every column (the wide layout at 120 columns), the columns
# first take their short form, then these go, first to last, until the pre-stage column has its
# minimum: the phase times the timeline already draws; the GPU time, the status, the pre-stage
# decision and the verification stay.
DROP_ORDER = ("upload", "h", "msm", "wait")
GREEN, AMBER, ORANGE = "#5fd75f", "#d7af00", "#ff8700"
PRESTAGE_MIN, PRESTAGE_MAX = 10, 48  # the pre-stage column takes the width the others leave


def column_widths(width: int) -> list[int]:
    """Each column's width for a table ``width`` cells wide (0: the column is left out): the
    fixed columns as declared, the pre-stage column (reasons) whatever is left, so the last
    column is never cut. Short of room, the columns take their short form, then those of
    :data:`DROP_ORDER` go in turn; narrower than what remains, the table scrolls sideways."""
    widths = {c.key: c.width for c in COLUMNS}

    def fixed() -> int:
        return sum(w + 1 for k, w in widths.items() if k != "prestage" and w) + 1

    if fixed() + PRESTAGE_MIN > width:
        for c in COLUMNS:
            if c.short is not None:
                widths[c.key] = c.short[1]
    for key in DROP_ORDER:
        if fixed() + PRESTAGE_MIN <= width:
            break
        widths[key] = 0
    widths["prestage"] = max(PRESTAGE_MIN, min(PRESTAGE_MAX, width - fixed()))
    return [widths[c.key] for c in COLUMNS]


def label_of(column: Column, width: int) -> str:
    """The column's header at ``width`` (its short label where it took its short form)."""
    if column.short is not None and width == column.short[1]:
        return column.short[0]
    return column.label


def cells(row: PartitionRow) -> list[tuple[str, str]]:
    """(text, colour-or-style) per column of one row."""
    if row.device is None:
        where = "–"
    else:  # no worker yet: still being synthesised on a synthesis lane
        where = f"{row.device}/{'syn' if row.worker is None else row.worker}"
    upload = row.phases_ms.get("upload", row.phases_ms.get("fallback_upload"))
    verified = {True: ("yes", GREEN), False: ("NO", f"bold {FAILURE_COLOUR}"), None: ("–", "dim")}
    if row.ok is None:
        status = ("running", "italic")
    elif not row.ok:
        status = ("FAILED", f"bold {FAILURE_COLOUR}")
    else:
        status = ("retried ok" if row.retried else "ok", GREEN)
    if row.prestage is None:
        prestage = ("…", "dim")
    elif row.prestage == "ok":
        prestage = ("ok", GREEN)
    else:
        text = row.prestage
        if row.forced:
            text += " (forced)"
        elif row.prestage_reason:
            text += f": {row.prestage_reason}"
        prestage = (text, ORANGE if row.prestage == "fallback" else AMBER)
    if row.ok is False and row.failure:
        prestage = (f"{prestage[0]} · {row.failure}", f"bold {FAILURE_COLOUR}")
    plain = f"bold {FAILURE_COLOUR}" if row.ok is False else ""
    return [
        (str(row.proof), plain),
        (str(row.partition), plain),
        (where, plain),
        status,
        prestage,
        (ms(row.mutex_wait_ms), ""),
        (ms(upload), ""),
        (ms(row.phases_ms.get("h_step")), ""),
        (ms(row.group_ms("msm") if row.phases_ms else None), ""),
        (ms(row.gpu_total_ms), ""),
        verified[row.verified],
    ]


def sort_value(row: PartitionRow, column: str) -> tuple[object, ...] | float:
    """The value a column sorts by (numbers as numbers, missing values last)."""
    big = float("inf")
    values: dict[str, tuple[object, ...] | float] = {
        "proof": (row.proof, row.partition),
        "part": (row.partition, row.proof),
        "where": (row.device if row.device is not None else -1, row.worker or 0),
        "prestage": (row.prestage or "~", row.forced, row.proof, row.partition),
        "wait": row.mutex_wait_ms if row.mutex_wait_ms is not None else big,
        "upload": row.phases_ms.get("upload", row.phases_ms.get("fallback_upload", big)),
        "h": row.phases_ms.get("h_step", big),
        "msm": row.group_ms("msm") if row.phases_ms else big,
        "gpu": row.gpu_total_ms if row.gpu_total_ms is not None else big,
        "verified": {True: 0, None: 1, False: 2}[row.verified],
        "status": {None: 1, True: 0, False: 2}[row.ok],
    }
    return values[column]


def _stamp(row: PartitionRow) -> tuple[object, ...]:
    return (row.ok, row.attempt, row.prestage, row.t_done, row.worker, row.forced, row.verified)


class PartitionsTable(ScrollView, can_focus=True):
    """Rows of :class:`PartitionRow`; ↑↓ PgUp PgDn Home End move, ``o`` cycles the sort column
    (or click a header), ``O`` reverses. Times are milliseconds (``s`` above 10 s)."""

    BINDINGS = [
        Binding("o", "cycle_sort", "sort"),
        Binding("O", "reverse_sort", "reverse", show=False),
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "move(-20)", show=False),
        Binding("pagedown", "move(20)", show=False),
        Binding("home", "move(-1000000)", show=False),
        Binding("end", "move(1000000)", show=False),
    ]
    DEFAULT_CSS = """
    PartitionsTable { scrollbar-size-vertical: 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.order: list[tuple[int, int]] = []  # row keys in display order
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.cursor = 0
        self._stamps: dict[tuple[int, int], tuple[object, ...]] = {}
        self._strips: dict[tuple[int, int], tuple[tuple[object, ...], Strip]] = {}
        self._follow = True
        self.widths = [c.width for c in COLUMNS]

    def on_mount(self) -> None:
        self.virtual_size = Size(self._table_width(), 1)  # the header row

    def _table_width(self) -> int:
        return sum(w + 1 for w in self.widths if w)

    # -- data ---------------------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.order)

    def row_at(self, index: int) -> PartitionRow:
        assert self.state is not None
        return self.state.partitions[self.order[index]]

    def detail(self) -> str:
        """The cursor row's pre-stage decision and failure in words, for the detail line."""
        if self.state is None or not self.order:
            return ""
        index = min(self.cursor, len(self.order) - 1)
        row = self.state.partitions.get(self.order[index])
        if self._follow and not self.sort_column:  # the newest decided row, not one pending
            for key in reversed(self.order[-64:]):
                candidate = self.state.partitions.get(key)
                if candidate is not None and candidate.prestage is not None:
                    row = candidate
                    break
        if row is None:
            return ""
        text = cells(row)[4][0]
        return f"▸ {row.proof}/{row.partition} pre-stage {text}"

    def text_at(self, index: int, column: str) -> str:
        """The text shown in one cell (for tests and the detail line)."""
        i = [c.key for c in COLUMNS].index(column)
        return cells(self.row_at(index))[i][0]

    def show(self, state: State) -> None:
        """Bring the table in line with ``state``; only changed rows are re-rendered."""
        if state is not self.state:
            self.state = state
            self._stamps.clear()
            self._strips.clear()
        rows = state.partitions
        keys = list(rows)[-MAX_ROWS:]
        changed = len(keys) != len(self._stamps) or any(
            _stamp(rows[k]) != self._stamps.get(k)
            for k in keys[-64:]  # recent rows change
        )
        if not changed:
            if self._follow and not self.sort_column and self.scroll_y < self.max_scroll_y:
                self._to_end()
            return
        self._stamps = {k: _stamp(rows[k]) for k in keys}
        self.order = keys
        if self.sort_column:
            self._sort()
        self.virtual_size = Size(self._table_width(), len(self.order) + 2)
        if self._follow and not self.sort_column:
            self.cursor = max(0, len(self.order) - 1)
            self._to_end()
        self.cursor = min(self.cursor, max(0, len(self.order) - 1))
        self.refresh()

    def _to_end(self) -> None:
        self.scroll_target_y = self.scroll_y = self.max_scroll_y

    def on_resize(self) -> None:
        widths = column_widths(self.scrollable_content_region.width)
        if widths != self.widths:
            self.widths = widths
            self._strips.clear()
            self.virtual_size = Size(self._table_width(), len(self.order) + 2)
            self.refresh()
        if self._follow and not self.sort_column:
            self.call_after_refresh(self._to_end)

    def _sort(self) -> None:
        if self.state is None or self.sort_column is None:
            return
        rows, column = self.state.partitions, self.sort_column
        self.order.sort(key=lambda k: sort_value(rows[k], column), reverse=self.sort_reverse)

    # -- drawing ------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        if y == 0:
            return self._header(base).crop(scroll_x, scroll_x + width)
        if y == self.size.height - 1 and y > 1:  # the cursor row's decision, whole
            text = self.detail()
            if len(text) > width:
                text = text[: width - 1] + "…"
            return Strip([Segment(text.ljust(width), base + Style(dim=True, italic=True))])
        index = scroll_y + y - 1
        if self.state is None or index >= len(self.order):
            return Strip.blank(width, base)
        key = self.order[index]
        row = self.state.partitions.get(key)
        if row is None:
            return Strip.blank(width, base)
        stamp = (self._stamps.get(key), base)
        cached = self._strips.get(key)
        if cached is None or cached[0] != stamp:
            cached = (stamp, self._row_strip(row, base))
            self._strips[key] = cached
        strip = cached[1]
        if index == self.cursor:
            strip = strip.apply_style(Style(reverse=True) if self.has_focus else Style(bold=True))
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, base)

    def _header(self, base: Style) -> Strip:
        segs = []
        for c, width in zip(COLUMNS, self.widths, strict=True):
            if not width:  # left out at this width
                continue
            label = label_of(c, width)
            label += ("▲" if not self.sort_reverse else "▼") * (c.key == self.sort_column)
            text = label.rjust(width) if c.right else label.ljust(width)
            segs.append(Segment(text[:width] + " ", base + Style(bold=True, underline=True)))
        return Strip(segs)

    def _row_strip(self, row: PartitionRow, base: Style) -> Strip:
        segs = []
        for c, width, (text, style) in zip(COLUMNS, self.widths, cells(row), strict=True):
            if not width:
                continue
            if len(text) > width:
                text = text[: width - 1] + "…"
            text = (text.rjust(width) if c.right else text.ljust(width)) + " "
            segs.append(Segment(text, base + Style.parse(style) if style else base))
        return Strip(segs)

    # -- interaction --------------------------------------------------------------------------

    def action_move(self, step: int) -> None:
        if not self.order:
            return
        self.cursor = max(0, min(len(self.order) - 1, self.cursor + step))
        self._follow = self.cursor == len(self.order) - 1
        top, height = self.scroll_offset.y, max(1, self.size.height - 2)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False)
        self.refresh()

    def action_cycle_sort(self) -> None:
        names = [c.key for c, w in zip(COLUMNS, self.widths, strict=True) if w]  # those shown
        if self.sort_column is None:
            self.sort_column = names[0]
        else:
            i = names.index(self.sort_column) + 1 if self.sort_column in names else len(names)
            self.sort_column = names[i] if i < len(names) else None
        self._resort()
        self.notify(f"partitions sorted by {self.sort_column or 'arrival'}", timeout=1.5)

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._resort()

    def _resort(self) -> None:
        if self.state is None:
            return
        if self.sort_column is None:
            rows = self.state.partitions
            self.order = [k for k in rows if k in self._stamps]
        else:
            self._sort()
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:  # a header: sort by it (again: reverse)
            x = offset.x + self.scroll_offset.x
            for c, width in zip(COLUMNS, self.widths, strict=True):
                if not width:
                    continue
                if x < width + 1:
                    if self.sort_column == c.key:
                        self.sort_reverse = not self.sort_reverse
                    self.sort_column = c.key
                    self._resort()
                    return
                x -= width + 1
        else:
            self.cursor = min(len(self.order) - 1, self.scroll_offset.y + offset.y - 1)
            self._follow = False
            self.refresh()

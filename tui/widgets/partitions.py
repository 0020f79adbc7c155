"""The partitions table: one row per (proof, partition), updated in place, sortable, failures in
red. Only rows that changed since the last refresh are touched, so a busy engine costs a few
cell updates per refresh, not a rebuild."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from recordings.state import PartitionRow, State
from tui.style import FAILURE_COLOUR, ms

COLUMNS = (
    ("proof", "proof"),
    ("part", "part"),
    ("where", "gpu/w"),
    ("wait", "wait"),
    ("upload", "upload"),
    ("h", "H"),
    ("msm", "MSM"),
    ("gpu", "GPU"),
    ("verified", "verified"),
    ("status", "status"),
    ("prestage", "pre-stage"),
)
MAX_ROWS = 2000  # the most recent partitions shown; summary/export have them all


def _prestage(row: PartitionRow) -> Text:
    if row.prestage is None:
        return Text("…", style="dim")
    if row.prestage == "ok":
        return Text("ok", style="green")
    text = row.prestage
    if row.forced:
        text += " (forced)"
    elif row.prestage_reason:
        text += f" ({row.prestage_reason})"
    return Text(text, style="#ff8700" if row.prestage == "fallback" else "#d7af00")


def _status(row: PartitionRow) -> Text:
    if row.ok is None:
        return Text("running", style="italic")
    if not row.ok:
        return Text(f"FAILED {row.failure or ''}".strip(), style=f"bold {FAILURE_COLOUR}")
    return Text("retried ok" if row.retried else "ok", style="green")


def cells(row: PartitionRow) -> tuple:
    """The table cells of one row (Rich Text, numbers right-aligned for sorting by value)."""
    where = f"{row.device}/{row.worker}" if row.device is not None else "–"
    verified = {
        True: Text("yes", style="green"),
        False: Text("NO", style=f"bold {FAILURE_COLOUR}"),
        None: Text("–", style="dim"),
    }[row.verified]
    upload = row.phases_ms.get("upload", row.phases_ms.get("fallback_upload"))
    values = [
        Text(str(row.proof), justify="right"),
        Text(str(row.partition), justify="right"),
        Text(where),
        Text(ms(row.mutex_wait_ms), justify="right"),
        Text(ms(upload), justify="right"),
        Text(ms(row.phases_ms.get("h_step")), justify="right"),
        Text(ms(row.group_ms("msm") if row.phases_ms else None), justify="right"),
        Text(ms(row.gpu_total_ms), justify="right"),
        verified,
        _status(row),
        _prestage(row),
    ]
    if row.ok is False:
        for v in values[:3]:
            v.stylize(f"bold {FAILURE_COLOUR}")
    return tuple(values)


def sort_value(row: PartitionRow, column: str) -> object:
    """The value a column sorts by (numbers as numbers, missing values last)."""
    big = float("inf")
    return {
        "proof": (row.proof, row.partition),
        "part": (row.partition, row.proof),
        "where": (row.device if row.device is not None else -1, row.worker or 0),
        "prestage": (row.prestage or "~", row.proof, row.partition),
        "wait": row.mutex_wait_ms if row.mutex_wait_ms is not None else big,
        "upload": row.phases_ms.get("upload", row.phases_ms.get("fallback_upload", big)),
        "h": row.phases_ms.get("h_step", big),
        "msm": row.group_ms("msm") if row.phases_ms else big,
        "gpu": row.gpu_total_ms if row.gpu_total_ms is not None else big,
        "verified": {True: 0, None: 1, False: 2}[row.verified],
        "status": {None: 1, True: 0, False: 2}[row.ok],
    }[column]


class PartitionsTable(DataTable):
    """DataTable of :class:`PartitionRow`; `o` cycles the sort column, `O` reverses it.
    Times are milliseconds (``s`` suffix above 10 s)."""

    BINDINGS = [
        Binding("o", "cycle_sort", "sort"),
        Binding("O", "reverse_sort", "reverse", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self.state: State | None = None
        self._shown: dict[tuple[int, int], tuple] = {}
        self.sort_column: str | None = None
        self.sort_reverse = False

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, state: State) -> None:
        """Bring the table in line with ``state``, touching only rows that changed."""
        if state is not self.state:
            self.state = state
            self._shown.clear()
            self.clear()
        rows = state.partitions
        keys = list(rows)[-MAX_ROWS:]
        changed = False
        for key in keys:
            row = rows[key]
            stamp = (row.ok, row.attempt, row.prestage, row.t_done, row.worker, row.forced)
            old = self._shown.get(key)
            if old == stamp:
                continue
            rk = f"{key[0]}:{key[1]}"
            values = cells(row)
            if old is None:
                self.add_row(*values, key=rk)
            else:
                for (column, _), value in zip(COLUMNS, values, strict=True):
                    self.update_cell(rk, column, value)
            self._shown[key] = stamp
            changed = True
        while len(self._shown) > MAX_ROWS:  # drop the oldest
            oldest = next(iter(self._shown))
            self._shown.pop(oldest)
            self.remove_row(f"{oldest[0]}:{oldest[1]}")
        if changed and self.sort_column:
            self._sort()
        elif changed and not self.has_focus:  # follow the newest rows until the operator looks
            self.move_cursor(row=self.row_count - 1, animate=False)

    def _sort(self) -> None:
        assert self.state is not None and self.sort_column is not None
        column, rows = self.sort_column, self.state.partitions

        def key(values: tuple) -> object:
            row = rows.get((int(values[0].plain), int(values[1].plain)))
            return sort_value(row, column) if row else ()

        self.sort("proof", "part", key=key, reverse=self.sort_reverse)

    def action_cycle_sort(self) -> None:
        names = [key for key, _ in COLUMNS]
        if self.sort_column is None:
            self.sort_column = names[0]
        else:
            i = names.index(self.sort_column) + 1
            self.sort_column = names[i] if i < len(names) else None
        self.notify(f"sorted by {self.sort_column or 'arrival'}", timeout=1.5)
        if self.sort_column:
            self._sort()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        if self.sort_column:
            self._sort()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        if self.sort_column == column:
            self.sort_reverse = not self.sort_reverse
        self.sort_column = column
        self._sort()

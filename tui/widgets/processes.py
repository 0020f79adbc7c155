"""The GPU processes of the machine, one table for every GPU, as nvitop lists them: GPU, pid,
user, GPU memory, %CPU, %MEM, run time and command; provetop's own processes marked.

Why one table under the GPU blocks: an operator looks for "who holds this card" across the
machine, and the figures beside the GPU memory (host CPU and memory, how long it has run)
tell a stuck prover from a busy one. The host figures are the monitor's readings of ``/proc``
(:mod:`provetop.sources.procstat`), carried in the ``gpu`` events like NVML's. A process is
provetop's (``◆``) when it is an attached engine or trace (its ``hello.pid``), a process a
trace follows (its lanes' pids), this monitor, or its command line runs provetop.

Sorted as nvitop sorts it: largest GPU memory first until the operator picks another column
(``o`` cycles, ``O`` reverses, the table focused); the header's arrow names the column. Figures
sort largest first, names and numbers that identify (GPU, pid, user, command) smallest first,
and a process missing a figure sorts last either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widget import Widget

from provetop.recordings.state import State
from provetop.tui.style import size

OWN_COLOUR = "#00afff"


def run_time(seconds: float | None) -> str:
    """Elapsed time as ps writes it: ``m:ss``, ``h:mm:ss``, ``Nd hh:mm``."""
    if seconds is None:
        return "–"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


Row = tuple[int, dict[str, Any]]


def _figure(field: str) -> Callable[[Row], float | None]:
    def value(row: Row) -> float | None:
        v = row[1].get(field)
        return float(v) if isinstance(v, int | float) else None

    return value


def _name(field: str) -> Callable[[Row], str | None]:
    def value(row: Row) -> str | None:
        v = row[1].get(field)
        return None if v is None else str(v)

    return value


# column -> (the value it sorts by, largest first by default); in the order ``o`` cycles them
SORTS: dict[str, tuple[Callable[[Row], Any], bool]] = {
    "GPU MEM": (_figure("used"), True),
    "%CPU": (_figure("cpu_pct"), True),
    "%MEM": (_figure("mem_pct"), True),
    "TIME": (_figure("run_s"), True),
    "PID": (_figure("pid"), False),
    "USER": (_name("user"), False),
    "GPU": (lambda row: row[0], False),
    "COMMAND": (_name("command"), False),
}
DEFAULT_SORT = "GPU MEM"


def sort_rows(rows: list[Row], column: str = DEFAULT_SORT, reverse: bool = False) -> list[Row]:
    """``rows`` in ``column``'s order (``reverse`` flips it); rows missing the value last,
    ties by GPU then pid so that a redraw never reorders equal rows."""
    key, descending = SORTS[column]
    stable = sorted(rows, key=lambda r: (r[0], r[1].get("pid") or 0))
    ordered = sorted(
        (r for r in stable if key(r) is not None), key=key, reverse=descending != reverse
    )
    return ordered + [r for r in stable if key(r) is None]


def rows_of(
    state: State,
    only: set[int] | None,
    pids: set[int] | None,
    column: str = DEFAULT_SORT,
    reverse: bool = False,
) -> list[Row]:
    """(GPU, process) of every GPU's newest sample, filtered by ``--only`` (GPUs) and
    ``--pid``, in ``column``'s order."""
    out = []
    for d in sorted(state.gpu):
        if only is not None and d not in only:
            continue
        for p in state.gpu[d].get("processes") or ():
            if pids is None or p.get("pid") in pids:
                out.append((d, p))
    return sort_rows(out, column, reverse)


def header(column: str = DEFAULT_SORT, reverse: bool = False) -> str:
    """The table's header, the sorted column marked ▼ (largest first) or ▲."""
    descending = SORTS[column][1] != reverse

    def label(name: str) -> str:
        return name + ("▼" if descending else "▲") if name == column else name

    # "GPU" and the two cells of a row's "◆ " mark: 6 columns before the pid's 7
    head = f"{label('GPU'):<6}{label('PID'):>7} {label('USER'):<10} {label('GPU MEM'):>10} "
    return head + f"{label('%CPU'):>6} {label('%MEM'):>5} {label('TIME'):>9}  {label('COMMAND')}"


def process_lines(
    rows: Iterable[Row], own: Mapping[int, str], width: int, head: str | None = None
) -> list[Text]:
    """The table's lines: a header, then one line per process (its command cut with "…")."""
    lines = [Text(head or header(), style="bold reverse")]
    for d, p in rows:
        pid = p.get("pid")
        name = own.get(pid) if isinstance(pid, int) else None
        if name is None and p.get("provetop"):
            name = f"provetop {p['provetop']}"
        text = Text(f"{d:>3} ")
        text.append("◆ " if name else "  ", style=f"bold {OWN_COLOUR}")
        text.append(f"{pid if pid is not None else '?':>7} {str(p.get('user', '–'))[:10]:<10} ")
        used = p.get("used")
        text.append(f"{size(used) if used is not None else '–':>10} ")
        text.append(f"{pct(p.get('cpu_pct')):>6} {pct(p.get('mem_pct')):>5} ")
        text.append(f"{run_time(p.get('run_s')):>9}  ")
        command = str(p.get("command", "–"))
        if name:
            command = f"{name} · {command}"
        room = max(8, width - text.cell_len)
        if len(command) > room:
            command = command[: room - 1] + "…"
        text.append(command, style=f"bold {OWN_COLOUR}" if name else "")
        lines.append(text)
    if len(lines) == 1:
        lines.append(Text("no compute processes", style="dim"))
    return lines


class ProcessTable(Widget, can_focus=True):
    """Every GPU's compute processes (see the module docstring); ``o`` cycles the sort column,
    ``O`` reverses it."""

    BINDINGS = [
        Binding("o", "cycle_sort", "sort"),
        Binding("O", "reverse_sort", "reverse", show=False),
    ]
    DEFAULT_CSS = """
    ProcessTable { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.own: dict[int, str] = {}
        self.only: set[int] | None = None
        self.pids: set[int] | None = None
        self.sort_column = DEFAULT_SORT
        self.sort_reverse = False

    def show(self, state: State, own: dict[int, str]) -> None:
        """Draw ``state``'s processes; ``own``: pid -> what provetop process it is."""
        self.state, self.own = state, own
        self.refresh(layout=True)

    def lines(self, width: int) -> list[Text]:
        if self.state is None or not self.state.gpu:
            return []
        rows = rows_of(self.state, self.only, self.pids, self.sort_column, self.sort_reverse)
        return process_lines(rows, self.own, width, header(self.sort_column, self.sort_reverse))

    def action_cycle_sort(self) -> None:
        names = list(SORTS)
        self.sort_column = names[(names.index(self.sort_column) + 1) % len(names)]
        self.sort_reverse = False
        self.refresh()
        self.notify(f"processes sorted by {self.sort_column}", timeout=1.5)

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.refresh()

    def render(self) -> Text:
        return Text("\n").join(self.lines(max(20, self.size.width)))

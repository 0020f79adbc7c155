"""The GPU processes of the machine, one table for every GPU, as nvitop lists them: GPU, pid,
user, GPU memory, %CPU, %MEM, run time and command; provetop's own processes marked.

Why one table under the GPU blocks: an operator looks for "who holds this card" across the
machine, and the figures beside the GPU memory (host CPU and memory, how long it has run)
tell a stuck prover from a busy one. The host figures are the monitor's readings of ``/proc``
(:mod:`provetop.sources.procstat`), carried in the ``gpu`` events like NVML's. A process is
provetop's (``◆``) when it is an attached engine or trace (its ``hello.pid``), a process a
trace follows (its lanes' pids), this monitor, or its command line runs provetop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.text import Text
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


def rows_of(
    state: State, only: set[int] | None, pids: set[int] | None
) -> list[tuple[int, dict[str, Any]]]:
    """(GPU, process) of every GPU's newest sample, largest GPU memory first, filtered by
    ``--only`` (GPUs) and ``--pid``."""
    out = []
    for d in sorted(state.gpu):
        if only is not None and d not in only:
            continue
        for p in state.gpu[d].get("processes") or ():
            if pids is None or p.get("pid") in pids:
                out.append((d, p))
    out.sort(key=lambda dp: (-int(dp[1].get("used") or 0), dp[0]))
    return out


def process_lines(
    rows: Iterable[tuple[int, dict[str, Any]]], own: Mapping[int, str], width: int
) -> list[Text]:
    """The table's lines: a header, then one line per process (its command cut with "…")."""
    head = f"{'GPU':>3}   {'PID':>7} {'USER':<10} {'GPU MEM':>10} {'%CPU':>6} {'%MEM':>5} "
    head += f"{'TIME':>9}  COMMAND"
    lines = [Text(head, style="bold reverse")]
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


class ProcessTable(Widget):
    """Every GPU's compute processes (see the module docstring)."""

    DEFAULT_CSS = """
    ProcessTable { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.own: dict[int, str] = {}
        self.only: set[int] | None = None
        self.pids: set[int] | None = None

    def show(self, state: State, own: dict[int, str]) -> None:
        """Draw ``state``'s processes; ``own``: pid -> what provetop process it is."""
        self.state, self.own = state, own
        self.refresh(layout=True)

    def lines(self, width: int) -> list[Text]:
        if self.state is None or not self.state.gpu:
            return []
        return process_lines(rows_of(self.state, self.only, self.pids), self.own, width)

    def render(self) -> Text:
        return Text("\n").join(self.lines(max(20, self.size.width)))

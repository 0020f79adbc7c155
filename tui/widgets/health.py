"""Device health per GPU, from NVML's ``gpu`` samples: what nvitop shows, beside the pipeline.

Why here and not in the memory panel: memory answers "who holds each byte"; this panel answers
"is the card working, and how hard" (utilisation, power, temperature, clocks, PCIe, errors). The
history rows share the timeline's window, so a stall in a worker lane lines up with a dip in
utilisation directly above or below it. Only what the GPU reported is drawn: a field missing
from the sample is left out, and the cpu backend (a modeled device, no NVML) gets one line
saying so, never a number.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Group
from rich.text import Text

from provetop.recordings.state import State
from provetop.tui.style import FAILURE_COLOUR, size
from provetop.tui.widgets.device_panel import DevicePanel, rows_of
from provetop.tui.widgets.memory import flow, spark
from provetop.tui.widgets.timeline import LABEL_W

CPU_MESSAGE = "no NVIDIA GPU (cpu backend): nothing to show"
WAITING_MESSAGE = "no NVML samples yet"
NO_NVML_MESSAGE = "no NVIDIA GPU visible to NVML on this machine ({why}); waiting for engines"

Reader = Callable[[dict[str, Any]], float | None]  # one figure of a sample, None when absent


def _field(name: str) -> Reader:
    return lambda sample: sample.get(name)


def _watts(sample: dict[str, Any]) -> float | None:
    mw = sample.get("power_mw")
    return None if mw is None else mw / 1000


HISTORY: tuple[tuple[str, Reader, str], ...] = (  # (row label, its figure, colour)
    ("SM util", _field("sm_util_pct"), "#5fd75f"),
    ("mem ctl", _field("mem_util_pct"), "#5f87ff"),
    ("power", _watts, "#d7af00"),
    ("PCIe rx", _field("pcie_rx_bytes_s"), "#00afaf"),
    ("PCIe tx", _field("pcie_tx_bytes_s"), "#d75fd7"),
)


def rate(n: float | int | None) -> str:
    """Bytes per second for humans."""
    return "–" if n is None else f"{size(n)}/s"


def figures(sample: dict[str, Any]) -> list[Text]:
    """One atomic chunk per figure the sample carries, in a fixed order; absent ones skipped."""
    chunks: list[Text] = []

    def chunk(label: str, value: str, style: str = "") -> None:
        text = Text()
        text.append(label + " ", style="bold")
        text.append(value, style=style)
        chunks.append(text)

    if sample.get("sm_util_pct") is not None:
        chunk("SM", f"{sample['sm_util_pct']} %")
    if sample.get("mem_util_pct") is not None:
        chunk("mem ctl", f"{sample['mem_util_pct']} %")
    used, total = sample.get("mem_used"), sample.get("mem_total")
    if used is not None:
        chunk("memory", size(used) if total is None else f"{size(used)} / {size(total)}")
    power, limit = sample.get("power_mw"), sample.get("power_limit_mw")
    if power is not None:
        watts = f"{power / 1000:.0f} W"
        chunk("power", watts if limit is None else f"{watts} / {limit / 1000:.0f} W")
    elif limit is not None:
        chunk("power limit", f"{limit / 1000:.0f} W")
    if sample.get("temp_c") is not None:
        chunk("temp", f"{sample['temp_c']} °C", "bold #ff8700" if sample["temp_c"] >= 85 else "")
    sm, mem = sample.get("sm_clock_mhz"), sample.get("mem_clock_mhz")
    if sm is not None or mem is not None:
        clocks = [f"SM {sm}" if sm is not None else "", f"mem {mem}" if mem is not None else ""]
        chunk("clocks", " / ".join(c for c in clocks if c) + " MHz")
    rx, tx = sample.get("pcie_rx_bytes_s"), sample.get("pcie_tx_bytes_s")
    if rx is not None or tx is not None:
        chunk("PCIe", f"rx {rate(rx)} · tx {rate(tx)}")
    if sample.get("fan_pct") is not None:
        chunk("fan", f"{sample['fan_pct']} %")
    corrected, uncorrected = sample.get("ecc_corrected"), sample.get("ecc_uncorrected")
    if corrected is not None or uncorrected is not None:
        bad = bool(uncorrected)
        counts = [
            f"{corrected} corrected" if corrected is not None else "",
            f"{uncorrected} uncorrected" if uncorrected is not None else "",
        ]
        chunk("ECC", ", ".join(c for c in counts if c), f"bold {FAILURE_COLOUR}" if bad else "")
    if sample.get("retired_pages") is not None:
        pages = sample["retired_pages"]
        chunk("retired pages", str(pages), f"bold {FAILURE_COLOUR}" if pages else "")
    if chunks:  # XIDs are counted only where NVML delivers the event: say n/a, not 0
        xids = sample.get("xid_count")
        if xids is None:
            chunk("XID", "n/a", "dim")
        else:
            last = sample.get("xid_last")
            value = str(xids) if last is None else f"{xids} (last {last})"
            chunk("XID", value, f"bold {FAILURE_COLOUR}" if xids else "")
    return chunks


BRIEF = ("SM", "memory", "power", "temp", "XID")  # the figures of a device on one row


def one_row(title: Text, sample: dict[str, Any], width: int) -> Text:
    """A device not selected, on one row: its title and the figures of :data:`BRIEF` it
    reported (an XID count only when not zero), cut with "…" at ``width``."""
    row = title.copy()
    for chunk in figures(sample):
        label = chunk.plain.split(" ")[0]
        if label not in BRIEF or chunk.plain in ("XID 0", "XID n/a"):
            continue
        row.append(" · " if row.cell_len > title.cell_len else "  ")
        row.append_text(chunk)
    row.truncate(width, overflow="ellipsis")
    return row


def history_rows(samples: Sequence[dict[str, Any]], start: int, end: int, width: int) -> list[Text]:
    """Sparkline rows over [start, end) on the timeline's grid (its label width, one column
    per timeline cell, so at the same width a dip sits under the stall that caused it), then
    one line of scales: utilisation is scaled to 100 %, power to the enforced limit, PCIe to
    its own largest value in the window. A row whose field never appears is left out.

    NVML's utilisation at ``t`` describes the sample period before ``t``, so a column shows the
    first sample after its start: the dip drawn under a stall is the one measured during it.
    A column more than a sample period (with a tenth of slack for jitter) before the next
    sample (before the first one, the engine stopped, the live edge) stays blank rather than
    borrowing a figure measured at another time."""
    cols = max(4, width - LABEL_W)
    cell = (end - start) / cols
    picks: list[dict[str, Any] | None] = [None] * cols
    n = len(samples)
    if n:
        period = (samples[-1]["t"] - samples[0]["t"]) / (n - 1) if n > 1 else 1e9
        reach = 1.1 * max(period, 1.0)
        for c in range(cols):
            col_start = start + c * cell
            j = bisect_right(samples, col_start, key=lambda s: s["t"])
            if j < n and samples[j]["t"] - col_start <= reach:
                picks[c] = samples[j]
    rows: list[Text] = []
    scales: list[str] = []
    for label, read, colour in HISTORY:
        values = [None if s is None else read(s) for s in picks]
        if all(v is None for v in values):
            continue
        if label.endswith("util") or label == "mem ctl":
            top: float = 100.0
        elif label == "power":
            limits = [s.get("power_limit_mw") for s in picks if s is not None]
            known = [x for x in limits if x]
            top = max(known) / 1000 if known else max(v for v in values if v is not None)
            scales.append(f"power {top:.0f} W")
        else:
            top = max((v for v in values if v is not None), default=0)
            scales.append(f"{label} {rate(top) if top else '0'}")
        text = Text(f"{label:<{LABEL_W - 1}} ", style="bold")
        for value in values:
            if value is None:
                text.append(" ")
            elif value <= 0 or top <= 0:
                text.append("_", style="dim")
            else:
                text.append(spark(value, top), style=colour)
        rows.append(text)
    if rows:
        scales.insert(0, "utilisation 100 %")
        chunks = [Text("full scale:", style="dim")]
        chunks += [Text(scale, style="dim") for scale in scales]
        rows.append(flow(chunks, width))
    return rows


def process_rows(
    processes: Sequence[dict[str, Any]], own_pid: int | None, width: int
) -> list[Text]:
    """The compute processes, largest GPU memory first, one row each; the engine's own pid
    (``hello.pid``) is marked. A command longer than the row is ended with "…"."""
    if not processes:
        return [Text("no compute processes", style="dim")]
    rows = [Text(f"{'pid':>8} {'user':<10} {'GPU mem':>10}  command", style="bold dim")]
    ordered = sorted(processes, key=lambda p: -int(p.get("used") or 0))
    for p in ordered:
        own = own_pid is not None and p.get("pid") == own_pid
        text = Text()
        text.append("◆" if own else " ", style="bold #00afff")
        text.append(f"{p.get('pid', '?'):>7} {str(p.get('user', '–'))[:10]:<10} ")
        text.append(f"{size(p.get('used')) if p.get('used') is not None else '–':>10}  ")
        room = max(8, width - text.cell_len)
        command = str(p.get("command", "–"))
        if own:
            command = "provetop engine · " + command
        if len(command) > room:
            command = command[: room - 1] + "…"
        text.append(command, style="bold" if own else "")
        rows.append(text)
    return rows


def processes_row(processes: Sequence[dict[str, Any]], own_pid: int | None, width: int) -> Text:
    """The compute processes on one row, largest GPU memory first: pid and memory each, the
    engine's own marked (the full table is in the wide layout)."""
    if not processes:
        return Text("no compute processes", style="dim")
    row = Text(f"{len(processes)} processes", style="bold")
    for i, p in enumerate(sorted(processes, key=lambda p: -int(p.get("used") or 0))):
        own = own_pid is not None and p.get("pid") == own_pid
        row.append(" · " if i else "  ")
        if own:
            row.append("◆", style="bold #00afff")
        used = p.get("used")
        row.append(f"{p.get('pid', '?')} {size(used) if used is not None else '–'}")
    row.truncate(width, overflow="ellipsis")
    return row


class HealthPanel(DevicePanel):
    """Per-GPU health: every device's figures; the selected device's history and processes."""

    DEFAULT_CSS = """
    HealthPanel { height: auto; }
    """

    def _device_count(self, state: State) -> int:
        return len(state.gpu)

    def _content(self, width: int) -> Group | Text:
        state = self.state
        if state is None or not state.gpu:
            hello = (state.hello if state else None) or {}
            if hello.get("backend") == "cpu" or hello.get("modeled"):
                return Text(CPU_MESSAGE, style="dim")
            why = (hello.get("config") or {}).get("nvml_error")
            if why:  # the GPU monitor found no NVML: say so, and that it still waits
                return Text(NO_NVML_MESSAGE.format(why=why), style="bold #d7af00")
            return Text(WAITING_MESSAGE, style="dim")
        width = max(20, width)
        devices = sorted(state.gpu)
        selected = self.device if self.device in devices else devices[0]
        names: dict[int, dict[str, Any]] = {}
        if state.hello:
            names = {int(d.get("index", i)): d for i, d in enumerate(state.hello["devices"])}
        full = self._devices(devices, selected, names, width, brief=False)
        budget = self._budget()
        if budget is not None and len(devices) > 1 and rows_of(full) > budget:
            return self._devices(devices, selected, names, width, brief=True)
        return full

    def _devices(
        self,
        devices: list[int],
        selected: int,
        names: dict[int, dict[str, Any]],
        width: int,
        *,
        brief: bool,
    ) -> Group:
        """Every device's title and figures, the selected one's history and processes.
        ``brief`` (a short box, 80x24): every other device on one row of its main figures;
        the rest of them is a key away (select one of its lanes in the timeline)."""
        state = self.state
        assert state is not None
        out: list[Text] = []
        for d in devices:
            sample = state.gpu[d]
            title = Text()
            title.append(f"gpu{d}", style="bold reverse" if d == selected else "bold")
            name = str(names.get(d, {}).get("name", ""))
            if name:
                title.append(f" {name}")
            if brief and d != selected:
                out.append(one_row(title, sample, width))
                continue
            out.append(title)
            out.append(flow(figures(sample), width))
            if d != selected:  # the others' history: select a lane of theirs in the timeline
                continue
            samples = state.gpu_history.get(d, ())
            rows = history_rows(samples, *self.window, width)
            own = (state.hello or {}).get("pid")
            if brief:  # utilisation only, and the processes on one row
                out.extend(row for row in rows if row.plain.startswith("SM util"))
                if "processes" in sample:
                    out.append(processes_row(sample["processes"], own, width))
                continue
            out.extend(rows)
            if "processes" in sample:
                out.extend(process_rows(sample["processes"], own, width))
        return Group(*out)

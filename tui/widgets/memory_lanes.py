"""The timeline's memory lanes: for a source with no pipeline (``provetop trace`` of another
program, an engine that has only sampled its pools so far), what each traced process holds in
its CUDA pools and how much of it is phantom, on the timeline's own time axis.

Why on the timeline: a trace has no partitions or phases, and an empty timeline above the pools
told the operator nothing; the phantom is the thing to see over time (which process reserved
it, when the other's OOM came). Two rows per process: what it holds in both pools (the async
pool's reservation, the sync pool's used and cached bytes) and, under it, the phantom part of
that (reserved or cached, in use by neither). Both rows are scaled to the process's largest
holding in the window, so the phantom row reads as a share of the row above; an OOM of that
process marks its phantom row's column red. A column shows the newest sample at or before its
end; a sample older than :data:`STALE_NS` shows nothing (the process has gone quiet or exited).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from rich.segment import Segment as RichSegment
from rich.style import Style
from textual.strip import Strip

from provetop.recordings.state import MemorySeries, State
from provetop.tui.style import FAILURE_COLOUR, MARKER_COLOUR, size
from provetop.tui.widgets.memory import PHANTOM_COLOUR, USED_COLOUR, series_value, spark

HELD_COLOUR = USED_COLOUR  # the memory panel's history colours
# A trace samples every 50 ms and an engine every 100-250 ms: a lane 20 samples or more behind
# has gone quiet (its process exited or stopped reporting), and holding its last sample on
# would draw memory that is no longer there.
STALE_NS = 1_000_000_000


def held(series: MemorySeries, i: int) -> int:
    """Bytes a process holds in both pools at sample ``i``: the async pool's reservation, the
    sync pool's used and cached bytes (a field not observed reads -1: nothing)."""
    c = series.columns
    return max(0, c["async_reserved"][i]) + max(0, c["sync_used"][i]) + max(0, c["sync_cached"][i])


def shown(state: State) -> list[Any]:
    """The memory lanes drawn: every sampled device or process, when there is no pipeline."""
    if state.lanes() or not state.series:
        return []
    return sorted(state.series, key=lambda d: (str(type(d)), d))


def label(state: State, device: Any) -> str:
    pid = (state.memory.get(device) or {}).get("pid")
    return f"pid {pid}" if isinstance(pid, int) else f"gpu{device}"


def _columns(series: MemorySeries, start: int, end: int, cols: int) -> list[int | None]:
    """The sample index each column shows, or None."""
    cell = (end - start) / cols
    stale = max(cell, STALE_NS)
    out: list[int | None] = []
    for c in range(cols):
        j = bisect_left(series.t, int(start + (c + 1) * cell)) - 1
        out.append(j if j >= 0 and series.t[j] >= start + c * cell - stale else None)
    return out


def _oom_columns(state: State, device: Any, start: int, end: int, cols: int) -> set[int]:
    pid = (state.memory.get(device) or {}).get("pid")
    cell = (end - start) / cols
    out = set()
    for f in state.faults:
        if f.get("kind") != "oom" or not start <= f["t"] < end:
            continue
        if f.get("device") == device or (pid is not None and f.get("pid") == pid):
            out.add(min(cols - 1, int((f["t"] - start) / cell)))
    return out


def lane_rows(
    state: State, start: int, end: int, cols: int, label_w: int, width: int, base: Style
) -> list[Strip]:
    """Two strips per memory lane (held, phantom), ``label_w`` cells of label first."""
    rows: list[Strip] = []
    held_style = base + Style(color=HELD_COLOUR)
    phantom_style = base + Style(color=PHANTOM_COLOUR)
    oom_style = base + Style(color="white", bgcolor=FAILURE_COLOUR, bold=True)
    dim = base + Style(dim=True)
    bold = base + Style(bold=True)
    for device in shown(state):
        series = state.series[device]
        idx = _columns(series, start, end, cols)
        holding = [None if j is None else held(series, j) for j in idx]
        unused = [None if j is None else series_value(series, "phantom", j) for j in idx]
        top = max((v for v in holding if v), default=0)
        ooms = _oom_columns(state, device, start, end, cols)
        for name, values, style in (
            (label(state, device), holding, held_style),
            ("phantom", unused, phantom_style),
        ):
            segs = [RichSegment(name.ljust(label_w - 1)[: label_w - 1] + " ", bold)]
            for col, v in enumerate(values):
                glyph = " " if v is None else ("_" if v == 0 or not top else spark(v, top))
                if values is unused and col in ooms:
                    segs.append(RichSegment("✖" if glyph in " _" else glyph, oom_style))
                else:
                    segs.append(RichSegment(glyph, dim if glyph in " _" else style))
            rows.append(Strip(Strip(segs).simplify()).adjust_cell_length(width, base))
    return rows


def detail(state: State, t: int) -> str:
    """What each lane held at ``t`` (the cursor): ``pid 574 8.00 GiB held, 8.00 GiB phantom``."""
    parts = []
    for device in shown(state):
        series = state.series[device]
        j = bisect_left(series.t, t + 1) - 1
        if j < 0 or series.t[j] < t - STALE_NS:
            parts.append(f"{label(state, device)} –")
            continue
        name, phantom = label(state, device), series_value(series, "phantom", j)
        parts.append(f"{name} {size(held(series, j))} held, {size(phantom)} phantom")
    return " · ".join(parts)


LEGEND = [
    ("█", HELD_COLOUR, "held in its pools (a row per process)"),
    ("█", PHANTOM_COLOUR, "phantom: held, used by neither pool"),
    ("✖", FAILURE_COLOUR, "OOM"),
    ("▼", MARKER_COLOUR, "marker"),
]

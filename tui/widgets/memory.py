"""Memory per device: the whole card as one bar split by who holds each byte, the nvidia-smi
and cudaMemGetInfo views beside it, the phantom memory called out, and a history graph.

The point of the panel is the seed's lesson: memory free inside one CUDA pool is invisible and
unusable to the other allocator, and neither nvidia-smi nor cudaMemGetInfo says so. The bar
shows the two "free but held" parts (async reserved-free, sync cached) in warning colours and the
phantom line adds them up.
"""

from __future__ import annotations

from bisect import bisect_left

from rich.console import Group
from rich.text import Text
from textual.widget import Widget

from recordings.state import MemorySeries, State, phantom_bytes
from tui.style import FAILURE_COLOUR, MEMORY_PARTS, size

SPARK = " ▁▂▃▄▅▆▇█"
HISTORY = (  # (label, how to read the series at index i, colour)
    ("used", "nvml_used", "#5f87ff"),
    ("phantom", "phantom", "#ff5f5f"),
    ("free", "driver_free", "#5fd75f"),
)


def parts(sample: dict) -> dict[str, int]:
    """The card split into the bar's parts, in bytes; they add up to the driver total."""
    total = int(sample.get("nvml_total") or sample.get("driver_total") or 0)
    a_used = int(sample.get("async_used", 0))
    a_free = max(0, int(sample.get("async_reserved", 0)) - a_used)
    s_used = int(sample.get("sync_used", 0))
    s_cached = int(sample.get("sync_cached", 0))
    ballast = int(sample.get("ballast", 0))
    free = int(sample.get("driver_free", 0))
    if sample.get("nvml_free") is not None and sample.get("nvml_total"):
        free = min(free, int(sample["nvml_free"])) if free else int(sample["nvml_free"])
    other = max(0, total - a_used - a_free - s_used - s_cached - ballast - free)
    return {
        "async_used": a_used,
        "async_free": a_free,
        "sync_used": s_used,
        "sync_cached": s_cached,
        "ballast": ballast,
        "other": other,
        "free": max(0, free),
        "total": total,
    }


def bar(sample: dict, width: int) -> Text:
    """The card as ``width`` cells, each part rounded so every non-zero part stays visible."""
    p = parts(sample)
    total = max(1, p["total"])
    text = Text()
    cells = [
        (key, max(1, round(p[key] / total * width)) if p[key] > 0 else 0)
        for key, *_ in MEMORY_PARTS
    ]
    excess = sum(n for _, n in cells) - width
    while excess > 0:  # take back from the largest part
        i = max(range(len(cells)), key=lambda j: cells[j][1])
        cells[i] = (cells[i][0], cells[i][1] - 1)
        excess -= 1
    if excess < 0:
        cells[-1] = (cells[-1][0], cells[-1][1] - excess)
    style_of = {key: (colour, glyph) for key, _, colour, glyph in MEMORY_PARTS}
    for key, n in cells:
        colour, glyph = style_of[key]
        text.append(glyph * n, style=colour)
    return text


def _series_value(series: MemorySeries, name: str, i: int) -> int:
    if name == "phantom":
        c = series.columns
        return max(0, c["async_reserved"][i] - c["async_used"][i]) + max(0, c["sync_cached"][i])
    return series.columns[name][i]


def history(
    series: MemorySeries | None,
    faults: list[dict],
    device: int,
    start: int,
    end: int,
    width: int,
    total: int,
) -> list[Text]:
    """Sparkline rows of used / phantom / free over [start, end) plus a row of OOM markers."""
    rows: list[Text] = []
    label_w = 8
    cols = max(4, width - label_w)
    cell = (end - start) / cols
    idx: list[int | None] = [None] * cols
    if series is not None and len(series):
        t = series.t
        for c in range(cols):
            j = bisect_left(t, int(start + (c + 1) * cell)) - 1
            idx[c] = j if j >= 0 and t[j] >= start - cell else None
    for label, name, colour in HISTORY:
        text = Text(f"{label:<{label_w}}", style="bold")
        chars = []
        for j in idx:
            if j is None or series is None:
                chars.append(" ")
                continue
            value = _series_value(series, name, j)
            if value < 0:
                chars.append(" ")
                continue
            level = min(8, max(0, round(value / max(1, total) * 8)))
            chars.append(SPARK[level] if value else " ")
        text.append("".join(chars), style=colour)
        rows.append(text)
    marks = [" "] * cols
    for f in faults:
        if f.get("kind") == "oom" and f.get("device", device) == device and start <= f["t"] < end:
            marks[min(cols - 1, int((f["t"] - start) / cell))] = "✖"
    oom = Text(f"{'OOM':<{label_w}}", style="bold")
    oom.append("".join(marks), style=f"bold {FAILURE_COLOUR}")
    rows.append(oom)
    return rows


class MemoryPanel(Widget, can_focus=True):
    """Per-device memory; the selected device gets the figures and history, others a bar."""

    DEFAULT_CSS = """
    MemoryPanel { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.device: int | None = None
        self.window: tuple[int, int] = (0, 1)
        self._shape: tuple = ()

    def show(self, state: State, device: int | None, window: tuple[int, int]) -> None:
        self.state, self.device, self.window = state, device, window
        shape = (len(state.memory), device, self.size.width)
        self.refresh(layout=shape != self._shape)  # a layout pass only when the height may change
        self._shape = shape

    def _devices(self) -> list[int]:
        assert self.state is not None
        known = set(self.state.memory)
        if self.state.hello:
            known |= {int(d.get("index", i)) for i, d in enumerate(self.state.hello["devices"])}
        return sorted(known)

    def render(self) -> Group | Text:
        if self.state is None or not self.state.memory:
            return Text("no memory samples yet", style="dim")
        width = max(20, self.size.width)
        devices = self._devices()
        selected = self.device if self.device in devices else devices[0]
        names = {}
        if self.state.hello:
            names = {int(d.get("index", i)): d for i, d in enumerate(self.state.hello["devices"])}
        out: list[Text] = []
        for d in devices:
            sample = self.state.memory.get(d)
            if sample is None:
                out.append(Text(f"gpu{d}: no samples", style="dim"))
                continue
            p = parts(sample)
            phantom = phantom_bytes(sample)
            label = f"gpu{d}"
            dev = names.get(d, {})
            name = str(dev.get("name", ""))
            if sample.get("modeled") and "modeled" not in name.lower():
                name += " (modeled)"
            if "GiB" not in name:
                name += f" {size(p['total'])}"
            title = Text()
            title.append(label, style="bold reverse" if d == selected else "bold")
            if d == selected or len(devices) <= 2:
                title.append(f" {name}")
            bar_w = max(10, width - len(title.plain) - 1)
            if d != selected and len(devices) > 2:
                line = title + Text(" ") + bar(sample, bar_w)
                out.append(line)
                continue
            out.append(title)
            out.append(bar(sample, width))
            out.append(self._figures(sample, p, phantom, width))
            if d == selected:
                total = p["total"] or int(sample.get("driver_total", 1))
                series = self.state.series.get(d)
                out.extend(history(series, self.state.faults, d, *self.window, width, total))
        out.append(self._legend(width))
        return Group(*out)

    def _figures(self, sample: dict, p: dict[str, int], phantom: int, width: int) -> Text:
        text = Text()
        text.append("nvidia-smi ", style="bold")
        text.append(f"used {size(sample.get('nvml_used'))} free {size(sample.get('nvml_free'))}")
        text.append("  cudaMemGetInfo ", style="bold")
        text.append(f"free {size(sample.get('driver_free'))}")
        text.append("\n")
        style = f"bold reverse {FAILURE_COLOUR}" if phantom > 0 else "bold"
        text.append(f" PHANTOM {size(phantom)} ", style=style)
        text.append("  largest cudaMalloc ", style="bold")
        text.append(size(sample.get("largest_alloc")))
        if sample.get("modeled"):
            text.append("  modeled", style="italic #d7af00")
        text.append("\n")
        items = []
        for key, label, colour, glyph in MEMORY_PARTS:
            items.append((glyph, colour, f"{label} {size(p[key])}"))
        for i, (glyph, colour, label) in enumerate(items):
            text.append(glyph, style=colour)
            text.append(f" {label}" + ("  " if i < len(items) - 1 else ""))
        return text

    def _legend(self, width: int) -> Text:
        text = Text(style="dim")
        text.append("phantom = async reserved free + sync cached (unusable by the other pool)")
        return text

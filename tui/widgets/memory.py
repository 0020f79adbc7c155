"""Memory per device: the whole card as one bar split by who holds each byte, the nvidia-smi
and cudaMemGetInfo views beside it, the phantom memory called out, and a history graph.

The point of the panel is the seed's lesson: memory free inside one CUDA pool is invisible and
unusable to the other allocator, and neither nvidia-smi nor cudaMemGetInfo says so. The bar
shows the two "free but held" parts (async reserved-free, sync cached) in warning colours and the
phantom line adds them up.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.text import Text

from provetop.recordings.state import MemorySeries, State, phantom_bytes
from provetop.tui.style import FAILURE_COLOUR, MEMORY_PARTS, clock, size
from provetop.tui.widgets.device_panel import DevicePanel, rows_of

SPARK = " ▁▂▃▄▅▆▇█"
USED_COLOUR = "#5f87ff"
PHANTOM_COLOUR = "#ff5f5f"
HISTORY = (  # (label, how to read the series at index i, colour)
    ("used", "nvml_used", USED_COLOUR),
    ("phantom", "phantom", PHANTOM_COLOUR),
    ("free", "driver_free", "#5fd75f"),
)
PHANTOM_WARN = 0.05  # phantom above this share of the usable card (less ballast): highlighted
# the one-line legend, longest first: the first that fits the panel is shown
LEGENDS = (
    "phantom = ▓ async reserved-unused + ▓ sync cached: used to nvidia-smi, "
    "free to neither pool · ✖ OOM",
    "phantom = ▓ async reserved-unused + ▓ sync cached · ✖ OOM",
    "phantom = ▓ async unused + ▓ sync cached · ✖ OOM",
    "phantom = ▓ + ▓ (pools' unused) · ✖ OOM",
)


@dataclass(frozen=True)
class Pinned:
    """The pool state one event carried (an OOM's ``pools``), shown for its device instead
    of the newest sample, so the panel says what the event says, at the event's time."""

    t: int
    device: int
    pools: dict[str, Any]
    what: str  # the event, as the log names it ("OOM gpu0 w1")


def parts(sample: dict[str, Any]) -> dict[str, int]:
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


def bar(sample: dict[str, Any], width: int) -> Text:
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


def spark(value: float, top: float) -> str:
    """The sparkline glyph of ``value`` on a scale to ``top`` (both above 0): at least ▁."""
    return SPARK[max(1, min(8, round(value / top * 8)))]


def series_value(series: MemorySeries, name: str, i: int) -> int:
    if name == "phantom":
        c = series.columns
        phantom = max(0, c["async_reserved"][i] - c["async_used"][i]) + max(0, c["sync_cached"][i])
        return int(phantom)
    return int(series.columns[name][i])


def history(
    series: MemorySeries | None,
    faults: list[dict[str, Any]],
    device: int,
    start: int,
    end: int,
    width: int,
    total: int,
    oom_row: bool = True,
) -> list[Text]:
    """Sparkline rows of used / phantom / free over [start, end), each scaled to its own
    largest value in the window (printed at the row's end), so a small phantom still shows;
    then the OOMs, a red ✖ in every column that had one, on a row of their own (on the
    phantom's row they hid it wherever OOMs were frequent), with their count in the window.
    Without ``oom_row`` (a short box) an OOM's column of the phantom row keeps its glyph on a
    red background instead: the phantom stays readable there too."""
    rows: list[Text] = []
    label_w = 8
    scale_w = 11  # " 179.0 KiB"
    cols = max(4, width - label_w - scale_w)
    cell = (end - start) / cols
    idx: list[int | None] = [None] * cols
    if series is not None and len(series):
        t = series.t
        for c in range(cols):
            j = bisect_left(t, int(start + (c + 1) * cell)) - 1
            idx[c] = j if j >= 0 and t[j] >= start - cell else None
    ooms: set[int] = set()
    count = 0
    for f in faults:
        if f.get("kind") == "oom" and f.get("device", device) == device and start <= f["t"] < end:
            ooms.add(min(cols - 1, int((f["t"] - start) / cell)))
            count += 1
    for label, name, colour in HISTORY:
        values = [
            None if j is None or series is None else series_value(series, name, j) for j in idx
        ]
        top = max((v for v in values if v is not None and v > 0), default=0)
        text = Text(f"{label:<{label_w}}", style="bold")
        for c, value in enumerate(values):
            if name == "phantom" and not oom_row and c in ooms:
                glyph = spark(value, top) if value and top else "✖"
                text.append(glyph, style=f"bold white on {FAILURE_COLOUR}")
            elif value is None or value < 0:
                text.append(" ")
            elif value == 0 or top == 0:
                text.append("_" if value == 0 else " ", style="dim")
            else:
                text.append(spark(value, top), style=colour)
        text.append(f" {size(top) if top else '0':>{scale_w - 1}}", style="dim")
        rows.append(text)
    if not oom_row:
        return rows
    marks = Text(f"{'OOM':<{label_w}}", style="bold")
    for c in range(cols):
        marks.append("✖" if c in ooms else " ", style=f"bold {FAILURE_COLOUR}")
    marks.append(f" {count:>{scale_w - 1}}", style=f"bold {FAILURE_COLOUR}" if count else "dim")
    rows.append(marks)
    return rows


def legend(width: int) -> Text:
    """The longest legend that fits ``width`` (the shortest otherwise, wrapped)."""
    chosen = next((t for t in LEGENDS if len(t) <= width), LEGENDS[-1])
    text = Text(style="dim")
    colours = iter(("#ff5f5f", "#ff8700"))
    for part in chosen.split("▓"):
        if text.plain:
            text.append("▓", style=next(colours, "#ff8700"))
        text.append(part)
    text.highlight_words(["✖"], style=f"bold {FAILURE_COLOUR}")
    return text


def phantom_alarming(phantom: int, p: dict[str, int]) -> bool:
    """Whether the phantom is large enough to highlight: above PHANTOM_WARN of the card less
    its ballast (on a modeled card the ballast makes it look small)."""
    usable = max(1, p["total"] - p["ballast"])
    return phantom > 0 and phantom >= PHANTOM_WARN * usable


def flow(chunks: list[Text], width: int, gap: str = "  ") -> Text:
    """Chunks laid out in rows of at most ``width`` cells, never splitting one."""
    out = Text()
    used = 0
    for chunk in chunks:
        n = chunk.cell_len
        if used and used + len(gap) + n > width:
            out.append("\n")
            used = 0
        elif used:
            out.append(gap)
            used += len(gap)
        out.append_text(chunk)
        used += n
    return out


class MemoryPanel(DevicePanel):
    """Per-device memory; the selected device gets the figures and history, others a bar."""

    DEFAULT_CSS = """
    MemoryPanel { height: auto; }
    """

    pinned: Pinned | None = None  # set by the app at a fault or a selected event

    def _device_count(self, state: State) -> int:
        return len(state.memory)

    def _sample(self, d: int) -> dict[str, Any] | None:
        """What the panel shows for device ``d``: the pinned event's pools, else the newest
        sample."""
        assert self.state is not None
        pin = self.pinned
        if pin is not None and pin.device == d:
            return {"device": d, "t": pin.t, **pin.pools}
        return self.state.memory.get(d)

    def _when(self, d: int, sample: dict[str, Any]) -> Text:
        """When the figures of ``d`` were taken: the pinned event's time, or the sample's."""
        pin = self.pinned
        if pin is not None and pin.device == d:
            return Text(f"at {clock(pin.t)}: {pin.what}'s pools", style="bold reverse #00afff")
        if "t" not in sample:
            return Text()
        return Text(f"sample {clock(sample['t'])}", style="dim")

    def _devices(self) -> list[int]:
        assert self.state is not None
        known = set(self.state.memory)
        if self.state.hello:
            known |= {int(d.get("index", i)) for i, d in enumerate(self.state.hello["devices"])}
        return sorted(known)

    def _label(self, d: int, sample: dict[str, Any]) -> str:
        """``gpu0``; a traced process's lane says its GPU and pid (``gpu0 pid 4242``): two
        processes on one GPU are two lanes (``provetop.trace.lanes``)."""
        pid = sample.get("pid")
        if not isinstance(pid, int) and self.state is not None:  # a fault's pools name no pid:
            pid = (self.state.memory.get(d) or {}).get("pid")  # the lane's own samples do
        if not isinstance(pid, int):
            return f"gpu{d}"
        config = ((self.state.hello if self.state else None) or {}).get("config") or {}
        stride = config.get("lane_stride")
        gpu = d % stride if isinstance(stride, int) and stride > 0 else d
        return f"gpu{gpu} pid {pid}"

    def _content(self, width: int) -> Group | Text:
        if self.state is None or not self.state.memory:
            return Text("no memory samples yet", style="dim")
        width = max(20, width)
        full = self._full(width)
        budget = self._budget()
        if budget is not None and rows_of(full) > budget:
            compact = self._compact(width)
            if rows_of(compact) < rows_of(full):
                return compact
        return full

    def _compact(self, width: int) -> Group:
        """The same figures in fewer rows, for a short box (80x24): the selected device's
        title, bar and sample time on one row (a pinned event's time among its figures), its
        figures, and only its phantom history row (OOMs on a red background); every other
        device on one row (bar and phantom); the legend. Every figure of the selected device
        stays; the others' are a key press away (select their lane in the timeline)."""
        assert self.state is not None
        devices = self._devices()
        selected = self.device if self.device in devices else devices[0]
        out: list[Text] = []
        for d in devices:
            sample = self._sample(d)
            if sample is None:
                out.append(Text(f"gpu{d}: no samples", style="dim"))
                continue
            p = parts(sample)
            phantom = phantom_bytes(sample)
            title = Text(self._label(d, sample), style="bold reverse" if d == selected else "bold")
            if d != selected:
                tail = Text(f" PHANTOM {size(phantom)}", style="bold #d7af00" if phantom else "")
                bar_w = max(10, width - title.cell_len - tail.cell_len - 1)
                out.append(title + Text(" ") + bar(sample, bar_w) + tail)
                continue
            pin = self.pinned
            pinned = pin is not None and pin.device == d
            # the sample's time at the row's end; a fault's pools say so among the figures
            stamp = Text(f" {clock(sample['t'])}" if "t" in sample and not pinned else "")
            bar_w = max(10, width - title.cell_len - stamp.cell_len - 1)
            out.append(title + Text(" ") + bar(sample, bar_w) + Text(stamp.plain, style="dim"))
            when = self._when(d, sample) if pinned else None
            out.extend(self._figures(sample, p, phantom, width, when).split("\n"))
            total = p["total"] or int(sample.get("driver_total", 1))
            series = self.state.series.get(d)
            rows = history(series, self.state.faults, d, *self.window, width, total, False)
            out.extend(row for row in rows if row.plain.startswith("phantom"))
        out.append(self._legend(width))
        return Group(*out)

    def _full(self, width: int) -> Group:
        """Every device's title, bar and figures; the selected one's history; the legend."""
        assert self.state is not None
        devices = self._devices()
        selected = self.device if self.device in devices else devices[0]
        names = {}
        if self.state.hello:
            names = {int(d.get("index", i)): d for i, d in enumerate(self.state.hello["devices"])}
        out: list[Text] = []
        for d in devices:
            sample = self._sample(d)
            if sample is None:
                out.append(Text(f"gpu{d}: no samples", style="dim"))
                continue
            p = parts(sample)
            phantom = phantom_bytes(sample)
            label = self._label(d, sample)
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
            when = self._when(d, sample) if d == selected else None
            out.append(self._figures(sample, p, phantom, width, when))
            if d == selected:
                total = p["total"] or int(sample.get("driver_total", 1))
                series = self.state.series.get(d)
                out.extend(history(series, self.state.faults, d, *self.window, width, total))
        out.append(self._legend(width))
        return Group(*out)

    def _figures(
        self,
        sample: dict[str, Any],
        p: dict[str, int],
        phantom: int,
        width: int,
        when: Text | None = None,
    ) -> Text:
        """Every figure of the pool asymmetry as an atomic chunk, flowed to the width; first,
        ``when`` they were taken (the sample's time, or the event's whose pools they are)."""
        bold = "bold"

        def chunk(label: str, value: str, glyph: str = "", colour: str = "") -> Text:
            text = Text()
            if glyph:
                text.append(glyph + " ", style=colour)
            text.append(label + " ", style=bold)
            text.append(value)
            return text

        style_of = {key: (colour, glyph) for key, _, colour, glyph in MEMORY_PARTS}
        chunks = [when] if when is not None and when.plain else []
        chunks += [
            chunk("nvidia-smi used", size(sample.get("nvml_used"))),
            chunk("cudaMemGetInfo free", size(sample.get("driver_free"))),
            chunk("async used", size(p["async_used"]), *reversed(style_of["async_used"])),
            chunk(
                "async reserved-unused", size(p["async_free"]), *reversed(style_of["async_free"])
            ),
            chunk("sync used", size(p["sync_used"]), *reversed(style_of["sync_used"])),
            chunk("sync cached", size(p["sync_cached"]), *reversed(style_of["sync_cached"])),
        ]
        if phantom_alarming(phantom, p):
            style = f"bold reverse {FAILURE_COLOUR}"
        else:
            style = "bold #d7af00" if phantom else "bold"
        chunks.append(Text(f" PHANTOM {size(phantom)} ", style=style))
        chunks.append(chunk("largest cudaMalloc", size(sample.get("largest_alloc"))))
        for key in ("ballast", "other"):
            if p[key]:
                chunks.append(chunk(key, size(p[key]), *reversed(style_of[key])))
        if sample.get("modeled"):
            chunks.append(Text("modeled", style="italic #d7af00"))
        return flow(chunks, width)

    def _legend(self, width: int) -> Text:
        return legend(width)

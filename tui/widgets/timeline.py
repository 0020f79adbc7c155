"""The timeline: one lane per worker per device, a GPU lane and an upload lane, drawn with the
Line API so only the visible rows are built, and only once per refresh.

Each column is a time bucket; it shows the phase that covers most of the bucket (failures win).
The window follows the newest event (live) or stays where the operator put it (paused), from
100 ms to 1 h wide. A cursor (a lane and an instant) selects the segment shown in the detail row.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from rich.segment import Segment as RichSegment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from provetop.recordings.schema import PHASES
from provetop.recordings.state import Lane, Segment, State
from provetop.tui.style import (
    FAILURE_COLOUR,
    GPU_BUSY,
    GROUPS,
    IDLE_GPU,
    MARKER_COLOUR,
    UPLOAD_BUSY,
    clock,
    duration_ns,
    group_colour,
    phase_group,
)
from provetop.tui.widgets import memory_lanes

_GROUP_OF = {name: spec.group for name, spec in PHASES.items()}
ZOOMS_NS = [
    int(x * 1e9) for x in (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)
]
DEFAULT_ZOOM = ZOOMS_NS.index(int(30e9))
LABEL_W = 9
SAMPLE_LIMIT = 8  # segments per column above which columns are point-sampled


@dataclass
class Cell:
    """What one column of one lane shows."""

    kind: str  # "idle", "busy", a phase group, or "fail"
    seg: Segment | None = None


class LaneIndex:
    """End times of one lane's finished segments, kept in step with the state's list (which
    only grows, in order of end time), so a window's segments are found by bisection."""

    def __init__(self) -> None:
        self.source: list[Segment] | None = None
        self.ends: list[int] = []
        self.longest = 0

    def sync(self, segments: list[Segment]) -> None:
        if segments is not self.source or len(self.ends) > len(segments):
            self.source, self.ends, self.longest = segments, [], 0
        for seg in segments[len(self.ends) :]:
            end = seg.end if seg.end is not None else seg.start
            self.ends.append(end)
            self.longest = max(self.longest, end - seg.start)

    def window(self, start: int, end: int) -> list[Segment]:
        """Finished segments overlapping [start, end)."""
        assert self.source is not None
        lo = bisect_left(self.ends, start)
        hi = bisect_left(self.ends, end + self.longest + 1, lo)
        return [s for s in self.source[lo:hi] if s.start < end]


class Timeline(Widget, can_focus=True):
    """Lanes of phases over a time window; see the module docstring."""

    BINDINGS = [
        Binding("left", "cursor(-1)", "◀", show=False),
        Binding("right", "cursor(1)", "▶", show=False),
        Binding("shift+left", "scroll_window(-0.5)", "scroll", show=False),
        Binding("shift+right", "scroll_window(0.5)", "scroll", show=False),
        Binding("up", "lane(-1)", "lane up", show=False),
        Binding("down", "lane(1)", "lane down", show=False),
        Binding("plus,equals_sign", "zoom(-1)", "zoom in"),
        Binding("minus", "zoom(1)", "zoom out"),
        Binding("l", "follow", "live"),
        Binding("g", "gpu_only", "GPU lanes", show=False),
    ]

    follow: reactive[bool] = reactive(True)
    zoom: reactive[int] = reactive(DEFAULT_ZOOM)

    class Selected(Message):
        """The cursor moved to another lane: its device becomes the selected device."""

        def __init__(self, device: int | None) -> None:
            super().__init__()
            self.device = device

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.now = 0
        self.end_t = 0  # right edge of the window while paused
        self.cursor_t: int | None = None  # None: the right edge
        self.lane_index = 0
        self.lane_top = 0
        self.gpu_only = False
        self.follow_label = "live"  # "replay" while following a replay's position
        self.auto_zoom = True  # until the operator zooms: fit a young run (5 s .. 30 s)
        self.builds = 0  # frames built, and when the last one was (for provetop bench tui)
        self.built_at = 0.0
        self._lanes: list[Lane] = []
        self._rows: list[Strip] = []
        self._key: tuple[object, ...] | None = None  # what the rows were built from
        self._indexes: dict[Lane, LaneIndex] = {}
        self._state_id = 0
        self._styles_key: tuple[object, ...] | None = None
        self._glyph_cache: dict[tuple[Style, str], dict[str, tuple[str, Style]]] = {}

    # -- data in ------------------------------------------------------------------------------

    def show(self, state: State, now: int) -> None:
        """Draw ``state`` with the live edge at ``now`` (engine nanoseconds)."""
        if state is not self.state:
            self._indexes.clear()
            self.state = state
        self.now = now
        origin = state.first_t  # the first phase; a trace has none and starts at 0
        if origin is None and self._memory_lanes():
            origin = 0
        if self.auto_zoom and self.follow and origin is not None:
            # a young run fills the window until the operator picks a zoom
            age = max(1, now - origin)
            fit = next((i for i, z in enumerate(ZOOMS_NS) if z >= age * 1.05), DEFAULT_ZOOM)
            self.zoom = min(DEFAULT_ZOOM, max(ZOOMS_NS.index(int(5e9)), fit))
        self._key = None
        self.refresh()

    @property
    def span(self) -> int:
        return ZOOMS_NS[self.zoom]

    @property
    def window_end(self) -> int:
        return self.now if self.follow else self.end_t

    @property
    def selected_lane(self) -> Lane | None:
        lanes = self.visible_lanes()
        if not lanes:
            return None
        return lanes[min(self.lane_index, len(lanes) - 1)]

    @property
    def selected_device(self) -> int | None:
        lane = self.selected_lane
        return None if lane is None else lane[1]

    def visible_lanes(self) -> list[Lane]:
        if self.state is None:
            return []
        lanes = self.state.lanes()
        if self.gpu_only:
            lanes = [lane for lane in lanes if lane[0] == "gpu"]
        return lanes

    # -- actions ------------------------------------------------------------------------------

    def _pause_here(self) -> None:
        if self.follow:
            self.end_t = self.now
            self.follow = False

    def action_cursor(self, step: int) -> None:
        self._pause_here()
        cols = self._cols()
        cell = self.span / cols
        start = self.window_end - self.span
        cur = self.cursor_t if self.cursor_t is not None else self.window_end - cell / 2
        cur = int(cur + step * cell)
        if cur < start:
            self.end_t -= int(start - cur + cell)
        elif cur > self.window_end:
            self.end_t += int(cur - self.window_end + cell)
        self.cursor_t = max(0, cur)
        self._key = None
        self.refresh()

    def action_scroll_window(self, fraction: float) -> None:
        self._pause_here()
        shift = int(self.span * fraction)
        self.end_t = max(self.span // 2, self.end_t + shift)
        if self.cursor_t is not None:
            self.cursor_t += shift
        self._key = None
        self.refresh()

    def action_lane(self, step: int) -> None:
        lanes = self.visible_lanes()
        if not lanes:
            return
        self.lane_index = max(0, min(len(lanes) - 1, self.lane_index + step))
        self._key = None
        self.refresh()
        self.post_message(self.Selected(self.selected_device))

    def action_zoom(self, step: int) -> None:
        self.auto_zoom = False
        centre = self.cursor_t
        self.zoom = max(0, min(len(ZOOMS_NS) - 1, self.zoom + step))
        if not self.follow and centre is not None:
            self.end_t = centre + self.span // 2
        self._key = None

    def action_follow(self) -> None:
        self.follow = True
        self.cursor_t = None
        self._key = None
        self.refresh()

    def action_gpu_only(self) -> None:
        self.gpu_only = not self.gpu_only
        self.lane_index = 0
        self._key = None
        self.refresh()

    def watch_zoom(self) -> None:
        self.refresh()

    def watch_follow(self) -> None:
        self.refresh()

    def centre_on(self, t: int, device: int | None, worker: int | None) -> None:
        """Pause with ``t`` in the middle of the window and the cursor on it, on the lane of
        ``worker`` on ``device`` (its GPU lane without a worker; the lane stays otherwise):
        a fault the operator jumped to, with what came before and after it."""
        self.follow = False
        self.end_t = t + self.span // 2
        self.cursor_t = t
        lanes = self.visible_lanes()
        want = ("worker", device, worker) if worker is not None and worker >= 0 else None
        for i, lane in enumerate(lanes):
            if lane == want or (want is None and lane[0] == "gpu" and lane[1] == device):
                self.lane_index = i
                break
        self._key = None
        self.refresh()
        if device is not None:
            self.post_message(self.Selected(self.selected_device))

    def set_window(self, end: int, follow: bool) -> None:
        """Used by replay: the window ends at the replay position."""
        self.end_t = end
        self.follow = follow
        self._key = None
        self.refresh()

    # -- geometry -----------------------------------------------------------------------------

    def _cols(self) -> int:
        return max(4, self.size.width - LABEL_W)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        lanes = len(self.visible_lanes()) + 2 * len(self._memory_lanes())
        return max(4, lanes + 2 + self.legend_height(width))

    def _memory_lanes(self) -> list[Any]:
        """The memory lanes drawn in place of the pipeline's (a trace: no pipeline lanes)."""
        return [] if self.state is None else memory_lanes.shown(self.state)

    def legend_height(self, width: int) -> int:
        return len(self._legend(max(20, width), Style()))

    # -- drawing ------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        self._build()
        if y < len(self._rows):
            return self._rows[y]
        return Strip.blank(self.size.width, self.rich_style)

    def _build(self) -> None:
        key = (
            self.size,
            self.window_end,
            self.span,
            self.cursor_t,
            self.lane_index,
            self.state.events if self.state else -1,
            self.has_focus,
            self.gpu_only,
            self.app.theme,
        )
        if key == self._key:
            return
        self._key = key
        self.builds += 1
        self.built_at = time.perf_counter()
        width, height = self.size.width, self.size.height
        base = self.rich_style
        dim = base + Style(dim=True)
        rows: list[Strip] = []
        if self.state is None or self.state.hello is None and not self.state.segments:
            rows.append(Strip([RichSegment(" waiting for events…".ljust(width), dim)]))
            self._rows = rows
            return
        cols = self._cols()
        end = self.window_end
        start = end - self.span
        cell = self.span / cols
        lanes = self.visible_lanes()
        self.lane_index = min(self.lane_index, max(0, len(lanes) - 1))
        lane_rows = max(1, height - 2 - self.legend_height(width))
        if self.lane_index < self.lane_top:
            self.lane_top = self.lane_index
        elif self.lane_index >= self.lane_top + lane_rows:
            self.lane_top = self.lane_index - lane_rows + 1
        self.lane_top = max(0, min(self.lane_top, max(0, len(lanes) - lane_rows)))
        cursor_col = None
        if self.cursor_t is not None and start <= self.cursor_t < end:
            cursor_col = int((self.cursor_t - start) / cell)
        elif self.cursor_t is None:
            cursor_col = cols - 1
        rows.append(self._axis(start, end, cols, base, dim))
        selected_seg: Segment | None = None
        for i, lane in enumerate(lanes[self.lane_top : self.lane_top + lane_rows]):
            index = self.lane_top + i
            cells = self._cells(lane, start, end, cols)
            is_sel = index == self.lane_index
            if is_sel and cursor_col is not None and 0 <= cursor_col < cols:
                selected_seg = cells[cursor_col].seg
            rows.append(self._lane_strip(lane, cells, is_sel, cursor_col, base, dim))
        if not lanes and self._memory_lanes():
            mem = memory_lanes.lane_rows(self.state, start, end, cols, LABEL_W, width, base)
            rows.extend(mem[:lane_rows])
        rows.append(self._detail(selected_seg, width, base, dim))
        rows.extend(self._legend(width, base))
        self._rows = rows

    def _label(self, lane: Lane) -> str:
        if lane[0] == "worker":
            # synthesis drawn apart from the GPU workers, as workers from synth_worker_base
            # on: the cuzk adapter's CPU synthesis slots, the engine's --synthesis-ahead
            state = self.state
            n = state.synth_lane(lane[2]) if state is not None else None
            if state is not None and n is not None:
                devices = ((state.hello or {}).get("config") or {}).get("devices")
                on = f"gpu{lane[1]} " if isinstance(devices, list) and len(devices) > 1 else ""
                return f"{on}synth {n}"
            return f"gpu{lane[1]} w{lane[2]}"
        return f"gpu{lane[1]} {'GPU' if lane[0] == 'gpu' else 'upl'}"

    def _cells(self, lane: Lane, start: int, end: int, cols: int) -> list[Cell]:
        """What each column of ``lane`` shows over [start, end): the phase covering most of
        the column (one segment's overlap; failures always win)."""
        assert self.state is not None
        state = self.state
        idx = self._indexes.get(lane)
        if idx is None:
            idx = self._indexes[lane] = LaneIndex()
        idx.sync(state.segments.get(lane, []))
        segs = idx.window(start, end)
        for seg in state.open.values():
            if seg.lane == lane and seg.start < end:
                segs.append(seg)
        cell = (end - start) / cols
        busy = lane[0] != "worker"
        idle = "idle" if lane[0] == "gpu" else "none"
        kinds = [idle] * cols
        owners: list[Segment | None] = [None] * cols
        cover = [0.0] * cols
        now = state.t
        if len(segs) > SAMPLE_LIMIT * cols:  # too many to weigh: sample column midpoints
            segs.sort(key=lambda s: s.start)
            starts = [s.start for s in segs]
            for c in range(cols):
                mid = start + (c + 0.5) * cell
                j = bisect_left(starts, mid) - 1
                if j >= 0:
                    seg = segs[j]
                    if (seg.end if seg.end is not None else now) >= mid:
                        kinds[c], owners[c] = self._kind(seg, busy), seg
            for seg in segs:
                if not seg.ok:
                    c = int((max(seg.start, start) - start) / cell)
                    if 0 <= c < cols:
                        kinds[c], owners[c] = "fail", seg
            return [Cell(k, o) for k, o in zip(kinds, owners, strict=True)]
        inv = 1.0 / cell
        groups = _GROUP_OF
        for seg in segs:
            seg_end = seg.end
            if seg_end is None:
                seg_end = now if now > seg.start else seg.start
            s = seg.start if seg.start > start else start
            e = seg_end if seg_end < end else end
            if e < s:
                continue
            c0 = int((s - start) * inv)
            c1 = int((e - start) * inv)
            if c1 >= cols:
                c1 = cols - 1
            if c0 >= cols:
                continue
            if not seg.ok:
                kind = "fail"
            else:
                kind = "busy" if busy else groups.get(seg.phase, "host")
            fail = kind == "fail"
            overlap: float
            if c0 == c1:
                overlap = e - s
                if fail or (kinds[c0] != "fail" and overlap > cover[c0]):
                    kinds[c0], owners[c0], cover[c0] = kind, seg, overlap
                continue
            overlap = start + (c0 + 1) * cell - s
            if fail or (kinds[c0] != "fail" and overlap > cover[c0]):
                kinds[c0], owners[c0], cover[c0] = kind, seg, overlap
            for c in range(c0 + 1, c1):
                if fail or (kinds[c] != "fail" and cell > cover[c]):
                    kinds[c], owners[c], cover[c] = kind, seg, cell
            overlap = e - (start + c1 * cell)
            if fail or (kinds[c1] != "fail" and overlap > cover[c1]):
                kinds[c1], owners[c1], cover[c1] = kind, seg, overlap
        return [Cell(k, o) for k, o in zip(kinds, owners, strict=True)]

    @staticmethod
    def _kind(seg: Segment, busy: bool) -> str:
        if not seg.ok:
            return "fail"
        return "busy" if busy else phase_group(seg.phase)

    def _glyphs(self, base: Style, lane_kind: str) -> dict[str, tuple[str, Style]]:
        """kind -> (glyph, style), built once per base style and lane kind."""
        key = (base, lane_kind)
        cached = self._glyph_cache.get(key)
        if cached is not None:
            return cached
        busy = GPU_BUSY if lane_kind == "gpu" else UPLOAD_BUSY
        table = {
            "none": (" ", base),
            "idle": ("·", base + Style(color=IDLE_GPU)),
            "fail": ("✖", base + Style(color=FAILURE_COLOUR, bold=True)),
            "busy": ("█", base + Style(color=busy)),
        }
        for group in GROUPS:
            glyph = "▒" if group == "mutex_wait" else "█"
            table[group] = (glyph, base + Style(color=group_colour(group)))
        self._glyph_cache[key] = table
        return table

    def _lane_strip(
        self,
        lane: Lane,
        cells: list[Cell],
        selected: bool,
        cursor_col: int | None,
        base: Style,
        dim: Style,
    ) -> Strip:
        label_style = base + Style(bold=True, reverse=selected and self.has_focus)
        if selected and not self.has_focus:
            label_style += Style(underline=True)
        segments = [
            RichSegment(self._label(lane).ljust(LABEL_W - 1)[: LABEL_W - 1] + " ", label_style)
        ]
        glyphs = self._glyphs(base, lane[0])
        fallback = glyphs["host"]
        run: list[str] = []
        run_kind = ""  # the kind of the cells in ``run`` (none yet)
        for c, cell in enumerate(cells):
            kind = cell.kind
            if selected and c == cursor_col:
                if run:
                    segments.append(RichSegment("".join(run), glyphs.get(run_kind, fallback)[1]))
                    run, run_kind = [], ""
                char, style = glyphs.get(kind, fallback)
                segments.append(
                    RichSegment("│" if char == " " else char, style + Style(reverse=True))
                )
                continue
            if kind != run_kind:
                if run:
                    segments.append(RichSegment("".join(run), glyphs.get(run_kind, fallback)[1]))
                run, run_kind = [], kind
            run.append(glyphs.get(kind, fallback)[0])
        if run:
            segments.append(RichSegment("".join(run), glyphs.get(run_kind, fallback)[1]))
        return Strip(segments).adjust_cell_length(self.size.width, base)

    def _axis(self, start: int, end: int, cols: int, base: Style, dim: Style) -> Strip:
        assert self.state is not None
        mode = self.follow_label if self.follow else "paused"
        head = f"{mode:<{LABEL_W - 1}} "
        line = [" "] * cols
        styles: list[Style] = [dim] * cols
        step = nice_step(self.span, max(1, cols // 12))
        first = max(0, math.ceil(start / step) * step)
        t = first
        while t < end:
            c = int((t - start) / (self.span / cols))
            label = "┆" + clock(t)
            if c + len(label) <= cols:
                for i, ch in enumerate(label):
                    line[c + i] = ch
            t += step
        cell = self.span / cols
        for ft in (f["t"] for f in self.state.faults):
            if start <= ft < end:
                c = int((ft - start) / cell)
                if line[c] == " ":  # time labels win over fault marks (the lanes show them)
                    line[c], styles[c] = "✖", base + Style(color=FAILURE_COLOUR, bold=True)
        for mt, _ in self.state.markers:
            if start <= mt < end:
                c = int((mt - start) / cell)
                line[c], styles[c] = "▼", base + Style(color=MARKER_COLOUR, bold=True)
        segs = [
            RichSegment(head, base + Style(bold=True, color="#d7af00" if not self.follow else None))
        ]
        for ch, st in zip(line, styles, strict=True):
            segs.append(RichSegment(ch, st))
        return Strip(Strip(segs).simplify()).adjust_cell_length(self.size.width, base)

    def _fault_at_cursor(self) -> dict[str, Any] | None:
        """A fault of the selected lane's worker (or device) in the cursor's column."""
        lane, state = self.selected_lane, self.state
        if self.cursor_t is None or lane is None or state is None:
            return None
        half = self.span / self._cols() / 2
        for f in reversed(state.faults):
            if abs(f["t"] - self.cursor_t) > half or f.get("device", lane[1]) != lane[1]:
                continue
            if lane[0] == "worker" and f.get("worker") not in (None, -1, lane[2]):
                continue
            fault: dict[str, Any] = f
            return fault
        return None

    def _detail(self, seg: Segment | None, width: int, base: Style, dim: Style) -> Strip:
        span_text = f"window {duration_ns(self.span)}"
        fault = self._fault_at_cursor()
        if fault is not None:  # the cursor on a fault: the fault first, then the phase under it
            span_text = f"✖ {str(fault.get('kind', 'fault')).upper()} at {clock(fault['t'])}" + (
                f" ({fault['site']})" if fault.get("site") else ""
            )  # in place of the window's width, which the axis shows
        lane = self.selected_lane
        if seg is None:
            when = self.cursor_t if self.cursor_t is not None else self.window_end
            text = f"{span_text} · cursor {clock(when)}"
            if lane is not None:
                text += f" · {self._label(lane)}: idle"
            elif self.state is not None and self._memory_lanes():
                text += f" · {memory_lanes.detail(self.state, when)}"
            return Strip([RichSegment(text[:width].ljust(width), dim)])
        end = seg.end if seg.end is not None else (self.state.t if self.state else seg.start)
        parts = [span_text]
        if seg.proof is not None:
            parts.append(f"proof {seg.proof} partition {seg.partition}")
        phase = seg.phase if seg.lane[0] == "worker" else f"{seg.phase} busy"
        parts.append(phase + ("" if seg.ok else " FAILED"))
        parts.append(f"{clock(seg.start)} +{duration_ns(end - seg.start)}")
        if seg.end is None:
            parts.append("running")
        colour = FAILURE_COLOUR if not seg.ok or fault else group_colour(phase_group(seg.phase))
        text = " · ".join(parts)
        return Strip(
            [RichSegment("● ", base + Style(color=colour)), RichSegment(text, base)]
        ).adjust_cell_length(width, base)

    def _legend(self, width: int, base: Style) -> list[Strip]:
        if self._memory_lanes():  # a trace: its lanes' glyphs, none of the pipeline's
            return legend_rows(memory_lanes.LEGEND, width, base)
        items: list[tuple[str, str, str]] = []
        for group, (label, colour) in GROUPS.items():
            items.append(("▒" if group == "mutex_wait" else "█", colour, label))
        items += [
            ("✖", FAILURE_COLOUR, "failure"),
            ("·", IDLE_GPU, "GPU idle"),
            ("▼", MARKER_COLOUR, "marker"),
        ]
        return legend_rows(items, width, base)


def legend_rows(items: list[tuple[str, str, str]], width: int, base: Style) -> list[Strip]:
    """Legend entries (glyph, colour, label) flowed into as many rows as ``width`` needs."""
    rows: list[Strip] = []
    line: list[RichSegment] = []
    used = 0
    for glyph, colour, label in items:
        n = len(label) + 3
        if line and used + n > width:
            rows.append(Strip(line).adjust_cell_length(width, base))
            line, used = [], 0
        line += [
            RichSegment(glyph, base + Style(color=colour, bold=True)),
            RichSegment(f" {label} ", base),
        ]
        used += n
    if line:
        rows.append(Strip(line).adjust_cell_length(width, base))
    return rows


def nice_step(span: int, ticks: int) -> int:
    """A round tick interval giving about ``ticks`` labels over ``span`` nanoseconds."""
    raw = span / max(1, ticks)
    for step_s in (
        0.01,
        0.02,
        0.05,
        0.1,
        0.2,
        0.5,
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1800,
        3600,
    ):
        if step_s * 1e9 >= raw:
            return int(step_s * 1e9)
    return int(3600e9)


def monotonic_ns() -> int:
    return time.monotonic_ns()

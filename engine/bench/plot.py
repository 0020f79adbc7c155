"""A small SVG line chart for the benchmarks: one panel per series, stacked, sharing a
categorical x axis.

Why our own: the sweep's plot is two lines over a handful of points, and a plotting library
(matplotlib and its native wheels) is a heavy dependency for a GPU host that only runs the
engine. Why categorical: the points of a device-memory sweep are few and unevenly spaced
(8, 12, 16, 24, 40, 80 GiB and uncapped, which has no number of its own), so each point gets
an equal step, labelled with what was asked for. A point without a value (a run that failed)
breaks its line and is marked on the axis with why (``missing``, else "no result").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

WIDTH = 720
PANEL_HEIGHT = 220
LEFT, RIGHT, TOP, GAP = 80, 24, 84, 64  # margins around the panels, pixels
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


@dataclass(frozen=True)
class Series:
    """One panel: a name with its unit, and a value (or None) per x label; optionally a
    target per x label, drawn dashed and named in the panel's legend (a device-count sweep's
    0.95 x N line)."""

    name: str
    unit: str
    values: Sequence[float | None]
    target: Sequence[float | None] | None = None
    target_name: str = "target"


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top`` (steps of 1, 2 or 5 times a power of ten),
    so the axis reads at a glance."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _num(v: float) -> str:
    return f"{v:.1f}"


def _label(v: float) -> str:
    """A tick or point label: no decimals for large values, a few for small ones."""
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def _text(
    x: float, y: float, text: str, anchor: str = "middle", size: int = 12, **extra: object
) -> str:
    attrs = "".join(f" {k.replace('_', '-')}={quoteattr(str(v))}" for k, v in extra.items())
    return (
        f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" font-size="{size}"'
        f"{attrs}>{escape(text)}</text>"
    )


def line_chart(
    title: str,
    subtitle: str,
    x_label: str,
    labels: Sequence[str],
    series: Sequence[Series],
    missing: Sequence[str] | None = None,
) -> str:
    """The chart as an SVG document (a string; well-formed XML: every text is escaped).
    ``missing``: per x label, what to write where a series has no value."""
    why = _notes(labels, series, missing)
    height = TOP + len(series) * (PANEL_HEIGHT + GAP) + 8
    inner_w = WIDTH - LEFT - RIGHT
    step = inner_w / len(labels)
    xs = [LEFT + step * (i + 0.5) for i in range(len(labels))]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>',
        _text(WIDTH / 2, 24, title, size=15, font_weight="bold"),
        _text(WIDTH / 2, 44, subtitle, size=12, fill="#444444"),
    ]
    for i, s in enumerate(series):
        out += _panel(s, COLOURS[i % len(COLOURS)], TOP + i * (PANEL_HEIGHT + GAP), xs, labels, why)
    last_bottom = TOP + len(series) * (PANEL_HEIGHT + GAP) - GAP
    out.append(_text(LEFT + inner_w / 2, last_bottom + 36, x_label, size=12))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _notes(
    labels: Sequence[str], series: Sequence[Series], missing: Sequence[str] | None
) -> list[str]:
    """Per x label, the note for a missing value; refuses series that do not fit the
    labels."""
    if not labels:
        raise ValueError("a chart needs at least one x label")
    why = list(missing) if missing is not None else ["no result"] * len(labels)
    if len(why) != len(labels):
        raise ValueError(f"{len(why)} notes for {len(labels)} labels")
    for s in series:
        if len(s.values) != len(labels):
            raise ValueError(f"{s.name}: {len(s.values)} values for {len(labels)} labels")
        if s.target is not None and len(s.target) != len(labels):
            raise ValueError(f"{s.name}: {len(s.target)} targets for {len(labels)} labels")
    return why


def _panel(
    s: Series,
    colour: str,
    top: float,
    xs: list[float],
    labels: Sequence[str],
    why: list[str],
) -> list[str]:
    """One series' panel: its axes and ticks, its line (broken where a value is missing),
    its points with their values, and the x labels."""
    bottom = top + PANEL_HEIGHT
    known = [v for v in (*s.values, *(s.target or ())) if v is not None and math.isfinite(v)]
    ticks = nice_ticks(max(known) if known else 1.0)
    scale = PANEL_HEIGHT / ticks[-1]

    def y_of(v: float) -> float:
        return bottom - v * scale

    out = [f'<g class="panel" data-series={quoteattr(s.name)}>']
    out.append(_text(LEFT, top - 10, f"{s.name} ({s.unit})", anchor="start", size=13))
    out += _axes(ticks, top, bottom, y_of)
    out += _line(s.values, colour, xs, y_of)
    if s.target is not None:
        out.append(f'<g class="target" data-target={quoteattr(s.target_name)}>')
        out += _line(s.target, "#555555", xs, y_of, dashed=True)
        for x, t in zip(xs, s.target, strict=True):
            if t is not None and math.isfinite(t):
                out.append(
                    f'<circle cx="{_num(x)}" cy="{_num(y_of(t))}" r="2" fill="#555555">'
                    f"<title>{escape(f'{s.target_name}: {_label(t)} {s.unit}')}</title></circle>"
                )
        out.append(_text(WIDTH - RIGHT, top - 10, f"- - - {s.target_name}", "end", 11))
        out.append("</g>")
    for x, v, name, note in zip(xs, s.values, labels, why, strict=True):
        if v is None or not math.isfinite(v):
            out.append(_text(x, bottom - 8, note, size=10, fill="#888888"))
            continue
        y = y_of(v)
        out.append(
            f'<circle cx="{_num(x)}" cy="{_num(y)}" r="4" fill="{colour}">'
            f"<title>{escape(f'{name}: {_label(v)} {s.unit}')}</title></circle>"
        )
        out.append(_text(x, y - 9, _label(v), size=10))
    for x, name in zip(xs, labels, strict=True):
        out.append(_text(x, bottom + 16, name, size=11))
    out.append("</g>")
    return out


def _axes(
    ticks: list[float], top: float, bottom: float, y_of: Callable[[float], float]
) -> list[str]:
    """A panel's grid lines with their tick labels, and its two axes."""
    out = []
    for t in ticks:
        y = y_of(t)
        out.append(
            f'<line x1="{LEFT}" y1="{_num(y)}" x2="{WIDTH - RIGHT}" y2="{_num(y)}" '
            f'stroke="#dddddd" stroke-width="1"/>'
        )
        out.append(_text(LEFT - 6, y + 4, _label(t), anchor="end", size=11))
    out.append(
        f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" '
        f'stroke="black" stroke-width="1"/>'
    )
    out.append(
        f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" stroke="black" stroke-width="1"/>'
    )
    return out


def _line(
    values: Sequence[float | None],
    colour: str,
    xs: list[float],
    y_of: Callable[[float], float],
    dashed: bool = False,
) -> list[str]:
    """A series' line, one polyline per unbroken stretch of values."""
    runs: list[list[str]] = [[]]
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    for x, v in zip(xs, values, strict=True):
        if v is None or not math.isfinite(v):
            runs.append([])
        else:
            runs[-1].append(f"{_num(x)},{_num(y_of(v))}")
    return [
        f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        for run in runs
        if len(run) > 1
    ]

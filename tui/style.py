"""Colours, glyphs and human formats shared by every panel.

One table maps a phase group to its colour so the timeline, its legend and the memory bar can
never disagree; sizes stay bytes until they reach this module (the architecture's "humans see
GiB only at the edges").
"""

from __future__ import annotations

from provetop.base.units import fmt_bytes
from provetop.recordings.schema import PHASES

# phase group -> (legend label, colour). Colours chosen to read on dark and light backgrounds.
GROUPS: dict[str, tuple[str, str]] = {
    "host": ("host", "#8a8a8a"),
    "prestage": ("pre-stage", "#af87ff"),
    "upload": ("upload", "#00afaf"),
    "mutex_wait": ("mutex wait", "#d7af00"),
    "h_step": ("H step", "#5fd75f"),
    "msm": ("MSM", "#5f87ff"),
    "copy_back": ("copy-back", "#d75fd7"),
    "check": ("check", "#d7d7af"),
    "fallback": ("fallback", "#ff8700"),
}
FAILURE_COLOUR = "#ff3030"
GPU_BUSY = "#5fd75f"
UPLOAD_BUSY = "#00afaf"
IDLE_GPU = "#d75f5f"
MARKER_COLOUR = "#00afff"

# memory bar parts: (key, label, colour, glyph)
MEMORY_PARTS: tuple[tuple[str, str, str, str], ...] = (
    ("async_used", "async used", "#5f87ff", "█"),
    ("async_free", "async reserved free", "#ff5f5f", "▓"),
    ("sync_used", "sync used", "#5fd75f", "█"),
    ("sync_cached", "sync cached", "#ff8700", "▓"),
    ("ballast", "ballast", "#8a8a8a", "▒"),
    ("other", "other", "#af87ff", "▒"),
    ("free", "free", "#3a3a3a", "░"),
)


def phase_group(phase: str) -> str:
    """The colour group of a phase name (unknown phases draw as host work)."""
    spec = PHASES.get(phase)
    return spec.group if spec else "host"


def group_colour(group: str) -> str:
    return GROUPS.get(group, GROUPS["host"])[1]


def size(n: float | int | None, unit: bool = True) -> str:
    """Bytes as the rest of the product writes them (:func:`provetop.base.units.fmt_bytes`), with
    the dashboard's dash for a size not known."""
    return fmt_bytes(n, unit=unit, unknown="–")


def duration_ns(ns: int | float | None) -> str:
    """A span for humans: 850 ms, 12.3 s, 4m05s, 1h02m."""
    if ns is None:
        return "–"
    s = ns / 1e9
    if s < 1:
        return f"{ns / 1e6:.0f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def clock(ns: int | float) -> str:
    """Elapsed time since the engine's start as h:mm:ss.s (m:ss.s under an hour)."""
    s = max(0.0, ns / 1e9)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{int(h)}:{int(m):02d}:{sec:04.1f}"
    return f"{int(m)}:{sec:04.1f}"


def ms(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 10_000:
        return f"{value / 1000:.1f}s"
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"

"""One line for a ``progress`` event: the engine's stderr and the dashboard's header say the
same thing, so the words are made in one place (the events come from
``provetop.engine.telemetry.progress``)."""

from __future__ import annotations

from typing import Any


def progress_line(event: dict[str, Any]) -> str:
    """One line for a ``progress`` event (the engine's stderr, the dashboard's header):
    label, done/total, percent, rate and ETA."""
    done, total, unit = int(event["done"]), int(event["total"]), str(event["unit"])
    pct = 100.0 * done / total if total else 100.0
    shown = "GB" if unit == "bytes" else unit
    text = f"{event['label']}: {_count(done, unit)}/{_count(total, unit)} {shown} ({pct:.0f} %)"
    if done >= total:
        return text + f", done in {_seconds(float(event.get('elapsed_s') or 0.0))}"
    rate = event.get("rate")
    if rate:
        text += f", {_count(rate, unit)} {shown}/s"
    eta = event.get("eta_s")
    if eta is not None:
        text += f", ETA {_seconds(float(eta))}"
    return text


def _count(x: float, unit: str) -> str:
    if unit == "bytes":  # the unit follows: "1.2/17.0 GB"
        return f"{x / 1e9:.1f}"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e4:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def _seconds(s: float) -> str:
    if s >= 3600:
        return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
    if s >= 60:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{s:.1f} s"

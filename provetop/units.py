"""Bytes for people: the one formatter behind every size the product prints.

A leaf module (it imports nothing of ours), so the engine's start-up lines, the state's log
lines, ``summary`` and the dashboard write a size the same way: GiB with two decimals, MiB and
KiB with one, whole bytes below that (binary units, as nvidia-smi and the CUDA pools count).
"""

from __future__ import annotations

_UNITS = ((30, "GiB", "{:.2f}"), (20, "MiB", "{:.1f}"), (10, "KiB", "{:.1f}"))


def fmt_bytes(n: float | int | None, *, unit: bool = True, unknown: str = "?") -> str:
    """``n`` bytes as ``"12.00 GiB"`` (``unit=False``: the number alone, for a column whose
    heading names the unit); ``unknown`` for None or a negative count."""
    if n is None or n < 0:
        return unknown
    n = float(n)
    for shift, name, fmt in _UNITS:
        if n >= 1 << shift:
            text = fmt.format(n / (1 << shift))
            return f"{text} {name}" if unit else text
    return f"{n:.0f} B" if unit else f"{n:.0f}"

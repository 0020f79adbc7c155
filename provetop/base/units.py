"""Bytes for people: the one parser of every size a person types and the one formatter behind
every size the product prints.

A leaf module (it imports nothing of ours), so the engine's start-up lines, the state's log
lines, ``summary`` and the dashboard write a size the same way: GiB with two decimals, MiB and
KiB with one, whole bytes below that (binary units, as nvidia-smi and the CUDA pools count).
"""

from __future__ import annotations

import re

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


_PARSE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1000**4,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from "16GiB", "512MiB", "4096", "1.5G" (bare K/M/G/T are binary, KB/MB/GB/TB are
    decimal, as storage vendors print them). ValueError with the offending text otherwise."""
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _PARSE_UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 16GiB, 512MiB, 4096)")
    value = float(m.group(1)) * _PARSE_UNITS[m.group(2).lower()]
    if value < 1:
        raise ValueError(f"size must be at least one byte: {text!r}")
    return int(value)

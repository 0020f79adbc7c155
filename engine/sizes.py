"""Byte sizes at the edges: parse what a person types ("16GiB", "512 MiB", "1.5G") and print
what a person reads. Inside the engine every size is an int of bytes (architecture rule)."""

from __future__ import annotations

import re

_UNITS = {
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
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 16GiB, 512MiB, 4096)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value < 1:
        raise ValueError(f"size must be at least one byte: {text!r}")
    return int(value)

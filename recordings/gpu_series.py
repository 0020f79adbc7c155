"""Every ``gpu`` sample of a run, columnar, for the summary's medians and the Perfetto counters.

Why not the reducer's ``State.gpu_history``: that one is bounded (the dashboard draws at most an
hour), while a summary or an export covers the whole recording. This series is filled while the
recording is folded (``fold_recording(also=...)``) and costs one int64 per field per sample.
A live engine's summary, which has no recording to read, falls back to the bounded history.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from statistics import median
from typing import Any

# the numeric fields kept (processes and the rest of the event are not)
FIELDS = (
    "sm_util_pct",
    "mem_util_pct",
    "power_mw",
    "power_limit_mw",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pcie_rx_bytes_s",
    "pcie_tx_bytes_s",
)
MISSING = -1


class GpuSeries:
    """Per device: sample times and one column per field (``MISSING`` where absent)."""

    def __init__(self) -> None:
        self.t: dict[int, array[int]] = {}
        self.columns: dict[int, dict[str, array[int]]] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        """Keep ``event`` when it is a ``gpu`` sample (the ``also`` hook of a fold)."""
        if event.get("k") != "gpu" or not isinstance(event.get("device"), int):
            return
        device = event["device"]
        if device not in self.t:
            self.t[device] = array("q")
            self.columns[device] = {name: array("q") for name in FIELDS}
        self.t[device].append(int(event.get("t", 0)))
        for name, column in self.columns[device].items():
            value = event.get(name)
            column.append(int(value) if isinstance(value, int | float) else MISSING)

    @classmethod
    def of(cls, events: Iterable[dict[str, Any]]) -> GpuSeries:
        series = cls()
        for event in events:
            series(event)
        return series

    def devices(self) -> list[int]:
        return sorted(self.t)

    def values(self, device: int, name: str) -> list[int]:
        """The field's reported values on the device, in time order (absent ones skipped)."""
        return [v for v in self.columns.get(device, {}).get(name, ()) if v != MISSING]

    def medians(self) -> dict[str, dict[str, Any]]:
        """Per device (as a string key, like the summary's other per-device figures): sample
        count and the medians of SM utilisation, power and temperature, the largest power
        limit; a figure the GPU never reported is absent."""
        out: dict[str, dict[str, Any]] = {}
        for d in self.devices():
            row: dict[str, Any] = {"samples": len(self.t[d])}
            for key, name, per in (
                ("sm_util_pct", "sm_util_pct", 1),
                ("mem_util_pct", "mem_util_pct", 1),
                ("power_w", "power_mw", 1000),
                ("temp_c", "temp_c", 1),
            ):
                values = self.values(d, name)
                if values:
                    row[key] = median(values) / per if per != 1 else median(values)
            limits = self.values(d, "power_limit_mw")
            if limits:
                row["power_limit_w"] = max(limits) / 1000
            out[str(d)] = row
        return out

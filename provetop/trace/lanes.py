"""Which ``device`` index a traced process's device gets in the events, and its NVML device.

Why lanes: the reducer keeps one memory picture per ``device`` index, and several traced
processes may share one GPU (the case where one process's reserve refuses another's
allocation). So each (process, GPU) pair is a lane: the first process on a GPU gets the GPU's
NVML index, so that one traced program reads like the engine, and each further process on the
same GPU the index plus a multiple of :data:`LANE_STRIDE`. Every lane's ``memory`` event says
its ``pid`` and ``cuda_device``; its ``gpu`` events are the physical GPU's.

GPUs are matched by PCI bus id: a traced process's CUDA ordinals follow its own
CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, NVML's indices are the machine's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from provetop.base import nvml
from provetop.sources.trace.events import DeviceInfo

# The library traces device ordinals below 64 (MAX_DEVICES in its live.h): lane indices of
# further processes on one GPU step by it, so a lane's GPU is its index modulo the stride.
LANE_STRIDE = 64


@dataclass
class Lane:
    index: int  # the events' ``device``
    pid: int
    ordinal: int  # the CUDA ordinal inside that process
    gpu: int  # the NVML index (the ordinal when NVML did not match it)
    name: str
    pci_bus_id: str = ""
    nvml: nvml.NvmlDevice | None = field(default=None, repr=False)


class LaneMap:
    """(pid, CUDA ordinal) -> :class:`Lane`; thread-safe (each stream has its reader thread)."""

    def __init__(self, gpus: list[dict[str, Any]] | None = None) -> None:
        self.gpus = gpus if gpus is not None else _local_gpus()
        self._by_pci = {g["pci_bus_id"].upper(): g for g in self.gpus if g.get("pci_bus_id")}
        self._lanes: dict[tuple[int, int], Lane] = {}
        self._lock = threading.Lock()

    def see(self, pid: int, info: DeviceInfo) -> None:
        """A process's DEVICE record: its lane is made now, matched to NVML by bus id."""
        with self._lock:
            if (pid, info.ordinal) not in self._lanes:
                self._make(pid, info.ordinal, info.pci_bus_id)

    def lane(self, pid: int, ordinal: int) -> int:
        with self._lock:
            lane = self._lanes.get((pid, ordinal))
            if lane is None:  # no DEVICE record came (a library of an older stream)
                lane = self._make(pid, ordinal, "")
            return lane.index

    def lanes(self) -> list[Lane]:
        with self._lock:
            return sorted(self._lanes.values(), key=lambda lane: lane.index)

    def get(self, index: int) -> Lane | None:
        with self._lock:
            return next((lane for lane in self._lanes.values() if lane.index == index), None)

    def _make(self, pid: int, ordinal: int, pci_bus_id: str) -> Lane:
        gpu = self._by_pci.get(pci_bus_id.upper()) if pci_bus_id else None
        physical = int(gpu["index"]) if gpu is not None else ordinal
        taken = {lane.index for lane in self._lanes.values()}
        index = physical
        while index in taken:
            index += LANE_STRIDE
        name = str(gpu["name"]) if gpu is not None else f"CUDA device {ordinal}"
        lane = Lane(index, pid, ordinal, physical, f"{name} · pid {pid}", pci_bus_id)
        if gpu is not None:
            lane.nvml = nvml.NvmlDevice(pci_bus_id=str(gpu["pci_bus_id"]))
        self._lanes[(pid, ordinal)] = lane
        return lane


def _local_gpus() -> list[dict[str, Any]]:
    nv = nvml.module()
    if nv is None:
        return []
    return [{k: v for k, v in g.items() if k != "handle"} for g in nvml.local_devices(nv)]

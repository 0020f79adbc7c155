"""Memory samples: every device at a steady rate, and on demand at every allocation decision;
NVML's view of each GPU every ``--nvml-interval`` seconds (1 by default).

Why both: the steady 10 Hz series draws the pool graphs; the on-demand samples catch what a
partition does between two ticks (a tiny domain's whole GPU region can fit between them), and
they put the exact pool state next to every decision in the recording.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from provetop.engine.devices.base import Device


class SampleBus(Protocol):
    """The part of ``provetop.engine.telemetry.bus.Bus`` the sampler uses."""

    def emit(self, kind: str, /, **fields: Any) -> object: ...

    def counters(self) -> dict[str, int]: ...


class Sampler:
    """Emits ``memory`` events through ``bus``, ``counters`` once a second and, every
    ``nvml_interval`` seconds (rounded to whole ticks of the memory sampling, at least one),
    ``gpu`` (NVML's utilisation, power, temperature...)."""

    def __init__(
        self,
        bus: SampleBus,
        devices: Sequence[Device],
        hz: float = 10.0,
        nvml_interval: float = 1.0,
    ) -> None:
        self.bus = bus
        self.devices = list(devices)
        self.period = 1.0 / hz
        self.gpu_every = max(1, round(nvml_interval / self.period))  # ticks between gpu samples
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self, device: Device) -> None:
        """One sample of one device, now."""
        self.bus.emit("memory", device=device.index, **device.sample())

    def sample_all(self) -> None:
        for device in self.devices:
            self.sample(device)

    def sample_gpu(self) -> None:
        """One ``gpu`` event per device that has NVML (none on the modeled devices of the cpu
        backend); a device, or a field, NVML cannot read is left out, never an error."""
        for device in self.devices:
            nvml = getattr(device, "nvml", None)
            read = getattr(nvml, "gpu", None)
            if read is None:
                continue
            try:
                fields = read()
            except Exception:
                continue
            if fields:
                self.bus.emit("gpu", device=device.index, **fields)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ticks = 0
        per_second = max(1, round(1.0 / self.period))
        while not self._stop.wait(self.period):
            self.sample_all()
            ticks += 1
            if ticks % self.gpu_every == 0:
                self.sample_gpu()
            if ticks % per_second == 0:
                self.bus.emit("counters", **self.bus.counters())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

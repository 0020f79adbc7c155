"""What every partition of a run shares (:class:`RunContext`), and what the driver and the
steps need of each collaborator in it, as protocols.

Why protocols: the driver reaches the run through a few collaborators (the telemetry bus, the
allocation policy, the fault hooks, the kernel backend, the device). Naming what it asks of
each keeps the real ones, the tests' stand-ins and a future backend interchangeable, and lets
a type checker say when a step asks for something no collaborator promises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from provetop.engine.devices.base import Device
from provetop.engine.memory.allocator import Decision, Footprint
from provetop.engine.memory.plan import RESIDENT, MemoryPlan
from provetop.engine.settings.config import EngineConfig
from provetop.engine.settings.tuning import Tuning
from provetop.engine.spec.srs import Srs
from provetop.engine.spec.workload import QuerySizes
from provetop.engine.telemetry.bus import Clock
from provetop.engine.telemetry.control import Controls
from provetop.kernels.backend import KernelBackend


class Emit(Protocol):
    """Emits one event of ``kind`` with its fields (stamped by the bus); never blocks."""

    def __call__(self, kind: str, /, **fields: Any) -> Any: ...


class EventBus(Protocol):
    """What the engine asks of the telemetry bus (``provetop.engine.telemetry.bus.Bus``): events
    now,
    events at a time the caller measured (the mutex's), and the clock those times count
    from."""

    @property
    def clock(self) -> Clock: ...

    def emit(self, kind: str, /, **fields: Any) -> Any: ...

    def emit_at(self, t: int, kind: str, /, **fields: Any) -> Any: ...


class Policy(Protocol):
    """An allocation policy (``provetop.engine.memory.allocator``: naive, aware, lazy aware)."""

    @property
    def name(self) -> str: ...

    @property
    def fallback_tries(self) -> int:
        """How many times a refused fallback upload is tried inside one attempt."""
        ...

    def prestage(
        self, device: Device, fp: Footprint, forced: bool, reserved: int = 0
    ) -> Decision: ...

    def fallback_chunk(self, device: Device, fp: Footprint, working: int) -> Decision: ...

    def reclaim_cache(self, device: Device, need: int) -> Decision | None: ...


class FaultHooks(Protocol):
    """Where injected faults fire (``provetop.engine.partition.faults.FaultInjector``)."""

    def on_phase(self, phase: str, device: Device, where: dict[str, int]) -> None: ...

    def on_alloc(self, device: Device, nbytes: int, pool: str, site: str) -> None: ...


@dataclass
class RunContext:
    """What every partition of a run shares (read-only for the pipeline, except controls)."""

    config: EngineConfig
    backend: KernelBackend
    srs: Srs
    sizes: QuerySizes
    footprint: Footprint
    policy: Policy
    bus: EventBus
    controls: Controls
    sample: Callable[[Device], None]  # emit a memory sample of the device now
    faults: FaultHooks | None = None  # None: no injection
    tuning: Tuning = field(default_factory=Tuning)  # the run's PROVETOP_* settings
    plan: MemoryPlan = RESIDENT  # how the device's memory is used (provetop.engine.memory.plan)
    # True once the run is stopping: the start-up steps (the SRS on CUDA) end between chunks
    stopping: Callable[[], bool] = lambda: False

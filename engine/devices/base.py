"""What the engine needs from a device's memory, whatever the hardware.

Why an interface: the phantom OOM lives in the gap between two allocators on one device, so the
pipeline must allocate through the same three doors on every backend and be able to ask the
same questions afterwards:

- ``raw``: plain cudaMalloc / cudaFree (the seed's pre-stage buffers, ``dev_ptr_t``);
- ``sync``: a caching pool over cudaMalloc (CuPy's ``MemoryPool``): frees are cached, a miss
  that the driver refuses first empties the cache and retries;
- ``async``: the stream-ordered pool (cudaMallocAsync, release threshold UINT64_MAX): frees
  stay reserved by the pool until :meth:`Device.trim`; the other two cannot use that memory.

``sample()`` returns the ``memory`` event's fields (``provetop.recordings.schema.MEMORY_FIELDS``).
The
cpu backend implements this with a model (``provetop.engine.devices.modeled``); the cuda backend
with
CuPy's pools and NVML.
"""

from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from provetop.engine.devices.cuda import CudaDevice

import numpy as np

from provetop.kernels.backend import Array

POOLS = ("raw", "sync", "async")
_ids = itertools.count(1)


class DeviceOOM(MemoryError):
    """An allocation the device refused. Carries what a fault event needs."""

    injected = False  # True on a refusal made on purpose (provetop.engine.partition.faults)

    def __init__(self, requested: int, pool: str, site: str, pools: dict[str, Any]) -> None:
        self.requested = requested
        self.pool = pool
        self.site = site
        self.pools = pools
        super().__init__(
            f"out of memory: {pool} allocation of {requested} bytes for {site} "
            f"(driver free {pools.get('driver_free')})"
        )


class PhaseTimer(Protocol):
    """Device time of one phase: ``start()`` as it begins, ``stop()`` -> milliseconds."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


@dataclass
class Block:
    """One live allocation. ``size`` is what the pool charged (rounded)."""

    pool: str
    size: int
    requested: int
    site: str
    id: int = field(default_factory=lambda: next(_ids))
    handle: Any = None  # backend object (a CuPy memory pointer); None on the model
    freed: bool = False


class Device(ABC):
    """One device's memory: allocate, free, trim, ask. Thread-safe."""

    index: int
    name: str
    capacity: int  # bytes the device offers this run (after ballast)
    modeled: bool

    @abstractmethod
    def malloc(self, nbytes: int, pool: str, site: str) -> Block:
        """Allocate ``nbytes`` from ``pool`` (one of :data:`POOLS`); raise :class:`DeviceOOM`."""

    @abstractmethod
    def free(self, block: Block) -> None:
        """Return a block to where it came from (idempotent)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for the device's streams, so stream-ordered frees are observed (before trim)."""

    @abstractmethod
    def trim(self, pools: tuple[str, ...] = ("async", "sync")) -> int:
        """Give cached/reserved-but-unused memory back to the driver; return bytes released."""

    @abstractmethod
    def mem_info(self) -> tuple[int, int]:
        """(free, total) as cudaMemGetInfo reports them."""

    @abstractmethod
    def sample(self) -> dict[str, Any]:
        """The ``memory`` event's fields (without ``device``), every MEMORY_FIELDS key set."""

    # Subclasses set these in __init__: the lock that guards their counters, and the host
    # bytes currently pinned or registered for uploads.
    _lock: threading.RLock
    pinned_host: int

    def pin(self, nbytes: int) -> None:
        """Account host memory pinned or registered for uploads."""
        with self._lock:
            self.pinned_host += int(nbytes)

    def unpin(self, nbytes: int) -> None:
        """Undo :meth:`pin`."""
        with self._lock:
            self.pinned_host = max(0, self.pinned_host - int(nbytes))

    @abstractmethod
    def upload(
        self,
        host: np.ndarray,
        block: Block,
        *,
        offset: int = 0,
        chunk: int | None = None,
        pinned: bool = False,
    ) -> Array:
        """Copy the host array ``host`` into ``block`` at byte ``offset`` (in pieces of at most
        ``chunk`` bytes when given) and return the device-side array the kernels take.
        ``pinned``: the caller's buffer is page-locked already (a pinned pool), so a device
        that registers host memory for the copy must not try to."""

    @abstractmethod
    def download(self, array: Array) -> np.ndarray:
        """A host (numpy) copy of a device-side array."""

    def round(self, nbytes: int) -> int:
        """What a pool charges for ``nbytes`` (CuPy rounds to 512 bytes)."""
        return max(512, -(-int(nbytes) // 512) * 512)

    def describe(self) -> dict[str, Any]:
        """The entry of ``hello.devices``."""
        return {
            "index": self.index,
            "name": self.name,
            "capacity": self.capacity,
            "modeled": self.modeled,
        }

    # -- what only a device with streams has (a modeled device answers None, or nothing) ------

    @property
    def cuda(self) -> CudaDevice | None:
        """The device's CUDA side (streams, events, the kernels' arguments), or None: on a
        modeled device the steps that need one take the host's way."""
        return None

    def gpu_timer(self) -> PhaseTimer | None:
        """Device time of a kernel phase, or None where the device keeps none."""
        return None

    def copy_timer(self) -> PhaseTimer | None:
        """Device time of a phase's copies to the device, or None where it keeps none."""
        return None

    def close(self) -> None:  # noqa: B027 (optional: a modeled device holds nothing)
        """Give back what the device holds for the run (a real device's ballast)."""

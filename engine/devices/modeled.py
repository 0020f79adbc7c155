"""The cpu backend's device memory: a model of one GPU's pools, fed by real sizes.

Why a model: the phantom OOM is a property of allocator bookkeeping, not of silicon, so it can
be reproduced exactly on any machine. The pipeline asks this model for the same allocations it
would make on a GPU, with the byte counts of the arrays the partition really holds (a, b, c,
H, MSM scratch), and the model answers as CUDA and CuPy would (``docs`` in
``../shared/docs/cuda-memory.md``):

- cudaMalloc (``raw``) fails when the driver's free memory is short, whatever the pools cache;
- the ``sync`` caching pool reuses its cached blocks, and on a driver refusal frees its whole
  cache and retries once (CuPy ``MemoryPool``);
- the ``async`` pool serves from its reserved-but-unused bytes first, grows from the driver
  otherwise, and keeps everything reserved after frees (release threshold UINT64_MAX) until
  trimmed; on a refusal it "synchronises" and retries, but never trims (CuPy
  ``MemoryAsyncPool``);
- driver free = capacity - ballast - raw - sync pool (used + cached) - async reserved.

There is no fragmentation in the model (``largest_alloc`` = driver free). Every sample carries
``modeled: True``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from provetop.base.units import fmt_bytes
from provetop.engine.devices.base import POOLS, Block, Device, DeviceOOM
from provetop.kernels.backend import Array


class ModeledDevice(Device):
    """A modeled device of ``capacity`` bytes; ``physical`` (>= capacity) is the card the
    model pretends to be, the difference is held as ballast (``--device-memory``)."""

    def __init__(self, index: int, capacity: int, physical: int | None = None) -> None:
        self.index = index
        self.capacity = int(capacity)
        self.physical = int(max(physical or capacity, capacity))
        self.ballast = self.physical - self.capacity
        self.modeled = True
        # the capacity in the unit that shows it (the phantom preset's is below 1 MiB) and the
        # word "modeled" twice: the name is what every screen shows of the device
        self.name = f"modeled device {index} ({fmt_bytes(self.capacity)} modeled, cpu backend)"
        self._lock = threading.RLock()
        self.raw_used = 0
        self.sync_used = 0
        self.sync_cache: list[int] = []  # sizes of cached free blocks
        self.async_used = 0
        self.async_reserved = 0
        self.async_high = 0
        self.pinned_host = 0
        self.live: dict[int, Block] = {}

    # -- accounting ---------------------------------------------------------------------------

    def _driver_free(self) -> int:
        held = self.raw_used + self.sync_used + sum(self.sync_cache) + self.async_reserved
        return self.physical - self.ballast - held

    def malloc(self, nbytes: int, pool: str, site: str) -> Block:
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}")
        size = self.round(nbytes)
        with self._lock:
            if pool == "raw":
                if self._driver_free() < size:
                    raise DeviceOOM(int(nbytes), pool, site, self._sample())
                self.raw_used += size
            elif pool == "sync":
                self._sync_malloc(size, int(nbytes), site)
                size = self._last_sync_size
            else:
                free_in_pool = self.async_reserved - self.async_used
                grow = max(0, size - free_in_pool)
                if grow and self._driver_free() < grow:
                    raise DeviceOOM(int(nbytes), pool, site, self._sample())
                self.async_reserved += grow
                self.async_used += size
                self.async_high = max(self.async_high, self.async_reserved)
            block = Block(pool=pool, size=size, requested=int(nbytes), site=site)
            self.live[block.id] = block
            return block

    def _sync_malloc(self, size: int, requested: int, site: str) -> None:
        fits = [s for s in self.sync_cache if s >= size]
        if fits:  # best fit from the cache (CuPy splits; the model charges the whole block)
            best = min(fits)
            self.sync_cache.remove(best)
            self.sync_used += best
            self._last_sync_size = best
            return
        if self._driver_free() < size:
            self.sync_cache.clear()  # CuPy: free_all_blocks() and retry once
            if self._driver_free() < size:
                raise DeviceOOM(requested, "sync", site, self._sample())
        self.sync_used += size
        self._last_sync_size = size

    def free(self, block: Block) -> None:
        with self._lock:
            if block.freed:
                return
            block.freed = True
            self.live.pop(block.id, None)
            if block.pool == "raw":
                self.raw_used -= block.size
            elif block.pool == "sync":
                self.sync_used -= block.size
                self.sync_cache.append(block.size)
            else:
                self.async_used -= block.size

    def synchronize(self) -> None:
        """Modeled frees complete at once; nothing to wait for."""

    def trim(self, pools: tuple[str, ...] = ("async", "sync")) -> int:
        with self._lock:
            released = 0
            if "async" in pools:
                released += self.async_reserved - self.async_used
                self.async_reserved = self.async_used
            if "sync" in pools:
                released += sum(self.sync_cache)
                self.sync_cache.clear()
            return released

    def mem_info(self) -> tuple[int, int]:
        with self._lock:
            return self._driver_free(), self.physical

    def sample(self) -> dict[str, Any]:
        with self._lock:
            return self._sample()

    def _sample(self) -> dict[str, Any]:
        free = self._driver_free()
        used = self.physical - free
        return {
            "sync_used": self.raw_used + self.sync_used,
            "sync_cached": sum(self.sync_cache),
            "async_used": self.async_used,
            "async_reserved": self.async_reserved,
            "async_high": self.async_high,
            "pinned_host": self.pinned_host,
            "ballast": self.ballast,
            "driver_free": free,
            "driver_total": self.physical,
            "largest_alloc": free,
            "nvml_used": used,
            "nvml_free": free,
            "nvml_total": self.physical,
            "process_used": used,
            "modeled": True,
        }

    def upload(
        self,
        host: np.ndarray,
        block: Block,
        *,
        offset: int = 0,
        chunk: int | None = None,
        pinned: bool = False,
    ) -> np.ndarray:
        """A real copy of ``host`` (the cpu backend's "device" is host memory), made piece by
        piece when ``chunk`` is given, so the upload phases cost what a copy of those bytes
        costs. The block is only checked for room: the model keeps no bytes in it."""
        nbytes = int(host.nbytes)
        if offset < 0 or offset + nbytes > block.size or block.freed:
            raise ValueError(f"upload of {nbytes} bytes at {offset} does not fit block {block.id}")
        out = np.empty_like(host)
        if not chunk or chunk >= nbytes or host.ndim == 0 or len(host) == 0:
            out[...] = host
            return out
        rows = max(1, chunk // max(1, nbytes // len(host)))
        for start in range(0, len(host), rows):
            out[start : start + rows] = host[start : start + rows]
        return out

    def download(self, array: Array) -> np.ndarray:
        return np.array(array, copy=True)

"""A real GPU behind the ``Device`` interface: CuPy's pools, the driver and NVML.

Why these three doors (``provetop.engine.devices.base``), on real memory:

- ``raw``: plain ``cudaMalloc``/``cudaFree`` (``cupy.cuda.runtime.malloc``), freed exactly at
  :meth:`CudaDevice.free` and never cached: the device-resident SRS. (The seed's pre-stage
  buffers were such blocks; on the H200 a 12 GiB ``cudaMalloc`` or ``cudaFree`` per partition
  waited for the neighbour's work, so the CUDA runner takes them from ``sync``.)
- ``sync``: CuPy's caching pool (``cupy.cuda.MemoryPool``, cudaMalloc underneath): the
  pre-stage buffers, reused from partition to partition, and anything CuPy allocates without
  an explicit allocator (tables, twiddles). Memory cached here is invisible to the driver: the
  phantom OOM of a refused stream-ordered allocation, which only a trim ends;
- ``async``: ``cupy.cuda.MemoryAsyncPool`` over the device's default stream-ordered pool
  (cudaMallocAsync). Constructing it sets the release threshold to UINT64_MAX, so freed memory
  stays reserved until :meth:`CudaDevice.trim` (``cudaMemPoolTrimTo``). The kernels draw their
  scratch (NTT work buffers, MSM buckets and sorts, H's output) through :meth:`allocator`,
  which is this pool with OOMs turned into :class:`DeviceOOM`.

Streams: each worker thread gets, on first use, its own non-blocking compute stream and an
upload stream (``kernel_args``); an upload records an event that the compute stream waits on.
:meth:`synchronize` waits for the calling worker's own streams only: that is what makes *its*
stream-ordered frees observed before a trim (``cudaMemPoolTrimTo`` does not synchronise; frees
not yet observed on the host "can count as outstanding"), and it never waits for the other
worker's kernels. A thread with no streams of its own (the engine's, a ``trim`` command)
synchronises the whole device.

Ballast (``--device-memory`` on a larger card): one plain cudaMalloc that makes the driver's
free memory what a card of that size would have; shown as ``ballast`` in every sample.

Host registration: uploads register the host array (``cudaHostRegister``) so the copy is a
real asynchronous DMA, and unregister it once the copy is done; a refusal (for example "already
registered") falls back to a pageable copy and is counted and reported, never fatal.

CuPy is imported lazily (``require_cupy``); the pure helpers at the top are tested on CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from provetop.base.nvml import NvmlDevice
from provetop.engine.devices.base import POOLS, Block, Device, DeviceOOM
from provetop.kernels.backend import Array
from provetop.kernels.cuda.runtime import require_cupy

# CuPy has no type information: its objects are named here for the reader, not checked
Stream = Any  # cupy.cuda.Stream
Event = Any  # cupy.cuda.Event
Allocator = Callable[[int], Any]  # nbytes -> cupy.cuda.MemoryPointer

# cudaMemPoolAttr values (driver_types.h)
ATTR_RESERVED_CURRENT, ATTR_RESERVED_HIGH, ATTR_USED_CURRENT, ATTR_USED_HIGH = 5, 6, 7, 8
CUDA_ERROR_MEMORY_ALLOCATION = 2
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
BALLAST_HEADROOM = 256 << 20  # what a ballast must leave free beyond the asked capacity's use
H2D = 1  # cudaMemcpyHostToDevice
# The device's greatest stream priority, asked for without reading the range: CuPy 14.2's
# runtime module wraps no cudaDeviceGetStreamPriorityRange, and cudaStreamCreateWithPriority
# clamps a priority beyond the range to its nearest end. Ranges are a few levels ([-5, 0] on
# Ampere and Hopper), so any value far below them is the greatest; the stream's .priority
# (cudaStreamGetPriority) reads back what the driver chose.
GREATEST_PRIORITY = -(1 << 10)


class CudaDeviceError(RuntimeError):
    """The device cannot be set up as asked (one line, for the CLI)."""


# -- pure helpers (no CuPy; tested on CPU) ------------------------------------------------------


@dataclass(frozen=True)
class BallastPlan:
    """How much to hold so the engine sees a card of ``capacity`` bytes."""

    ballast: int
    capacity: int
    note: str | None = None


def plan_ballast(requested: int | None, free: int, total: int) -> BallastPlan:
    """``requested`` = ``--device-memory`` (None: the whole card). The ballast is
    ``total - requested``: the driver's total stays the physical card's, its free memory drops
    by exactly the difference, as on a smaller card with the same context overhead. Raises
    :class:`CudaDeviceError` when the ballast cannot fit in what is free now."""
    if requested is None or requested >= total:
        note = None
        if requested is not None and requested > total:
            note = f"--device-memory {requested} exceeds the card's {total} bytes: using the card"
        return BallastPlan(0, total, note)
    ballast = total - int(requested)
    if ballast > free - BALLAST_HEADROOM:
        raise CudaDeviceError(
            f"--device-memory {requested}: a ballast of {ballast} bytes does not fit in the "
            f"{free} bytes free on this card (other processes hold memory?)"
        )
    return BallastPlan(ballast, int(requested))


def is_oom(exc: BaseException) -> bool:
    """True for the exceptions CuPy raises when the device refuses memory."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    status = getattr(exc, "status", None)
    return status == CUDA_ERROR_MEMORY_ALLOCATION


def register_failure_reason(exc: BaseException) -> str:
    """One line for a refused ``cudaHostRegister`` (the upload then copies from pageable
    memory)."""
    status = getattr(exc, "status", None)
    if status == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
        return "host memory already registered: pageable copy"
    return f"cudaHostRegister refused ({type(exc).__name__}: {exc}): pageable copy"


def pool_sample(
    *,
    raw_used: int,
    sync_used: int,
    sync_cached: int,
    async_attrs: dict[int, int],
    pinned_host: int,
    ballast: int,
    free: int,
    total: int,
    nvml: dict[str, int],
    counters: dict[str, int],
) -> dict[str, Any]:
    """The ``memory`` event's fields from the raw readings (schema MEMORY_FIELDS plus the
    extra keys ``raw_used``, ``async_used_high`` and the ``counters`` of registrations)."""
    out: dict[str, Any] = {
        "sync_used": int(raw_used + sync_used),
        "sync_cached": int(sync_cached),
        "async_used": int(async_attrs.get(ATTR_USED_CURRENT, 0)),
        "async_reserved": int(async_attrs.get(ATTR_RESERVED_CURRENT, 0)),
        "async_high": int(async_attrs.get(ATTR_RESERVED_HIGH, 0)),
        "async_used_high": int(async_attrs.get(ATTR_USED_HIGH, 0)),
        "raw_used": int(raw_used),
        "pinned_host": int(pinned_host),
        "ballast": int(ballast),
        "driver_free": int(free),
        "driver_total": int(total),
        "modeled": False,
    }
    out.update({k: int(v) for k, v in nvml.items()})
    out.update({k: int(v) for k, v in counters.items()})
    return out


def gpu_visible() -> bool:
    """A cheap check, without CuPy, that this host exposes an NVIDIA GPU."""
    import os

    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")


def choose_backend(
    requested: str | None, probe: Callable[[], str | None] | None = None
) -> tuple[str, str]:
    """(backend, one-line reason) for ``--backend`` (None = default: cuda when a GPU is
    visible and CuPy can use it, cpu otherwise). ``probe()`` returns None when CUDA is usable
    or the reason it is not (default: ``provetop.kernels.cuda.runtime.require_cupy``)."""
    if requested:
        return requested, f"backend {requested} (asked for)"
    if probe is None:

        def probe() -> str | None:
            if not gpu_visible():
                return "no GPU visible"
            try:
                require_cupy()
            except Exception as exc:
                return str(exc)
            return None

    why = probe()
    if why is None:
        return "cuda", "backend cuda (default: a GPU is visible)"
    return "cpu", f"backend cpu (default: {why}), device memory modeled"


# -- the device -------------------------------------------------------------------------------


@dataclass
class _WorkerStreams:
    compute: Stream
    upload: Stream
    # the synthetic witness's kernels run outside the mutex, beside the neighbour's GPU region;
    # at the device's greatest priority their few short blocks are scheduled ahead of the
    # neighbour's queued MSM blocks instead of after them (see engine/spec/witness_gpu.py)
    synthesis: Stream


@dataclass
class _Counters:
    register_ok: int = 0
    register_fallback: int = 0
    last_register_failure: str | None = None
    ooms: dict[str, int] = field(default_factory=dict)


class CudaDevice(Device):
    """One CUDA device with real pools (see the module docstring). ``capacity`` is
    ``--device-memory`` (None: the whole card)."""

    kernels_allocate = True  # the kernels draw their scratch through allocator(); see pipeline

    def __init__(self, index: int, capacity: int | None = None, *, cupy: Any = None) -> None:
        if cupy is None:
            cupy = require_cupy()
        self.cupy = cupy
        self.rt = cupy.cuda.runtime
        self.index = int(index)
        self.modeled = False
        if not 0 <= self.index < self.rt.getDeviceCount():
            raise CudaDeviceError(
                f"--devices: no CUDA device {index} ({self.rt.getDeviceCount()} visible)"
            )
        self.dev = cupy.cuda.Device(self.index)
        self._lock = threading.RLock()
        self._tl = threading.local()
        self.raw_used = 0
        self.pinned_host = 0
        self.counters = _Counters()
        with self.dev:
            self.sync_pool = cupy.get_default_memory_pool()
            self.async_pool = cupy.cuda.MemoryAsyncPool()  # release threshold -> UINT64_MAX
            self.pool_handle = self.rt.deviceGetDefaultMemPool(self.index)
            free, total = self.rt.memGetInfo()
            props = self.rt.getDeviceProperties(self.index)
            self.pci_bus_id = self.dev.pci_bus_id
        plan = plan_ballast(capacity, free, total)
        self.note = plan.note
        self.physical = int(total)
        self.ballast = plan.ballast
        self.capacity = plan.capacity
        self._ballast_mem = None
        if self.ballast:
            with self.dev:
                self._ballast_mem = cupy.cuda.Memory(self.ballast)  # one plain cudaMalloc
        raw_name = props.get("name", b"GPU")
        gpu = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
        gib = self.capacity / (1 << 30)
        self.name = f"{gpu} #{self.index} ({gib:.2f} GiB" + (
            f", {self.ballast / (1 << 30):.2f} GiB ballast)" if self.ballast else ")"
        )
        self.nvml = NvmlDevice(pci_bus_id=self.pci_bus_id)

    # -- streams ------------------------------------------------------------------------------

    @property
    def cuda(self) -> CudaDevice:
        """This device is its own CUDA side (``Device.cuda``)."""
        return self

    def streams(self) -> _WorkerStreams:
        """The calling thread's compute and upload streams (created on first use), with this
        device made current for the thread on every call.

        Why every call: CuPy's ``with Device`` restores, on exit, the device that was current
        at entry, and undoes a ``use()`` made inside it. A thread whose first call came from
        inside ``with self.dev`` (an async ``malloc``, a check) was left on device 0; its
        later events, ``_state()`` kernels and NTT tables then belonged to device 0 while its
        streams belonged to this one (only on a device other than 0: a look-ahead worker whose
        first partition fell back). Every kernel call, copy and timer of a worker passes
        through here first, so the thread is on this device whenever it launches."""
        st = getattr(self._tl, "streams", None)
        if self.rt.getDevice() != self.index:
            self.dev.use()
        if st is None:
            # The synthesis stream gets the greatest priority, the compute stream the default,
            # 0, the least: the neighbour's witness is made beside the holder's MSMs without
            # waiting behind their blocks (its kernels are short and many).
            # decided: bench/notes/pipeline.md, c3b2654 and 64f4703
            st = _WorkerStreams(
                compute=self.cupy.cuda.Stream(non_blocking=True, priority=0),
                upload=self.cupy.cuda.Stream(non_blocking=True),
                synthesis=self.cupy.cuda.Stream(non_blocking=True, priority=GREATEST_PRIORITY),
            )
            self._tl.streams = st
        return st

    def kernel_args(self, site: str = "msm_scratch") -> dict[str, Any]:
        """``stream`` and ``allocator`` for a backend call from this worker thread (the
        synthesis has its own high-priority stream, every other site the compute stream)."""
        st = self.streams()
        stream = st.synthesis if site == "synthesis" else st.compute
        return {"stream": stream, "allocator": self.allocator(site)}

    def allocator(self, site: str) -> Allocator:
        """The stream-ordered pool as a CuPy allocator; a refusal becomes :class:`DeviceOOM`
        with the pool state (so the pipeline records an ``oom`` fault, not an exception)."""

        def alloc(nbytes: int) -> Any:
            try:
                with self.dev:
                    return self.async_pool.malloc(nbytes)
            except Exception as exc:
                if is_oom(exc):
                    self._count_oom("async")
                    raise DeviceOOM(int(nbytes), "async", site, self._sample()) from None
                raise

        return alloc

    def gpu_timer(self) -> GpuTimer:
        """A pair of CUDA events on this worker's compute stream (phase ``gpu_ms``)."""
        return GpuTimer(
            self.cupy,
            self.streams().compute,
            self._event("timer.start", timing=True),
            self._event("timer.end", timing=True),
        )

    def event(self, name: str) -> Event:
        """This thread's reusable (non-timing) CUDA event ``name``: see :meth:`_event`."""
        return self._event(name)

    def _event(self, name: str, timing: bool = False) -> Event:
        """This thread's CUDA event ``name`` on this device, made once and re-recorded ever
        after. Why not a new one per use: on the H200 (driver 580) creating an event waited for the
        device's running kernel to end, so an upload beside a neighbour's 1 s msm_h took 1.25 s for
        a 233 ms copy, and the holder stalled ~210 ms between phases (bench/notes/pipeline.md,
        "the busy fraction", H200 runs of 2026-11-29). A stream's wait on an event takes the
        record made before the wait, so re-recording later never changes a wait already queued;
        every use below is finished, or waited on, before its name is recorded again."""
        events = getattr(self._tl, "events", None)
        if events is None:
            events = self._tl.events = {}
        ev = events.get(name)
        if ev is None:
            ev = events[name] = self.cupy.cuda.Event(disable_timing=not timing)
        return ev

    def copy_ms(self) -> float:
        """Device time of this thread's :meth:`upload` copies so far, from upload-stream
        events around each copy (not around the phase: a phase also allocates and waits for
        the compute stream, and the upload stream is idle meanwhile)."""
        return float(getattr(self._tl, "copy_ms", 0.0))

    def copy_timer(self) -> CopyTimer:
        """The upload copies made between start() and stop() (phase ``gpu_ms``)."""
        return CopyTimer(self.copy_ms)

    # -- Device -------------------------------------------------------------------------------

    def malloc(self, nbytes: int, pool: str, site: str) -> Block:
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}")
        size = self.round(nbytes)
        try:
            with self.dev:
                if pool == "raw":
                    ptr = self.rt.malloc(size)
                    mem = self.cupy.cuda.memory.UnownedMemory(ptr, size, self, self.index)
                    handle = self.cupy.cuda.MemoryPointer(mem, 0)
                elif pool == "sync":
                    handle = self.sync_pool.malloc(size)
                else:  # stream-ordered on this worker's compute stream (where it is used
                    # and where CuPy frees it)
                    with self.streams().compute:
                        handle = self.async_pool.malloc(size)
        except Exception as exc:
            if is_oom(exc):
                self._count_oom(pool)
                raise DeviceOOM(int(nbytes), pool, site, self._sample()) from None
            raise
        if pool == "raw":
            with self._lock:
                self.raw_used += size
        return Block(pool=pool, size=size, requested=int(nbytes), site=site, handle=handle)

    def free(self, block: Block) -> None:
        if block.pool == "sync" and not block.freed:
            # CuPy's caching pool hands a freed block out again at once, to any thread, with
            # no stream ordering: the caller's own work on it must be over first (the H step
            # still read d_bc when a neighbour's pre-stage got it, and 4 of 5 checks failed on
            # the H200 before this wait). A plain cudaFree waits for the device by itself.
            self.synchronize()
        with self._lock:
            if block.freed:
                return
            block.freed = True
            handle, block.handle = block.handle, None
            if block.pool == "raw":
                self.raw_used -= block.size
        if block.pool == "raw" and handle is not None:
            with self.dev:
                self.rt.free(handle.ptr)  # cudaFree: waits for the device's pending work
        del handle  # sync/async: back to the pool when the last array over it goes

    def synchronize(self) -> None:
        st = getattr(self._tl, "streams", None)
        if st is not None:  # the worker's own streams; decided: bench/notes/memory.md, bd04ed3
            st.upload.synchronize()
            st.compute.synchronize()
            st.synthesis.synchronize()
        else:
            self.dev.synchronize()

    def trim(self, pools: tuple[str, ...] = ("async", "sync")) -> int:
        """Release reserved-but-unused memory; only pools that hold some are touched (a
        ``free_all_blocks`` with nothing cached would still cost cudaFree calls)."""
        released = 0
        with self.dev:
            if "async" in pools:
                before = self._attr(ATTR_RESERVED_CURRENT)
                if before > self._attr(ATTR_USED_CURRENT):
                    self.rt.memPoolTrimTo(self.pool_handle, 0)
                    released += max(0, before - self._attr(ATTR_RESERVED_CURRENT))
            if "sync" in pools:
                cached = int(self.sync_pool.free_bytes())
                if cached:
                    self.sync_pool.free_all_blocks()
                    released += max(0, cached - int(self.sync_pool.free_bytes()))
        return released

    def mem_info(self) -> tuple[int, int]:
        with self.dev:
            free, total = self.rt.memGetInfo()
        return int(free), int(total)

    def sample(self) -> dict[str, Any]:
        return self._sample()

    def _attr(self, attr: int) -> int:
        return int(self.rt.memPoolGetAttribute(self.pool_handle, attr))

    def _sample(self) -> dict[str, Any]:
        with self.dev:
            free, total = self.rt.memGetInfo()
            attrs = {
                a: self._attr(a)
                for a in (ATTR_RESERVED_CURRENT, ATTR_RESERVED_HIGH, ATTR_USED_CURRENT)
            }
            attrs[ATTR_USED_HIGH] = self._attr(ATTR_USED_HIGH)
            sync_used = int(self.sync_pool.used_bytes())
            sync_cached = int(self.sync_pool.free_bytes())
        c = self.counters
        counters = {"register_ok": c.register_ok, "register_fallback": c.register_fallback}
        return pool_sample(
            raw_used=self.raw_used,
            sync_used=sync_used,
            sync_cached=sync_cached,
            async_attrs=attrs,
            pinned_host=self.pinned_host,
            ballast=self.ballast,
            free=free,
            total=total,
            nvml=self.nvml.memory(),
            counters=counters,
        )

    def _count_oom(self, pool: str) -> None:
        with self._lock:
            self.counters.ooms[pool] = self.counters.ooms.get(pool, 0) + 1

    # -- copies -------------------------------------------------------------------------------

    def upload(
        self,
        host: np.ndarray,
        block: Block,
        *,
        offset: int = 0,
        chunk: int | None = None,
        pinned: bool = False,
    ) -> Array:
        """Copy ``host`` into ``block`` at ``offset`` on this worker's upload stream; the
        compute stream waits for it (an event), and the call returns once the copy is done
        (so the host array can be unregistered and the phase time is the copy's). Whole
        arrays go from registered host memory; with ``chunk`` they go through a pinned
        staging buffer of that size."""
        cupy = self.cupy
        host = np.ascontiguousarray(host)
        nbytes = int(host.nbytes)
        if block.freed or block.handle is None or offset < 0 or offset + nbytes > block.size:
            raise ValueError(f"upload of {nbytes} bytes at {offset} does not fit block {block.id}")
        st = self.streams()
        dst = cupy.ndarray(host.shape, dtype=host.dtype, memptr=block.handle + offset)
        # a stream-ordered block was allocated on the compute stream: the upload stream must
        # not write it before that point (the pool may hand out memory a kernel just freed)
        ready = self._event("upload.ready")
        ready.record(st.compute)
        st.upload.wait_event(ready)
        if nbytes == 0:
            return dst
        # timed on the upload stream after the wait above: the copy, not the compute stream
        begin, end = self._event("upload.begin", True), self._event("upload.end", True)
        begin.record(st.upload)
        if chunk and chunk < nbytes:
            self._upload_chunked(host, dst, int(chunk), st)
        else:
            registered = not pinned and self._register(host)
            try:
                self.rt.memcpyAsync(dst.data.ptr, host.ctypes.data, nbytes, H2D, st.upload.ptr)
                st.upload.synchronize()
            finally:
                if registered:
                    self.rt.hostUnregister(host.ctypes.data)
        end.record(st.upload)
        end.synchronize()
        self._tl.copy_ms = self.copy_ms() + float(cupy.cuda.get_elapsed_time(begin, end))
        done = self._event("upload.done")
        done.record(st.upload)
        st.compute.wait_event(done)
        return dst

    def upload_async(
        self, host: np.ndarray, block: Block, event: str = "upload_async.done"
    ) -> tuple[Array, Event]:
        """Start copying page-locked ``host`` into ``block`` on this worker's upload stream and
        return (the device array, an event recorded after the copy) at once: the caller makes
        the compute stream wait for the event when it needs the data, so kernels launched
        before that overlap the copy. Copies in flight together need distinct ``event``
        names (each name is one event per thread, re-recorded by the next call)."""
        cupy = self.cupy
        host = np.ascontiguousarray(host)
        nbytes = int(host.nbytes)
        if block.freed or block.handle is None or nbytes > block.size:
            raise ValueError(f"upload of {nbytes} bytes does not fit block {block.id}")
        if not self.is_pinned(host):
            raise ValueError("upload_async needs page-locked host memory")
        st = self.streams()
        dst = cupy.ndarray(host.shape, dtype=host.dtype, memptr=block.handle)
        ready = self._event("upload_async.ready")
        ready.record(st.compute)  # see upload: the block's allocation point on compute
        st.upload.wait_event(ready)
        if nbytes:
            self.rt.memcpyAsync(dst.data.ptr, host.ctypes.data, nbytes, H2D, st.upload.ptr)
        # the caller waits on it before this thread's next upload_async re-records it (the
        # runner: msm_l's wait, or the release's after a failure)
        done = self._event(event)
        done.record(st.upload)
        return dst, done

    def is_pinned(self, host: np.ndarray) -> bool:
        """True when ``host`` is page-locked already (a pinned pool): registering it again
        would fail, and it needs no registration."""
        try:
            attrs = self.rt.pointerGetAttributes(host.ctypes.data)
        except Exception:
            return False
        return int(getattr(attrs, "type", 0)) == 1  # cudaMemoryTypeHost

    def _register(self, host: np.ndarray) -> bool:
        try:
            self.rt.hostRegister(host.ctypes.data, int(host.nbytes), 0)
        except Exception as exc:
            with self._lock:
                self.counters.register_fallback += 1
                self.counters.last_register_failure = register_failure_reason(exc)
            return False
        with self._lock:
            self.counters.register_ok += 1
        return True

    def _upload_chunked(self, host: np.ndarray, dst: Array, chunk: int, st: _WorkerStreams) -> None:
        """Through a pinned staging buffer of ``chunk`` bytes, one piece at a time."""
        flat = host.reshape(-1).view(np.uint8)
        stage = self._staging_buffer(chunk)
        base = dst.data.ptr
        for lo in range(0, flat.size, chunk):
            hi = min(flat.size, lo + chunk)
            stage[: hi - lo] = flat[lo:hi]
            self.rt.memcpyAsync(base + lo, stage.ctypes.data, hi - lo, H2D, st.upload.ptr)
            st.upload.synchronize()  # the staging buffer is reused by the next piece

    def _staging_buffer(self, chunk: int) -> np.ndarray:
        """A pinned (cudaHostAlloc) byte buffer for this thread, grown when needed."""
        buf = getattr(self._tl, "staging", None)
        if buf is None or buf.size < chunk:
            mem = self.cupy.cuda.alloc_pinned_memory(chunk)
            buf = np.frombuffer(mem, np.uint8, chunk)
            self._tl.staging = buf
        return buf

    def download(self, array: Array) -> np.ndarray:
        if isinstance(array, np.ndarray):
            return np.array(array, copy=True)
        host: np.ndarray = array.get(stream=self.streams().compute)
        return host

    def registration_report(self) -> tuple[int, int, str | None]:
        """(registered, fell back, last failure reason) since the start."""
        c = self.counters
        return c.register_ok, c.register_fallback, c.last_register_failure

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(physical=self.physical, ballast=self.ballast, pci_bus_id=self.pci_bus_id)
        if self.nvml.error:
            d["nvml"] = self.nvml.error
        return d

    def close(self) -> None:
        """Give the ballast back and empty both pools (end of run). The ballast's cudaFree runs
        with this device current: the caller (the run thread) is on device 0, and the runtime
        documents no cudaFree of another device's memory."""
        with self.dev:
            self._ballast_mem = None
        self.synchronize()
        self.trim()


class CopyTimer:
    """Copy time accumulated by a device between start() and stop()."""

    def __init__(self, read: Callable[[], float]) -> None:
        self._read = read
        self._base = 0.0

    def start(self) -> None:
        self._base = self._read()

    def stop(self) -> float:
        return self._read() - self._base


class GpuTimer:
    """Elapsed device time between two events on one stream (the thread's own pair: a
    thread's phases run one after another, and stop() waits before the next start())."""

    def __init__(self, cupy: Any, stream: Stream, start_ev: Event, end_ev: Event) -> None:
        self.cupy = cupy
        self.stream = stream
        self.start_ev = start_ev
        self.end_ev = end_ev

    def start(self) -> None:
        self.start_ev.record(self.stream)

    def stop(self) -> float:
        """Record the end, wait for it, return milliseconds."""
        self.end_ev.record(self.stream)
        self.end_ev.synchronize()
        return float(self.cupy.cuda.get_elapsed_time(self.start_ev, self.end_ev))

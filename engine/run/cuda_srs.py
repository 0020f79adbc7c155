"""The run's SRS placed on a real device: the residency decision
(``provetop.engine.memory.residency``)
carried out and emitted.

Device queries are made straight into a ``raw`` block; host ones come from one pinned copy
shared by every device (:class:`HostSrs`: a real prover loads its parameters into host memory
once). One ``alloc`` event per query, site ``srs``, with proof/partition/worker -1: the SRS
belongs to the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from provetop.engine.devices.base import Block, Device
from provetop.engine.devices.cuda import CudaDevice
from provetop.engine.memory.allocator import Footprint
from provetop.engine.memory.residency import G1_AFFINE_BYTES, Placement, plan_residency
from provetop.engine.partition.context import EventBus
from provetop.engine.spec.srs import Srs
from provetop.engine.telemetry.progress import Progress
from provetop.kernels.cuda.host_pinned import pinned_empty

if TYPE_CHECKING:
    from provetop.kernels.cuda.backend import CudaBackend


class HostSrs:
    """The queries streamed from the host, made once into pinned memory and shared by every
    device (a real prover loads its parameters into host memory once)."""

    def __init__(self, srs: Srs, backend: CudaBackend, pin_method: str) -> None:
        self.srs = srs
        self.backend = backend
        self.pin_method = pin_method
        self._lock = threading.Lock()

    def get(self, query: str, gpu: CudaDevice, progress: Progress | None = None) -> Any:
        """The query's pinned host points, made on ``gpu`` by the first caller (counted in
        ``progress``; a later caller counts them at once, already made)."""
        with self._lock:
            pts = self.srs.points.get(query)
            m = self.srs.sizes[query]
            if pts is None:
                pts = pinned_empty((m, 12), method=self.pin_method)
                with gpu.dev:
                    self.backend.srs_powers(
                        self.srs.sigmas[query],
                        m,
                        pts,
                        chunk=SRS_CHUNK,
                        progress=None if progress is None else progress.advance,
                        **_srs_args(gpu),
                    )
                self.srs.points[query] = pts
            elif progress is not None:
                progress.advance(m)
            return pts


SRS_CHUNK = 1 << 22  # points per SRS generation launch: ~1 GiB of scratch (cuda_srs)


def _srs_args(gpu: CudaDevice) -> dict[str, Any]:
    """Stream and allocator for SRS generation on ``gpu`` (its stream-ordered pool, so the
    scratch is trimmed away before the partitions start)."""
    return {"stream": gpu.streams().compute, "allocator": gpu.allocator("srs")}


def place_device_srs(
    device: Device,
    srs: Srs,
    fp: Footprint,
    workers: int,
    host_chunk: int,
    bus: EventBus,
    host: HostSrs,
    stopping: Callable[[], bool] | None = None,
) -> tuple[dict[str, Any], list[Block], dict[str, int]]:
    """Decide where each query lives on ``device``, make it there (device queries straight
    into a ``raw`` block; host ones from the shared pinned copy) and emit one ``alloc`` event
    per query. Returns (points by query, device blocks to free at the end, streamed queries ->
    chunk points). The points made are counted in one ``progress`` step per device; between
    two chunks ``stopping()`` ends the generation
    (``provetop.engine.telemetry.progress.Stopped``)."""
    gpu = device.cuda
    if gpu is None:
        raise TypeError(f"device {device.index} has no CUDA side to make its SRS on")
    sizes = dict(srs.sizes)
    device.synchronize()
    device.trim()
    free, _ = device.mem_info()
    plan = plan_residency(sizes, free, fp, workers, host_chunk * G1_AFFINE_BYTES)
    points: dict[str, Any] = {}
    blocks: list[Block] = []
    progress = Progress(
        bus.emit,
        "device_srs",
        f"SRS on device {device.index}",
        sum(sizes[p.query] for p in plan),
        "points",
        stop=stopping,
        device=device.index,
    )
    try:
        for p in plan:
            if p.where == "device":
                points[p.query] = _make_on_device(device, gpu, srs, p, blocks, progress, host)
            else:
                points[p.query] = host.get(p.query, gpu, progress)
                device.pin(p.nbytes)
            _emit_placed(bus, device, p)
    except BaseException:  # stopped (or failed) part-way: the blocks made so far go back now
        _give_back(device, blocks)
        raise
    progress.finish()
    device.synchronize()
    device.trim()  # the generation scratch goes back before the first pre-stage decision
    streamed = {p.query: host_chunk for p in plan if p.where == "host"}
    return points, blocks, streamed


def _make_on_device(
    device: Device,
    gpu: CudaDevice,
    srs: Srs,
    p: Placement,
    blocks: list[Block],
    progress: Progress,
    host: HostSrs,
) -> Any:
    """A device query's points, made straight into a ``raw`` block (kept in ``blocks``)."""
    m = srs.sizes[p.query]
    blk = device.malloc(p.nbytes, "raw", "srs")
    blocks.append(blk)
    cupy = gpu.cupy
    arr = cupy.ndarray((m, 12), dtype=cupy.uint64, memptr=blk.handle)
    with gpu.dev:
        host.backend.srs_powers(
            srs.sigmas[p.query],
            m,
            arr,
            chunk=SRS_CHUNK,
            progress=progress.advance,
            **_srs_args(gpu),
        )
    return arr


def emit_run_alloc(bus: EventBus, device: Device, **fields: Any) -> None:
    """An ``alloc`` event of the run rather than of a partition (the SRS placement, the memory
    plan): proof, partition and worker are -1, and the device's pools are sampled with it."""
    bus.emit(
        "alloc",
        proof=-1,
        partition=-1,
        worker=-1,
        device=device.index,
        pools=device.sample(),
        **fields,
    )


def _emit_placed(bus: EventBus, device: Device, p: Placement) -> None:
    """The query's ``alloc`` event (site ``srs``: the SRS belongs to the run)."""
    emit_run_alloc(
        bus,
        device,
        site="srs",
        pool="raw" if p.where == "device" else "host",
        requested=p.nbytes,
        decision="ok" if p.where == "device" else "fallback",
        reason=f"{p.query}: {p.reason}",
        free=p.free,
        margin=p.need,
    )


def _give_back(device: Device, blocks: list[Block]) -> None:
    """The blocks made so far, once nothing still writes into them."""
    try:
        device.synchronize()  # nothing still writes into them
    except Exception:
        pass
    for blk in blocks:
        device.free(blk)

"""The kernel backend bound to one worker of one CUDA device.

Every kernel call of a partition's GPU region gets the calling worker's compute stream and the
device's stream-ordered pool (``CudaDevice.kernel_args``) injected, and the streamed MSMs the
choices of the device's memory plan (``provetop.engine.memory.stream_plan``): the window cap, the
chunk, the one interleaved pass. The H step runs in place (H in d_a's memory, d_b/d_c as work
buffers: the footprint the allocator plans for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provetop.kernels.cuda.msm_plan import INTERLEAVE_BUFFERS, INTERLEAVE_LEAD, companion_window_cap

if TYPE_CHECKING:
    from provetop.engine.devices.cuda import CudaDevice
    from provetop.kernels.cuda.backend import CudaBackend


class BoundBackend:
    """``backend`` with ``device.kernel_args()`` (this thread's stream, the async pool)."""

    def __init__(
        self,
        backend: CudaBackend,
        device: CudaDevice,
        window_max: int | None = None,
        together: list[str] | None = None,
        chunk: int | None = None,
        host_scalars: bool = False,
        buffers: int = INTERLEAVE_BUFFERS,
        lead: int = INTERLEAVE_LEAD,
    ) -> None:
        self.backend = backend
        self.device = device
        self.name = backend.name
        self.window_max = window_max  # the streamed MSMs' window cap (:func:`plan_with_window`)
        self.together = together  # the queries streamed in one pass (H first), or None
        self.chunk = chunk  # points per upload of a streamed MSM (:func:`plan_streaming`)
        # the one pass reads the aux scalars from host memory, chunk by chunk (no device copy)
        self.host_scalars = bool(together) and host_scalars
        self.buffers = buffers  # point buffers of the one pass (the plan counted them)
        self.lead = lead  # H's chunks the one pass takes before any other query's

    def h_step(self, a: Any, b: Any, c: Any, **kw: Any) -> Any:
        args = {**self.device.kernel_args("ntt_scratch"), "overwrite_inputs": True, **kw}
        return self.backend.h_step(a, b, c, **args)

    def h_step_streamed(self, a: Any, b: Any, c: Any, slots: list[Any], **kw: Any) -> Any:
        args = {**self.device.kernel_args("ntt_scratch"), **kw}
        return self.backend.h_step_streamed(a, b, c, slots, **args)

    def msm(self, points: Any, scalars: Any, **kw: Any) -> Any:
        args = {**self.device.kernel_args("msm_scratch"), "window_max": self.window_max, **kw}
        if self.chunk is not None:
            args.setdefault("chunk", self.chunk)
        return self.backend.msm(points, scalars, **args)

    def msm_many(self, points: list[Any], scalars: list[Any], **kw: Any) -> Any:
        caps = [self.window_max] + [companion_window_cap(self.window_max)] * (len(points) - 1)
        args = {**self.device.kernel_args("msm_scratch"), "windows_max": caps, **kw}
        args.setdefault("buffers", self.buffers)
        args.setdefault("lead", self.lead)
        if self.chunk is not None:
            args.setdefault("chunk", self.chunk)
        if self.host_scalars:
            args.setdefault("host_scalars", True)
        return self.backend.msm_many(points, scalars, **args)

    def ntt(self, x: Any, **kw: Any) -> Any:
        return self.backend.ntt(x, **{**self.device.kernel_args("ntt_scratch"), **kw})

    def srs(self, secrets: Any, **kw: Any) -> Any:
        return self.backend.srs(secrets, **kw)

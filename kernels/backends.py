"""Choosing a kernel backend by name: the one place the engine and the CLI turn "cpu" or
"cuda" into an object implementing ``provetop.kernels.backend.KernelBackend``.

Why lazily: constructing the CUDA backend pulls in CuPy; a CPU-only run must never pay for (or
fail on) that. The modules themselves import anywhere (CuPy is imported only when a kernel
runs), so the imports are at the top.
"""

from __future__ import annotations

from provetop.kernels.backend import KernelBackend
from provetop.kernels.cpu_backend import CpuBackend
from provetop.kernels.cuda.backend import CudaBackend
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

BACKENDS = ("cpu", "cuda")


class BackendUnavailable(RuntimeError):
    """The named backend exists but cannot run here (no CuPy, no GPU, module not built)."""


def get_backend(name: str, tuning: KernelTuning | None = None) -> KernelBackend:
    """A fresh backend instance: ``"cpu"`` (always available) or ``"cuda"`` (needs CuPy and a
    GPU), with the kernels' tuning record (default: :data:`provetop.kernels.tuning.DEFAULT_TUNING`;
    the
    CPU backend has nothing to tune). Raises ValueError for an unknown name and
    BackendUnavailable, with the reason, when CUDA cannot be used."""
    if name == "cpu":
        return CpuBackend()
    if name == "cuda":
        try:
            return CudaBackend(tuning=tuning or DEFAULT_TUNING)
        except (ImportError, RuntimeError, OSError) as exc:  # no CuPy/driver/GPU at start-up
            raise BackendUnavailable(
                f"the cuda backend cannot start here: {type(exc).__name__}: {exc}"
            ) from exc
    raise ValueError(f"unknown kernel backend {name!r} (expected one of {', '.join(BACKENDS)})")

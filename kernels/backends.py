"""Choosing a kernel backend by name: the one place the engine and the CLI turn "cpu" or
"cuda" into an object implementing ``kernels.backend.KernelBackend``.

Why lazily: importing the CUDA backend pulls in CuPy and compiles kernels; a CPU-only run must
never pay for (or fail on) that.
"""

from __future__ import annotations

from kernels.backend import KernelBackend

BACKENDS = ("cpu", "cuda")


class BackendUnavailable(RuntimeError):
    """The named backend exists but cannot run here (no CuPy, no GPU, module not built)."""


def get_backend(name: str) -> KernelBackend:
    """A fresh backend instance: ``"cpu"`` (always available) or ``"cuda"`` (needs CuPy, a GPU
    and ``kernels.cuda_backend``). Raises ValueError for an unknown name and
    BackendUnavailable, with the reason, when CUDA cannot be used."""
    if name == "cpu":
        from kernels.cpu_backend import CpuBackend

        return CpuBackend()
    if name == "cuda":
        try:
            from kernels.cuda_backend import CudaBackend
        except ImportError as exc:
            raise BackendUnavailable(f"the cuda backend is not available here: {exc}") from exc
        try:
            return CudaBackend()
        except (ImportError, RuntimeError, OSError) as exc:  # no CuPy/driver/GPU at start-up
            raise BackendUnavailable(
                f"the cuda backend cannot start here: {type(exc).__name__}: {exc}"
            ) from exc
    raise ValueError(f"unknown kernel backend {name!r} (expected one of {', '.join(BACKENDS)})")

"""Load every CUDA module on every visible device, once, before any work: ``provetop warmup``.

Why: the only slow step of a first GPU run on a new machine is compiling our sources with
NVRTC (msm.cu alone took 153 s of a 183 s first ``provetop selftest --backend cuda`` on an
H200 host). Done here, it is one explicit step with a line per module; afterwards every
process loads the modules from a prebuilt cubin or CuPy's on-disk cache in well under a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kernels.cuda import runtime
from kernels.cuda.runtime import Log, stderr_log
from kernels.cuda.sources import SOURCES, Defines, normalize_defines
from kernels.tuning import DEFAULT_TUNING, KernelTuning


@dataclass(frozen=True)
class Warmed:
    """One module made ready on one device: where it came from and the wall time it took."""

    device: int
    arch: str
    source: str
    defines: Defines
    origin: str  # "cubin" or "nvrtc"
    seconds: float


def builds(tuning: KernelTuning = DEFAULT_TUNING) -> list[tuple[str, Defines]]:
    """Every source with the defines a run under ``tuning`` loads it with (only the NTT
    source takes defines)."""
    return [
        (src, normalize_defines(tuning.ntt_defines) if src == "ntt/ntt.cu" else ())
        for src in SOURCES
    ]


def visible_devices() -> list[int]:
    """The CUDA device ids CuPy sees (raises CudaUnavailable without CuPy or a device)."""
    cupy = runtime.require_cupy()
    return list(range(cupy.cuda.runtime.getDeviceCount()))


def warm(
    tuning: KernelTuning = DEFAULT_TUNING,
    devices: Iterable[int] | None = None,
    on_module: Callable[[Warmed], None] | None = None,
    log: Log = stderr_log,
) -> list[Warmed]:
    """Load every module of :func:`builds` on each of ``devices`` (default: all visible),
    calling ``on_module`` after each."""
    out = []
    for dev in visible_devices() if devices is None else devices:
        for src, defines in builds(tuning):
            t0 = time.perf_counter()
            kw = {"defines": defines, "device": dev, "cubin_dir": tuning.cubin_dir, "log": log}
            mod = runtime.load(src, **kw)
            w = Warmed(dev, mod.arch, src, defines, mod.origin, time.perf_counter() - t0)
            out.append(w)
            if on_module is not None:
                on_module(w)
    return out

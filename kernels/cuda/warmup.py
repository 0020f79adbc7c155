"""Load every CUDA module on every visible device, once, before any work: ``provetop warmup``.

Why: the only slow step of a first GPU run on a new machine is compiling our sources with
NVRTC (msm.cu alone took 153 s of a 183 s first ``provetop selftest --backend cuda`` on an
H200 host). Done here, it is one explicit step with a line per module; afterwards every
process loads the modules from a prebuilt cubin or CuPy's on-disk cache in well under a second.

Where the machine has nvcc, the builds that have no cubin yet are compiled with it first, all at
once (one nvcc process per build, in parallel: NVRTC compiles one module after the other in
this process), into the user's cubin folder (:func:`provetop.kernels.cuda.cubins.directory`); the
loader then finds them there. Without nvcc, NVRTC compiles each in turn.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from provetop.kernels.cuda import cubins, runtime
from provetop.kernels.cuda.runtime import Log, stderr_log
from provetop.kernels.cuda.sources import SOURCES, Defines, normalize_defines
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning


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
    """Every source a run under ``tuning`` loads, with its defines (the NTT and MSM sources take
    them)."""

    def defines(src: str) -> Defines:
        if src == "ntt/ntt.cu":
            return normalize_defines(tuning.ntt_defines)
        if src == "msm/msm.cu":
            return normalize_defines(tuning.msm_defines)
        return ()

    return [(src, defines(src)) for src in SOURCES]


@dataclass(frozen=True)
class Built:
    """One cubin compiled by this machine's nvcc, or the reason it was not."""

    source: str
    arch: str
    seconds: float
    error: str = ""


def prebuild_missing(
    needed: list[tuple[str, Defines]],
    archs: list[str],
    tuning: KernelTuning = DEFAULT_TUNING,
    on_built: Callable[[Built], None] | None = None,
    nvcc: str | None = None,
) -> list[Built]:
    """Compile with nvcc, in parallel, each (build, arch) that has no cubin on the search
    path. Nothing when nvcc is not on the PATH. A failed compile is reported, not raised: the
    loader then compiles that build with NVRTC."""
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        return []
    folder = cubins.directory(tuning.cubin_dir or None)
    path = cubins.search_path(tuning.cubin_dir or None)
    todo = [
        (src, defs, arch)
        for arch in archs
        for src, defs in needed
        if cubins.find(src, defs, arch, path) is None
    ]

    def one(job: tuple[str, Defines, str]) -> Built:
        src, defs, arch = job
        t0 = time.perf_counter()
        try:
            cubins.build(src, arch, folder, defs, nvcc=nvcc)
        except (subprocess.CalledProcessError, OSError) as exc:
            out = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else None
            err = out or str(exc)
            return Built(src, arch, time.perf_counter() - t0, err.strip().splitlines()[-1])
        return Built(src, arch, time.perf_counter() - t0)

    out = []
    with ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1))) as pool:
        for fut in as_completed([pool.submit(one, job) for job in todo]):
            out.append(fut.result())
            if on_built is not None:
                on_built(out[-1])
    return out


def device_archs(devices: Iterable[int]) -> list[str]:
    """The distinct ``sm_XY`` of ``devices``, in device order."""
    cupy = runtime.require_cupy()
    archs: list[str] = []
    for dev in devices:
        arch = f"sm_{cupy.cuda.Device(dev).compute_capability}"
        if arch not in archs:
            archs.append(arch)
    return archs


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
            mod = runtime.load(
                src, defines=defines, device=dev, cubin_dir=tuning.cubin_dir, log=log
            )
            w = Warmed(dev, mod.arch, src, defines, mod.origin, time.perf_counter() - t0)
            out.append(w)
            if on_module is not None:
                on_module(w)
    return out

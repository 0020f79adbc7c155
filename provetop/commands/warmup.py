"""``provetop warmup [--backend cpu|cuda]``: make every CUDA module ready on this machine, once.

Why a command: on a new GPU machine the first use of each kernel source compiles it with NVRTC
(msm.cu alone took 153 s of a first 183 s ``provetop selftest --backend cuda`` on an H200
host), silently, inside whatever ran first. Here that is one explicit step with one line per
module and device: where the module came from (``cubin``: prebuilt by ``python -m
provetop.kernels.cuda.prebuild``; ``nvrtc``: compiled, or read back from CuPy's on-disk cache) and
how
long it took. Where nvcc is on the PATH the missing cubins are first compiled with it, in
parallel, for the visible GPUs' architectures (``provetop.kernels.cuda.warmup.prebuild_missing``).
Later
processes load every module in well under a second.

Last, the injection library of ``provetop trace`` is built (or found cached), one line saying
which or why not; a missing compiler or CUPTI never fails the warm-up.

Modules are built with the kernels' tuning record from the environment (``PROVETOP_*``), so
``PROVETOP_NTT_DEFINES`` warms the NTT a tuned run will load. Exit status: 0 when every module
loaded, or when there is nothing to do (the cpu backend, or no GPU and no ``--backend``); 2
for ``--backend cuda`` on a machine where CUDA cannot run, or a bad ``PROVETOP_*`` setting;
1 when a module failed to compile or load.
"""

from __future__ import annotations

import argparse
import sys
import time

from provetop.base.errors import UsageError
from provetop.kernels.cuda.prebuild import inject_line
from provetop.kernels.cuda.runtime import CudaUnavailable
from provetop.kernels.cuda.warmup import (
    Built,
    Warmed,
    builds,
    device_archs,
    prebuild_missing,
    visible_devices,
    warm,
)
from provetop.kernels.tuning import KernelTuning, SettingError


def run(args: argparse.Namespace) -> int:

    if args.backend == "cpu":
        print("warmup: the cpu backend has nothing to compile")
        return 0
    try:
        tuning = KernelTuning.from_env()
    except SettingError as exc:
        raise UsageError(str(exc)) from exc
    try:
        devices = visible_devices()
    except CudaUnavailable as exc:
        if args.backend == "cuda":
            raise UsageError(f"warmup --backend cuda: {exc}") from exc
        print(f"warmup: no GPU here ({exc}); no module to load")
        print(inject_line(), flush=True)
        return 0

    def show(w: Warmed) -> None:
        defines = ",".join(f"{k}={v}" for k, v in w.defines)
        what = w.source + (f" [{defines}]" if defines else "")
        print(f"gpu {w.device} {w.arch:<7} {what:<32} {w.origin:<6} {w.seconds:8.2f} s", flush=True)

    def built(b: Built) -> None:
        what = f"nvcc failed ({b.error}); NVRTC will compile it" if b.error else "cubin built"
        print(f"nvcc    {b.arch:<7} {b.source:<32} {what} in {b.seconds:.1f} s", flush=True)

    t0 = time.perf_counter()
    try:
        archs = device_archs(devices)
        made = prebuild_missing(builds(tuning), archs, tuning, on_built=built)
        if made:
            print(f"{len(made)} builds compiled with nvcc in {time.perf_counter() - t0:.1f} s")
        done = warm(tuning, devices, on_module=show)
    except Exception as exc:  # a compile error (NVRTC's log) or a driver refusal
        print(f"warmup: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    total = time.perf_counter() - t0
    print(f"{len(done)} modules ready on {len(devices)} GPU(s) in {total:.1f} s")
    print(inject_line(), flush=True)
    return 0

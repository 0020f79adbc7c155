"""Host time of each call the fallback upload makes under the mutex, on a real CUDA device.

Why: at 16 GiB the fallback upload of a partition that adopted its a takes 7-17 ms of host
time while the GPU waits (bench/notes/pipeline.md, 64f4703); it is a few memory
samples (pool attributes, cudaMemGetInfo and NVML), two stream-ordered allocations and two
queued copies. This times each alone, medians of ``--repeats`` calls, with the GPU idle and
again with a kernel running on another stream (the neighbour's synthesis or the pass).

    PYTHONPATH=. python3 bench/host_costs.py [--repeats 100] [--capacity 16GiB]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from provetop.base import nvml
from provetop.base.units import parse_size
from provetop.engine.devices.cuda import CudaDevice
from provetop.kernels.cuda.host_pinned import pinned_empty
from provetop.kernels.cuda.spin import spin_kernel


def _median_us(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--capacity", default="16GiB")
    args = ap.parse_args()
    dev = CudaDevice(0, parse_size(args.capacity))
    cupy, st = dev.cupy, dev.streams()
    nv = nvml._nvml()
    handle = dev.nvml.handle
    host = pinned_empty((1 << 21, 4), method="alloc")  # 64 MiB, page-locked
    block = dev.malloc(int(host.nbytes), "async", "prestage")
    pid = os.getpid()

    def alloc_free() -> None:
        dev.free(dev.malloc(4 << 30, "async", "prestage"))

    def queued_copy() -> None:
        dev.upload_async(host, block, event="probe.copy")

    calls: dict[str, Callable[[], object]] = {
        "cudaMemGetInfo (mem_info)": dev.mem_info,
        "pool attributes (4 reads)": lambda: [dev._attr(a) for a in (5, 6, 7, 8)],
        "NVML memory info (v2)": lambda: nv.nvmlDeviceGetMemoryInfo(
            handle, version=nv.nvmlMemory_v2
        ),
        "NVML compute processes": lambda: nvml.process_usage(nv, handle, pid),
        "NvmlDevice.memory (both)": dev.nvml.memory,
        "device.sample (one memory sample)": dev.sample,
        "malloc + free 4 GiB (async pool)": alloc_free,
        "upload_async 64 MiB (host part)": queued_copy,
        "event record": lambda: dev.event("probe.ev").record(st.compute),
    }
    spin = spin_kernel(cupy)
    other = cupy.cuda.Stream(non_blocking=True)
    rows = []
    sms = int(dev.rt.getDeviceProperties(0)["multiProcessorCount"])
    for name, fn in calls.items():
        idle = _median_us(fn, args.repeats)
        st.upload.synchronize()
        # busy: every SM's threads spinning on another stream for ~3 s (6e9 cycles at ~2 GHz),
        # longer than the repeats take
        spin((4 * sms,), (256,), (np.int64(6_000_000_000),), stream=other)
        busy = _median_us(fn, args.repeats)
        other.synchronize()
        st.upload.synchronize()
        rows.append((name, idle, busy))
    print(f"{'call':<38} {'idle us':>9} {'busy us':>9}")
    for name, idle, busy in rows:
        print(f"{name:<38} {idle:9.1f} {busy:9.1f}")


if __name__ == "__main__":
    main()

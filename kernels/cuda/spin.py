"""A kernel that keeps the device busy for a given number of clock cycles.

Why: what waits behind device work (a stream waiting on an event, a host call beside a
running kernel) is tested and probed against work of a known length that needs no inputs
(`tests/engine/test_cuda.py`, `bench/host_costs.py`). At the H200's ~2 GHz, 5e8 cycles are
~0.25 s.
"""

from __future__ import annotations

from typing import Any

_SOURCE = r"""extern "C" __global__ void spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}"""


def spin_kernel(cupy: Any) -> Any:
    """The ``spin(cycles)`` kernel (each thread spins ``cycles`` of its SM's clock)."""
    return cupy.RawKernel(_SOURCE, "spin")

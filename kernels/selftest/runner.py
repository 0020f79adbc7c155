"""Which rows a backend's self-test has, and running them: the engine of ``provetop selftest``.

For ``cpu``: the reference rows and the CPU backend's rows (``rows_cpu``). For ``cuda``: the
CUDA backend against the reference (``rows_backend``) followed by the GPU modules' own rows
(``rows_cuda``), with the kernels' tuning record the command was given.
"""

from __future__ import annotations

from collections.abc import Callable

from provetop.kernels.backends import get_backend
from provetop.kernels.selftest.registry import Check, CheckResult, run_check
from provetop.kernels.selftest.rows_cpu import cpu_checks
from provetop.kernels.selftest.rows_cuda import cuda_checks
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning


def collect_checks(backend: str, tuning: KernelTuning = DEFAULT_TUNING) -> list[Check]:
    """The checks for ``backend``: "cpu", or "cuda" (the CUDA backend against the reference
    plus the GPU modules' own checks)."""
    if backend == "cpu":
        return cpu_checks()
    if backend == "cuda":
        return cuda_checks(get_backend("cuda", tuning), tuning)
    raise ValueError(f"unknown backend {backend!r}")


def run_selftest(
    backend: str,
    on_result: Callable[[CheckResult], None] | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> list[CheckResult]:
    """Run every check of ``backend``; ``on_result`` sees each result as it completes."""
    results = []
    for check in collect_checks(backend, tuning):
        res = run_check(check)
        results.append(res)
        if on_result is not None:
            on_result(res)
    return results

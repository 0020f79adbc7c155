"""The ``meta`` block of an engine benchmark's JSON: where, when, at which commit, by which
command. Why here: a figure committed to ``bench/results/`` must carry these (docs/performance.md)
and the benches that wrote none had them added by hand afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

from provetop.kernels.bench_meta import commit_of
from provetop.kernels.tuning import KernelTuning


def _gpus() -> list[str]:
    """``name, driver`` of each GPU nvidia-smi lists; none where it is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return (
        [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode == 0
        else []
    )


def bench_meta(argv: list[str] | None = None) -> dict[str, Any]:
    """Machine (CPUs, GPUs), UTC date, commit (``PROVETOP_COMMIT`` or git) and the command."""
    args = sys.argv[1:] if argv is None else argv
    return {
        "machine": f"{os.cpu_count()} CPUs",
        "gpus": _gpus(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": commit_of(KernelTuning.from_env()),
        "command": " ".join(["provetop", *args]),
    }

"""What every GPU benchmark JSON records about where and how it ran.

One function, so the NTT, MSM and pipeline results can be compared and re-measured: the GPU,
the driver (as nvidia-smi prints it and as the CUDA driver API reports it), the CUDA runtime,
NVRTC and CuPy versions, the commit, the UTC date, the exact command and the kernels' tuning
record (what an A/B run changed).
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from provetop.kernels.tuning import KernelTuning


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def commit_of(tuning: KernelTuning | None) -> str:
    """The commit a result was measured at: the record's (``PROVETOP_COMMIT``, for copies of
    the tree without git history, such as the device machine's), else ``git rev-parse HEAD``
    with ``+dirty`` when the tracked files differ from it (a copy whose git metadata lags its
    files says so instead of naming a commit that did not run), else "unknown"."""
    if tuning is not None and tuning.commit:
        return tuning.commit
    head = _run(["git", "rev-parse", "HEAD"])
    if not head:
        return "unknown"
    changed = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return f"{head}+dirty" if changed else head


def gpu_bench_meta(cp: Any, argv: list[str], tuning: KernelTuning | None = None) -> dict[str, Any]:
    """The ``meta`` block of a GPU benchmark result, with ``tuning.as_dict()`` under
    ``"tuning"`` when the caller passes its record (every bench that has one must)."""
    device = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    try:
        nvrtc = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
    except Exception:  # NVRTC missing is reported, not fatal
        nvrtc = "unknown"
    meta = {
        "gpu": name,
        "sm_count": props.get("multiProcessorCount"),
        "compute_capability": device.compute_capability,
        "driver": (driver or "unknown").splitlines()[0] if driver else "unknown",
        "driver_api_version": cp.cuda.runtime.driverGetVersion(),
        "cuda_runtime_version": cp.cuda.runtime.runtimeGetVersion(),
        "nvrtc_version": nvrtc,
        "cupy_version": cp.__version__,
        "field_mul": field_mul_meta(props.get("singleToDoublePrecisionPerfRatio")),
    }
    return _with_run(meta, argv, tuning)


def field_mul_meta(fp32_per_fp64: int | None) -> dict[str, Any]:
    """Which units the field multiplications of this run used, and the device figure a choice
    would rest on (FP32 per FP64 throughput: 2 on the H200, 64 on consumer cards). Why the
    integer path on every device: on the H200, which has the most FP64 units per SM of any
    card, none of 14 FP64 and mixed forms of the Fr or Fp product beat it (bench/
    notes/field.md, "the FP64 units"), so a card with fewer can
    only do worse and the kernels carry no FP64 product to choose."""
    return {
        "fr": "integer",
        "fp": "integer",
        "fp32_per_fp64": fp32_per_fp64,
        "fp64_variants": "bench/fp64_mul (micro-benchmark only)",
    }


def host_bench_meta(argv: list[str], tuning: KernelTuning | None = None) -> dict[str, Any]:
    """The ``meta`` block of a benchmark that ran without a GPU (the CPU backend): the host's
    processor and Python, the commit, the UTC date and the exact command, so that a CPU
    figure says where and when it was taken as a GPU one does."""
    meta = {
        "host": platform.node(),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
    }
    return _with_run(meta, argv, tuning)


def _with_run(meta: dict[str, Any], argv: list[str], tuning: KernelTuning | None) -> dict[str, Any]:
    """``meta`` with what every result records whatever ran it: Python, the commit, the UTC
    date, the command and the tuning record when there is one."""
    meta.update(
        python=platform.python_version(),
        commit=commit_of(tuning),
        date_utc=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        command=" ".join(argv),
    )
    if tuning is not None:
        meta["tuning"] = tuning.as_dict()
    return meta


def bench_command(argv: list[str] | None = None) -> list[str]:
    """The command as a user would type it again: ``python -m provetop ...`` shows up as
    ``__main__.py`` in ``sys.argv``, which is written back as ``provetop``."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return []
    prog = Path(argv[0]).name
    return ["provetop" if prog in ("__main__.py", "provetop") else prog, *argv[1:]]

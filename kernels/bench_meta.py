"""What every GPU benchmark JSON records about where and how it ran.

One function, so the NTT, MSM and pipeline results can be compared and re-measured: the GPU,
the driver (as nvidia-smi prints it and as the CUDA driver API reports it), the CUDA runtime,
NVRTC and CuPy versions, the commit, the UTC date and the exact command.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from typing import Any


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_bench_meta(cp: Any, argv: list[str]) -> dict[str, Any]:
    """The ``meta`` block of a GPU benchmark result. ``PROVETOP_COMMIT`` overrides the commit
    for copies of the tree without git history (the device machine gets such a copy)."""
    device = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    commit = os.environ.get("PROVETOP_COMMIT") or _run(["git", "rev-parse", "HEAD"]) or "unknown"
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    try:
        nvrtc = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
    except Exception:  # NVRTC missing is reported, not fatal
        nvrtc = "unknown"
    return {
        "gpu": name,
        "sm_count": props.get("multiProcessorCount"),
        "compute_capability": device.compute_capability,
        "driver": (driver or "unknown").splitlines()[0] if driver else "unknown",
        "driver_api_version": cp.cuda.runtime.driverGetVersion(),
        "cuda_runtime_version": cp.cuda.runtime.runtimeGetVersion(),
        "nvrtc_version": nvrtc,
        "cupy_version": cp.__version__,
        "python": platform.python_version(),
        "commit": commit,
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(argv),
    }


def bench_command(argv: list[str] | None = None) -> list[str]:
    """The command as a user would type it again: ``python -m provetop ...`` shows up as
    ``__main__.py`` in ``sys.argv``, which is written back as ``provetop``."""
    import sys
    from pathlib import Path

    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return []
    prog = Path(argv[0]).name
    return ["provetop" if prog in ("__main__.py", "provetop") else prog, *argv[1:]]

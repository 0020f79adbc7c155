"""The CUDA extras install only NVRTC, the runtime and CUPTI (pyproject.toml): a GPU run must
load no other CUDA library. Checked in a fresh process that warms the backend up (every
module, every MSM path) and runs the kernel selftest, then reads its own memory map.

What ``import cupy`` maps before any of our code runs is CuPy's own doing: it preloads the
CUDA libraries of whatever NVIDIA wheels are installed beside it (on the GPU machine, where
PyTorch's wheels bring cuBLAS, it mapped libcublasLt at import, through ctypes; H100,
2026-12-07). On a slim install those wheels are absent and there is nothing to preload. The
claim tested is ours: nothing the engine's kernels do loads another CUDA library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNUSED = ("libcublas", "libcufft", "libcurand", "libcusolver", "libcusparse")

_PROBE = """
import json, re
def libs():
    maps = open("/proc/self/maps").read()
    return sorted({m.group(1) for m in re.finditer(r"/(lib[\\w+-]+)\\.so[.\\d]*", maps)})
steps = {}
import cupy
steps["import cupy"] = libs()
from provetop.kernels.cuda.backend import CudaBackend
from provetop.kernels.selftest.runner import run_selftest
CudaBackend().warm_up(12)
steps["warm-up"] = libs()
results = run_selftest("cuda")
steps["selftest"] = libs()
print(json.dumps({"ok": all(r.ok for r in results), "libs": libs(), "steps": steps}))
"""


def _first_step(steps: dict[str, list[str]], lib: str) -> str:
    """The probe's step after which ``lib`` was first mapped."""
    return next((name for name, libs in steps.items() if lib in libs), "?")


def _loaders(env: dict[str, str], names: list[str]) -> list[str]:
    """The dynamic loader's own word on who asked for ``names`` (LD_DEBUG=files: "needed
    by" a library, or "dynamically loaded by" one), for the failure message."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**env, "LD_DEBUG": "files"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return [
        " ".join(line.split())
        for line in done.stderr.splitlines()
        if "file=" in line and any(n in line for n in names)
    ][:12]


@pytest.mark.gpu
def test_a_gpu_run_loads_only_the_libraries_the_slim_extra_installs(cp):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["ok"]
    at_import = set(probe["steps"]["import cupy"])
    loaded = [lib for lib in probe["libs"] if lib.startswith(UNUSED) and lib not in at_import]
    if loaded:
        when = {lib: _first_step(probe["steps"], lib) for lib in loaded}
        why = "\n".join(_loaders(env, loaded))
        raise AssertionError(
            f"loaded CUDA libraries the extras do not install: {when} (after which step); "
            f"all libraries: {probe['libs']}\nthe loader says:\n{why}"
        )
    assert any(lib.startswith("libnvrtc") for lib in probe["libs"]) or any(
        lib.startswith("libcuda") for lib in probe["libs"]
    )

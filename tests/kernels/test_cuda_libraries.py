"""The CUDA extras install only NVRTC, the runtime and CUPTI (pyproject.toml): a GPU run must
load no other CUDA library. Checked in a fresh process that warms the backend up (every
module, every MSM path) and runs the kernel selftest, then reads its own memory map."""

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
from provetop.kernels.cuda.backend import CudaBackend
from provetop.kernels.selftest.runner import run_selftest
CudaBackend().warm_up(12)
results = run_selftest("cuda")
maps = open("/proc/self/maps").read()
libs = sorted({m.group(1) for m in re.finditer(r"/(lib[\\w+-]+)\\.so[.\\d]*", maps)})
print(json.dumps({"ok": all(r.ok for r in results), "libs": libs}))
"""


@pytest.mark.gpu
def test_a_gpu_run_loads_only_the_libraries_the_slim_extra_installs(cp):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["ok"]
    loaded = [lib for lib in probe["libs"] if lib.startswith(UNUSED)]
    assert loaded == [], f"loaded CUDA libraries the extras do not install: {loaded}"
    assert any(lib.startswith("libnvrtc") for lib in probe["libs"]) or any(
        lib.startswith("libcuda") for lib in probe["libs"]
    )

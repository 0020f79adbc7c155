"""The ctypes structures of kernels/cuda/launch_ex.py against cuda.h itself.

Why: a field at the wrong offset in ``CUlaunchConfig`` would hand the driver a wrong stream or
attribute list, and nothing else would say so until a GPU misbehaved. Where a CUDA toolkit's
``cuda.h`` is on this machine, a host program prints the real sizes and offsets; elsewhere the
test skips with the reason.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from kernels.cuda import launch_ex
from tests.kernels.host_build import build_driver

PROGRAM = r"""
#include <cstddef>
#include <cstdio>
#include <cuda.h>
int main() {
    std::printf("%zu %zu %zu %zu %zu %zu %zu %d\n", sizeof(CUlaunchConfig),
                offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),
                offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute),
                offsetof(CUlaunchAttribute, value),
                offsetof(CUlaunchAttribute, value.programmaticStreamSerializationAllowed),
                (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
    return 0;
}
"""


def _cuda_include() -> Path:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include"
    pytest.skip("no CUDA toolkit header (cuda.h) under CUDA_HOME, CUDA_PATH or /usr/local/cuda")


def test_structures_match_cuda_h(tmp_path: Path) -> None:
    exe = build_driver(tmp_path, "layout", PROGRAM, includes=(_cuda_include(),))
    got = [int(v) for v in subprocess.run([str(exe)], capture_output=True, text=True,
                                          check=True).stdout.split()]  # fmt: skip
    cfg, attr = launch_ex._LaunchConfig, launch_ex._LaunchAttribute
    assert got == [
        ctypes.sizeof(cfg),
        cfg.hStream.offset,
        cfg.attrs.offset,
        cfg.numAttrs.offset,
        ctypes.sizeof(attr),
        attr.value.offset,
        attr.value.offset,
        launch_ex.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
    ]

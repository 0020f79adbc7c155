"""No MSM kernel keeps its working arrays in local memory, checked with nvcc's own report
(``-Xptxas -v``) on the shipped source and options. Why a test: an array indexed by a loop
variable (a scalar's words, a limit) moves to local memory for the whole kernel without any
other sign. The counting sort's kernels once got a 64-byte stack frame that way, and the
2^27 sort went from 129 to 188 ms (bench/notes/msm.md, 2e6ef05). Runs wherever
nvcc is (the CI machines have it); needs no GPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from provetop.kernels.cuda.cubins import nvcc_command

# "Compiling entry function 'k' ..." then, a line or two later, "N bytes stack frame, M bytes
# spill stores, ..."
ENTRY = re.compile(
    r"Compiling entry function '(\w+)'[^\n]*\n(?:[^\n]*\n)*?[^\n]*?\b(\d+) bytes stack frame, "
    r"(\d+) bytes spill stores"
)
# The bucket-reduction tree's two kernels run a few thousand threads at the end of an MSM, and
# their point sums with doublings need more than 255 registers' worth of state; their frames
# as of 2026-12-03 are the ceiling (a larger one is a change to look at; with the shared
# reduction in every Y3, 72 -> 48 and 32 -> 56 bytes, measured 3.8 % faster). The accumulation
# has none since its Y3 shares one reduction between two products (mont.cuh mul_sub).
FRAME_CEILING = {"xyzz_sum_weighted": 48, "msm_bucket_reduce": 56}


@pytest.mark.nvcc
@pytest.mark.slow
def test_msm_kernels_have_no_stack_frames(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH: the ptxas report needs it")
    cmd = nvcc_command("msm/msm.cu", "sm_90", tmp_path / "msm.cubin", nvcc=nvcc)
    done = subprocess.run(
        [*cmd, "-Xptxas", "-v"], capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    frames = {m[0]: (int(m[1]), int(m[2])) for m in ENTRY.findall(done.stderr + done.stdout)}
    for kernel in ("msm_count", "msm_scatter", "msm_radix_hist", "msm_accumulate0"):
        assert kernel in frames, f"{kernel} missing from ptxas's report"
    for kernel, (frame, _spills) in frames.items():
        assert frame <= FRAME_CEILING.get(kernel, 0), f"{kernel}: {frame}-byte stack frame"

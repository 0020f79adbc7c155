"""Prebuilt cubins: where nvcc puts them, how the loader finds the one for a build, and how
to make one.

Why: NVRTC compiles at first use, on the GPU machine, and msm.cu is slow to compile: the first
``provetop selftest --backend cuda`` on a new H200 host took 183 s, 153 s of it compiling msm.cu.
A cubin built ahead of time by nvcc (``python -m provetop.kernels.cuda.prebuild``) loads in
milliseconds.

A cubin is found only for the exact build: its file name carries the source's hash (expanded
text and defines, :func:`provetop.kernels.cuda.sources.source_hash`) and the architecture, so a
stale
or foreign cubin is never picked up. Layout of a cubin folder, one sub-folder per layer::

    <dir>/msm/msm-<hash16>-sm_90.cubin
    <dir>/ntt/ntt-<hash16>-sm_86.cubin
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from provetop.kernels.cuda.sources import (
    BASE_OPTIONS,
    SRC_DIR,
    Defines,
    define_options,
    source_hash,
)

# The package's own folder (shipped as package data when a wheel is built after a prebuild);
# ``KernelTuning.cubin_dir`` (PROVETOP_CUBIN_DIR) points elsewhere.
DEFAULT_DIR = Path(__file__).resolve().parent / "cubin"

# The architectures prebuilt by default: one cubin each, since SASS runs only on its own
# major version and a cubin for a lower minor gives up the newer minor's instructions.
#   sm_80  A100, A30                      sm_89  L4, L40S, RTX 40xx, RTX 6000 Ada
#   sm_86  A10, A40, RTX 30xx, RTX A6000  sm_90  H100, H200, GH200
#   sm_100 B200, GB200                    sm_120 RTX 50xx, RTX PRO 6000 Blackwell
# Older GPUs (sm_75 and below) are not targets: nvcc 13 dropped sm_50-sm_72 and the MSM's
# register budget is tuned for 64K-register SMs with large L2 (bench/notes/msm.md).
ARCHS: tuple[str, ...] = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
NVCC_OPTIONS: tuple[str, ...] = ("-O3",)


def user_dir() -> Path:
    """Where ``provetop warmup`` puts the cubins it builds with this machine's nvcc: the user's
    cache (the package folder may be read-only once installed)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "provetop" / "cubin"


def directory(configured: str | os.PathLike[str] | None = None) -> Path:
    """The folder new cubins go to: ``configured`` (``KernelTuning.cubin_dir``) or
    :func:`user_dir`."""
    return Path(configured) if configured else user_dir()


def search_path(configured: str | os.PathLike[str] | None = None) -> list[Path]:
    """The folders a cubin is looked for in, in order: ``configured`` alone when given, else
    the package's own (:data:`DEFAULT_DIR`, filled before a wheel is built) and the user's."""
    return [Path(configured)] if configured else [DEFAULT_DIR, user_dir()]


def cubin_path(name: str, defines: Defines, arch: str, folder: Path) -> Path:
    """Where the cubin of source ``name`` with ``defines`` for ``arch`` lives in ``folder``."""
    src = Path(name)
    return folder / src.parent / f"{src.stem}-{source_hash(name, defines)}-{arch}.cubin"


def find(name: str, defines: Defines, arch: str, folder: Path | list[Path]) -> Path | None:
    """The prebuilt cubin for exactly this build in ``folder`` (or the first of a list that
    has it), or None."""
    for each in folder if isinstance(folder, list) else [folder]:
        path = cubin_path(name, defines, arch, each)
        if path.is_file():
            return path
    return None


def nvcc_command(
    name: str, arch: str, out: Path, defines: Defines = (), nvcc: str = "nvcc"
) -> list[str]:
    """The nvcc command line that builds ``out`` (include root ``src/``, as NVRTC gets)."""
    return [
        nvcc, "-cubin", f"-arch={arch}", *BASE_OPTIONS, *NVCC_OPTIONS, f"-I{SRC_DIR}",
        *define_options(defines), "-o", str(out), str(SRC_DIR / name),
    ]  # fmt: skip


def build(name: str, arch: str, folder: Path, defines: Defines = (), nvcc: str = "nvcc") -> Path:
    """Compile ``name`` for ``arch`` with nvcc into :func:`cubin_path`. The cubin is written
    under a temporary name and renamed, so a reader never sees half a file. Raises
    ``subprocess.CalledProcessError`` (with nvcc's output) when the compile fails."""
    out = cubin_path(name, defines, arch, folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}-", suffix=".cubin", dir=out.parent)
    os.close(fd)
    try:
        subprocess.run(
            nvcc_command(name, arch, Path(tmp), defines, nvcc),
            check=True,
            capture_output=True,
            text=True,
        )
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out

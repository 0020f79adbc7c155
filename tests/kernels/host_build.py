"""One way to build the C++ drivers that test the CUDA headers on the CPU.

Why shared: every header test compiles a small driver against ``kernels/cuda/src`` with the
host compiler, and skips with the same reason where there is none; one helper keeps the flags
and the skip message the same everywhere.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SRC_DIR = Path(__file__).resolve().parents[2] / "kernels" / "cuda" / "src"
WARNINGS = ("-Wall", "-Werror")


def host_compiler() -> str:
    """The host C++ compiler, or skip the calling test with the reason."""
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler (g++/c++/clang++) on PATH")
    return cxx


def build_driver(
    folder: Path,
    name: str,
    source: str,
    flags: tuple[str, ...] = ("-O1", *WARNINGS),
    includes: tuple[Path, ...] = (),
    shared: bool = False,
) -> Path:
    """Compile the C++ ``source`` (which includes headers from ``kernels/cuda/src`` and
    ``includes``) into ``folder/name`` (a shared library with ``shared``); return its path.
    A compile error fails the test with the compiler's output."""
    cxx = host_compiler()
    src = folder / f"{name}.cpp"
    src.write_text(source)
    out = folder / (f"lib{name}.so" if shared else name)
    cmd = [cxx, "-std=c++17", *flags, f"-I{SRC_DIR}", *(f"-I{p}" for p in includes)]
    cmd += ["-shared", "-fPIC"] if shared else []
    cmd += [str(src), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"host build of {name} failed:\n{done.stderr}")
    return out

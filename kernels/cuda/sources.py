"""The CUDA C sources under ``kernels/cuda/src``: their names, their text and their identity.

Why one module: the loader (NVRTC at run time), the prebuild step (nvcc ahead of time) and the
cubin lookup must agree on what "the same source" is. A source is named by its path under
``src/`` (``"msm/msm.cu"``); local includes are written from that root too
(``#include "field/fields.cuh"``), as nvcc and g++ see them with ``-I src``. The identity of a
build is :func:`source_hash` of the fully expanded text plus its defines, so a change in any
header gives a new hash: a stale cubin is never loaded, and CuPy's on-disk cache (keyed on the
text it is given) notices the change too.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

SRC_DIR = Path(__file__).resolve().parent / "src"
# Every source that is compiled on its own (the .cuh headers are only included).
SOURCES: tuple[str, ...] = (
    "ntt/ntt.cu",
    "msm/msm.cu",
    "srs/srs.cu",
    "checks/fr_check.cu",
)
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17",)

Defines = tuple[tuple[str, str], ...]

# A local include, with or without a trailing comment (those with one used to reach NVRTC
# unexpanded, found through -I, so their text was missing from the cache keys).
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*(?://[^\n]*)?$', re.MULTILINE)
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$", re.MULTILINE)


def normalize_defines(
    defines: Mapping[str, object] | Iterable[tuple[str, object]] | None,
) -> Defines:
    """``{"A": 1}`` or ``[("A", 1)]`` -> ``(("A", "1"),)``, sorted by name: the one form every
    cache key and command line uses."""
    items = defines.items() if isinstance(defines, Mapping) else (defines or ())
    return tuple(sorted((str(k), str(v)) for k, v in items))


def define_options(defines: Defines) -> tuple[str, ...]:
    """``-DNAME=VALUE`` for each define (for NVRTC and nvcc alike)."""
    return tuple(f"-D{k}={v}" for k, v in defines)


def _expand(name: str, seen: set[str]) -> str:
    text = _PRAGMA_ONCE.sub("", (SRC_DIR / name).read_text())

    def repl(m: re.Match[str]) -> str:
        inc = m.group(1)
        if inc in seen:
            return f"// (already included: {inc})"
        seen.add(inc)
        return f"// ---- begin {inc}\n{_expand(inc, seen)}\n// ---- end {inc}"

    return _INCLUDE.sub(repl, text)


@functools.cache
def expand(name: str) -> str:
    """The text of ``src/<name>`` with local quoted includes inlined, each once. Read once per
    process: the sources are part of the installed package and do not change under it."""
    if not (SRC_DIR / name).is_file():
        raise FileNotFoundError(f"no CUDA source {name!r} under {SRC_DIR}")
    return _expand(name, {name})


@functools.cache
def source_hash(name: str, defines: Defines = ()) -> str:
    """16 hex digits naming one build: the expanded text of ``name`` and its defines (computed
    once per process: every kernel launch's module lookup asks for it)."""
    h = hashlib.sha256(expand(name).encode())
    h.update("\0".join(BASE_OPTIONS + define_options(defines)).encode())
    return h.hexdigest()[:16]


def nvrtc_options(defines: Defines) -> tuple[str, ...]:
    """The options an NVRTC compile of an expanded source gets."""
    return (*BASE_OPTIONS, f"-I{SRC_DIR}", *define_options(defines))

"""Load the CUDA C sources under ``kernels/cuda`` as CuPy RawModules, once per device and source.

Why this module: every GPU kernel in the project is our own CUDA C, compiled at run time by
NVRTC for the architecture of the device in use (CuPy picks ``sm_XY`` from the device's compute
capability when the NVRTC in use supports it, otherwise PTX the driver finishes). Local
``#include "x.cuh"`` lines are expanded here, before CuPy sees the source, so that CuPy's
on-disk cache (keyed on the source text and options only) notices a change in any header.
In-process, modules are cached per (device id, compute capability, source hash, options).

``import cupy`` happens inside the functions: this module is imported by CPU-only code paths.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17",)

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)
_cache: dict[tuple[Any, ...], Any] = {}
_lock = threading.Lock()


class CudaUnavailable(RuntimeError):
    """CuPy is not installed, or it sees no CUDA device: the CUDA backend cannot run here."""


def require_cupy() -> Any:
    """Import CuPy and check a device is visible; raise CudaUnavailable with the reason."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        raise CudaUnavailable(f"CuPy is not importable ({exc.__class__.__name__}: {exc})") from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise CudaUnavailable(f"CuPy sees no CUDA driver/device ({exc})") from exc
    if count < 1:
        raise CudaUnavailable("CuPy sees no CUDA device")
    return cupy


def expand_includes(name: str, _seen: frozenset[str] = frozenset()) -> str:
    """The text of ``kernels/cuda/<name>`` with local quoted includes inlined (each once)."""
    path = CUDA_DIR / name
    text = path.read_text()
    seen = set(_seen) | {name}

    def repl(m: re.Match[str]) -> str:
        inc = m.group(1)
        if inc in seen:
            return f"// (already included: {inc})"
        seen.add(inc)
        body = expand_includes(inc, frozenset(seen))
        return f"// ---- begin {inc}\n{body}\n// ---- end {inc}"

    text = re.sub(r"^\s*#\s*pragma\s+once\s*$", "", text, flags=re.MULTILINE)
    return _INCLUDE.sub(repl, text)


def source_hash(source: str, options: tuple[str, ...]) -> str:
    """Stable key for a fully expanded source plus options."""
    h = hashlib.sha256(source.encode())
    h.update("\0".join(options).encode())
    return h.hexdigest()[:16]


def device_arch() -> str:
    """``sm_XY`` of the current CuPy device (what NVRTC compiles for)."""
    cupy = require_cupy()
    return f"sm_{cupy.cuda.Device().compute_capability}"


def load_module(
    name: str, *, defines: dict[str, int | str] | None = None, extra_options: tuple[str, ...] = ()
) -> Any:
    """A ``cupy.RawModule`` for ``kernels/cuda/<name>`` on the current device.

    ``defines`` become ``-DNAME=VALUE`` options (compile-time kernel parameters). Raises
    CudaUnavailable when CuPy or a device is missing, and CuPy's CompileException (with the
    NVRTC log) when the source does not compile.
    """
    cupy = require_cupy()
    source = expand_includes(name)
    opts = list(BASE_OPTIONS) + [f"-I{CUDA_DIR}"]
    for k, v in sorted((defines or {}).items()):
        opts.append(f"-D{k}={v}")
    opts.extend(extra_options)
    options = tuple(opts)
    dev = cupy.cuda.Device()
    key = (dev.id, dev.compute_capability, name, source_hash(source, options))
    with _lock:
        mod = _cache.get(key)
        if mod is None:
            mod = cupy.RawModule(code=source, options=options, backend="nvrtc")
            mod.compile()  # compile now, so errors surface here and not at the first launch
            _cache[key] = mod
    return mod


@contextlib.contextmanager
def on_stream(stream: Any, allocator: Any) -> Iterator[Any]:
    """Make ``stream`` current (the current one when None) and route CuPy's allocations in the
    block through ``allocator`` (nbytes -> MemoryPointer) when one is given: how every kernel
    wrapper honours the stream and the memory budget the engine passes in."""
    cupy = require_cupy()
    s = stream if stream is not None else cupy.cuda.get_current_stream()
    with contextlib.ExitStack() as stack:
        stack.enter_context(s)
        if allocator is not None:
            stack.enter_context(cupy.cuda.using_allocator(allocator))
        yield s


def to_device(cupy: Any, host: np.ndarray) -> Any:
    """``host`` copied on the current stream. ``cupy.asarray`` copies on the legacy default
    stream, which does not order with the engine's non-blocking streams: a block fresh from a
    stream-ordered pool may still be read by a kernel queued on the current stream."""
    out = cupy.empty(host.shape, dtype=host.dtype)
    out.set(np.ascontiguousarray(host), stream=cupy.cuda.get_current_stream())
    return out

"""The one way a CUDA source becomes a loaded module, plus the stream helpers every launcher uses.

Why one loader: every kernel in the project is our own CUDA C (``kernels/cuda/src``), and each
module used to have its own way to load it, only one of which knew about prebuilt cubins.
:func:`load` serves them all, with one in-process cache keyed by (device, source, defines,
source hash), safe to call from any thread (a build holds only its own key's lock, so one slow
compile does not block loads of other modules).

Where a module comes from, in order:

1. a prebuilt cubin for exactly this build and the device's architecture
   (:mod:`provetop.kernels.cuda.cubins`, made by ``python -m provetop.kernels.cuda.prebuild``). A
   cubin the driver
   refuses (nvcc newer than the driver, say) is reported on stderr with the reason and skipped;
2. NVRTC through ``cupy.RawModule(code=...)``. CuPy keeps the compiled binary in its on-disk
   cache (``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``, keyed on the source text,
   options, architecture and NVRTC version; not with ``CUPY_CACHE_IN_MEMORY=1``), so only the
   first process on a machine compiles: later ones read the binary back. A marker file beside
   CuPy's entry records that we compiled this build here, so the first compile announces itself
   on stderr (it can take minutes) and later loads stay quiet.

``import cupy`` happens inside :func:`require_cupy`: every module of the package imports on a
machine without CuPy.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from provetop.kernels.cuda import cubins
from provetop.kernels.cuda.sources import (
    Defines,
    expand,
    normalize_defines,
    nvrtc_options,
    source_hash,
)

# A compile slower than this is reported even when CuPy's cache was expected to have it.
SLOW_COMPILE_S = 10.0

Log = Callable[[str], None]

# CuPy has no type information: its objects are named here for the reader, not checked.
Event = Any  # cupy.cuda.Event
# A launch's arguments in the kernel's parameter order: device arrays (cupy.ndarray) and the
# numpy scalars of its integer parameters.
KernelArgs = tuple[Any, ...]


# What to install where CuPy is missing: the extras of pyproject.toml's optional-dependencies
# (tests/kernels/test_cuda_runtime.py checks they are there) and the drivers each one needs.
INSTALL_HINT = (
    "install the CuPy extra for this machine's NVIDIA driver: "
    "pip install 'provetop[cuda12]' (driver >= 525) or 'provetop[cuda13]' (driver >= 580)"
)


@runtime_checkable
class CudaArray(Protocol):
    """An array in device memory, as the kernels recognise one: it offers the CUDA array
    interface (CuPy's ``ndarray`` does; a numpy array does not). Why a protocol: nothing in
    ``kernels/`` imports CuPy before a kernel runs, so a device array is known by what it
    offers, in one place, instead of by attribute probes wherever one is met."""

    __cuda_array_interface__: Any


class CudaUnavailable(RuntimeError):
    """CuPy is not installed, or it sees no CUDA device: the CUDA backend cannot run here."""


def require_cupy() -> Any:
    """Import CuPy and check a device is visible; raise CudaUnavailable with the reason."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        hint = f"; {INSTALL_HINT}" if isinstance(exc, ImportError) else ""
        raise CudaUnavailable(
            f"CuPy is not importable ({exc.__class__.__name__}: {exc}){hint}"
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise CudaUnavailable(f"CuPy sees no CUDA driver/device ({exc})") from exc
    if count < 1:
        raise CudaUnavailable("CuPy sees no CUDA device")
    _no_size_specialised_reductions()
    return cupy


def _no_size_specialised_reductions() -> None:
    """CuPy's reductions without its CUB block-reduction accelerator. Why: that accelerator
    compiles a kernel per reduction, dtype *and size class* on first use (cub_sum_pass1/2,
    cub_count_nonzero_pass1/2: 1.3-2.7 s each on an H100 with an empty kernel cache), so a
    warm-up on small arrays cannot build the ones a partition's 2^21-element chunks take, and
    a ``small`` run's first partition spent 7 s compiling them (2026-12-07). CuPy's own
    reduction kernels are compiled per expression and dtype alone, which the warm-up covers;
    the reductions are a few small sums and counts per partition, not where its time goes.
    ``CUPY_ACCELERATORS`` still governs CuPy's other routines."""
    try:
        from cupy._core import _accelerator

        _accelerator.set_reduction_accelerators([])
    except Exception:  # noqa: BLE001 (a CuPy without this switch: its defaults stay)
        pass


def stderr_log(line: str) -> None:
    """The default progress sink: one line on stderr, flushed."""
    print(f"kernels: {line}", file=sys.stderr, flush=True)


@dataclass
class KernelModule:
    """One loaded source on one device: the CuPy RawModule, where it came from and what the
    load cost. ``get_function`` looks each kernel up once."""

    source: str
    defines: Defines
    device: int
    arch: str
    origin: str  # "cubin" (prebuilt, ``path``) or "nvrtc"
    seconds: float
    raw: Any
    path: Path | None = None
    _functions: dict[str, Any] = field(default_factory=dict, repr=False)

    def get_function(self, name: str) -> Any:
        """The kernel ``name`` of this module (a ``cupy.RawKernel``)."""
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.raw.get_function(name)
        return fn


_Key = tuple[int, str, Defines, str]
_cache: dict[_Key, KernelModule] = {}
_key_locks: dict[_Key, threading.Lock] = {}
_lock = threading.Lock()


def load(
    source: str,
    *,
    defines: Mapping[str, object] | Iterable[tuple[str, object]] | None = None,
    device: int | None = None,
    cubin_dir: str | os.PathLike[str] | None = None,
    log: Log = stderr_log,
) -> KernelModule:
    """The module of ``kernels/cuda/src/<source>`` (e.g. ``"msm/msm.cu"``) compiled with
    ``defines`` (``-DNAME=VALUE``) on ``device`` (default: the current one), from the cache,
    a prebuilt cubin in ``cubin_dir`` (default: :func:`provetop.kernels.cuda.cubins.search_path`) or
    NVRTC, in that order. Compiled now, so a compile error surfaces here (CuPy's
    CompileException with NVRTC's log) and not at the first launch. Raises CudaUnavailable
    without CuPy or a device."""
    cupy = require_cupy()
    defs = normalize_defines(defines)
    dev = cupy.cuda.Device().id if device is None else int(device)
    key = (dev, source, defs, source_hash(source, defs))
    mod = _cache.get(key)
    if mod is not None:
        return mod
    with _lock:
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        mod = _cache.get(key)
        if mod is None:
            with cupy.cuda.Device(dev):
                mod = _build(cupy, source, defs, dev, cubins.search_path(cubin_dir), log)
            _cache[key] = mod
    return mod


def _build(
    cupy: Any, source: str, defs: Defines, dev: int, folder: list[Path], log: Log
) -> KernelModule:
    arch = f"sm_{cupy.cuda.Device(dev).compute_capability}"
    path = cubins.find(source, defs, arch, folder)
    if path is not None:
        t0 = time.perf_counter()
        try:
            raw = cupy.RawModule(path=str(path))
            raw.compile()  # loads the cubin now: a refusal is caught here, not at a launch
        except Exception as exc:
            log(
                f"prebuilt {path} did not load ({type(exc).__name__}: {exc}); "
                f"compiling {source} with NVRTC instead"
            )
        else:
            dt = time.perf_counter() - t0
            return KernelModule(source, defs, dev, arch, "cubin", dt, raw, path)
    marker = _nvrtc_marker(source, defs, arch)
    first = not marker.is_file()
    if first:
        log(
            f"compiling {source} for {arch} with NVRTC (first use on this machine, can take "
            f"minutes; cached in {marker.parent}; `provetop warmup` does this ahead)"
        )
    t0 = time.perf_counter()
    raw = cupy.RawModule(code=expand(source), options=nvrtc_options(defs), backend="nvrtc")
    raw.compile()
    dt = time.perf_counter() - t0
    if first or dt > SLOW_COMPILE_S:
        log(f"compiled {source} for {arch} with NVRTC in {dt:.1f} s")
    with contextlib.suppress(OSError):  # a read-only cache only costs the announcement
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return KernelModule(source, defs, dev, arch, "nvrtc", dt, raw)


def cupy_cache_dir() -> Path:
    """CuPy's on-disk kernel cache (its documented default, or ``CUPY_CACHE_DIR``)."""
    return Path(os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")


def _nvrtc_marker(source: str, defs: Defines, arch: str) -> Path:
    """The file that says this build was compiled with NVRTC on this machine. It lives in
    CuPy's cache folder, so clearing that cache clears the marker with it."""
    stem = source.replace("/", "-").removesuffix(".cu")
    return cupy_cache_dir() / f"provetop-{stem}-{source_hash(source, defs)}-{arch}.compiled"


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

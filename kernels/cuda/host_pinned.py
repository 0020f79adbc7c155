"""Page-locked host arrays: registered large-page mappings, or cudaHostAlloc as the fallback.

Why: every CUDA worker pins a ~17 GB witness pool at 2^27 before its first partition, and the
host-resident SRS is pinned at start-up too. On the H200 VM (``bench/pin_probe.py``, 2026-11-30,
7dc8278) cudaHostAlloc took 0.47 s/GB (8.5 s for 17 GiB), and two workers pinning at once made the
first partitions' synthesis 23-25 s. An anonymous mapping advised ``MADV_HUGEPAGE``, touched,
then cudaHostRegister'ed took 0.20 s/GB (3.7 s), with the same 55 GB/s host-to-device copies:
the kernel pins 2 MiB pages, 512 times fewer than 4 KiB ones. So ``register`` is the default
and ``alloc`` (cudaHostAlloc) is both the alternative (the caller passes
``KernelTuning.pin_method``, set by ``PROVETOP_PIN_METHOD=alloc``) and the fallback when a
mapping or a registration fails; each fallback is kept per thread for the engine to report
(:func:`take_fallbacks`).

Both kinds are portable (page-locked for every device: the host SRS is made on one device
and streamed by all), exactly the bytes asked for, and freed with the array.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from provetop.kernels.cuda.runtime import require_cupy
from provetop.kernels.tuning import PIN_METHODS

METHODS = PIN_METHODS  # ("register", "alloc"): the first is the default
# cudaHostRegisterPortable / cudaHostAllocPortable (the CUDA runtime's flag value, 1 for both)
PORTABLE = 1


class _Fallbacks(threading.local):
    """This thread's register -> alloc fallbacks, in order (per thread: a worker reports its
    own)."""

    def __init__(self) -> None:
        self.lines: list[str] = []


_local = _Fallbacks()


class _Registration:
    """Unregisters its range when the last array over it is gone, before the mapping is
    unmapped (it is referenced from the buffer object, whose attributes are cleared before
    the buffer lets go of the mapping)."""

    def __init__(self, runtime: Any, mapping: mmap.mmap, ptr: int) -> None:
        self.runtime, self.mapping, self.ptr = runtime, mapping, ptr

    def __del__(self) -> None:
        try:
            self.runtime.hostUnregister(self.ptr)
        except Exception:  # interpreter shutdown, or a context already gone: nothing to do
            pass


TOUCH_CHUNK = 1 << 30  # bytes faulted in per step: the unit of the caller's progress


def _registered(
    nbytes: int, runtime: Any, progress: Callable[[int], None] | None = None
) -> tuple[Any, int]:
    """A buffer object over a touched, registered large-page mapping, and its address;
    ``progress(bytes)`` after each :data:`TOUCH_CHUNK` faulted in (the registration that
    follows is one call)."""
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mapping, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        try:  # a hint: without it (a kernel built without THP), 4 KiB pages, still correct
            mapping.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass
    buf = (ctypes.c_uint8 * nbytes).from_buffer(mapping)
    view = np.frombuffer(memoryview(buf), np.uint8, nbytes)  # numpy's stubs omit ctypes arrays
    for lo in range(0, nbytes, TOUCH_CHUNK):  # fault every page in before pinning
        hi = min(nbytes, lo + TOUCH_CHUNK)
        view[lo:hi] = 0
        if progress is not None:
            progress(hi - lo)
    del view
    ptr = ctypes.addressof(buf)
    runtime.hostRegister(ptr, nbytes, PORTABLE)
    # Kept on the buffer, so that it lives exactly as long as the arrays over it. A ctypes array
    # takes attributes at run time, but its stub declares none, and its type is made here for
    # this length: there is no class to declare the attribute on, hence the ignore.
    buf.registration = _Registration(runtime, mapping, ptr)  # type: ignore[attr-defined]
    return buf, ptr


def _allocated(nbytes: int, cupy: Any) -> Any:
    mem = cupy.cuda.PinnedMemory(nbytes, cupy.cuda.runtime.hostAllocPortable)
    return cupy.cuda.PinnedMemoryPointer(mem, 0)


def pinned_empty(
    shape: tuple[int, ...],
    dtype: Any = np.uint64,
    *,
    method: str = "register",
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """A numpy array in page-locked host memory: the only kind a host-to-device copy can
    overlap with kernels. Not CuPy's pinned pool, which rounds each block up to a power of two
    and keeps it after use (a 12 GiB witness a, b, c took 16 GiB there). ``method``
    (``KernelTuning.pin_method``): ``register`` (a large-page mapping, registered) or
    ``alloc`` (cudaHostAlloc). ``progress(bytes)``: called as the mapping is faulted in
    (``register`` only; cudaHostAlloc is one call)."""
    if method not in METHODS:
        raise ValueError(f"pin method {method!r}: expected one of {', '.join(METHODS)}")
    cupy = require_cupy()
    count = int(np.prod(shape))
    nbytes = max(1, count * np.dtype(dtype).itemsize)
    buf: Any = None
    if method == "register":
        try:
            buf, _ptr = _registered(nbytes, cupy.cuda.runtime, progress)
        except (OSError, ValueError, cupy.cuda.runtime.CUDARuntimeError) as exc:
            _fallbacks().append(
                f"cudaHostRegister of {nbytes / 1e9:.2f} GB failed "
                f"({type(exc).__name__}: {exc}); cudaHostAlloc used instead"
            )
    if buf is None:
        buf = _allocated(nbytes, cupy)
    return np.frombuffer(buf, dtype, count).reshape(shape)


def _fallbacks() -> list[str]:
    return _local.lines


def take_fallbacks() -> list[str]:
    """This thread's fallback lines since its last call (for the engine's ``registration``
    faults: per thread, so a worker reports its own), emptied."""
    out = list(_fallbacks())
    _fallbacks().clear()
    return out

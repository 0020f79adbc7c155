"""Give the C heap's free pages back to the kernel, every ``HEAP_TRIM_EVERY_S`` seconds.

Why: over a long run the engine's Python objects stay flat (a tracemalloc diff over ten
minutes shows no growing site), yet RSS climbed about 1 MiB a minute. glibc's malloc keeps
the memory freed inside its arenas (one per thread that allocates: workers, bus, recorder,
writer) rather than returning it: mallinfo2 showed the arenas' free bytes growing while their
used bytes stayed at ~12 MiB. Event dicts, encoded frames and the recording's write buffer are
freed in another order than allocated, so holes accumulate. ``malloc_trim(0)`` releases the
free pages inside every arena (madvise), which bounds RSS by what is used plus what was
freed since the last trim. It runs in C without the GIL; an arena is locked only while it is
walked (at most 35 ms in a 30-minute soak, docs/reliability.md). Elsewhere than glibc it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable

from provetop.engine.settings.tuning import HEAP_TRIM_EVERY_S


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where there is none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


class HeapTrimmer:
    """A daemon thread calling ``malloc_trim(0)`` every ``every`` seconds until stopped."""

    def __init__(self, every: float = HEAP_TRIM_EVERY_S) -> None:
        self.every = every
        self.trims = 0
        self.released = 0  # trims that gave memory back
        self.longest_ms = 0.0
        self._fn = _malloc_trim()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.every > 0 and self._fn is not None

    def start(self) -> HeapTrimmer:
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="heap-trim", daemon=True)
            self._thread.start()
        return self

    def trim(self) -> bool:
        """One trim now; True when the allocator gave memory back."""
        if self._fn is None:
            return False
        t0 = time.perf_counter()
        released = bool(self._fn(0))
        self.longest_ms = max(self.longest_ms, (time.perf_counter() - t0) * 1e3)
        self.trims += 1
        self.released += released
        return released

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.trim()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

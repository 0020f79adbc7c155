"""A fixed sequence of kernel launches replayed as a CUDA graph (``cuGraphLaunch``, ctypes).

Why: a small transform's kernels run for 0.01 .. 0.25 ms, and whatever the host does before the
first of them reaches the GPU is idle time in every call. Three ``cuLaunchKernel`` calls from
Python took ~13 us of a 2^20 forward's host time (docs/performance-notes.md, 2026-12-03); one
``cuGraphLaunch`` replays the same kernels with one driver call.

A graph holds every argument by value, the buffers' addresses included, so one executable graph
is kept per set of addresses (:class:`GraphCache`, least recently used first out). Callers that
reuse their buffers (a memory pool hands the same addresses back) replay; a set of addresses is
captured only on its second use, so one-off buffers cost a set look-up and the plain launches.

Why ctypes and not CuPy's graph API: the launches captured here are themselves driver calls on
raw stream handles, and replay must stay one cheap call; CuPy's wrapper adds neither.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

# cuda.h: CUstream_flags, CUstreamCaptureMode
CU_STREAM_NON_BLOCKING = 1
# Relaxed: other threads' unsafe calls (cuMemAlloc in a neighbour worker) stay legal while a
# capture runs; the capture itself holds launches only.
CU_STREAM_CAPTURE_MODE_RELAXED = 2

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()
_capture_streams: dict[int, int] = {}  # CUcontext -> its private capture stream


class GraphUnavailable(RuntimeError):
    """The driver library lacks a graph entry point this module needs (older than CUDA 11.4)."""


def _driver() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        vp, pvp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        signatures = {
            "cuCtxGetCurrent": [pvp],
            "cuStreamCreate": [pvp, ctypes.c_uint],
            "cuStreamBeginCapture_v2": [vp, ctypes.c_int],
            "cuStreamEndCapture": [vp, pvp],
            "cuGraphInstantiateWithFlags": [pvp, vp, ctypes.c_ulonglong],
            "cuGraphLaunch": [vp, vp],
            "cuGraphExecDestroy": [vp],
            "cuGraphDestroy": [vp],
            "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        }
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for name, argtypes in signatures.items():
                fn = getattr(lib, name)
                fn.argtypes = argtypes
                fn.restype = ctypes.c_int
        except (OSError, AttributeError) as exc:
            raise GraphUnavailable(f"CUDA graphs are not available: {exc}") from exc
        _lib = lib
        return lib


def _check(lib: ctypes.CDLL, rc: int, what: str) -> None:
    if rc:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(rc, ctypes.byref(msg))
        text = msg.value.decode() if msg.value else "unknown error"
        raise RuntimeError(f"{what} failed: {text} ({rc})")


def _capture_stream(lib: ctypes.CDLL) -> int:
    """The current context's private stream for captures. Why private: the legacy default
    stream cannot be captured, and a caller's stream may have work queued that must not end
    up in (or be held back by) a capture."""
    ctx = ctypes.c_void_p()
    _check(lib, lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    key = ctx.value or 0
    with _lib_lock:
        stream = _capture_streams.get(key)
        if stream is None:
            handle = ctypes.c_void_p()
            flags = CU_STREAM_NON_BLOCKING
            _check(lib, lib.cuStreamCreate(ctypes.byref(handle), flags), "cuStreamCreate")
            stream = _capture_streams[key] = handle.value or 0
    return stream


def capture(record: Callable[[int], None]) -> int:
    """An executable graph (CUgraphExec handle) of the launches ``record(stream)`` queues on
    the stream it is given; the launches run only when the graph is launched."""
    lib = _driver()
    stream = _capture_stream(lib)
    _check(
        lib,
        lib.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED),
        "cuStreamBeginCapture",
    )
    graph = ctypes.c_void_p()
    try:
        record(stream)
    finally:  # a failed capture must still end, or the stream stays in capture mode
        rc_end = lib.cuStreamEndCapture(stream, ctypes.byref(graph))
    _check(lib, rc_end, "cuStreamEndCapture")
    exe = ctypes.c_void_p()
    try:
        _check(
            lib,
            lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, 0),
            "cuGraphInstantiateWithFlags",
        )
    finally:
        lib.cuGraphDestroy(graph)  # the executable graph keeps its own copy
    return exe.value or 0


def replay(exe: int, stream: int) -> None:
    """Launch executable graph ``exe`` on ``stream`` (a CUstream handle; 0 = legacy default)."""
    lib = _driver()
    _check(lib, lib.cuGraphLaunch(exe, stream), "cuGraphLaunch")


def destroy(exe: int) -> None:
    """Free an executable graph; a launch still in flight completes first (the driver defers
    the free)."""
    if exe:
        _driver().cuGraphExecDestroy(exe)


class GraphCache:
    """Executable graphs of one launch sequence, one per key (the buffers' addresses), at most
    ``capacity`` of them (128: more than the 96 inputs ``provetop bench ntt`` rotates through
    at 2^16 to keep them out of L2, so a bench's replays are a caller's who reuses buffers). A key is captured on its second use; until then, and for every key
    once capturing has failed, :meth:`launch` returns False and the caller launches plainly.
    Not thread-safe: the caller holds its own lock around :meth:`launch`."""

    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self._execs: OrderedDict[Hashable, int] = OrderedDict()
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self.failed: str | None = None  # why capturing was given up, once it was
        self.captures = 0
        self.replays = 0

    def launch(self, key: Hashable, record: Callable[[int], None], stream: int) -> bool:
        """Replay ``key``'s graph on ``stream`` (a CUstream handle, 0 = legacy default) and
        return True; or return False (key new, or graphs unavailable) without launching."""
        exe = self._execs.get(key)
        if exe is None:
            if self.failed is not None or not self._first_seen_before(key):
                return False
            try:
                exe = capture(record)
            except (GraphUnavailable, RuntimeError) as exc:
                self.failed = str(exc)
                return False
            self.captures += 1
            self._execs[key] = exe
            if len(self._execs) > self.capacity:
                destroy(self._execs.popitem(last=False)[1])
        else:
            self._execs.move_to_end(key)
        replay(exe, stream)
        self.replays += 1
        return True

    def _first_seen_before(self, key: Hashable) -> bool:
        if key in self._seen:
            del self._seen[key]
            return True
        self._seen[key] = None
        if len(self._seen) > 4 * self.capacity:
            self._seen.popitem(last=False)
        return False

    def close(self) -> None:
        """Free every executable graph (the cache stays usable)."""
        while self._execs:
            destroy(self._execs.popitem()[1])

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver may be gone
            pass

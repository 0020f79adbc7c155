"""Kernel launches as programmatic dependents of the kernel before them (``cuLaunchKernelEx``).

Why ctypes: CuPy exposes ``cuLaunchKernel`` but not ``cuLaunchKernelEx``, the only way to give a
launch the attribute ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`` (sm_90 and newer).
With it, the next kernel in the stream may start once every block of the running one has
executed ``griddepcontrol.launch_dependents``, and must execute ``griddepcontrol.wait`` before it
touches what the running one writes (the NTT passes do both: ``src/ntt/ntt.cuh``). The structures
below are those of ``cuda.h`` (CUDA 12 and 13, x86-64 and aarch64 layouts are the same).
"""

from __future__ import annotations

import ctypes
import threading

# cuda.h: CUlaunchAttributeID
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the id, 4 bytes of padding, and a 64-byte value union whose first
    int is ``programmaticStreamSerializationAllowed``."""

    _fields_ = [
        ("id", ctypes.c_uint32),
        ("pad", ctypes.c_char * 4),
        ("value", ctypes.c_int32),
        ("value_pad", ctypes.c_char * 60),
    ]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint32),
        ("gridDimY", ctypes.c_uint32),
        ("gridDimZ", ctypes.c_uint32),
        ("blockDimX", ctypes.c_uint32),
        ("blockDimY", ctypes.c_uint32),
        ("blockDimZ", ctypes.c_uint32),
        ("sharedMemBytes", ctypes.c_uint32),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttribute)),
        ("numAttrs", ctypes.c_uint32),
    ]


assert ctypes.sizeof(_LaunchAttribute) == 72 and ctypes.sizeof(_LaunchConfig) == 56

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


class LaunchExUnavailable(RuntimeError):
    """The driver library has no ``cuLaunchKernelEx`` (a driver older than CUDA 11.8)."""


def _driver() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
                fn = lib.cuLaunchKernelEx
            except (OSError, AttributeError) as exc:
                raise LaunchExUnavailable(f"cuLaunchKernelEx is not available: {exc}") from exc
            fn.argtypes = [
                ctypes.POINTER(_LaunchConfig),
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_void_p,
            ]
            fn.restype = ctypes.c_int
            lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
            _lib = lib
        return _lib


class DependentLaunch:
    """One kernel's launch, prepared once (grid, block, shared bytes, the attribute); only the
    stream changes per call. ``dependent`` False launches it plainly (the first kernel of a
    sequence, whose predecessor in the stream is not ours)."""

    def __init__(
        self, fn: int, grid: tuple[int, int], block: int, shared: int, dependent: bool
    ) -> None:
        self._lib = _driver()
        self._fn = ctypes.c_void_p(fn)
        self._attr = _LaunchAttribute(
            id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, value=1
        )
        self._cfg = _LaunchConfig(
            gridDimX=grid[0],
            gridDimY=grid[1],
            gridDimZ=1,
            blockDimX=block,
            blockDimY=1,
            blockDimZ=1,
            sharedMemBytes=shared,
            hStream=None,
            attrs=ctypes.pointer(self._attr) if dependent else None,
            numAttrs=1 if dependent else 0,
        )
        self._cfg_ref = ctypes.byref(self._cfg)

    def __call__(self, stream: int, params: int) -> None:
        """Launch on ``stream`` (a CUstream handle; 0 = the legacy default stream) with the
        kernel parameter array at address ``params``; raises RuntimeError on a driver error.
        The caller serialises calls (the config is shared)."""
        self._cfg.hStream = stream or None
        rc = self._lib.cuLaunchKernelEx(self._cfg_ref, self._fn, params, None)
        if rc:
            msg = ctypes.c_char_p()
            self._lib.cuGetErrorString(rc, ctypes.byref(msg))
            text = msg.value.decode() if msg.value else "unknown error"
            raise RuntimeError(f"cuLaunchKernelEx failed: {text} ({rc})")

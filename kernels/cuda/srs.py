"""SRS generation on the GPU: P_i = [s_i] G for known secrets, by fixed-base tables.

Why: an SRS with known secrets makes every MSM checkable exactly (MSM(k, P) = [<k, s>] G), and
the H query of a 32 GiB sector has 2^27 points; one double-and-add per point would take hours
on a CPU. With a table T[w][d-1] = d 2^(c w) G (c = 16: 16 windows of 2^15 affine points, 48 MiB,
built once per device on the GPU), each point costs 16 mixed additions, and the affine
conversion shares one inversion among ``BATCH_INV`` points (``src/srs/srs.cu``).

Layout: secrets ``(n, 4)`` uint64 canonical Fr (< r), output ``(n, 12)`` affine Montgomery;
s = 0 gives the all-zero row (infinity).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from provetop.kernels.constants import G1_GENERATOR
from provetop.kernels.cuda.msm_plan import XYZZ_WORDS, num_windows
from provetop.kernels.cuda.runtime import KernelArgs, KernelModule, load, on_stream, require_cupy
from provetop.kernels.layout import fr_to_limbs, g1_to_limbs, random_fr
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

SOURCE = "srs/srs.cu"
BLOCK = 256  # threads per block of every srs.cu kernel
TABLE_BITS = 16
BATCH_INV = 32  # points sharing one inversion in the affine conversion
CHUNK = 1 << 23  # points per srs_mul launch: scratch = CHUNK * (192 + 48) bytes = 1.9 GiB

_tables: dict[tuple[int, int], Any] = {}
_lock = threading.Lock()


def scratch_bytes(n: int) -> int:
    """Peak device scratch of :func:`srs` for ``n`` points (the table is cached separately, see
    :func:`table_bytes`): XYZZ results and prefix products of one chunk."""
    m = min(n, CHUNK)
    return m * (192 + 48) + 2 * 512


def table_bytes(c: int = TABLE_BITS) -> int:
    """Device bytes of the cached fixed-base table: W 2^(c-1) affine points of 96 bytes."""
    return num_windows(c) * (1 << (c - 1)) * 96


def module(tuning: KernelTuning = DEFAULT_TUNING) -> KernelModule:
    """srs.cu on the current device (a prebuilt cubin from ``tuning.cubin_dir`` when one
    matches)."""
    return load(SOURCE, cubin_dir=tuning.cubin_dir)


def _u32(x: int) -> np.uint32:
    return np.uint32(x)


def launch(mod: KernelModule, name: str, threads: int, args: KernelArgs, stream: Any) -> None:
    """Kernel ``name`` of srs.cu over ``threads`` threads in blocks of :data:`BLOCK` (also the
    fixed-base MSM's table build, kernels/cuda/msm_fixed.py)."""
    mod.get_function(name)((-(-threads // BLOCK),), (BLOCK,), args, stream=stream)


def generator_limbs() -> np.ndarray:
    """The standard generator as a ``(1, 12)`` Montgomery array."""
    return g1_to_limbs([G1_GENERATOR])


def table(c: int = TABLE_BITS, stream: Any = None, *, tuning: KernelTuning = DEFAULT_TUNING) -> Any:
    """The affine fixed-base table ``(W 2^(c-1), 12)`` on the current device (built once; kept
    for the life of the process, outside any caller's allocator)."""
    cupy = require_cupy()
    key = (cupy.cuda.Device().id, c)
    with _lock:
        tab = _tables.get(key)
        if tab is not None:
            return tab
        mod = module(tuning)
        s = stream if stream is not None else cupy.cuda.get_current_stream()
        W, B = num_windows(c), 1 << (c - 1)
        with s:
            gen = cupy.asarray(generator_limbs())
            tmp = cupy.empty((W * B, XYZZ_WORDS), dtype=np.uint64)
            launch(mod, "srs_table_build", W * B, (gen, _u32(c), _u32(W), tmp), s)
            tab = _to_affine(mod, tmp, s)
            s.synchronize()
        _tables[key] = tab
        return tab


def _to_affine(mod: KernelModule, xyzz: Any, stream: Any) -> Any:
    cupy = require_cupy()
    n = int(xyzz.shape[0])
    out = cupy.empty((n, 12), dtype=np.uint64)
    prefix = cupy.empty((n, 6), dtype=np.uint64)
    args = (xyzz, _u32(n), _u32(BATCH_INV), prefix, out)
    launch(mod, "xyzz_to_affine_batch", -(-n // BATCH_INV), args, stream)
    return out


def srs(
    secrets: Any,
    *,
    stream: Any = None,
    allocator: Any = None,
    out: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> Any:
    """P_i = [s_i] G for device ``secrets`` ``(n, 4)`` (canonical, < r); returns the device
    array ``(n, 12)`` (or fills ``out``). Scratch: :func:`scratch_bytes`; the output itself is
    allocated through ``allocator`` too when ``out`` is None."""
    cupy = require_cupy()
    if secrets.ndim != 2 or secrets.shape[1] != 4 or secrets.dtype != np.uint64:
        raise ValueError(f"secrets must be a uint64 (n, 4) array, got {secrets.shape}")
    n = int(secrets.shape[0])
    if n >= 1 << 32:
        raise ValueError("at most 2^32 - 1 points per call")
    tab = table(TABLE_BITS, stream, tuning=tuning)
    mod = module(tuning)
    secrets = cupy.ascontiguousarray(secrets)
    with on_stream(stream, allocator) as s:
        if out is None:
            out = cupy.empty((n, 12), dtype=np.uint64)
        W = num_windows(TABLE_BITS)
        for lo in range(0, n, CHUNK):
            m = min(CHUNK, n - lo)
            tmp = cupy.empty((m, XYZZ_WORDS), dtype=np.uint64)
            args: KernelArgs = (secrets[lo : lo + m], _u32(m), tab, _u32(TABLE_BITS), _u32(W), tmp)
            launch(mod, "srs_mul", m, args, s)
            prefix = cupy.empty((m, 6), dtype=np.uint64)
            args = (tmp, _u32(m), _u32(BATCH_INV), prefix, out[lo : lo + m])
            launch(mod, "xyzz_to_affine_batch", -(-m // BATCH_INV), args, s)
            del tmp, prefix
    return out


def srs_random_points(
    n: int, stream: Any = None, *, tuning: KernelTuning = DEFAULT_TUNING
) -> tuple[Any, list[int]]:
    """``n`` fresh random points [s_i] G on the device and their secrets (canonical ints): the
    test and bench inputs whose MSMs can be checked exactly."""
    cupy = require_cupy()
    secrets = random_fr(n)
    pts = srs(cupy.asarray(fr_to_limbs(secrets, montgomery=False)), stream=stream, tuning=tuning)
    return pts, secrets


__all__ = ["module", "scratch_bytes", "srs", "srs_random_points", "table", "table_bytes"]

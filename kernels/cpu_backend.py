"""The no-GPU kernel backend: the exact CPU reference behind the ``KernelBackend`` interface.

Why it exists: the engine runs one code path whatever the hardware, so on a machine without a
GPU (CI, a laptop) every partition still computes real, checkable math through this class, on
numpy arrays in exactly the layout the CUDA backend uses (``kernels/layout.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from provetop.kernels.backend import Order
from provetop.kernels.constants import FP_LIMBS, FR_LIMBS
from provetop.kernels.cpu import msm as _msm
from provetop.kernels.cpu import ntt as _ntt
from provetop.kernels.cpu import srs as _srs
from provetop.kernels.layout import fr_from_limbs, fr_to_limbs, g1_from_limbs, g1_to_limbs


def _fr_array(x: Any, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.uint64 or a.shape[-1:] != (FR_LIMBS,):
        raise ValueError(
            f"{what}: expected uint64 array of shape (..., 4), got {a.dtype} {a.shape}"
        )
    return a


class CpuBackend:
    """``KernelBackend`` on numpy arrays; ``stream`` and ``allocator`` are accepted and ignored.

    ``use_arkworks`` (None = when importable) selects py-arkworks-bls12381 for MSM and SRS;
    False forces the plain-Python reference (slower, same results)."""

    name = "cpu"

    def __init__(self, use_arkworks: bool | None = None) -> None:
        self.use_arkworks = use_arkworks

    def ntt(
        self,
        x: Any,
        *,
        inverse: bool = False,
        coset: bool = False,
        input_order: Order = "natural",
        output_order: Order = "natural",
        stream: Any = None,
        allocator: Any = None,
    ) -> np.ndarray:
        """NTT of ``(n, 4)`` or ``(batch, n, 4)`` Montgomery limbs. The transform is linear
        over Fr, so it runs directly on the Montgomery representatives a*R (no conversion):
        NTT(a*R) = NTT(a)*R."""
        a = _fr_array(x, "ntt")
        if a.ndim not in (2, 3):
            raise ValueError(f"ntt: expected (n, 4) or (batch, n, 4), got {a.shape}")
        rows = a.reshape(-1, a.shape[-2], FR_LIMBS)
        out = np.empty_like(rows)
        for i in range(rows.shape[0]):
            vals = np.empty(rows.shape[1], dtype=object)
            vals[:] = fr_from_limbs(rows[i], montgomery=False)
            res = _ntt.ntt_objects(
                vals,
                inverse=inverse,
                coset=coset,
                input_order=input_order,
                output_order=output_order,
            )
            out[i] = fr_to_limbs(res.tolist(), montgomery=False)
        return out.reshape(a.shape)

    def h_step(
        self, a: Any, b: Any, c: Any, *, stream: Any = None, allocator: Any = None
    ) -> np.ndarray:
        """H's n-1 coefficients ``(n - 1, 4)``, canonical, from Montgomery evaluations."""
        arrs = [_fr_array(v, "h_step") for v in (a, b, c)]
        n = arrs[0].shape[0]
        if any(v.shape != (n, FR_LIMBS) for v in arrs):
            raise ValueError("h_step: a, b and c must all have shape (n, 4)")
        objs = []
        for v in arrs:
            o = np.empty(n, dtype=object)
            o[:] = fr_from_limbs(v)
            objs.append(o)
        h = _ntt.h_step_objects(*objs)
        return fr_to_limbs(h[:-1].tolist(), montgomery=False)

    def msm(
        self, points: Any, scalars: Any, *, stream: Any = None, allocator: Any = None
    ) -> np.ndarray:
        """sum scalars[i] * points[i]; one affine point ``(12,)`` (Montgomery, zeros =
        infinity). Scalar rows >= r raise ValueError."""
        pts = np.asarray(points)
        sc = _fr_array(scalars, "msm")
        if pts.ndim != 2 or pts.shape[1] != 2 * FP_LIMBS or sc.shape != (pts.shape[0], FR_LIMBS):
            raise ValueError(
                f"msm: expected points (n, 12) and scalars (n, 4), got {pts.shape}, {sc.shape}"
            )
        res = _msm.msm_fast(
            g1_from_limbs(pts), fr_from_limbs(sc, montgomery=False), use_arkworks=self.use_arkworks
        )
        limbs: np.ndarray = g1_to_limbs([res])[0]
        return limbs

    def srs(self, secrets: Any, *, stream: Any = None, allocator: Any = None) -> np.ndarray:
        """[s_i]G for canonical secrets ``(n, 4)`` -> affine ``(n, 12)``."""
        s = _fr_array(secrets, "srs")
        if s.ndim != 2:
            raise ValueError(f"srs: expected (n, 4), got {s.shape}")
        pts = _srs.srs_points(fr_from_limbs(s, montgomery=False), use_arkworks=self.use_arkworks)
        return g1_to_limbs(pts)

"""Conversions between Python ints and the limb arrays every backend shares.

Why: the CPU reference computes on Python ints, the GPU kernels on arrays of 64-bit limbs. This
module is the single definition of how one becomes the other, so a test can hand the same array
to both backends and compare results bit for bit.

The layout (see also ``kernels/backend.py`` and ``docs/kernels.md``):

- every array is ``numpy.uint64``, C-contiguous, little-endian limbs (limb 0 = least
  significant 64 bits); on a little-endian host the bytes of a row are the little-endian bytes
  of the integer, i.e. also 8 (Fr) or 12 (Fp) little-endian 32-bit words;
- Fr: ``(n, 4)``, Montgomery form a*2^256 mod r unless ``montgomery=False`` (canonical a);
- Fp: ``(n, 6)``, Montgomery form a*2^384 mod p unless ``montgomery=False``;
- G1 affine: ``(n, 12)`` = x (6 limbs) then y (6 limbs), both Montgomery; infinity is the
  all-zero row ((0, 0) is not on the curve);
- G1 Jacobian ``(n, 18)`` = X, Y, Z (infinity: any Z = 0; the CPU reference writes (1, 1, 0));
  G1 XYZZ ``(n, 24)`` = X, Y, ZZ, ZZZ (infinity: ZZ = ZZZ = 0; the reference writes (1, 1, 0, 0)).
- MSM scalars are Fr in canonical form (``montgomery=False``), values < r.

Conversions go through one ``bytes`` buffer for the whole array (``int.to_bytes`` /
``int.from_bytes`` per element, ``numpy.frombuffer`` once), never per-limb Python loops.
Values outside ``[0, modulus)`` are rejected with ``ValueError`` (no silent reduction).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from provetop.kernels.constants import (
    FP_BYTES,
    FP_LIMBS,
    FP_MODULUS,
    FP_MONT_R,
    FP_MONT_R_INV,
    FR_BYTES,
    FR_LIMBS,
    FR_MODULUS,
    FR_MONT_R,
    FR_MONT_R_INV,
)

try:  # gmpy2's integers: the Montgomery conversion ~2x faster, the MSM's host combination ~2.8x
    from gmpy2 import mpz as _mpz
except ImportError:  # pragma: no cover - the GPU image has no gmpy2
    _mpz = int
# gmpy2's mpz where installed, else int: typed as the conversion it is used as (gmpy2 has no
# type information), and bound here rather than imported as, so that it is this module's own
# name for provetop.kernels.cuda.msm_stages to import.
fast_int: Callable[[int], int] = _mpz

Point = tuple[int, int] | None  # affine point, canonical coordinates; None = infinity

_DTYPE = np.dtype("<u8")


# --- generic ---------------------------------------------------------------------------------


def _ints_to_array(values: Sequence[int], nbytes: int, limbs: int) -> np.ndarray:
    # bytearray (not bytes) so the array that shares its memory is writable
    buf = bytearray().join([int(v).to_bytes(nbytes, "little") for v in values])
    arr = np.frombuffer(buf, dtype=_DTYPE).reshape(len(values), limbs)
    return arr.astype(np.uint64, copy=False)  # native byte order (no copy on little-endian)


@runtime_checkable
class DeviceArray(Protocol):
    """An array that lives elsewhere and is copied to the host with ``get()`` (CuPy's
    ``ndarray``). Why a protocol: ``kernels/`` imports CuPy only when a kernel runs, so a
    device array is recognised by what it offers."""

    def get(self, stream: Any = None) -> np.ndarray: ...


def to_host(arr: Any) -> np.ndarray:
    """numpy view of ``arr``; a device array (:class:`DeviceArray`) is copied to the host."""
    if not isinstance(arr, np.ndarray) and isinstance(arr, DeviceArray):
        arr = arr.get()
    return np.asarray(arr)


def _array_to_ints(arr: Any, nbytes: int, limbs: int) -> list[int]:
    a = to_host(arr)
    if a.shape[-1:] != (limbs,):
        raise ValueError(f"expected an array of shape (..., {limbs}), got {a.shape}")
    buf = np.ascontiguousarray(a, dtype=_DTYPE).tobytes()
    fb = int.from_bytes
    return [fb(buf[i : i + nbytes], "little") for i in range(0, len(buf), nbytes)]


def _check_range(values: list[int], modulus: int, what: str) -> None:
    if values and (min(values) < 0 or max(values) >= modulus):
        raise ValueError(f"{what} value outside [0, modulus)")


def _to_limbs(
    values: Iterable[int], modulus: int, radix: int, nbytes: int, limbs: int, mont: bool, what: str
) -> np.ndarray:
    vals = [int(v) for v in values]
    _check_range(vals, modulus, what)
    if mont:
        m, rr = fast_int(modulus), fast_int(radix)
        vals = [v * rr % m for v in vals]
    return _ints_to_array(vals, nbytes, limbs)


def _from_limbs(
    arr: Any, modulus: int, radix_inv: int, nbytes: int, limbs: int, mont: bool, what: str
) -> list[int]:
    vals = _array_to_ints(arr, nbytes, limbs)
    _check_range(vals, modulus, what)
    if mont:
        m, ri = fast_int(modulus), fast_int(radix_inv)
        vals = [int(v * ri % m) for v in vals]
    return vals


# --- Fr / Fp ---------------------------------------------------------------------------------


def fr_to_limbs(values: Iterable[int], montgomery: bool = True) -> np.ndarray:
    """Canonical Fr ints in [0, r) -> ``(n, 4)`` uint64, Montgomery (a*2^256 mod r) by default."""
    return _to_limbs(values, FR_MODULUS, FR_MONT_R, FR_BYTES, FR_LIMBS, montgomery, "Fr")


def fr_from_limbs(arr: Any, montgomery: bool = True) -> list[int]:
    """``(..., 4)`` uint64 -> canonical Fr ints (flattened in C order). Raises ValueError on a
    row >= r, which no correct kernel produces."""
    return _from_limbs(arr, FR_MODULUS, FR_MONT_R_INV, FR_BYTES, FR_LIMBS, montgomery, "Fr")


def fp_to_limbs(values: Iterable[int], montgomery: bool = True) -> np.ndarray:
    """Canonical Fp ints in [0, p) -> ``(n, 6)`` uint64, Montgomery (a*2^384 mod p) by default."""
    return _to_limbs(values, FP_MODULUS, FP_MONT_R, FP_BYTES, FP_LIMBS, montgomery, "Fp")


def fp_from_limbs(arr: Any, montgomery: bool = True) -> list[int]:
    """``(..., 6)`` uint64 -> canonical Fp ints (flattened in C order)."""
    return _from_limbs(arr, FP_MODULUS, FP_MONT_R_INV, FP_BYTES, FP_LIMBS, montgomery, "Fp")


# --- G1 --------------------------------------------------------------------------------------


def g1_to_limbs(points: Sequence[Point]) -> np.ndarray:
    """Affine points ((x, y) canonical ints, or None for infinity) -> ``(n, 12)`` Montgomery
    limbs, infinity as the all-zero row. Does not check that points are on the curve."""
    coords: list[int] = []
    for pt in points:
        if pt is None:
            coords.append(0)
            coords.append(0)
        else:
            coords.append(pt[0])
            coords.append(pt[1])
    arr = fp_to_limbs(coords)
    return arr.reshape(len(points), 2 * FP_LIMBS)


def g1_from_limbs(arr: Any) -> list[Point]:
    """``(n, 12)`` (or ``(12,)``) affine Montgomery limbs -> points; all-zero rows -> None.
    Accepts numpy or CuPy arrays (the latter are copied to the host)."""
    a = to_host(arr)
    if a.shape[-1:] != (2 * FP_LIMBS,):
        raise ValueError(f"expected shape (..., 12), got {a.shape}")
    a = a.reshape(-1, 2 * FP_LIMBS)
    # a 2-D array reduced over one axis is an array (numpy's stubs also allow a scalar)
    inf = cast("np.ndarray", ~a.any(axis=1))
    c = fp_from_limbs(a.reshape(-1, FP_LIMBS))
    return [None if inf[i] else (c[2 * i], c[2 * i + 1]) for i in range(a.shape[0])]


def _proj_to_limbs(points: Sequence[tuple[int, ...]], width: int) -> np.ndarray:
    coords = [c for pt in points for c in pt]
    if len(coords) != width * len(points):
        raise ValueError(f"each point needs {width} coordinates")
    return fp_to_limbs(coords).reshape(len(points), width * FP_LIMBS)


def _proj_from_limbs(arr: Any, width: int) -> list[tuple[int, ...]]:
    a = to_host(arr).reshape(-1, width * FP_LIMBS)
    c = fp_from_limbs(a.reshape(-1, FP_LIMBS))
    return [tuple(c[width * i : width * i + width]) for i in range(a.shape[0])]


def g1_jacobian_to_limbs(points: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """Jacobian (X, Y, Z) canonical ints (x = X/Z^2, y = Y/Z^3; Z = 0 is infinity) ->
    ``(n, 18)`` Montgomery limbs."""
    return _proj_to_limbs(points, 3)


def g1_jacobian_from_limbs(arr: Any) -> list[tuple[int, int, int]]:
    """``(n, 18)`` Montgomery limbs -> Jacobian (X, Y, Z) canonical ints."""
    # each tuple has ``width`` coordinates, a run-time length that its type cannot carry
    return _proj_from_limbs(arr, 3)  # type: ignore[return-value]


def g1_xyzz_to_limbs(points: Sequence[tuple[int, int, int, int]]) -> np.ndarray:
    """XYZZ (X, Y, ZZ, ZZZ) canonical ints (x = X/ZZ, y = Y/ZZZ, ZZ^3 = ZZZ^2; ZZ = 0 is
    infinity) -> ``(n, 24)`` Montgomery limbs."""
    return _proj_to_limbs(points, 4)


def g1_xyzz_from_limbs(arr: Any) -> list[tuple[int, int, int, int]]:
    """``(n, 24)`` Montgomery limbs -> XYZZ (X, Y, ZZ, ZZZ) canonical ints."""
    # each tuple has ``width`` coordinates, a run-time length that its type cannot carry
    return _proj_from_limbs(arr, 4)  # type: ignore[return-value]


# --- random elements -------------------------------------------------------------------------


def _r_limbs() -> np.ndarray:
    return np.array([(FR_MODULUS >> (64 * i)) & ((1 << 64) - 1) for i in range(4)], np.uint64)


def _random_below_r(n: int, gen: np.random.Generator) -> np.ndarray:
    """Uniform rows in [0, r) by rejection: 255 random bits per row, rows >= r redrawn (about
    55% of 255-bit values are < r, so a few rounds suffice)."""
    out = np.empty((n, 4), dtype=np.uint64)
    need = np.arange(n)
    r = _r_limbs()
    while need.size:
        draw = gen.integers(0, 1 << 64, size=(need.size, 4), dtype=np.uint64, endpoint=False)
        draw[:, 3] &= np.uint64((1 << 63) - 1)
        # lexicographic compare from the top limb: row < r
        less = np.zeros(need.size, dtype=bool)
        equal = np.ones(need.size, dtype=bool)
        for limb in (3, 2, 1, 0):
            less |= equal & (draw[:, limb] < r[limb])
            equal &= draw[:, limb] == r[limb]
        out[need[less]] = draw[less]
        need = need[~less]
    return out


def random_fr(n: int, rng: Any = None) -> list[int]:
    """``n`` independent uniform ints in [0, r).

    ``rng`` may be a ``random.Random`` (255-bit draws by rejection, reproducible from its
    seed), a ``numpy.random.Generator`` (vectorised), or None: a fresh OS-seeded generator, so
    every run sees new inputs. Not for secrets (no cryptographic guarantee)."""
    if isinstance(rng, _random.Random):
        out: list[int] = []
        gb = rng.getrandbits
        while len(out) < n:
            v = gb(255)
            if v < FR_MODULUS:
                out.append(v)
        return out
    gen = rng if rng is not None else np.random.default_rng()
    return fr_from_limbs(_random_below_r(n, gen), montgomery=False)


def random_fr_limbs(n: int, rng: Any = None, montgomery: bool = True) -> np.ndarray:
    """``(n, 4)`` uniform random Fr elements (same ``rng`` rules as :func:`random_fr`).

    With a numpy Generator (or None) the rows are drawn directly as uniform values < r; since
    a -> a*R mod r is a bijection, those rows are also uniform Montgomery representations, so
    no conversion is needed. With a ``random.Random`` the canonical ints of ``random_fr`` are
    converted, so a seeded Random gives the same elements in either form."""
    if isinstance(rng, _random.Random):
        return fr_to_limbs(random_fr(n, rng), montgomery=montgomery)
    gen = rng if rng is not None else np.random.default_rng()
    return _random_below_r(n, gen)

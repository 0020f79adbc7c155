"""The one interface behind which the CPU reference and the CUDA kernels sit.

The engine picks a backend by name and only ever talks to this interface, so a partition runs
the same code path on a laptop and on an H200. Arrays are numpy arrays on the CPU backend and
CuPy arrays on the CUDA backend, with the *same* shapes, dtypes and limb layout (see
``kernels/layout.py`` and ``docs/kernels.md``), so a test can move data between the two with a
plain copy and compare bit for bit.

Layout summary (the single source of truth is ``kernels/layout.py``):

- Fr element: 4 little-endian 64-bit limbs (uint64, shape ``(n, 4)``), Montgomery form with
  radix R = 2^256 unless a function says "canonical". Bytewise this is 8 little-endian 32-bit
  words, which is what the GPU kernels read.
- Fp element: 6 little-endian 64-bit limbs (shape ``(n, 6)``), Montgomery radix 2^384.
- G1 affine point: ``(n, 12)``: x then y, each 6 limbs, Montgomery form. The point at infinity
  is all zeros ((0, 0) is not on y^2 = x^3 + 4).
- G1 Jacobian ``(n, 18)`` (X, Y, Z; infinity has Z = 0); XYZZ ``(n, 24)`` (X, Y, ZZ, ZZZ;
  infinity has ZZ = 0).
- MSM scalars: Fr in canonical (non-Montgomery) form, shape ``(n, 4)``; values must be < r.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

Order = Literal["natural", "bitrev"]
Array = Any  # numpy.ndarray on the cpu backend, cupy.ndarray on the cuda backend


@runtime_checkable
class KernelBackend(Protocol):
    """What every kernel backend provides. Scratch memory and streams are optional hooks that
    the CPU backend ignores and the CUDA backend honours."""

    name: str

    def ntt(
        self,
        x: Array,
        *,
        inverse: bool = False,
        coset: bool = False,
        input_order: Order = "natural",
        output_order: Order = "natural",
        stream: Any = None,
        allocator: Any = None,
    ) -> Array:
        """NTT over Fr of ``x`` with shape ``(n, 4)`` or ``(batch, n, 4)``, n = 2^k, Montgomery
        form in and out. ``coset`` multiplies by powers of the coset generator g before a
        forward transform (evaluations on g*w^i) and divides them out after an inverse one."""
        ...

    def h_step(
        self, a: Array, b: Array, c: Array, *, stream: Any = None, allocator: Any = None
    ) -> Array:
        """Groth16 quotient: from evaluations a, b, c on the size-n domain (``(n, 4)``,
        Montgomery), return the n-1 coefficients of H = (A*B - C)/Z as ``(n - 1, 4)``, canonical
        form, ready to be MSM scalars."""
        ...

    def msm(
        self,
        points: Array,
        scalars: Array,
        *,
        stream: Any = None,
        allocator: Any = None,
    ) -> Array:
        """sum_i scalars[i] * points[i] for affine ``points`` ``(n, 12)`` and canonical
        ``scalars`` ``(n, 4)``; returns one affine point as a numpy array of shape ``(12,)``."""
        ...

    def srs(self, secrets: Array, *, stream: Any = None, allocator: Any = None) -> Array:
        """P_i = [s_i]G for canonical secrets ``(n, 4)``; returns affine points ``(n, 12)``."""
        ...


@runtime_checkable
class WarmUp(Protocol):
    """A backend with modules to compile and tables to build before its first partition
    (the CUDA one): an engine warms it up per device, counting :attr:`WARM_UP_STEPS`."""

    WARM_UP_STEPS: tuple[str, ...]

    def warm_up(self, domain_log: int, step: Callable[[str], None] | None = None) -> None:
        """Build what a partition of 2^domain_log uses; ``step(name)`` after each step."""
        ...


@runtime_checkable
class HostStreaming(Protocol):
    """A backend whose MSMs stream their points from host memory in chunks of
    :attr:`host_chunk` points (the CUDA one, where a query's points do not fit the device)."""

    host_chunk: int

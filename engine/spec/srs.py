"""The run's structured reference string: G1 query points with known secrets.

Why known secrets: every MSM result can then be checked exactly with one dot product and one
scalar multiplication, and with the H query's secrets tau^i the whole H step is checked by
(a*b - c)(tau) = h(tau) Z(tau) (``provetop.kernels.cpu.srs``). Generated once per run and shared
read-only by every partition and worker, as a real prover loads its parameters once.

Why each query's secrets are the powers of one secret (s_i = sigma_q^i, sigma_h = tau, the
four sigmas independent and uniform): a 32 GiB sector's queries hold 4.2e8 points, and their
secrets as Python ints would take ~25 GB and hours to make. Four ints describe them all: the
GPU makes any range of secrets on demand (``provetop.kernels.cuda.check.powers``) and a check needs
no
stored secrets (<k, s> is the value at sigma of the polynomial with coefficients k). The
structure is invisible to the MSM, which only sees points.

Where the points are made: on the CPU backend, all on the host (:func:`generate_srs`), in
chunks of :data:`HOST_CHUNK` points, each counted by the run's
``provetop.engine.telemetry.progress.Progress``
(which also ends the generation between two chunks when the run is stopped).
On CUDA, each device makes the queries its residency plan keeps on the device directly in
device memory, and the queries streamed from the host are made once into pinned host memory
shared by every device (``provetop.engine.run.cuda_srs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from provetop.engine.spec.workload import QuerySizes
from provetop.kernels.backend import Array, KernelBackend
from provetop.kernels.cpu.srs import R, powers
from provetop.kernels.layout import fr_to_limbs, random_fr

QUERIES = ("h", "l", "a", "b_g1")
# points per backend.srs call on the host: ~0.07 s with arkworks on one core, so a stop during
# the SRS waits at most that long (plain Python, without arkworks: ~1 s)
HOST_CHUNK = 1024


class StepProgress(Protocol):
    """What a step reports its work to: ``provetop.engine.telemetry.progress.Progress``, whose
    ``advance`` also raises ``Stopped`` once the run is stopping."""

    def advance(self, n: int) -> None: ...

    def finish(self) -> None: ...


@dataclass
class Srs:
    """Secrets (one sigma per query) and the affine points ``(m, 12)`` made so far."""

    sigmas: dict[str, int]
    sizes: dict[str, int]
    points: dict[str, Array] = field(default_factory=dict)

    @property
    def tau(self) -> int:
        return self.sigmas["h"]

    def secrets(self, query: str) -> list[int]:
        """The query's secrets as ints (CPU checks at small sizes only)."""

        return powers(self.sigmas[query], self.sizes[query])

    @property
    def nbytes(self) -> int:
        """Bytes of the query points (made or not): 96 per affine point."""
        return 96 * sum(self.sizes.values())


def draw_srs(sizes: QuerySizes, rng: np.random.Generator) -> Srs:
    """The secrets only: one uniform sigma per query (``rng``: a numpy Generator)."""

    sigmas = dict(zip(QUERIES, random_fr(len(QUERIES), rng), strict=True))
    return Srs(sigmas=sigmas, sizes=dict(sizes.as_dict()))


def make_host_points(
    backend: KernelBackend,
    srs: Srs,
    query: str,
    progress: StepProgress | None = None,
    chunk: int = HOST_CHUNK,
) -> np.ndarray:
    """One query's points on the host with the backend's ``srs`` kernel (CPU path), ``chunk``
    points per call; ``progress.advance(points)`` after each (it raises
    ``provetop.engine.telemetry.progress.Stopped`` when the run is stopping)."""

    # the secrets chunk by chunk, never the whole query up front: at 2^26 that list alone took
    # ~30 s of pure Python before the first stop check, so SIGTERM during start-up waited
    sigma, size = srs.sigmas[query] % R, srs.sizes[query]
    acc = 1
    parts = []
    for lo in range(0, size, chunk):
        part = []
        for _ in range(min(chunk, size - lo)):
            part.append(acc)
            acc = acc * sigma % R
        parts.append(np.asarray(backend.srs(fr_to_limbs(part, montgomery=False))))
        if progress is not None:
            progress.advance(len(part))
    return np.concatenate(parts) if parts else np.empty((0, 12), dtype=np.uint64)


def generate_srs(
    backend: KernelBackend,
    sizes: QuerySizes,
    rng: np.random.Generator,
    progress: StepProgress | None = None,
) -> Srs:
    """Draw the secrets and make every query's points on the host (``progress``: an
    ``provetop.engine.telemetry.progress.Progress`` over all the queries' points, or None)."""
    srs = draw_srs(sizes, rng)
    for q in QUERIES:
        srs.points[q] = make_host_points(backend, srs, q, progress)
    if progress is not None:
        progress.finish()
    return srs

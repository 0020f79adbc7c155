"""The run's structured reference string: G1 query points with known secrets.

Why known secrets: every MSM result can then be checked exactly with one dot product and one
scalar multiplication, and with the H query's secrets tau^i the whole H step is checked by
(a*b - c)(tau) = h(tau) Z(tau) (``kernels.cpu.srs``). Generated once per run and shared
read-only by every partition and worker, as a real prover loads its parameters once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.workload import QuerySizes

QUERIES = ("h", "l", "a", "b_g1")


@dataclass
class Srs:
    """Secrets (canonical ints) and affine points ``(m, 12)`` per query."""

    tau: int
    secrets: dict[str, list[int]]
    points: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        return int(sum(p.nbytes for p in self.points.values()))


def generate_srs(backend: Any, sizes: QuerySizes, rng: Any) -> Srs:
    """Draw the secrets (tau for H, independent uniform secrets for L, A, B-G1) and turn
    them into points with the backend's ``srs`` kernel."""
    from kernels.cpu.srs import powers
    from kernels.layout import fr_to_limbs, random_fr

    tau = random_fr(1, rng)[0]
    secrets = {
        "h": powers(tau, sizes.h),
        "l": random_fr(sizes.l, rng),
        "a": random_fr(sizes.a, rng),
        "b_g1": random_fr(sizes.b_g1, rng),
    }
    points = {
        q: np.asarray(backend.srs(fr_to_limbs(s, montgomery=False))) for q, s in secrets.items()
    }
    return Srs(tau=tau, secrets=secrets, points=points)

"""What one partition proves: the domain, the query sizes and a synthetic witness.

Why synthetic: the engine's job is scheduling, memory and kernels, not circuits. A witness with
a, b uniform and c = a*b satisfies every constraint, so the H step divides exactly and the
exact checks hold; the aux witness has a configurable mix of zeros, ones and dense scalars
because that mix (not the circuit) is what decides MSM cost (zeros skipped, ones batch-added,
the rest in the Pippenger tail). Default 48/48/4 %: a synthetic approximation of a PoRep
witness, labelled as such wherever it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.layout import fr_from_limbs, fr_to_limbs, random_fr_limbs

# One partition of a 32 GiB PoRep sector (domain.md section 2): n = 2^27 and these query sizes.
POREP_DOMAIN_LOG = 27
POREP_L = 130_169_893
POREP_A = 129_753_620
POREP_B_G1 = 33_112_282
FR_BYTES = 32  # one Fr element in the limb layout (4 x uint64)
G1_AFFINE_BYTES = 96  # one affine G1 point (12 x uint64)


@dataclass(frozen=True)
class QuerySizes:
    """Points in each G1 query of one partition (the MSM sizes)."""

    h: int
    l: int
    a: int
    b_g1: int

    def as_dict(self) -> dict[str, int]:
        return {"h": self.h, "l": self.l, "a": self.a, "b_g1": self.b_g1}


def query_sizes(domain_log: int) -> QuerySizes:
    """PoRep's query sizes scaled from 2^27 to 2^K (at least one point each): H has n-1
    points, L, A and B-G1 keep their PoRep ratio to the domain."""
    n = 1 << domain_log

    def scale(count: int) -> int:
        return max(1, min(n - 1 if n > 1 else 1, round(count * n / (1 << POREP_DOMAIN_LOG))))

    return QuerySizes(h=max(1, n - 1), l=scale(POREP_L), a=scale(POREP_A), b_g1=scale(POREP_B_G1))


@dataclass
class Witness:
    """One partition's inputs: evaluations a, b, c (``(n, 4)`` Montgomery) and the assignment
    scalars (canonical ``(m, 4)``) that the L, A and B-G1 MSMs read prefixes of."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    z: np.ndarray
    counts: dict[str, int]  # zeros / ones / dense in z
    pinned: bool = False  # a, b, c, z in page-locked host memory (provetop.engine.spec.witness_gpu)

    @property
    def abc_bytes(self) -> int:
        return int(self.a.nbytes + self.b.nbytes + self.c.nbytes)


def partition_rng(seed: int | None, proof: int, partition: int) -> np.random.Generator:
    """A generator per partition: reproducible from ``--seed``, fresh entropy without it."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed), proof, partition])


def synthesize(
    domain_log: int,
    sizes: QuerySizes,
    profile: tuple[float, float, float],
    rng: np.random.Generator,
) -> Witness:
    """Generate a partition's witness (see the module docstring). Exact: c_i = a_i * b_i."""

    n = 1 << domain_log
    a = random_fr_limbs(n, rng)
    b = random_fr_limbs(n, rng)

    av = fr_from_limbs(a)
    bv = fr_from_limbs(b)
    c = fr_to_limbs([x * y % FR_MODULUS for x, y in zip(av, bv, strict=True)])
    m = max(sizes.l, sizes.a, sizes.b_g1)
    z = aux_scalars(m, profile, rng)
    nz = ~z.any(axis=1)
    ones = (z[:, 0] == 1) & ~z[:, 1:].any(axis=1)
    counts = {"zeros": int(nz.sum()), "ones": int(ones.sum())}
    counts["dense"] = m - counts["zeros"] - counts["ones"]
    return Witness(a=a, b=b, c=c, z=z, counts=counts)


def aux_scalars(
    m: int, profile: tuple[float, float, float], rng: np.random.Generator
) -> np.ndarray:
    """``m`` canonical scalars: each independently zero, one or uniform in Fr with the profile's
    probabilities (a uniform draw is itself 0 or 1 only with probability ~2^-254)."""

    zeros, ones, _dense = profile
    u = rng.random(m)
    out = random_fr_limbs(m, rng, montgomery=False)
    out[u < zeros] = 0
    is_one = (u >= zeros) & (u < zeros + ones)
    out[is_one] = 0
    out[is_one, 0] = 1
    return out

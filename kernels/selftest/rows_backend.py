"""Self-test rows for any ``KernelBackend`` (CPU or CUDA) against the reference and the
known-secret identities: NTT, H step, MSM, SRS.

Why shared: the CPU and the CUDA backend must pass the very same rows; only where the inputs
live differs (``to_device``: numpy for the CPU backend, CuPy arrays for CUDA, as the engine
hands them).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu import g1, ntt, srs
from provetop.kernels.layout import fr_from_limbs, fr_to_limbs, g1_from_limbs, random_fr, to_host
from provetop.kernels.selftest.registry import Check


def _identity(x: np.ndarray) -> Any:
    return x


def backend_checks(
    backend: Any,
    log_n: int = 12,
    ntt_log_n: int = 10,
    to_device: Callable[[np.ndarray], Any] = _identity,
) -> list[Check]:
    """Checks of one ``KernelBackend`` against the reference: NTT at n = 2^ntt_log_n (all 16
    order, coset and direction combinations), and at n = 2^log_n the H step via the tau
    identity, the SRS, and the MSM via the known-secret identity. ``to_device`` places each
    input where the backend expects it (the CUDA rows pass ``cupy.asarray``)."""
    n = 1 << log_n
    tag = backend.name

    dev = to_device

    def check_ntt() -> None:
        rng = random.Random()  # OS-seeded: fresh inputs every run
        xs = random_fr(1 << ntt_log_n, rng)
        arr = fr_to_limbs(xs)
        for inverse in (False, True):
            for coset in (False, True):
                for io in ("natural", "bitrev"):
                    for oo in ("natural", "bitrev"):
                        got = fr_from_limbs(
                            to_host(
                                backend.ntt(
                                    dev(arr),
                                    inverse=inverse,
                                    coset=coset,
                                    input_order=io,
                                    output_order=oo,
                                )
                            )
                        )
                        want = ntt.ntt(
                            xs, inverse=inverse, coset=coset, input_order=io, output_order=oo
                        )
                        assert got == want, (
                            f"{tag} ntt mismatch (inverse={inverse}, coset={coset}, {io}->{oo})"
                        )

    def check_h() -> None:
        rng = random.Random()  # OS-seeded: fresh inputs every run
        a, b = random_fr(n, rng), random_fr(n, rng)
        c = [x * y % R for x, y in zip(a, b, strict=True)]
        h = fr_from_limbs(
            to_host(backend.h_step(dev(fr_to_limbs(a)), dev(fr_to_limbs(b)), dev(fr_to_limbs(c)))),
            montgomery=False,
        )
        assert len(h) == n - 1, f"{tag} h_step returned {len(h)} coefficients, want {n - 1}"
        assert srs.check_h_identity(a, b, c, h, rng.randrange(R)), f"{tag} H identity fails"
        assert h == ntt.h_step(a, b, c), f"{tag} h_step != reference"

    def check_srs_msm() -> None:
        rng = random.Random()  # OS-seeded: fresh inputs every run
        secrets = random_fr(n, rng)
        pts = to_host(backend.srs(dev(fr_to_limbs(secrets, montgomery=False))))
        idx = rng.sample(range(n), 4)
        for i in idx:
            want = g1.scalar_mul(g1.GENERATOR, secrets[i])
            assert g1_from_limbs(pts[i])[0] == want, f"{tag} srs point {i} wrong"
        ks = random_fr(n, rng)
        ks[0], ks[1] = 0, 1
        res = backend.msm(dev(pts), dev(fr_to_limbs(ks, montgomery=False)))
        res = g1_from_limbs(to_host(res))[0]
        assert srs.check_msm_identity(secrets, ks, res), f"{tag} MSM != [sum k_i s_i]G"

    return [
        Check(f"{tag} ntt: 16 order/coset/inverse combos vs reference", 1 << ntt_log_n, check_ntt),
        Check(f"{tag} h_step: (ab-c)(tau) = h(tau)Z(tau), vs reference", n, check_h),
        Check(f"{tag} srs + msm: MSM(k, [s]G) = [<k,s>]G", n, check_srs_msm),
    ]

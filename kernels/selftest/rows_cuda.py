"""The self-test rows of the GPU modules, for ``provetop selftest --backend cuda``.

Why here and not in the modules they check: a product module must not import the self-test
(that import closed a cycle through the whole package). Each row runs the device code against
the CPU reference on fresh random inputs: the NTT and H step, the MSM with its edge cases, the
known-secret identity through the GPU SRS, and the engine's GPU partition checks themselves (a
check that always said yes, or no, would otherwise go unnoticed).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from provetop.kernels import layout
from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu import msm as cmsm
from provetop.kernels.cpu import ntt as cntt
from provetop.kernels.cpu import srs as csrs
from provetop.kernels.cpu.ntt import evaluate_interpolant
from provetop.kernels.cuda import check as gcheck
from provetop.kernels.cuda.fr import elementwise, evaluate, random_fr
from provetop.kernels.cuda.msm import msm
from provetop.kernels.cuda.ntt import CudaNtt
from provetop.kernels.cuda.ntt_plan import ORDERS, from_words, to_words
from provetop.kernels.cuda.runtime import require_cupy, to_device
from provetop.kernels.cuda.srs import srs_random_points
from provetop.kernels.selftest.registry import Check
from provetop.kernels.selftest.rows_backend import backend_checks
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

# --- NTT and H step --------------------------------------------------------------------------


def _check_ntt_vs_reference(k: int, tuning: KernelTuning) -> None:
    cupy = require_cupy()
    rng = random.Random()
    n = 1 << k
    eng = CudaNtt(tuning=tuning)
    for inverse in (False, True):
        for coset in (False, True):
            io, oo = rng.choice(ORDERS), rng.choice(ORDERS)
            vals = [rng.randrange(R) for _ in range(n)]
            x = cupy.asarray(to_words(vals, True))
            out = cupy.full_like(x, np.uint64(0xFFFFFFFFFFFFFFFF))
            eng.ntt(x, inverse=inverse, coset=coset, input_order=io, output_order=oo, out=out)
            got = from_words(cupy.asnumpy(out), True)
            idx = cntt.bitrev_indices(k)
            natural_in = [vals[int(i)] for i in idx] if io == "bitrev" else vals
            want = cntt.ntt(natural_in, inverse=inverse, coset=coset)
            if oo == "bitrev":
                got = [got[int(i)] for i in idx]
            assert got == want, f"NTT 2^{k} inverse={inverse} coset={coset} {io}->{oo} differs"


def _check_h_step_vs_reference(k: int, tuning: KernelTuning) -> None:
    cupy = require_cupy()
    rng = random.Random()
    n = 1 << k
    a = [rng.randrange(R) for _ in range(n)]
    b = [rng.randrange(R) for _ in range(n)]
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    h = CudaNtt(tuning=tuning).h_step(*(cupy.asarray(to_words(v, True)) for v in (a, b, c)))
    assert from_words(cupy.asnumpy(h), False) == cntt.h_step(a, b, c), f"H step 2^{k} differs"


def _check_h_identity(k: int, tuning: KernelTuning) -> None:
    n = 1 << k
    eng = CudaNtt(tuning=tuning)
    a, b = random_fr((n,), tuning=tuning), random_fr((n,), tuning=tuning)
    c = elementwise("mul", a, b, tuning=tuning)
    h = eng.h_step(a, b, c)
    tau = random.Random().randrange(2, R)
    ev = [evaluate(eng.ntt(v, inverse=True), tau, tuning=tuning) for v in (a, b, c)]
    h_tau = evaluate(elementwise("to_mont", h, tuning=tuning), tau, tuning=tuning)
    z_tau = (pow(tau, n, R) - 1) % R
    assert (ev[0] * ev[1] - ev[2]) % R == h_tau * z_tau % R, f"(AB-C)(tau) != H(tau)Z(tau), 2^{k}"


def ntt_checks(tuning: KernelTuning = DEFAULT_TUNING) -> list[Check]:
    """NTT and H step on the GPU against the CPU reference, and the H identity at a random
    tau (evaluated on the GPU)."""
    return [
        Check(
            "cuda NTT vs reference (orders, coset, inverse)",
            1 << 9,
            lambda: _check_ntt_vs_reference(9, tuning),
        ),
        Check("cuda H step vs reference", 1 << 8, lambda: _check_h_step_vs_reference(8, tuning)),
        Check(
            "cuda H identity (AB-C)(tau) = H(tau)Z(tau)",
            1 << 14,
            lambda: _check_h_identity(14, tuning),
        ),
    ]


# --- MSM and SRS -----------------------------------------------------------------------------


def _check_msm_small(tuning: KernelTuning) -> None:
    cupy = require_cupy()
    n = 64
    pts_dev, _ = srs_random_points(n, tuning=tuning)
    pts_dev[5] = pts_dev[3]  # a repeated point
    pts_dev[7] = 0  # the point at infinity
    ks = layout.random_fr(n)
    ks[0], ks[1], ks[2] = 0, 1, 1
    ks[5] = ks[3]  # same point, same scalar: the doubling case in a bucket
    sc = layout.fr_to_limbs(ks, montgomery=False)
    got = msm(pts_dev, cupy.asarray(sc), tuning=tuning)
    pts = layout.g1_from_limbs(pts_dev.get())
    want = cmsm.msm_fast(pts, ks)
    assert layout.g1_from_limbs(got)[0] == want, "GPU MSM != CPU reference (n = 64)"


def _check_msm_identity(tuning: KernelTuning) -> None:
    cupy = require_cupy()
    n = 1 << 14
    pts_dev, secrets = srs_random_points(n, tuning=tuning)
    ks = layout.random_fr(n)
    for i in range(0, n, 3):
        ks[i] = i % 2  # a third zeros and ones, like a real witness
    got = msm(pts_dev, cupy.asarray(layout.fr_to_limbs(ks, montgomery=False)), tuning=tuning)
    res = layout.g1_from_limbs(got)[0]
    assert csrs.check_msm_identity(secrets, ks, res), "GPU MSM != [<k,s>]G (n = 2^14)"


def msm_checks(tuning: KernelTuning = DEFAULT_TUNING) -> list[Check]:
    """The GPU MSM against the CPU reference on fresh random inputs with the edge cases (zeros,
    ones, a repeated point, infinity), and the known-secret identity through the GPU SRS."""
    return [
        Check(
            "cuda msm vs reference (zeros, ones, repeats, infinity)",
            64,
            lambda: _check_msm_small(tuning),
        ),
        Check(
            "cuda srs + msm: MSM(k, [s]G) = [<k,s>]G",
            1 << 14,
            lambda: _check_msm_identity(tuning),
        ),
    ]


# --- the engine's GPU partition checks -------------------------------------------------------

POWERS_COUNT = 2 * gcheck.GRID * gcheck.BLOCK * gcheck.K + 7  # more than one launch grid covers


def _check_powers_beyond_one_grid(tuning: KernelTuning) -> None:
    """sigma^(start + j) for more elements than one launch grid covers: every row must be the
    previous one times sigma (checked on the device), the ends equal to Python's pow."""
    cupy = require_cupy()
    count = POWERS_COUNT
    base, start = random.Random().randrange(R), 12345
    out = cupy.full((count, 4), np.uint64(0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
    gcheck.powers(base, start, count, canonical=False, out=out, tuning=tuning)
    step = to_device(cupy, np.repeat(layout.fr_to_limbs([base]), count - 1, axis=0))
    chain = elementwise("mul", out[:-1], step, tuning=tuning) == out[1:]
    assert bool(chain.all()), "powers: chain broken"
    ends = layout.fr_from_limbs(out[[0, count - 1]].get())
    assert ends == [pow(base, start, R), pow(base, start + count - 1, R)], "powers: wrong ends"


def _check_sums_vs_reference(k: int, tuning: KernelTuning) -> None:
    """interpolants_at and dot_powers against the CPU reference at n = 2^k, in small chunks
    and in one, host and device inputs."""
    cupy = require_cupy()
    rng = random.Random()
    n = 1 << k
    vecs = [layout.random_fr(n, rng) for _ in range(3)]
    x = rng.randrange(R)
    want = tuple(evaluate_interpolant(vecs, x))
    a, b, c = (layout.fr_to_limbs(v) for v in vecs)
    got = gcheck.interpolants_at(a, b, c, x, chunk=n // 3 + 1, tuning=tuning)
    assert got == want, "interpolants (host) wrong"
    d_a, d_b, d_c = (cupy.asarray(r) for r in (a, b, c))
    got = gcheck.interpolants_at(d_a, d_b, d_c, x, tuning=tuning)
    assert got == want, "interpolants wrong"
    ks = vecs[0]
    dot = sum(v * pow(x, i, R) for i, v in enumerate(ks)) % R
    canon = layout.fr_to_limbs(ks, montgomery=False)
    assert gcheck.dot_powers(canon, x, chunk=n // 5 + 1, tuning=tuning) == dot, "dot wrong"


def partition_check_checks(tuning: KernelTuning = DEFAULT_TUNING) -> list[Check]:
    """The GPU partition checks the engine uses (``provetop.kernels.cuda.check``)."""
    return [
        Check(
            "cuda checks: sigma^i beyond one launch grid",
            POWERS_COUNT,
            lambda: _check_powers_beyond_one_grid(tuning),
        ),
        Check(
            "cuda checks: A(x), B(x), C(x) and <k, x^i> vs reference",
            1 << 10,
            lambda: _check_sums_vs_reference(10, tuning),
        ),
    ]


def cuda_checks(backend: Any, tuning: KernelTuning = DEFAULT_TUNING) -> list[Check]:
    """Everything ``provetop selftest --backend cuda`` runs, in order: the CUDA ``backend``
    against the reference (device inputs, as the engine hands them), then the NTT, MSM and
    partition-check rows above."""
    rows = backend_checks(backend, log_n=12, to_device=require_cupy().asarray)
    return rows + ntt_checks(tuning) + msm_checks(tuning) + partition_check_checks(tuning)

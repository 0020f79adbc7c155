"""The GPU partition checks (``provetop.kernels.cuda.check``) against the CPU reference (marked
``gpu``).

Fresh random inputs every run; chunk sizes that do not divide the vectors, so every chunk
boundary and the short last thread are exercised; host (numpy) and device (CuPy) inputs; and
each check must also *fail* on a corrupted input, so a check that always says yes cannot pass.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import g1
from provetop.kernels.cpu.ntt import evaluate_interpolant, h_step
from provetop.kernels.cpu.srs import powers as cpu_powers
from provetop.kernels.layout import fr_from_limbs, fr_to_limbs, random_fr

pytestmark = pytest.mark.gpu

R = FR_MODULUS
POISON = np.uint64(0xFFFFFFFFFFFFFFFF)


@pytest.fixture(scope="module")
def chk(cp):
    from provetop.kernels.cuda import check as cuda_check

    return cuda_check


@pytest.mark.parametrize(("start", "count"), [(0, 1), (0, 9), (5, 1000), ((1 << 27) - 3, 37)])
@pytest.mark.parametrize("canonical", [True, False])
def test_powers_match_reference(cp, chk, start, count, canonical):
    rng = random.Random()
    base = rng.randrange(R)
    out = cp.full((count, 4), POISON, dtype=cp.uint64)
    chk.powers(base, start, count, canonical=canonical, out=out)
    got = fr_from_limbs(out.get(), montgomery=not canonical)
    first = pow(base, start, R)
    assert got == [first * p % R for p in cpu_powers(base, count)]


@pytest.mark.parametrize("m", [1, 2, 31, 1000, 4097])
@pytest.mark.parametrize("where", ["host", "device"])
@pytest.mark.parametrize("montgomery", [False, True])
def test_dot_powers_matches_python(cp, chk, m, where, montgomery):
    rng = random.Random()
    vals = random_fr(m, rng)
    vals[: min(3, m)] = [0, 1, R - 1][: min(3, m)]
    sigma = rng.randrange(R)
    rows = fr_to_limbs(vals, montgomery=montgomery)
    arr = rows if where == "host" else cp.asarray(rows)
    want = sum(v * s for v, s in zip(vals, cpu_powers(sigma, m), strict=True)) % R
    assert chk.dot_powers(arr, sigma, montgomery=montgomery, chunk=999) == want
    assert chk.dot_powers(arr, sigma, montgomery=montgomery) == want
    if m > 1:
        bad = rows.copy()
        bad[m // 2, 0] ^= np.uint64(1 << 7)
        assert chk.dot_powers(bad, sigma, montgomery=montgomery) != want


@pytest.mark.parametrize("k", [1, 2, 5, 10, 12])
def test_interpolants_match_reference(cp, chk, k):
    n = 1 << k
    rng = random.Random()
    vecs = [random_fr(n, rng) for _ in range(3)]
    x = rng.randrange(R)
    want = evaluate_interpolant(vecs, x)
    rows = [fr_to_limbs(v) for v in vecs]
    assert list(chk.interpolants_at(*rows, x, chunk=max(1, n // 3 + 5))) == want
    dev = [cp.asarray(r) for r in rows]
    assert list(chk.interpolants_at(*dev, x)) == want


def test_interpolant_at_a_domain_point(cp, chk):
    from provetop.kernels.cpu.ntt import domain_root

    n = 16
    vecs = [random_fr(n) for _ in range(3)]
    x = pow(domain_root(4), 5, R)
    got = chk.interpolants_at(*(fr_to_limbs(v) for v in vecs), x)
    assert list(got) == [v[5] for v in vecs]


@pytest.mark.parametrize("k", [3, 10])
def test_h_identity_holds_and_catches_a_wrong_h(cp, chk, k):
    n = 1 << k
    rng = random.Random()
    a, b = random_fr(n, rng), random_fr(n, rng)
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    h = h_step(a, b, c)
    tau = rng.randrange(R)
    rows = [fr_to_limbs(v) for v in (a, b, c)]
    h_rows = fr_to_limbs(h, montgomery=False)
    assert chk.check_h_identity(*rows, h_rows, tau, chunk=n // 2 + 3)
    h_bad = h_rows.copy()
    h_bad[n // 3, 1] ^= np.uint64(1)
    assert not chk.check_h_identity(*rows, h_bad, tau)
    c_bad = rows[2].copy()
    c_bad[0, 0] ^= np.uint64(4)
    assert not chk.check_h_identity(rows[0], rows[1], c_bad, h_rows, tau)


def test_msm_identity_against_known_secrets(cp, chk):
    from provetop.kernels.cpu.msm import msm_fast
    from provetop.kernels.cpu.srs import srs_points

    m = 300
    rng = random.Random()
    sigma = rng.randrange(R)
    pts = srs_points(cpu_powers(sigma, m))
    ks = random_fr(m, rng)
    ks[:4] = [0, 1, 1, R - 1]
    res = msm_fast(pts, ks)
    rows = fr_to_limbs(ks, montgomery=False)
    assert chk.check_msm_identity(sigma, rows, res)
    assert not chk.check_msm_identity(sigma, rows, g1.affine_double(res))
    assert not chk.check_msm_identity((sigma + 1) % R, rows, res)


def test_dot_powers_prefixes_share_one_pass(cp, chk):
    rng = random.Random()
    m = 3000
    vals = random_fr(m, rng)
    rows = fr_to_limbs(vals, montgomery=False)
    terms = [(rng.randrange(R), k) for k in (m, 1234, 1, 0, 2999)]
    want = [
        sum(v * s for v, s in zip(vals[:k], cpu_powers(sigma, k), strict=True)) % R
        for sigma, k in terms
    ]
    assert chk.dot_powers_prefixes(rows, terms, chunk=777) == want
    with pytest.raises(ValueError, match="prefix"):
        chk.dot_powers_prefixes(rows, [(1, m + 1)])


# Beyond one grid: the host caps each launch at GRID blocks and the kernels loop with a grid
# stride, so sizes above GRID * BLOCK * K elements take several iterations per thread. (A
# kernel without the loop left every element past the first grid unwritten: the engine's SRS
# secrets past ~1.08e6 were garbage and every 2^27 MSM check failed, while 2^12 passed.)


def _one_grid(chk):
    return chk.GRID * chk.BLOCK * chk.K


def test_powers_beyond_one_grid_form_a_chain(cp, chk):
    from provetop.kernels.cuda.fr import elementwise

    count = 2 * _one_grid(chk) + 12345
    base = random.Random().randrange(R)
    start = 1 << 26
    out = cp.full((count, 4), POISON, dtype=cp.uint64)
    chk.powers(base, start, count, canonical=False, out=out)
    d_base = cp.asarray(fr_to_limbs([base] * (count - 1)))
    nxt = elementwise("mul", out[:-1], d_base)  # x_{i+1} must be x_i * base, for every i
    assert bool((nxt == out[1:]).all())
    ends = fr_from_limbs(out[[0, count - 1]].get())
    assert ends == [pow(base, start, R), pow(base, start + count - 1, R)]


def test_sums_beyond_one_grid_match_single_iteration_launches(cp, chk):
    rng = np.random.default_rng()
    m = 2 * _one_grid(chk) + 77
    rows = cp.asarray(random_fr_rows(m, rng))
    sigma = random.Random().randrange(R)
    small = chk.GRID * chk.BLOCK * chk.K // 4  # every launch within one grid iteration
    assert chk.dot_powers(rows, sigma) == chk.dot_powers(rows, sigma, chunk=small)
    terms = [(sigma, m), (sigma + 1, m - 5), (sigma + 2, 1000)]
    assert chk.dot_powers_prefixes(rows, terms) == chk.dot_powers_prefixes(rows, terms, chunk=small)


def test_interpolants_beyond_one_grid_match_an_ntt_and_horner(cp, chk):
    from provetop.kernels.cuda.fr import evaluate
    from provetop.kernels.cuda.ntt import CudaNtt

    k = 21
    rng = np.random.default_rng()
    vecs = [cp.asarray(random_fr_rows(1 << k, rng)) for _ in range(3)]
    x = random.Random().randrange(R)
    ntt = CudaNtt()
    want = tuple(evaluate(ntt.ntt(v, inverse=True), x) for v in vecs)  # independent path
    assert chk.interpolants_at(*vecs, x) == want


def random_fr_rows(n, rng):
    from provetop.kernels.layout import random_fr_limbs

    return random_fr_limbs(n, rng)

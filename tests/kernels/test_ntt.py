"""NTT against the O(n^2) DFT for every order/coset/direction, round trips, and the H step."""

from __future__ import annotations

import itertools
import random

import pytest

from provetop.kernels.constants import FR_COSET_GENERATOR, FR_MODULUS, FR_ROOT_OF_UNITY
from provetop.kernels.cpu.ntt import (
    bitrev_indices,
    domain_root,
    evaluate,
    evaluate_interpolant,
    h_step,
    ntt,
    ntt_naive,
    vanishing_on_coset,
)
from provetop.kernels.cpu.srs import check_h_identity
from provetop.kernels.layout import random_fr

R = FR_MODULUS
ORDERS = ("natural", "bitrev")


def _bitrev(xs: list[int]) -> list[int]:
    idx = bitrev_indices(len(xs).bit_length() - 1)
    return [xs[int(i)] for i in idx]


def test_domain_roots() -> None:
    assert domain_root(32) == FR_ROOT_OF_UNITY
    assert domain_root(0) == 1
    for k in (1, 5, 12, 27):
        w = domain_root(k)
        assert pow(w, 1 << k, R) == 1 and pow(w, 1 << (k - 1), R) == R - 1
    with pytest.raises(ValueError):
        domain_root(33)


def test_bitrev_indices() -> None:
    assert list(bitrev_indices(3)) == [0, 4, 2, 6, 1, 5, 3, 7]
    idx = bitrev_indices(6)
    assert all(idx[idx[i]] == i for i in range(64))


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5, 6])
def test_ntt_matches_dft_all_combinations(k: int) -> None:
    xs = random_fr(1 << k, random.Random())
    for inverse, coset, io, oo in itertools.product((False, True), (False, True), ORDERS, ORDERS):
        want = ntt_naive(xs, inverse=inverse, coset=coset)
        if oo == "bitrev":
            want = _bitrev(want)
        inp = _bitrev(xs) if io == "bitrev" else xs
        got = ntt(inp, inverse=inverse, coset=coset, input_order=io, output_order=oo)
        assert got == want, (k, inverse, coset, io, oo)


def test_dft_definition_spot_check() -> None:
    # The oracle itself: forward coset NTT evaluates the polynomial at g * w^i.
    xs = random_fr(8, random.Random())
    w, g = domain_root(3), FR_COSET_GENERATOR
    ev = ntt_naive(xs, coset=True)
    for i in range(8):
        assert ev[i] == evaluate(xs, g * pow(w, i, R) % R)


@pytest.mark.parametrize("k", [4, 10, 12])
def test_round_trips(k: int) -> None:
    xs = random_fr(1 << k, random.Random())
    for coset in (False, True):
        assert ntt(ntt(xs, coset=coset), inverse=True, coset=coset) == xs
        mid = ntt(xs, coset=coset, output_order="bitrev")
        assert ntt(mid, inverse=True, coset=coset, input_order="bitrev") == xs


def test_ntt_rejects_bad_sizes_and_orders() -> None:
    with pytest.raises(ValueError):
        ntt([1, 2, 3])
    with pytest.raises(ValueError):
        ntt([1, 2], input_order="reversed")  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [1, 3, 8, 12])
def test_h_step_identity_at_random_tau(k: int) -> None:
    rng = random.Random()
    n = 1 << k
    a, b = random_fr(n, rng), random_fr(n, rng)
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    h = h_step(a, b, c)
    assert len(h) == n - 1
    tau = rng.randrange(R)
    assert check_h_identity(a, b, c, h, tau)
    # and H really is the polynomial quotient: A*B - C = H * (x^n - 1) coefficient-wise
    if k <= 3:
        A, B, C = (ntt(v, inverse=True) for v in (a, b, c))
        prod = [0] * (2 * n - 1)
        for i, ai in enumerate(A):
            for j, bj in enumerate(B):
                prod[i + j] = (prod[i + j] + ai * bj) % R
        for i, ci in enumerate(C):
            prod[i] = (prod[i] - ci) % R
        hz = [0] * (2 * n - 1)
        for i, hi in enumerate(h):
            hz[i + n] = (hz[i + n] + hi) % R
            hz[i] = (hz[i] - hi) % R
        assert prod == hz


def test_h_identity_detects_a_wrong_h() -> None:
    rng = random.Random()
    n = 64
    a, b = random_fr(n, rng), random_fr(n, rng)
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    h = h_step(a, b, c)
    h[rng.randrange(n - 1)] ^= 1
    assert not check_h_identity(a, b, c, h, rng.randrange(R))
    c[0] = (c[0] + 1) % R  # unsatisfied: a*b != c somewhere
    assert not check_h_identity(a, b, c, h_step(a, b, c), rng.randrange(R))


def test_vanishing_on_coset() -> None:
    k = 5
    g = FR_COSET_GENERATOR
    w = domain_root(k)
    for i in range(4):
        x = g * pow(w, i, R) % R
        assert (pow(x, 1 << k, R) - 1) % R == vanishing_on_coset(k) != 0


@pytest.mark.parametrize("k", [0, 1, 4, 9])
def test_evaluate_interpolant_matches_inverse_ntt(k: int) -> None:
    rng = random.Random()
    n = 1 << k
    vecs = [random_fr(n, rng) for _ in range(3)]
    x = rng.randrange(R)
    assert evaluate_interpolant(vecs, x) == [evaluate(ntt(v, inverse=True), x) for v in vecs]
    m = rng.randrange(n)  # at a domain point the interpolant is the evaluation itself
    assert evaluate_interpolant(vecs, pow(domain_root(k), m, R)) == [v[m] for v in vecs]

"""Field laws for Fr and Fp on random elements (hypothesis) and the Montgomery conversions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provetop.kernels.constants import FP_MODULUS, FR_MODULUS
from provetop.kernels.cpu.fields import FP, FR, PrimeField

FIELDS = {"Fr": FR, "Fp": FP}
fast = settings(max_examples=60, deadline=None)


def elems(m: int) -> st.SearchStrategy[int]:
    # mix of uniform elements and the edges 0, 1, m-1
    return st.one_of(st.integers(0, m - 1), st.sampled_from([0, 1, 2, m - 1, m - 2]))


@pytest.mark.parametrize("name", FIELDS)
def test_ring_laws(name: str) -> None:
    f: PrimeField = FIELDS[name]
    m = f.modulus

    @fast
    @given(elems(m), elems(m), elems(m))
    def laws(a: int, b: int, c: int) -> None:
        assert f.add(a, b) == f.add(b, a)
        assert f.mul(a, b) == f.mul(b, a)
        assert f.add(f.add(a, b), c) == f.add(a, f.add(b, c))
        assert f.mul(f.mul(a, b), c) == f.mul(a, f.mul(b, c))
        assert f.mul(a, f.add(b, c)) == f.add(f.mul(a, b), f.mul(a, c))
        assert f.sub(f.add(a, b), b) == a
        assert f.add(a, f.neg(a)) == 0
        assert f.square(a) == f.mul(a, a)
        for v in (f.add(a, b), f.sub(a, b), f.mul(a, b), f.neg(a)):
            assert 0 <= v < m

    laws()


@pytest.mark.parametrize("name", FIELDS)
def test_inverse_pow_sqrt(name: str) -> None:
    f: PrimeField = FIELDS[name]
    m = f.modulus

    @fast
    @given(st.integers(1, m - 1), st.integers(-(1 << 300), 1 << 300))
    def check(a: int, e: int) -> None:
        assert f.mul(a, f.inv(a)) == 1
        assert f.pow(a, m - 1) == 1  # Fermat
        assert f.mul(f.pow(a, e), f.pow(a, -e)) == 1
        s = f.sqrt(f.square(a))
        assert s is not None and f.square(s) == f.square(a)
        root = f.sqrt(a)
        if f.is_square(a):
            assert root is not None and f.square(root) == a
        else:
            assert root is None

    check()
    with pytest.raises(ZeroDivisionError):
        f.inv(0)
    with pytest.raises(ZeroDivisionError):
        f.inv(m)


@pytest.mark.parametrize("name", FIELDS)
def test_batch_inverse(name: str) -> None:
    f: PrimeField = FIELDS[name]

    @fast
    @given(st.lists(st.integers(1, f.modulus - 1), min_size=0, max_size=40))
    def check(xs: list[int]) -> None:
        assert f.batch_inverse(xs) == [f.inv(x) for x in xs]

    check()
    with pytest.raises(ZeroDivisionError):
        f.batch_inverse([1, 2, 0, 3])


@pytest.mark.parametrize("name", FIELDS)
def test_montgomery(name: str) -> None:
    f: PrimeField = FIELDS[name]
    assert f.to_montgomery(1) == pow(2, f.radix_bits, f.modulus)

    @fast
    @given(st.integers(0, f.modulus - 1), st.integers(0, f.modulus - 1))
    def check(a: int, b: int) -> None:
        am, bm = f.to_montgomery(a), f.to_montgomery(b)
        assert f.from_montgomery(am) == a
        assert am == a * (1 << f.radix_bits) % f.modulus
        assert f.from_montgomery(f.montgomery_mul(am, bm)) == f.mul(a, b)

    check()


def test_fp_sqrt_uses_p_3_mod_4_and_fr_sqrt_tonelli_shanks() -> None:
    assert FP_MODULUS % 4 == 3 and FR_MODULUS % 4 == 1
    # -1 is a non-square in Fp (p = 3 mod 4) but a square in Fr (r = 1 mod 4)
    assert FP.sqrt(FP_MODULUS - 1) is None
    s = FR.sqrt(FR_MODULUS - 1)
    assert s is not None and s * s % FR_MODULUS == FR_MODULUS - 1

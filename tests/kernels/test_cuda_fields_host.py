"""Host-compiled checks of kernels/cuda/src/field/mont.cuh and fields.cuh against Python integers.

Why on the host: mont.cuh compiles as plain C++17, and its carry-chain primitives are an exact
emulation of the PTX instructions the GPU runs (explicit carry flag instead of the hardware
one), so CI without a GPU checks the very instruction sequences of the device multiplication,
addition and subtraction, for both fields and every multiplication variant. The device build
itself is checked on the GPU in tests/kernels/test_cuda_ntt.py. Inputs are fresh random values
on every run, plus the edge values 0, 1, 2, m-1, m-2, R mod m and those of the Karatsuba
split (equal halves, all-ones halves, all-ones words).
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from provetop.kernels import constants as C
from provetop.kernels.cuda import fields_gen as cuda_fields_gen
from tests.kernels.host_build import SRC_DIR, WARNINGS, build_driver

HARNESS = r"""
#include <cstdio>
#include <cstring>
#include <string>
#include <iostream>
#include "field/fields.cuh"

template <class F> F parse(const std::string& hex) {
    F x;  // hex is big-endian, exactly 8*N digits
    for (int i = 0; i < F::N; i++) {
        std::string w = hex.substr(hex.size() - 8 * (i + 1), 8);
        x.v[i] = (uint32_t)std::stoul(w, nullptr, 16);
    }
    return x;
}
template <class F> void print(const F& x) {
    for (int i = F::N - 1; i >= 0; i--) std::printf("%08x", x.v[i]);
    std::printf("\n");
}
template <class F> void run(const std::string& op, const std::string& as, const std::string& bs,
                            const std::string& cs, const std::string& ds) {
    F a = parse<F>(as), b = parse<F>(bs);
    if (op == "msub") {  // a b - c d with one reduction: Fp only (8p < R; not so for Fr)
        if constexpr (F::N == 12) print(F::mul_sub(a, b, parse<F>(cs), parse<F>(ds)));
        else std::printf("bad op\n");
    }
    else if (op == "mul") print(a * b);
    else if (op == "sqr") print(a.sqr());
    else if (op == "add") print(a + b);
    else if (op == "sub") print(a - b);
    else if (op == "neg") print(a.neg());
    else if (op == "tomont") print(a.to_mont());
    else if (op == "frommont") print(a.from_mont());
    else if (op == "inv") print(a.inverse());
    else if (op == "eq") std::printf("%d\n", (int)(a == b));
    else if (op == "iszero") std::printf("%d\n", (int)a.is_zero());
    else if (op == "one") print(F::one());
    else if (op == "red") print(a.reduced());
    else if (op == "chain") {  // 64 rounds of every operation on each other's outputs
        F x = a, y = b;
        for (int k = 0; k < 64; k++) {
            x = x * y;
            y = y + x;
            x = x - y.sqr();
            y = y.dbl() - x.neg();
        }
        print(x.reduced());
        print(y.reduced());
    }
    else std::printf("bad op\n");
}
int main() {
    std::string f, op, a, b;
    while (std::cin >> f >> op >> a >> b) {
        std::string c = a, d = b;
        if (op == "msub") std::cin >> c >> d;  // two more operands
        if (f == "r") run<fr_t>(op, a, b, c, d);
        else if (f == "z") run<fpz_t>(op, a, b, c, d);
        else run<fp_t>(op, a, b, c, d);
    }
    std::fflush(stdout);
    return 0;
}
"""

FIELDS = {
    "r": (C.FR_MODULUS, 256),
    "p": (C.FP_MODULUS, 384),
    "z": (C.FP_MODULUS, 384),  # Fp in the lazy form [0, 2p) (fields.cuh fpz_t)
}


# the default multiplication (even/odd carry chains with the roles swapped every row, exactly
# as on the GPU) and the alternatives kept for comparison
# (and the opt-in dedicated squaring)
MUL_VARIANTS = [
    "",
    "-DMONT_PORTABLE",
    "-DMONT_MUL_SPLIT",
    "-DMONT_MUL_EVENODD_FIXED",
    "-DMONT_SQR_SOS",
    "-DMONT_MUL_KARATSUBA",
    "-DMONT_MUL_KARATSUBA -DMONT_SQR_SOS",
]


@pytest.fixture(
    scope="module",
    params=MUL_VARIANTS,
    ids=[
        "evenodd",
        "portable",
        "split",
        "evenodd-fixed",
        "sqr-sos",
        "karatsuba",
        "karatsuba-sqr-sos",
    ],
)
def harness(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    flags = ("-O1", *WARNINGS, *request.param.split())
    return build_driver(tmp_path_factory.mktemp("mont_host"), "harness", HARNESS, flags)


def _expected(op: str, a: int, b: int, m: int, rbits: int) -> str:
    R = 1 << rbits
    rinv = pow(R, -1, m)
    width = rbits // 4
    if op == "mul":
        v = a * b * rinv % m
    elif op == "sqr":
        v = a * a * rinv % m
    elif op == "add":
        v = (a + b) % m
    elif op == "sub":
        v = (a - b) % m
    elif op == "neg":
        v = -a % m
    elif op == "tomont":
        v = a * R % m
    elif op == "frommont":
        v = a * rinv % m
    elif op == "inv":  # a is x R; result is x^-1 R = R^2 / a
        v = R * R * pow(a, -1, m) % m if a else 0
    elif op == "eq":
        return str(int(a == b))
    elif op == "iszero":
        return str(int(a == 0))
    elif op == "one":
        v = R % m
    elif op == "red":
        v = a % m
    else:
        raise ValueError(op)
    return f"{v:0{width}x}"


def _run(exe: Path, cases: list[tuple[str, str, int, int]]) -> list[str]:
    lines = []
    for f, op, a, b in cases:
        width = FIELDS[f][1] // 4
        lines.append(f"{f} {op} {a:0{width}x} {b:0{width}x}")
    out = subprocess.run(
        [str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def _half_edges(m: int, rbits: int) -> list[int]:
    """Values whose low and high halves (the Karatsuba split) are equal, differ by one either
    way, or are all ones against zero, plus all-ones 32-bit words: the signs and carries of
    the half differences and the middle term at their extremes."""
    half = rbits // 2
    ones = (1 << half) - 1
    out = []
    for lo, hi in ((ones, ones), (ones, 0), (0, ones), (5, 4), (4, 5), (ones, ones - 1)):
        out.append(((hi << half) | lo) % m)
    out += [((1 << (32 * k)) - 1) % m for k in range(1, rbits // 32 + 1)]
    out += [m - (1 << half), m - 1 - ones]
    return sorted(set(out))


@pytest.mark.parametrize("field", ["r", "p"])
def test_arithmetic_matches_python_ints(harness: Path, field: str) -> None:
    m, rbits = FIELDS[field]
    rng = random.Random()
    ops = ["mul", "sqr", "add", "sub", "neg", "tomont", "frommont", "eq", "iszero"]
    edges = [0, 1, 2, m - 1, m - 2, (1 << rbits) % m] + _half_edges(m, rbits)
    cases = []
    for op in ops:
        for _ in range(200):
            cases.append((field, op, rng.randrange(m), rng.randrange(m)))
        for a in edges:
            for b in edges:
                cases.append((field, op, a, b))
    for _ in range(10):
        a = rng.randrange(m)
        cases.append((field, "eq", a, a))
    for a in [rng.randrange(m) for _ in range(20)] + [0, 1, m - 1]:
        cases.append((field, "inv", a, 0))
    cases.append((field, "one", 0, 0))
    got = _run(harness, cases)
    assert len(got) == len(cases)
    for (f, op, a, b), g in zip(cases, got, strict=True):
        assert g == _expected(op, a, b, m, rbits), (f, op, hex(a), hex(b))


def _lazy_edges(m: int) -> list[int]:
    """Values of the lazy form [0, 2m) at its extremes: around 0, m and 2m, the top bits set,
    all-ones low words under 2m, and the Karatsuba edges shifted up by m."""
    out = [0, 1, 2, m - 2, m - 1, m, m + 1, m + 2, 2 * m - 2, 2 * m - 1]
    top = (2 * m).bit_length()
    out += [2 * m - (1 << k) for k in (1, 32, 64, 200, top - 2)]
    out += [(1 << k) - 1 for k in range(32, top, 32) if (1 << k) - 1 < 2 * m]
    out += [m + e for e in _half_edges(m, 384) if m + e < 2 * m]
    return sorted(set(out))


def _lazy_chain(a: int, b: int, m: int) -> tuple[int, int]:
    rinv = pow(1 << 384, -1, m)
    x, y = a, b
    for _ in range(64):
        x = x * y * rinv % m
        y = (y + x) % m
        x = (x - y * y * rinv) % m
        y = (2 * y + x) % m
    return x, y


def test_lazy_fp_stays_below_2p_and_agrees_mod_p(tmp_path_factory: pytest.TempPathFactory) -> None:
    """fpz_t (mont.cuh's lazy form) on inputs anywhere in [0, 2p): every value-producing
    operation returns a word vector < 2p congruent to the exact result, reduced() and
    from_mont() return the canonical value, and 64 rounds of every operation on each other's
    outputs (the bound must hold for lazy inputs, not only canonical ones) agree with Python's
    integers. A product that skipped its bound (4p < R) or an addition that reduced by p instead
    of 2p fails the range check or the residue."""
    exe = build_driver(tmp_path_factory.mktemp("mont_lazy"), "harness", HARNESS, ("-O1", *WARNINGS))
    m = C.FP_MODULUS
    rng = random.Random()
    edges = _lazy_edges(m)
    ops = ["mul", "sqr", "add", "sub", "neg", "tomont", "frommont", "eq", "iszero", "red"]
    cases = []
    for op in ops:
        for _ in range(300):
            cases.append(("z", op, rng.randrange(2 * m), rng.randrange(2 * m)))
        for a in edges:
            for b in edges:
                cases.append(("z", op, a, b))
    for a in [rng.randrange(2 * m) for _ in range(10)] + [0, m, m + 1, 2 * m - 1]:
        cases.append(("z", "inv", a, 0))
        cases.append(("z", "eq", a, (a + m) % (2 * m)))  # the same residue, other word vector
    cases.append(("z", "one", 0, 0))
    got = _run(exe, cases)
    assert len(got) == len(cases)
    for (_, op, a, b), g in zip(cases, got, strict=True):
        if op in ("eq", "iszero"):
            assert g == _expected(op, a % m, b % m, m, 384), (op, hex(a), hex(b))
            continue
        v = int(g, 16)
        want = int(_expected(op, a % m, b % m, m, 384), 16)
        if op in ("red", "frommont", "one"):
            assert v == want, (op, hex(a), hex(b))
        else:
            assert v < 2 * m and v % m == want, (op, hex(a), hex(b), hex(v))
    pairs = [(rng.randrange(2 * m), rng.randrange(2 * m)) for _ in range(40)]
    pairs += [(2 * m - 1, 2 * m - 1), (m, 2 * m - 1), (m - 1, m + 1)]
    got = _run(exe, [("z", "chain", a, b) for a, b in pairs])
    assert len(got) == 2 * len(pairs)
    for i, (a, b) in enumerate(pairs):
        assert (int(got[2 * i], 16), int(got[2 * i + 1], 16)) == _lazy_chain(a, b, m)


def test_lazy_mul_sub_one_reduction_for_two_products(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """fpz_t::mul_sub(a, b, c, d) = a b - c d with both products' rows sharing one reduction
    (the accumulation's Y3): for a, b, c, d anywhere in [0, 2p) the result is a word vector
    < 2p congruent to (a b - c d) / R. The edges drive each bound the header derives: every
    operand at 2p - 1 (the row totals' largest), d = 0 (so 2p - d = 2p, its one operand above
    the lazy range), and the all-ones and top-bit values of the lazy edges in each position.
    A row that dropped a carry, or a second product added after the reduction, fails here."""
    exe = build_driver(tmp_path_factory.mktemp("mont_msub"), "harness", HARNESS, ("-O1", *WARNINGS))
    m = C.FP_MODULUS
    R = 1 << 384
    rinv = pow(R, -1, m)
    rng = random.Random()
    edges = _lazy_edges(m)
    quads = [tuple(rng.randrange(2 * m) for _ in range(4)) for _ in range(2000)]
    top = 2 * m - 1
    quads += [(top, top, top, top), (top, top, top, 0), (top, top, 0, 0), (0, 0, top, 0)]
    quads += [(0, 0, 0, 0), (1, 1, 1, 1), (m, m, m, m), (top, top, m, m)]
    for pos in range(4):
        for e in edges:
            q = [rng.randrange(2 * m) for _ in range(4)]
            q[pos] = e
            quads.append(tuple(q))
            quads.append(tuple(e if i == pos else top for i in range(4)))
    lines = "".join(f"z msub {a:096x} {b:096x} {c:096x} {d:096x}\n" for a, b, c, d in quads)
    out = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True)
    got = out.stdout.split()
    assert len(got) == len(quads)
    for (a, b, c, d), g in zip(quads, got, strict=True):
        v = int(g, 16)
        want = (a * b - c * d) * rinv % m
        assert v < 2 * m and v % m == want, (hex(a), hex(b), hex(c), hex(d), hex(v))


def test_canonical_mul_sub_is_exact(harness: Path) -> None:
    """fp_t::mul_sub on canonical operands (the bucket reduction's and the SRS kernels' Y3):
    exactly the canonical (a b - c d) / R, in every multiplication build, at the edges below p
    and on random values."""
    m = C.FP_MODULUS
    rinv = pow(1 << 384, -1, m)
    rng = random.Random()
    edges = [0, 1, 2, m - 1, m - 2, (1 << 384) % m] + _half_edges(m, 384)
    quads = [tuple(rng.randrange(m) for _ in range(4)) for _ in range(500)]
    for pos in range(4):
        for e in edges:
            q = [m - 1] * 4
            q[pos] = e
            quads.append(tuple(q))
            quads.append(tuple(e if i == pos else rng.randrange(m) for i in range(4)))
    lines = "".join(f"p msub {a:096x} {b:096x} {c:096x} {d:096x}\n" for a, b, c, d in quads)
    out = subprocess.run([str(harness)], input=lines, capture_output=True, text=True, check=True)
    got = out.stdout.split()
    assert len(got) == len(quads)
    for (a, b, c, d), g in zip(quads, got, strict=True):
        assert int(g, 16) == (a * b - c * d) * rinv % m, (hex(a), hex(b), hex(c), hex(d), g)


def test_header_constants_match_kernels_constants() -> None:
    text = (SRC_DIR / "field" / "fields.cuh").read_text()
    assert cuda_fields_gen.current_block(text) == cuda_fields_gen.render(), (
        "fields.cuh constants drifted from kernels/constants.py: "
        "run python -m provetop.kernels.cuda.fields_gen"
    )
    # and the rendered values themselves agree with the named constants
    assert C.FR_MONT_INV32 == int(_macro(text, "FR_M0").rstrip("u"), 16)
    assert C.FP_MONT_INV32 == int(_macro(text, "FP_M0").rstrip("u"), 16)
    for tag, value, n in (
        ("FR_MOD_WORDS", C.FR_MODULUS, 8),
        ("FR_R2_WORDS", C.FR_MONT_R2, 8),
        ("FR_ONE_WORDS", C.FR_MONT_R, 8),
        ("FP_MOD_WORDS", C.FP_MODULUS, 12),
        ("FP_R2_WORDS", C.FP_MONT_R2, 12),
        ("FP_ONE_WORDS", C.FP_MONT_R, 12),
    ):
        words = [int(w.strip().rstrip("u"), 16) for w in _macro(text, tag).split(",")]
        assert len(words) == n
        assert sum(w << (32 * i) for i, w in enumerate(words)) == value, tag


def _macro(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.startswith(f"#define {name} "):
            return line.split(None, 2)[2]
    raise AssertionError(f"macro {name} not in fields.cuh")

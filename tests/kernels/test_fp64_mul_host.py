"""Host-compiled checks of bench/fp64_mul/fp64_mont.cuh (the FP64 Montgomery multiplication
micro-benchmark) against Python integers.

Why on the host: the header compiles as host C++ with std::fma (round-toward-zero through
fesetround for the hi half), and IEEE 754 defines fma exactly in every rounding mode, so g++ runs
the same arithmetic as the GPU's DFMA and any exactness error in the limb split, the bias
bookkeeping, the carries or the reduction shows up here, without a GPU. The GPU build is
checked by bench/fp64_mul/run.py. Inputs: fresh random values on every run, the edge values 0,
1, m-1, m-2, values whose 52-bit limbs are all 2^52 - 1 (the largest limb products, H = 2^52 - 2),
values with the top bits of every limb set, 64-bit words all ones, m - 2^k; for the raw 52 x 52
product also every limb pattern 2^52 - 1, powers of two and products that are exact multiples
of 2^52 (where a wrong rounding direction would show).

Can it fail? A wrong constant is caught: C1 = 2^103 puts hi in a binade of ulp 2^51 (H doubled,
every product with p >= 2^51 wrong); C2 = 2^104 leaves lo in [0, 2^52) where the bit pattern is
not K_LO + lo; a wrong MU leaves t_0 != 0 mod 2^52 and the division drops bits; a wrong bias
(K_HI, K_LO) shifts the columns by multiples of 2^52; round-to-nearest instead of toward zero
for hi gives lo < 0 for about half the random products; all of these break the random cases.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from provetop.kernels.constants import FP_MODULUS, FR_MODULUS
from tests.kernels.host_build import WARNINGS, build_driver

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = ROOT / "bench" / "fp64_mul"
M52 = (1 << 52) - 1
# field letter: modulus, limbs, 64-bit words, mont.cuh radix bits
FIELDS = {"r": (FR_MODULUS, 5, 4, 256), "p": (FP_MODULUS, 8, 6, 384)}

HARNESS = r"""
#include <cstdio>
#include <string>
#include <iostream>
#include "fp64_mont.cuh"

template <class P> static void parse_words(const std::string& hex, uint64_t* w) {
    for (int i = 0; i < P::WORDS; i++)  // big-endian hex, exactly 16 * WORDS digits
        w[i] = std::stoull(hex.substr(hex.size() - 16 * (i + 1), 16), nullptr, 16);
}
template <class P> static void print_words(const uint64_t* w) {
    for (int i = P::WORDS - 1; i >= 0; i--) std::printf("%016llx", (unsigned long long)w[i]);
    std::printf(" ");
}
template <class P> static void print_el(const fp64m::f64x<P::N>& x) {
    uint64_t w[P::WORDS];
    fp64_to_words<P>(x, w);
    print_words<P>(w);
}
// "mul r A B": raw products by every variant; "conv r A B": A, B in mont.cuh's form ->
// fp64 -> multiply -> back; "mul52 A B": the exact split of one product; "const r|p": params.
template <class P> static void run_mul(const std::string& sa, const std::string& sb) {
    uint64_t wa[P::WORDS], wb[P::WORDS];
    parse_words<P>(sa, wa);
    parse_words<P>(sb, wb);
    const auto a = fp64_from_words<P>(wa), b = fp64_from_words<P>(wb);
    print_el<P>(fp64_mul<P, 0>(a, b));
    print_el<P>(fp64_mul<P, 2>(a, b));
    print_el<P>(fp64_mul<P, P::N>(a, b));
    print_el<P>(fp64_mul<P, 0, true>(a, b));
    std::printf("\n");
}
template <class P> static void run_conv(const std::string& sa, const std::string& sb) {
    uint64_t wa[P::WORDS], wb[P::WORDS], w[P::WORDS];
    parse_words<P>(sa, wa);
    parse_words<P>(sb, wb);
    fp64_store_mont<P>(fp64_mul<P>(fp64_load_mont<P>(wa), fp64_load_mont<P>(wb)), w);
    print_words<P>(w);
    std::printf("\n");
}
template <class P> static void run_const() {
    for (int j = 0; j < P::N; j++)
        std::printf("%llx %llx %llx %llx %llx ", (unsigned long long)P::mod(j),
                    (unsigned long long)P::cin(j), (unsigned long long)P::cout(j),
                    (unsigned long long)P::r2(j), (unsigned long long)P::one(j));
    std::printf("%llx\n", (unsigned long long)P::MU);
}
int main() {
    std::string op, f, a, b;
    while (std::cin >> op) {
        if (op == "mul52") {
            std::cin >> a >> b;
            uint64_t h, l;
            fp64m::mul52((double)std::stoull(a, nullptr, 16), (double)std::stoull(b, nullptr, 16),
                         h, l);
            std::printf("%016llx %016llx\n", (unsigned long long)h, (unsigned long long)l);
        } else if (op == "const") {
            std::cin >> f;
            if (f == "r") run_const<fr52_params>(); else run_const<fp52_params>();
        } else {
            std::cin >> f >> a >> b;
            if (op == "mul") {
                if (f == "r") run_mul<fr52_params>(a, b); else run_mul<fp52_params>(a, b);
            } else {
                if (f == "r") run_conv<fr52_params>(a, b); else run_conv<fp52_params>(a, b);
            }
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    flags = ("-O1", *WARNINGS, "-frounding-math")
    d = tmp_path_factory.mktemp("fp64_mul_host")
    return build_driver(d, "harness", HARNESS, flags, includes=(BENCH_DIR,))


def run(harness: Path, lines: list[str]) -> list[str]:
    out = subprocess.run(
        [str(harness)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    )
    got = out.stdout.splitlines()
    assert len(got) == len(lines)
    return got


def stress(m: int, limbs: int, words: int) -> list[int]:
    top = m >> (52 * (limbs - 1))
    vals = [0, 1, 2, m - 1, m - 2, m >> 1, (1 << (m.bit_length() - 1)), pow(2, 52 * limbs, m)]
    vals += [(1 << (52 * k)) - 1 for k in range(1, limbs)]
    vals += [((top - 1) << (52 * (limbs - 1))) | ((1 << (52 * (limbs - 1))) - 1)]
    vals += [(1 << (64 * k)) - 1 for k in range(1, words)]
    vals += [m - (1 << k) for k in (1, 32, 51, 52, 53, 64, 104)]
    rng = random.Random()
    for _ in range(4):
        v = sum((rng.getrandbits(52) | (0xF << 48)) << (52 * j) for j in range(limbs))
        vals.append(v % m)
    return sorted({v % m for v in vals})


def test_constants_match_python(harness: Path) -> None:
    for f, (m, n, _, rb) in FIELDS.items():
        got = run(harness, [f"const {f}"])[0].split()
        rp = 1 << (52 * n)
        want = []
        for j in range(n):
            for v in (m, rp * rp // (1 << rb) % m, (1 << rb) % m, rp * rp % m, rp % m):
                want.append(f"{(v >> (52 * j)) & M52:x}")
        want.append(f"{(-pow(m, -1, 1 << 52)) % (1 << 52):x}")
        assert got == want, f


def test_mul52_exact_split(harness: Path) -> None:
    """hi = 2^104 + floor(ab / 2^52) 2^52, lo = 2^52 + (ab mod 2^52), as bit patterns."""
    rng = random.Random()
    edge = [0, 1, 2, 3, M52, M52 - 1, 1 << 51, (1 << 51) - 1, (1 << 51) + 1, 1 << 26, 3 << 50]
    edge += [(1 << k) for k in range(0, 52, 5)] + [M52 ^ (1 << k) for k in range(0, 52, 7)]
    pairs = [(a, b) for a in edge for b in edge]
    pairs += [(rng.getrandbits(52), rng.getrandbits(52)) for _ in range(3000)]
    pairs += [(rng.getrandbits(26) << 26, rng.getrandbits(26) << 26) for _ in range(300)]
    got = run(harness, [f"mul52 {a:x} {b:x}" for a, b in pairs])
    k_hi, k_lo = 0x4670000000000000, 0x4330000000000000
    for (a, b), line in zip(pairs, got, strict=True):
        p = a * b
        assert line == f"{k_hi + (p >> 52):016x} {k_lo + (p & M52):016x}", (hex(a), hex(b))


@pytest.mark.parametrize("f", ["r", "p"])
def test_fp64_mul_matches_python_ints(harness: Path, f: str) -> None:
    m, n, w, _ = FIELDS[f]
    rinv = pow(2, -52 * n, m)
    rng = random.Random()
    st = stress(m, n, w)
    pairs = [(a, b) for a in st for b in st]
    pairs += [(rng.randrange(m), rng.randrange(m)) for _ in range(1500)]
    got = run(harness, [f"mul {f} {a:0{16 * w}x} {b:0{16 * w}x}" for a, b in pairs])
    for (a, b), line in zip(pairs, got, strict=True):
        want = a * b * rinv % m
        full, split2, split_all, lazy = (int(x, 16) for x in line.split())
        assert (full, split2, split_all) == (want, want, want), (f, hex(a), hex(b), line)
        assert lazy < 2 * m and lazy % m == want, (f, hex(a), hex(b), line)


@pytest.mark.parametrize("f", ["r", "p"])
def test_lazy_accepts_inputs_below_2m(harness: Path, f: str) -> None:
    """The lazy multiplication's contract: a, b < 2m in, < 2m out (chained outputs)."""
    m, n, w, _ = FIELDS[f]
    rinv = pow(2, -52 * n, m)
    rng = random.Random()
    vals = [2 * m - 1, 2 * m - 2, m, m + 1] + [rng.randrange(2 * m) for _ in range(300)]
    pairs = [(rng.choice(vals), rng.choice(vals)) for _ in range(600)]
    got = run(harness, [f"mul {f} {a:0{16 * w}x} {b:0{16 * w}x}" for a, b in pairs])
    for (a, b), line in zip(pairs, got, strict=True):
        lazy = int(line.split()[3], 16)
        assert lazy < 2 * m and lazy % m == a * b * rinv % m, (f, hex(a), hex(b))


@pytest.mark.parametrize("f", ["r", "p"])
def test_conversions_from_mont_cuh_form(harness: Path, f: str) -> None:
    """mont.cuh form (x 2^256 / x 2^384) -> x R' -> product -> back = mont.cuh's product."""
    m, n, w, rb = FIELDS[f]
    rinv = pow(2, -rb, m)
    rng = random.Random()
    vals = stress(m, n, w) + [rng.randrange(m) for _ in range(200)]
    pairs = [(rng.choice(vals), rng.choice(vals)) for _ in range(600)]
    got = run(harness, [f"conv {f} {a:0{16 * w}x} {b:0{16 * w}x}" for a, b in pairs])
    for (a, b), line in zip(pairs, got, strict=True):
        assert int(line, 16) == a * b * rinv % m, (f, hex(a), hex(b))


def test_chained_products(harness: Path) -> None:
    """x <- x y repeatedly (outputs fed back as inputs), as the benchmark chains do."""
    for f, (m, n, w, _) in FIELDS.items():
        rinv = pow(2, -52 * n, m)
        rng = random.Random()
        x, y = rng.randrange(m), rng.randrange(m)
        pairs = []
        for _ in range(300):
            pairs.append((x, y))
            x = x * y * rinv % m
        got = run(harness, [f"mul {f} {a:0{16 * w}x} {b:0{16 * w}x}" for a, b in pairs])
        for (a, b), line in zip(pairs, got, strict=True):
            assert int(line.split()[0], 16) == a * b * rinv % m

"""Host-compiled checks of kernels/cuda/src/field/fr_mul.cuh (the NTT's Fr multiplications) against
Python integers.

Why on the host: fr_mul.cuh builds on mont.cuh's carry-chain primitives, which compile on the
host as an exact emulation of the PTX instructions (explicit carry flag), so CI without a GPU
checks the very instruction sequences the GPU runs. The device build is checked on the GPU in
tests/kernels/test_cuda_ntt.py (fr_mul_check kernel and every NTT test). Inputs: fresh random
values on every run, the edge values 0, 1, 2, r-1, r-2, R mod r, and values whose low words are 0 or
0xffffffff (the reduction digit m is then 0 or 1 in some rows: the special cases of the
r_0 = 1, r_1 = 2^32 - 1 shortcuts).
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from provetop.kernels.constants import FR_MODULUS
from tests.kernels.host_build import build_driver

R = FR_MODULUS
RINV = pow(1 << 256, -1, R)

HARNESS = r"""
#include <cstdio>
#include <string>
#include <iostream>
#include "field/fr_mul.cuh"

static fr_t parse(const std::string& hex) {
    fr_t x;  // big-endian hex, exactly 64 digits
    for (int i = 0; i < 8; i++)
        x.v[i] = (uint32_t)std::stoul(hex.substr(56 - 8 * i, 8), nullptr, 16);
    return x;
}
int main() {
    std::string a, b;
    while (std::cin >> a >> b) {
        const fr_t x = parse(a), y = parse(b);
        const fr_t outs[3] = {x * y, fr_mul_r(x, y), fr_mul_r2(x, y)};
        for (const fr_t& o : outs) {
            for (int i = 7; i >= 0; i--) std::printf("%08x", o.v[i]);
            std::printf(" ");
        }
        std::printf("%08x\n", fr_mul(x, y).v[0]);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver(tmp_path_factory.mktemp("fr_mul_host"), "harness", HARNESS)


def edge_values() -> list[int]:
    """Values that drive the special cases: extremes, and low words 0 / 0xffffffff."""
    rng = random.Random()
    vals = [0, 1, 2, R - 1, R - 2, (1 << 256) % R, R >> 1, (R >> 1) + 1]
    for _ in range(6):
        v = rng.randrange(R)
        vals += [v & ~0xFFFFFFFF, v & ~((1 << 64) - 1), v | 0xFFFFFFFF, v | ((1 << 64) - 1)]
    return [v % R for v in vals]


def test_fr_mul_variants_match_python_ints(harness: Path) -> None:
    rng = random.Random()
    edges = edge_values()
    pairs = [(a, b) for a in edges for b in edges]
    pairs += [(rng.randrange(R), rng.randrange(R)) for _ in range(3000)]
    text = "".join(f"{a:064x} {b:064x}\n" for a, b in pairs)
    out = subprocess.run([str(harness)], input=text, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == len(pairs)
    for (a, b), line in zip(pairs, lines, strict=True):
        want = f"{a * b * RINV % R:064x}"
        generic, r1, r2, default_lo = line.split()
        assert (generic, r1, r2) == (want,) * 3, (hex(a), hex(b), line)
        assert default_lo == want[-8:], (hex(a), hex(b))


def test_fr_mul_chained_products(harness: Path) -> None:
    """Long chains x <- x * y (outputs fed back as inputs), as the NTT and the probes do."""
    rng = random.Random()
    x, y = rng.randrange(R), rng.randrange(R)
    pairs = []
    for _ in range(500):
        pairs.append((x, y))
        x = x * y * RINV % R
    text = "".join(f"{a:064x} {b:064x}\n" for a, b in pairs)
    out = subprocess.run([str(harness)], input=text, capture_output=True, text=True, check=True)
    for (a, b), line in zip(pairs, out.stdout.splitlines(), strict=True):
        assert line.split()[2] == f"{a * b * RINV % R:064x}"


LAZY_HARNESS = r"""
#include <cstdio>
#include <string>
#include <iostream>
#include "field/fr_mul.cuh"

static fr_t parse(const std::string& hex) {
    fr_t x;
    for (int i = 0; i < 8; i++)
        x.v[i] = (uint32_t)std::stoul(hex.substr(56 - 8 * i, 8), nullptr, 16);
    return x;
}
static void print(const fr_t& o) {
    for (int i = 7; i >= 0; i--) std::printf("%08x", o.v[i]);
    std::printf(" ");
}
int main() {  // "w x y": w < r, x, y < 2r
    std::string a, b, c;
    while (std::cin >> a >> b >> c) {
        const fr_t w = parse(a), x = parse(b), y = parse(c);
        print(fr_mul_lazy(w, x));
        print(fr_add_lazy(x, y));
        print(fr_sub_lazy(x, y));
        print(fr_canonical(x));
        std::printf("\n");
    }
    return 0;
}
"""


def lazy_edge_values() -> list[int]:
    """[0, 2r) at its extremes: around 0, r and 2r, and the special low words shifted by r."""
    vals = [0, 1, R - 1, R, R + 1, 2 * R - 2, 2 * R - 1, (1 << 255) - 1, 1 << 255]
    vals += [R + v for v in edge_values() if R + v < 2 * R]
    return sorted(v for v in set(vals) if v < 2 * R)


def test_fr_lazy_butterfly_ops_stay_below_2r(tmp_path_factory: pytest.TempPathFactory) -> None:
    """fr_mul_lazy (a canonical twiddle times a value < 2r), fr_add_lazy, fr_sub_lazy and
    fr_canonical, the NTT_LAZY butterflies' operations: each result < 2r (canonical for
    fr_canonical) and congruent to the exact one, at the edges of [0, 2r) and on random values.
    A product whose second operand broke the bound, or an addition that dropped the carry word
    of a sum >= 2^256, fails the range or the residue."""
    exe = build_driver(tmp_path_factory.mktemp("fr_lazy_host"), "lazy", LAZY_HARNESS)
    rng = random.Random()
    lazy = lazy_edge_values()
    cases = [(w, x, y) for w in edge_values()[:8] for x in lazy for y in lazy]
    cases += [(rng.randrange(R), rng.randrange(2 * R), rng.randrange(2 * R)) for _ in range(3000)]
    text = "".join(f"{w:064x} {x:064x} {y:064x}\n" for w, x, y in cases)
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == len(cases)
    for (w, x, y), line in zip(cases, lines, strict=True):
        mul, add, sub, canon = (int(v, 16) for v in line.split())
        ctx = (hex(w), hex(x), hex(y))
        assert mul < 2 * R and mul % R == w * x * RINV % R, ctx
        assert add < 2 * R and add % R == (x + y) % R, ctx
        assert sub < 2 * R and sub % R == (x - y) % R, ctx
        assert canon == x % R, ctx

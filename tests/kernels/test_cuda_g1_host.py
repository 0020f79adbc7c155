"""kernels/cuda/src/curve/g1.cuh and msm/msm.cuh compiled as host C++ (g++) against the reference.

Why on the host: the curve formulas and the signed-digit recoding are the same source on the
GPU and here (mont.cuh's portable path does the carries with 64-bit integers), so CI, which has
no GPU, still checks every formula the MSM and SRS kernels run, on fresh random points in
non-trivial XYZZ/Jacobian representations (ZZ != 1) and on every exceptional case: P + P,
P + (-P), infinity on either side.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from provetop.kernels.constants import FP_MODULUS as P
from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu import g1
from provetop.kernels.cpu.msm import signed_digits
from tests.kernels.host_build import build_driver
from tests.kernels.host_io import FP_IO

DRIVER = (
    r"""
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include <algorithm>
#include "msm/msm.cuh"

"""
    + FP_IO
    + r"""
static void print_aff(const g1_affine& p) {
    if (p.is_inf()) { printf("inf\n"); return; }
    print_fp(p.x); printf(" "); print_fp(p.y); printf("\n");
}
static g1_affine rd_aff(std::istream& in) {
    std::string x, y; in >> x >> y;
    return {parse_fp(x), parse_fp(y)};
}
static g1_xyzz rd_xyzz(std::istream& in) {
    std::string a, b, c, d; in >> a >> b >> c >> d;
    return {parse_fp(a), parse_fp(b), parse_fp(c), parse_fp(d)};
}
static g1_jacobian rd_jac(std::istream& in) {
    std::string a, b, c; in >> a >> b >> c;
    return {parse_fp(a), parse_fp(b), parse_fp(c)};
}

// The GPU pipeline of kernels/cuda/msm.py run sequentially on the host with the very per-thread
// bodies the kernels call: "msm n c L0 L S F parts scaled kept" then n points and n scalars (64
// hex digits); scaled: the bucket-reduction tree's setting (0 span, 1 scaled, 2 + k auto
// switching at tree level k).
// parts > 1: the points are cut into that many contiguous chunks, each sorted and accumulated
// on its own, as msm_host_points streams them: kept = 1 sums the later ones straight into the
// kept array (msm_accumulate0_kept), kept = 0 into a second bucket array merged into the first
// (xyzz_merge).
static void run_msm(std::istream& in) {
    uint32_t n, c, L0, L, S, F, parts, scaled, kept;
    in >> n >> c >> L0 >> L >> S >> F >> parts >> scaled >> kept;
    std::vector<g1_affine> pts(n);
    std::vector<uint32_t> sc(8 * n);
    for (uint32_t i = 0; i < n; i++) pts[i] = rd_aff(in);
    for (uint32_t i = 0; i < n; i++) {
        std::string hex; in >> hex;
        for (int w = 0; w < 8; w++)
            sc[8 * i + 7 - w] = (uint32_t)std::stoul(hex.substr(8 * w, 8), nullptr, 16);
    }
    const uint32_t W = (256 + c - 1) / c, B = 1u << (c - 1), K = W * B + 1;
    g1_xyzz poison = g1_xyzz::inf();  // a real point in every level's slots before the launch
    for (uint32_t i = 0; i < n && poison.is_inf(); i++) poison = g1_xyzz::from_affine(pts[i]);
    std::vector<g1_xyzz> buckets(K, g1_xyzz::inf()), part(K, g1_xyzz::inf()), vals, pv;
    uint32_t levels = 0;
    for (uint32_t part_i = 0; part_i < parts; part_i++) {
        const uint32_t lo = (uint64_t)n * part_i / parts;
        const uint32_t hi = (uint64_t)n * (part_i + 1) / parts;
        std::vector<uint32_t> counts(K + 1, 0), offs(K + 1, 0), sorted;
        for (int pass = 0; pass < 2; pass++) {
            for (uint32_t i = lo; i < hi; i++) {
                const uint32_t* s = &sc[8 * i];
                msm_digits dg(c);
                for (uint32_t w = 0; w < W; w++) {
                    bool neg = false;
                    const bool z = msm_scalar_is(s, 0), one = msm_scalar_is(s, 1);
                    uint32_t key = msm_key(s, w, c, B, W, z, one, dg, &neg);
                    if (key == MSM_NONE) continue;
                    const uint32_t e = (i - lo) | (neg ? 0x80000000u : 0u);  // chunk-local
                    if (pass == 0) counts[key]++;
                    else sorted[offs[key] + counts[key]++] = e;
                }
            }
            if (pass == 0) {
                for (uint32_t k = 0; k < K; k++) offs[k + 1] = offs[k] + counts[k];
                sorted.assign(offs[K], 0);
                std::fill(counts.begin(), counts.end(), 0);
            }
        }
        const uint32_t M = offs[K];
        const bool into_kept = kept && part_i > 0;  // msm_accumulate0_kept
        g1_xyzz* into = part_i > 0 && !kept ? part.data() : buckets.data();
        std::vector<uint32_t> keys, pk;
        uint32_t size = M, chunk = L0, depth = 0;
        while (M > 0) {
            const uint32_t T = (size + chunk - 1) / chunk;
            pv.assign(2 * T, poison);  // as cupy.empty leaves them: every slot must be written
            pk.assign(2 * T, 0);
            for (uint32_t t = 0; t < T; t++) {
                if (depth == 0 && into_kept)
                    msm_accumulate0_kept_thread(t, pts.data() + lo, sorted.data(), offs.data(),
                                                K, M, chunk, into, pv.data(), pk.data());
                else if (depth == 0)
                    msm_accumulate0_thread(t, pts.data() + lo, sorted.data(), offs.data(), K, M,
                                           chunk, into, pv.data(), pk.data());
                else
                    msm_accumulate_n_thread(t, vals.data(), keys.data(), size, chunk, into,
                                            pv.data(), pk.data());
            }
            depth++;
            if (T == 1) break;
            vals.swap(pv), keys.swap(pk);
            size = 2 * T, chunk = L;
        }
        levels = depth > levels ? depth : levels;
        if (part_i > 0 && !kept)
            for (uint32_t b = 0; b < K; b++) xyzz_merge_thread(b, buckets.data(), part.data());
    }
    for (uint32_t b = 0; b < K; b++)  // the merges leave the second array at infinity
        if (!part[b].is_inf()) { printf("part not cleared\n"); return; }
    const uint32_t G = (B + S - 1) / S;
    std::vector<g1_xyzz> ra(W * G), rr(W * G), na, nr;
    uint32_t log_span = 0;
    while ((1u << log_span) < S) log_span++;
    uint32_t log_f = 0;
    while ((1u << log_f) < F) log_f++;
    // as kernels/cuda/msm.py::reduce_buckets launches them: scaled 0 = "span", 1 = "scaled"
    // from the leaves, 2 + k = "auto" switching at tree level k
    bool pre = scaled == 1 && G > 1;
    for (uint32_t t = 0; t < W * G; t++)
        msm_bucket_reduce_thread(t, buckets.data(), B, S, G, pre ? log_span : 0, ra.data(),
                                 rr.data());
    for (uint32_t len = G, level = 0; len > 1; level++) {
        const uint32_t out_len = (len + F - 1) / F;
        const bool root = out_len == 1;
        na.assign(W * out_len, g1_xyzz::inf());
        nr.assign(W * out_len, g1_xyzz::inf());
        uint32_t dbl_t = log_span, dbl_r = 0;
        if (pre) {
            dbl_t = 0, dbl_r = root ? 0 : log_f;
        } else if (scaled >= 2 && level == scaled - 2) {
            dbl_r = root ? 0 : log_span + log_f;
            pre = true;
        }
        for (uint32_t t = 0; t < W * out_len; t++)
            xyzz_sum_weighted_thread(t, ra.data(), rr.data(), len, F, out_len, dbl_t, dbl_r,
                                     na.data(), nr.data());
        ra.swap(na), rr.swap(nr), len = out_len, log_span += log_f;
    }
    std::vector<g1_xyzz>& red = ra;
    g1_xyzz acc = g1_xyzz::inf();
    for (int w = (int)W - 1; w >= 0; w--) {
        for (uint32_t k = 0; k < c; k++) acc = acc.dbl();
        acc = acc.add(red[w]);
    }
    acc = acc.add(buckets[K - 1]);
    printf("%u ", levels);
    print_aff(acc.to_affine());
}

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string op; in >> op;
        g1_xyzz a, b;
        g1_affine q;
        g1_jacobian j, k;
        if (op == "xadd") {
            a = rd_xyzz(in), b = rd_xyzz(in);
            print_aff(a.add(b).to_affine());
        } else if (op == "xmadd") {
            a = rd_xyzz(in), q = rd_aff(in);
            print_aff(a.add_affine(q).to_affine());
        } else if (op == "zmadd") {
            // the lazy accumulator: a lifted, the coordinates flagged in `mask` moved to their
            // other representative (+ p, still < 2p), plus q, reduced back
            unsigned mask; a = rd_xyzz(in); in >> mask; q = rd_aff(in);
            g1_xyzz_t<fpz_t> z = g1_xyzz_t<fpz_t>::lift(a);
            fpz_t* co[4] = {&z.X, &z.Y, &z.ZZ, &z.ZZZ};
            for (int k = 0; k < 4; k++) {
                if (!((mask >> k) & 1) || (k == 2 && a.is_inf())) continue;
                uint64_t c = 0;
                for (int i = 0; i < 12; i++) {
                    c += (uint64_t)co[k]->v[i] + fp_params::mod(i);
                    co[k]->v[i] = (uint32_t)c;
                    c >>= 32;
                }
            }
            print_aff(z.add_affine(q).reduced().to_affine());
        } else if (op == "xdbl") {
            a = rd_xyzz(in);
            print_aff(a.dbl().to_affine());
        } else if (op == "xdbla") {
            q = rd_aff(in);
            print_aff(g1_xyzz::dbl_affine(q).to_affine());
        } else if (op == "xneg") {
            a = rd_xyzz(in);
            print_aff(a.neg().to_affine());
        } else if (op == "jadd") {
            j = rd_jac(in), k = rd_jac(in);
            print_aff(j.add(k).to_affine());
        } else if (op == "jmadd") {
            j = rd_jac(in), q = rd_aff(in);
            print_aff(j.add_affine(q).to_affine());
        } else if (op == "jdbl") {
            j = rd_jac(in);
            print_aff(j.dbl().to_affine());
        }
        else if (op == "batch") {  // to_affine_with(1 / (ZZ ZZZ)) as the batched path computes it
            g1_xyzz a = rd_xyzz(in);
            print_aff(a.to_affine_with((a.ZZ * a.ZZZ).inverse()));
        }
        else if (op == "msm") {
            run_msm(in);
        }
        else if (op == "digits") {  // scalar as 8 hex words (most significant first), window c
            std::string hex; uint32_t c; in >> hex >> c;
            uint32_t s[8] = {0};
            for (int w = 0; w < 8; w++)
                s[7 - w] = (uint32_t)std::stoul(hex.substr(8 * w, 8), nullptr, 16);
            msm_digits dg(c);
            uint32_t W = (256 + c - 1) / c;
            for (uint32_t w = 0; w < W; w++) {
                bool neg; uint32_t m = dg.next(s, w, &neg);
                printf("%s%d", w ? " " : "", neg ? -(int)m : (int)m);
            }
            printf(" %d %d\n", (int)msm_scalar_is(s, 0), (int)msm_scalar_is(s, 1));
        }
        else if (op == "carry") {  // as "digits"; per window w: the carry into it (closed
            // form) and the digit of w from a digit iterator started there
            std::string hex; uint32_t c; in >> hex >> c;
            uint32_t s[8] = {0};
            for (int w = 0; w < 8; w++)
                s[7 - w] = (uint32_t)std::stoul(hex.substr(8 * w, 8), nullptr, 16);
            uint32_t W = (256 + c - 1) / c;
            for (uint32_t w = 0; w < W; w++) {
                uint32_t limit[8];
                msm_carry_limit(w, c, limit);
                msm_digits dg(c, s, limit, w);
                const uint32_t carry = dg.carry;
                bool neg; uint32_t m = dg.next(s, w, &neg);
                printf("%s%u:%d", w ? " " : "", carry, neg ? -(int)m : (int)m);
            }
            printf("\n");
        }
        else if (op == "owner") {  // n, then pre[0..n], then every block q < pre[n]
            uint32_t n; in >> n;
            std::vector<uint32_t> pre(n + 1);
            for (auto& v : pre) in >> v;
            for (uint32_t q = 0; q < pre[n]; q++)
                printf("%s%u", q ? " " : "", msm_chunk_owner(pre.data(), n, q));
            printf("\n");
        }
        else { printf("?\n"); }
        fflush(stdout);
    }
    return 0;
}
"""
)


# The builds every test here runs against: the default one, and the accumulation loop's
# compile-time variants (msm.cuh: the first partial sum written out early, the next entry's
# index read where it is used, canonical instead of lazy Fp sums), so an A/B build is exact
# before it is timed.
BUILDS = {
    "default": (),
    "slot0-early": ("-DMSM_SLOT0_EARLY=1",),
    "no-carry": ("-DMSM_CARRY_NEXT=0",),
    "eager": ("-DMSM_LAZY=0",),
}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled host driver, one per build in :data:`BUILDS` (skips where there is no
    g++)."""
    flags = ("-O1", *BUILDS[request.param])
    return build_driver(tmp_path_factory.mktemp("g1host"), "g1_host", DRIVER, flags)


def run(exe: Path, lines: list[str]) -> list[str]:
    out = subprocess.run(
        [str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def h(x: int) -> str:
    return f"{x % P:x}"


def aff(pt: g1.Affine) -> str:
    return "0 0" if pt is None else f"{h(pt[0])} {h(pt[1])}"


def parse(line: str) -> g1.Affine:
    if line == "inf":
        return None
    x, y = line.split()
    return (int(x, 16), int(y, 16))


def rand_point(rng: random.Random) -> tuple[int, int]:
    return g1.scalar_mul(g1.GENERATOR, rng.randrange(1, R))  # type: ignore[return-value]


def as_xyzz(pt: g1.Affine, rng: random.Random) -> tuple[int, int, int, int]:
    """A random XYZZ representation of pt (ZZ = z^2, ZZZ = z^3 for a random z)."""
    if pt is None:
        return (0, 0, 0, 0)
    z = rng.randrange(1, P)
    return (pt[0] * z * z % P, pt[1] * pow(z, 3, P) % P, z * z % P, pow(z, 3, P))


def as_jac(pt: g1.Affine, rng: random.Random) -> tuple[int, int, int]:
    if pt is None:
        return (1, 1, 0)
    z = rng.randrange(1, P)
    return (pt[0] * z * z % P, pt[1] * pow(z, 3, P) % P, z)


def xs(p: tuple[int, ...]) -> str:
    return " ".join(h(c) for c in p)


def test_group_law_random_and_exceptional(driver: Path) -> None:
    rng = random.Random()
    cases: list[tuple[str, g1.Affine]] = []
    pts = [rand_point(rng) for _ in range(6)]
    pairs = [(pts[0], pts[1]), (pts[2], pts[2]), (pts[3], g1.affine_neg(pts[3]))]
    pairs += [(None, pts[4]), (pts[5], None), (None, None)]
    for a, b in pairs:
        want_sum = g1.affine_add(a, b)
        cases.append((f"xadd {xs(as_xyzz(a, rng))} {xs(as_xyzz(b, rng))}", want_sum))
        cases.append((f"xmadd {xs(as_xyzz(a, rng))} {aff(b)}", want_sum))
        for mask in (0, 15, rng.randrange(1, 15)):
            cases.append((f"zmadd {xs(as_xyzz(a, rng))} {mask} {aff(b)}", want_sum))
        cases.append((f"jadd {xs(as_jac(a, rng))} {xs(as_jac(b, rng))}", want_sum))
        cases.append((f"jmadd {xs(as_jac(a, rng))} {aff(b)}", want_sum))
    for a in pts[:3] + [None]:
        cases.append((f"xdbl {xs(as_xyzz(a, rng))}", g1.affine_double(a)))
        cases.append((f"xdbla {aff(a)}", g1.affine_double(a)))
        cases.append((f"jdbl {xs(as_jac(a, rng))}", g1.affine_double(a)))
        cases.append((f"xneg {xs(as_xyzz(a, rng))}", g1.affine_neg(a)))
        cases.append((f"batch {xs(as_xyzz(a, rng))}", a))
    got = run(driver, [c for c, _ in cases])
    for (cmd, want), line in zip(cases, got, strict=True):
        assert parse(line) == want, f"{cmd.split()[0]} mismatch"


def test_signed_digits_match_reference(driver: Path) -> None:
    rng = random.Random()
    ks = [0, 1, 2, R - 1, (1 << 255) - 1 if (1 << 255) - 1 < R else R - 2]
    ks += [rng.randrange(R) for _ in range(20)]
    cs = [rng.choice([4, 5, 8, 11, 13, 16, 17, 20, 22, 23]) for _ in ks]
    got = run(driver, [f"digits {k:064x} {c}" for k, c in zip(ks, cs, strict=True)])
    for k, c, line in zip(ks, cs, got, strict=True):
        vals = [int(v) for v in line.split()]
        assert vals[:-2] == signed_digits(k, c), f"digits of k (c = {c})"
        assert vals[-2:] == [int(k == 0), int(k == 1)]


def test_carry_into_a_window_matches_the_digits(driver: Path) -> None:
    """msm_carry_into (a launch's first window without the digits below it) against the carries
    of the reference's signed digits, at every window of every c the MSM takes; with scalars
    whose low c w bits sit at the limit M_w (every lower digit 2^(c-1)), one above and one
    below it, next to random ones, r - 1 and small values. The digit of window w from an
    iterator started there equals the reference's."""
    from provetop.kernels.cuda import msm_plan as mp

    rng = random.Random()
    lines, want = [], []
    for c in range(max(2, mp.MIN_WINDOW), mp.MAX_WINDOW + 1):
        W = -(-256 // c)
        ks = [0, 1, 2, R - 1, rng.randrange(R), rng.randrange(R)]
        for _ in range(3):
            w = rng.randrange(1, W)
            limit = sum(1 << (i * c + c - 1) for i in range(w))
            high = rng.randrange(R >> (c * w)) << (c * w) if c * w < 255 else 0
            ks += [(high + limit + d) % R for d in (-1, 0, 1)]
        for k in ks:
            d = signed_digits(k, c)
            carries = []
            for w in range(W):
                low = k % (1 << (c * w))
                below = sum(d[i] << (c * i) for i in range(w))
                carries.append((low - below) >> (c * w))
            lines.append(f"carry {k:064x} {c}")
            want.append([f"{carries[w]}:{d[w]}" for w in range(W)])
    got = run(driver, lines)
    for line, g, w in zip(lines, got, want, strict=True):
        assert g.split() == w, line


def rand_points(rng: random.Random, k: int) -> list[tuple[int, int]]:
    """k distinct random points as small multiples of a random base (cheap in Python)."""
    base = rand_point(rng)
    out = [base]
    for _ in range(k - 1):
        out.append(g1.affine_add(out[-1], base))  # type: ignore[arg-type]
    rng.shuffle(out)
    return out


@pytest.mark.parametrize(
    "case",
    ["dense", "ones-heavy", "zeros", "ones", "repeats", "one-bucket", "infinity", "cancel"],
)
@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("reduce", ["span", "scaled", "switch"])
def test_msm_pipeline_on_host(driver: Path, case: str, parts: int, reduce: str) -> None:
    """The whole GPU pipeline (digits, counting sort, balanced multi-level accumulation, bucket
    reduction, tree sums) run on the host with small windows and chunks, so that buckets cross
    many chunk boundaries and several reduction levels run; against the reference MSM. With
    ``parts`` > 1 the points go through in chunks summed straight into the same kept
    buckets, as a streamed MSM's are; ``reduce``: where the tree's doublings go (by each
    node's span throughout, pre-scaled throughout, or the switch from one to the other at a
    random level of the tree, as :func:`provetop.kernels.cuda.msm_plan.reduce_tree` makes it)."""
    from provetop.kernels.cpu.msm import pippenger

    rng = random.Random()
    kept = 1  # (the driver's 0, a second array merged in, is no path of the MSM's)
    n = 97
    pts: list[g1.Affine] = list(rand_points(rng, 24))
    pts = [pts[rng.randrange(len(pts))] for _ in range(n)]  # repeated points throughout
    ks = [rng.randrange(R) for _ in range(n)]
    if case == "ones-heavy":
        ks = [rng.choice([0, 1]) if rng.random() < 0.96 else rng.randrange(R) for _ in range(n)]
    elif case == "zeros":
        ks = [0] * n
    elif case == "ones":
        ks = [1] * n
    elif case == "repeats":
        ks = [ks[0]] * n  # identical scalars: every digit hits the same bucket
    elif case == "one-bucket":
        ks = [rng.choice([3, R - 3, 2]) for _ in range(n)]
    elif case == "infinity":
        for i in rng.sample(range(n), 10):
            pts[i] = None
    elif case == "cancel":  # the second half undoes the first: kept sums go back to infinity
        half = n // 2
        pts = pts[:half] + [g1.affine_neg(q) for q in pts[:half]] + pts[2 * half :]
        ks = ks[:half] + ks[:half] + [0] * (n - 2 * half)
    c = rng.choice([3, 4, 5])
    # L >= 4: a level of T threads leaves 2T slots, so the levels shrink only when L > 2T/(T-1)
    # S and F are powers of two (the weighted tree doubles by them)
    L0, L, S, F = (
        rng.choice([2, 3, 4]),
        rng.choice([4, 5]),
        rng.choice([1, 2, 4]),
        rng.choice([2, 4]),
    )
    mode = {"span": 0, "scaled": 1}.get(reduce, 0)
    if reduce == "switch":  # 16 leaves per window, fan-in 2: four levels, three below the root
        c, S, F = 5, 1, 2
        mode = 2 + rng.randrange(3)
    lines = [f"msm {n} {c} {L0} {L} {S} {F} {parts} {mode} {kept}"]
    tail = " ".join(aff(p) for p in pts) + " " + " ".join(f"{k:064x}" for k in ks)
    got = run(driver, [lines[0] + " " + tail])[0].split(" ", 1)
    want = pippenger(pts, ks)
    assert parse(got[1]) == want, (
        f"host MSM pipeline mismatch ({case}, c={c}, L0={L0}, L={L}, S={S}, F={F}, "
        f"parts={parts}, reduce={reduce})"
    )
    if case == "cancel":
        assert want is None
    if case not in ("zeros",):
        assert int(got[0]) >= 1


def test_chunk_owner(driver: Path) -> None:
    """msm_chunk_owner (the radix kernels' block -> range map) against a plain scan: random
    chunk counts with empty ranges among them, at the ends too, and a single range."""
    rng = random.Random()
    cases = [[3], [0, 2, 0], [1, 0, 0, 4, 0]]
    cases += [[rng.choice([0, 0, 1, 2, 5]) for _ in range(rng.randint(1, 40))] for _ in range(20)]
    cases = [c for c in cases if sum(c)]
    lines = []
    for counts in cases:
        pre = [0]
        for x in counts:
            pre.append(pre[-1] + x)
        lines.append(f"owner {len(counts)} " + " ".join(map(str, pre)))
    got = run(driver, lines)
    for counts, line in zip(cases, got, strict=True):
        want = [j for j, x in enumerate(counts) for _ in range(x)]
        assert list(map(int, line.split())) == want, counts

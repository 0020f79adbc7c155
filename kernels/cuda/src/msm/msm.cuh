// Pippenger helpers shared by the MSM and SRS kernels: signed window digits of a 255-bit
// scalar and warp-aggregated bucket counters.
//
// Signed digits: a scalar k < r < 2^255 is written k = sum_w d_w 2^(c w) with
// d_w in [-(2^(c-1) - 1), 2^(c-1)], so a window needs only B = 2^(c-1) buckets (|d| - 1 is the
// bucket; a negative digit adds the negated point, which costs one Fp subtraction). W =
// ceil(256 / c) windows always suffice: the carry out of window W-2 lands in a top window whose
// value is at most 2^(255 - c (W-1)) <= 2^(c-1).
#pragma once
#include "curve/g1.cuh"

// Bits [off, off + c) of the 8-word little-endian scalar s (c <= 24; bits past 255 read as 0).
// The word selection is unrolled into selects so that s stays in registers.
MONT_HD uint32_t msm_scalar_bits(const uint32_t s[8], uint32_t off, uint32_t c) {
    const uint32_t wi = off >> 5, sh = off & 31;
    uint32_t lo = 0, hi = 0;
    MONT_UNROLL for (uint32_t j = 0; j < 8; j++) {
        lo = (j == wi) ? s[j] : lo;
        hi = (j == wi + 1) ? s[j] : hi;
    }
    const uint64_t both = ((uint64_t)hi << 32) | lo;
    return (uint32_t)(both >> sh) & ((1u << c) - 1u);
}

// Signed digit iterator: call next() W times, in window order 0..W-1.
struct msm_digits {
    uint32_t carry;
    uint32_t c;
    MONT_HD explicit msm_digits(uint32_t c_) : carry(0), c(c_) {}
    // Starting at window w instead of 0: the carry into it from msm_carry_into, whose limit
    // (msm_carry_limit (w, c)) is the same for every scalar of a launch.
    MONT_HD msm_digits(uint32_t c_, const uint32_t s[8], const uint32_t limit[8], uint32_t w);
    // Digit of window w as (magnitude, negative); magnitude 0 means "no bucket".
    MONT_HD uint32_t next(const uint32_t s[8], uint32_t w, bool* neg) {
        uint32_t d = msm_scalar_bits(s, w * c, c) + carry;
        const uint32_t half = 1u << (c - 1);
        if (d > half) {
            carry = 1;
            *neg = true;
            return (1u << c) - d;  // 0 when d == 2^c (a pure carry)
        }
        carry = 0;
        *neg = false;
        return d;
    }
};

// The carry into window w of the signed digits, without computing the digits below it. They
// sum to D = sum_{i<w} d_i 2^(c i), each d_i in [-(2^(c-1) - 1), 2^(c-1)], and
// s mod 2^(c w) = D + carry 2^(c w). With u = (2^(c w) - 1) / (2^c - 1) and M = 2^(c-1) u:
// D <= M (every digit 2^(c-1)) and D >= u - M (every digit -(2^(c-1) - 1)). Without a carry,
// s mod 2^(c w) = D <= M; with one, it is D + 2^(c w) >= u - M + (2^c - 1) u + 1 = M + 1. So
// the carry is [s mod 2^(c w) > M], and M's set bits are c - 1, 2c - 1, ..., c w - 1:
// msm_carry_limit writes them as 8 little-endian words. Why: a launch for windows
// [w_lo, w_hi) otherwise walks every window below w_lo for its carry, and the counting sort's
// scatter runs one launch per window at 2^27 (12 launches, 78 window digits per scalar
// instead of 12). tests/kernels/test_cuda_g1_host.py checks it against the digits.
// Both are written with constant word indices only (unrolled, selects), like msm_scalar_bits:
// a word index from a loop variable puts s and limit in local memory, and the sort kernels'
// scatter then ran 60 ms slower at 2^27 (2026-12-03, 2e6ef05).
MONT_HD void msm_carry_limit(uint32_t w, uint32_t c, uint32_t limit[8]) {
    MONT_UNROLL for (int j = 0; j < 8; j++) limit[j] = 0;
    for (uint32_t i = 0; i < w; i++) {
        const uint32_t bit = i * c + c - 1;  // < 256 for every window a launch starts at
        MONT_UNROLL for (uint32_t j = 0; j < 8; j++)
            limit[j] |= (bit >> 5) == j ? 1u << (bit & 31) : 0u;
    }
}

// 1 when the low c w bits of s exceed limit (msm_carry_limit (w, c)), else 0; 0 at w = 0.
MONT_HD uint32_t msm_carry_into(const uint32_t s[8], const uint32_t limit[8], uint32_t w,
                                uint32_t c) {
    const uint32_t bits = w * c;
    uint32_t gt = 0, decided = 0;
    MONT_UNROLL for (int j = 7; j >= 0; j--) {
        const uint32_t lo = 32u * (uint32_t)j;
        const uint32_t mask = bits >= lo + 32u ? 0xffffffffu
                              : bits > lo     ? (1u << (bits - lo)) - 1u
                                              : 0u;
        const uint32_t v = s[j] & mask;
        const uint32_t differ = !decided && v != limit[j];
        gt = differ ? (uint32_t)(v > limit[j]) : gt;
        decided |= differ;
    }
    return gt;
}

MONT_HD msm_digits::msm_digits(uint32_t c_, const uint32_t s[8], const uint32_t limit[8],
                               uint32_t w)
    : carry(msm_carry_into(s, limit, w, c_)), c(c_) {}

MONT_HD bool msm_scalar_is(const uint32_t s[8], uint32_t v) {
    uint32_t acc = s[0] ^ v;
    MONT_UNROLL for (int j = 1; j < 8; j++) acc |= s[j];
    return acc == 0;
}

#define MSM_NONE 0xffffffffu

// Bucket key of window w for scalar s, or MSM_NONE; *neg receives the sign. Keys are
// w * B + (|d| - 1); the scalars equal to 1 use the single extra key W * B (at window 0 only).
MONT_HD uint32_t msm_key(const uint32_t s[8], uint32_t w, uint32_t c, uint32_t B, uint32_t W,
                         bool is_zero, bool is_one, msm_digits& dg, bool* neg) {
    if (is_zero) return MSM_NONE;
    if (is_one) {
        *neg = false;
        return w == 0 ? W * B : MSM_NONE;
    }
    const uint32_t m = dg.next(s, w, neg);
    return m ? w * B + (m - 1) : MSM_NONE;
}

// The radix kernels whose blocks each take one chunk of a range (a bin, a superbin): pre[j]
// is range j's first block (n + 1 values, non-decreasing, pre[n] blocks in all). The range of
// block q < pre[n]: the largest j with pre[j] <= q (empty ranges share their pre with the next
// one and are skipped).
MONT_HD uint32_t msm_chunk_owner(const uint32_t* __restrict__ pre, uint32_t n, uint32_t q) {
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) >> 1;
        if (pre[mid] <= q) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// ---- per-thread bodies of the MSM kernels (host-callable for the C++ tests) ---------------

// ---- 4: balanced bucket accumulation, level 0 (affine points in) ---------------------------

MONT_HD g1_affine msm_point(const g1_affine* __restrict__ points, uint32_t e) {
    g1_affine p = g1_load(points + (e & 0x7fffffffu));
    if (e >> 31) p.y = p.y.neg();  // negating infinity (0, 0) keeps (0, 0)
    return p;
}

// MSM_PREFETCH: while a thread adds entry i, its next entry's point is asked for ahead (a
// prefetch, which holds no register: the 255-register accumulation has none to spare for a
// loaded point), so the next iteration's 96-byte random gather finds it in cache instead of
// waiting a DRAM round trip. 0: none (the default), 1: into L1, 2: into L2. Measured on the
// H200 (2026-12-02, bench/notes/msm.md, ca449db): +0.8 % at 2^27 either way, off.
#ifndef MSM_PREFETCH
#define MSM_PREFETCH 0
#endif
// MSM_SLOT0_EARLY: a thread's first bucket, begun before its chunk (a partial sum for the
// levels), is written out as soon as it is finished instead of held in registers until the
// chunk ends: 48 registers of the 255-register loop freed. 0: held (the default; with 1 ptxas
// schedules the loop worse: +2 % at 2^27 on the H200, 2026-12-02).
#ifndef MSM_SLOT0_EARLY
#define MSM_SLOT0_EARLY 0
#endif
// MSM_CARRY_NEXT: the next entry's index is read one iteration ahead and carried in a register
// (1, the default: no spills; the accumulation 3.9 % faster at 2^27 on the H200, 2026-12-02), or
// read where it is used (0: 12 bytes of spills in the loop).
#ifndef MSM_CARRY_NEXT
#define MSM_CARRY_NEXT 1
#endif
// MSM_LAZY: the accumulation's running bucket sums in the lazy Fp form ([0, 2p), mont.cuh),
// so its ten products per mixed addition end without their conditional subtraction; sums are
// reduced where they are stored (1, the default: the accumulate stage -0.8 % at 2^24 and 2^27,
// -1.2 % at 2^20 on the H200, 2026-12-03; its 16-byte spill is in the P == Q doubling branch),
// or canonical throughout (0).
#ifndef MSM_LAZY
#define MSM_LAZY 1
#endif
#if MSM_LAZY
typedef g1_xyzz_t<fpz_t> msm_acc_t;
#else
typedef g1_xyzz msm_acc_t;
#endif
MONT_HD void msm_prefetch_point(const g1_affine* __restrict__ points, uint32_t e) {
#if defined(__CUDA_ARCH__) && MSM_PREFETCH
    const char* a = reinterpret_cast<const char*>(points + (e & 0x7fffffffu));
    // a 96-byte point spans at most two 128-byte lines: its first and its last byte
#if MSM_PREFETCH == 1
    asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
    asm volatile("prefetch.global.L1 [%0];" ::"l"(a + sizeof(g1_affine) - 1));
#else
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a + sizeof(g1_affine) - 1));
#endif
#else
    (void)points, (void)e;
#endif
}

// KEPT: `buckets` already holds sums (a streamed MSM's earlier chunks), and this chunk's entries
// are added to them. A bucket finished inside one thread starts from its kept sum (a load
// where it begins) and is stored whole, infinity included; a bucket cut across threads leaves
// partial sums that start from infinity, and the levels add them into the kept sum
// (msm_accumulate_n loads and adds). Why here and not in a merge kernel after the chunk: the
// kept sum costs one mixed addition where the bucket's first point was free, against a full
// XYZZ addition and four bucket arrays' traffic in the merge, and no second array.
template <bool KEPT>
MONT_HD void msm_accumulate0_body(uint32_t t, const g1_affine* __restrict__ points,
                                  const uint32_t* __restrict__ sorted,
                                  const uint32_t* __restrict__ offs, uint32_t K, uint32_t M,
                                  uint32_t L, g1_xyzz* __restrict__ buckets,
                                  g1_xyzz* __restrict__ pvals, uint32_t* __restrict__ pkeys) {
    const uint32_t start = t * L;
    const uint32_t end = start + L < M ? start + L : M;
    // the bucket holding entry `start`: the largest b with offs[b] <= start (offs[K] = M > start)
    uint32_t lo = 0, hi = K - 1;
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) >> 1;
        if (offs[mid] <= start) lo = mid;
        else hi = mid - 1;
    }
    uint32_t b = lo;
    const uint32_t b_first = b;
    uint32_t seg_start = start, next = offs[b + 1];
    msm_acc_t acc = msm_acc_t::inf();
    g1_xyzz slot0 = g1_xyzz::inf(), slot1 = g1_xyzz::inf();  // canonical: reduced when set
    bool stored0 = false;
    // KEPT: the bucket now begun starts from its kept sum (loaded at its first entry, in the
    // loop: a load before the loop spilled 68 bytes)
    bool load_kept = KEPT && offs[b] >= start && next <= end;
    [[maybe_unused]] uint32_t e_next = MSM_CARRY_NEXT && sorted && start < end ? sorted[start] : 0;
    for (uint32_t i = start;; i++) {
        if (i == next || i == end) {
            // finish bucket b over [seg_start, i)
            const bool complete = offs[b] >= start && next <= end;
            if (complete) {
                if (KEPT || !acc.is_inf()) g1_store(buckets + b, acc.reduced());
            } else if (seg_start == start) {
#if MSM_SLOT0_EARLY
                g1_store(pvals + 2 * t, acc.reduced());  // now: its 48 registers are free for the rest
                stored0 = true;
#else
                slot0 = acc.reduced();
#endif
            } else {
                slot1 = acc.reduced();
            }
            if (i == end) break;
            do {
                b++;
                next = offs[b + 1];
            } while (next <= i);
            seg_start = i;
            acc = msm_acc_t::inf();
            load_kept = KEPT && next <= end;  // bucket b begins at entry i and ends here too
        }
        if (KEPT && load_kept) {
            acc = msm_acc_t::lift(g1_load(buckets + b));
            load_kept = false;
        }
        // sorted == nullptr: the points are already in bucket order (an affine pass's output)
#if MSM_CARRY_NEXT
        const uint32_t e = e_next;
        if (sorted && i + 1 < end) {
            e_next = sorted[i + 1];
            if (MSM_PREFETCH) msm_prefetch_point(points, e_next);
        }
#else
        const uint32_t e = sorted ? sorted[i] : 0;
        if (MSM_PREFETCH && sorted && i + 1 < end) msm_prefetch_point(points, sorted[i + 1]);
#endif
        acc = acc.add_affine(sorted ? msm_point(points, e) : g1_load(points + i));
    }
    if (!stored0) g1_store(pvals + 2 * t, slot0);
    g1_store(pvals + 2 * t + 1, slot1);
    pkeys[2 * t] = b_first;
    pkeys[2 * t + 1] = b;
}

MONT_HD void msm_accumulate0_thread(uint32_t t, const g1_affine* __restrict__ points,
                                    const uint32_t* __restrict__ sorted,
                                    const uint32_t* __restrict__ offs, uint32_t K, uint32_t M,
                                    uint32_t L, g1_xyzz* __restrict__ buckets,
                                    g1_xyzz* __restrict__ pvals, uint32_t* __restrict__ pkeys) {
    msm_accumulate0_body<false>(t, points, sorted, offs, K, M, L, buckets, pvals, pkeys);
}

MONT_HD void msm_accumulate0_kept_thread(uint32_t t, const g1_affine* __restrict__ points,
                                         const uint32_t* __restrict__ sorted,
                                         const uint32_t* __restrict__ offs, uint32_t K,
                                         uint32_t M, uint32_t L, g1_xyzz* __restrict__ buckets,
                                         g1_xyzz* __restrict__ pvals,
                                         uint32_t* __restrict__ pkeys) {
    msm_accumulate0_body<true>(t, points, sorted, offs, K, M, L, buckets, pvals, pkeys);
}

// ---- 4a: affine pairing passes with batched inversion (optional, before 4) ------------------
//
// Why: an affine + affine addition costs 1 inversion + 2M + 1S; with the inversions of many
// independent additions batched (Montgomery's trick: 3M per element plus one inversion per
// batch) that is ~6M + inv/NB per addition against 10M (8M + 2S) for XYZZ += affine. But a sum
// of many points is a chain, so the additions are done in passes: pass k adds the entries of
// every bucket in pairs (2r, 2r+1), halving each bucket (an odd last entry is carried over), and
// writes the sums in bucket order; a bucket of c entries becomes ceil(c / 2). Each thread takes
// a contiguous run of output slots, whatever the buckets, so uneven buckets (the ones of a
// witness) cost what uniform ones do. The exceptional pairs are exact: P + P uses the tangent
// slope 3x^2 / 2y in the same batch, P + (-P) and infinity on either side need no inversion.

#define MSM_PAIR_ADD 0u
#define MSM_PAIR_DBL 1u
#define MSM_PAIR_COPY_P 2u
#define MSM_PAIR_COPY_Q 3u
#define MSM_PAIR_INF 4u

// The kind of P + Q and the denominator of its slope (1 where none is needed, never 0).
MONT_HD uint32_t msm_pair_kind(const g1_affine& P, const g1_affine& Q, fp_t* d) {
    if (Q.is_inf()) {
        *d = fp_t::one();
        return MSM_PAIR_COPY_P;
    }
    if (P.is_inf()) {
        *d = fp_t::one();
        return MSM_PAIR_COPY_Q;
    }
    if (P.x != Q.x) {
        *d = Q.x - P.x;
        return MSM_PAIR_ADD;
    }
    if (P.y == Q.y && !P.y.is_zero()) {
        *d = P.y.dbl();
        return MSM_PAIR_DBL;
    }
    *d = fp_t::one();  // P == -Q (or a 2-torsion point doubled): infinity
    return MSM_PAIR_INF;
}

// P + Q given inv = 1 / d of msm_pair_kind: 1M + 1S + 1M (+ 1S for a doubling).
MONT_HD g1_affine msm_pair_finish(uint32_t kind, const g1_affine& P, const g1_affine& Q,
                                  const fp_t& inv) {
    if (kind == MSM_PAIR_COPY_P) return P;
    if (kind == MSM_PAIR_COPY_Q) return Q;
    if (kind == MSM_PAIR_INF) return g1_affine::inf();
    fp_t num;
    if (kind == MSM_PAIR_ADD) {
        num = Q.y - P.y;
    } else {
        const fp_t x2 = P.x.sqr();
        num = x2.dbl() + x2;
    }
    const fp_t lam = num * inv;
    g1_affine r;
    r.x = lam.sqr() - P.x - Q.x;  // Q.x == P.x for a doubling
    r.y = lam * (P.x - r.x) - P.y;
    return r;
}

// prefix products: written and read back by the same thread in one launch, so plain 16-byte
// accesses (g1_load's __ldg goes through the non-coherent read-only path)
MONT_HD void msm_fp_store(fp_t* p, const fp_t& v) {
#if defined(__CUDA_ARCH__)
    uint4* d = reinterpret_cast<uint4*>(p);
#pragma unroll
    for (int i = 0; i < 3; i++) d[i] = make_uint4(v.v[4 * i], v.v[4 * i + 1], v.v[4 * i + 2], v.v[4 * i + 3]);
#else
    *p = v;
#endif
}
MONT_HD fp_t msm_fp_load(const fp_t* p) {
#if defined(__CUDA_ARCH__)
    fp_t r;
    const uint4* s = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < 3; i++) {
        const uint4 q = s[i];
        r.v[4 * i] = q.x, r.v[4 * i + 1] = q.y, r.v[4 * i + 2] = q.z, r.v[4 * i + 3] = q.w;
    }
    return r;
#else
    return *p;
#endif
}

MONT_HD g1_affine msm_pass_point(const g1_affine* __restrict__ pin,
                                 const uint32_t* __restrict__ idx, uint32_t s) {
    return idx ? msm_point(pin, idx[s]) : g1_load(pin + s);
}

// Thread t of T: output slots [t Lc, min(t Lc + Lc, m2)) with m2 = off2[K], in batches of at
// most NB; bucket b's outputs [off2[b], off2[b+1]) come from its inputs [off[b], off[b+1]) (read
// through idx, entries with the sign bit, when idx is not null). prefix and srcs hold NB
// elements per thread, element k of thread t at k T + t (a warp's stores are contiguous).
// Per output: forward 1M (running product), backward 2M (its inverse, the running inverse) +
// msm_pair_finish; both passes load the pair (loading is cheaper than keeping 2 points).
MONT_HD void msm_affine_pass_thread(uint32_t t, uint32_t T, const g1_affine* __restrict__ pin,
                                    const uint32_t* __restrict__ idx,
                                    const uint32_t* __restrict__ off,
                                    const uint32_t* __restrict__ off2, uint32_t K, uint32_t Lc,
                                    uint32_t NB, fp_t* __restrict__ prefix,
                                    uint32_t* __restrict__ srcs, g1_affine* __restrict__ pout) {
    const uint32_t m2 = off2[K];
    if ((uint64_t)t * Lc >= m2) return;
    const uint32_t start = t * Lc;
    const uint32_t end = m2 - start > Lc ? start + Lc : m2;
    // the bucket of slot `start`: the largest b with off2[b] <= start (off2[K] = m2 > start)
    uint32_t lo = 0, hi = K - 1;
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) >> 1;
        if (off2[mid] <= start) lo = mid;
        else hi = mid - 1;
    }
    uint32_t b = lo;
    for (uint32_t bs = start; bs < end; bs += NB) {
        const uint32_t be = end - bs > NB ? bs + NB : end;
        fp_t acc = fp_t::one();
        for (uint32_t j = bs; j < be; j++) {
            while (off2[b + 1] <= j) b++;
            const uint32_t s0 = off[b] + 2 * (j - off2[b]);
            const bool has1 = s0 + 1 < off[b + 1];
            const g1_affine P = msm_pass_point(pin, idx, s0);
            const g1_affine Q = has1 ? msm_pass_point(pin, idx, s0 + 1) : g1_affine::inf();
            fp_t d;
            msm_pair_kind(P, Q, &d);
            acc = acc * d;
            const uint64_t k = (uint64_t)(j - bs) * T + t;
            msm_fp_store(prefix + k, acc);
            srcs[k] = s0 | (has1 ? 0x80000000u : 0u);
        }
        fp_t inv = acc.inverse();
        for (uint32_t j = be; j-- > bs;) {
            const uint64_t k = (uint64_t)(j - bs) * T + t;
            const uint32_t src = srcs[k], s0 = src & 0x7fffffffu;
            const g1_affine P = msm_pass_point(pin, idx, s0);
            const g1_affine Q = (src >> 31) ? msm_pass_point(pin, idx, s0 + 1) : g1_affine::inf();
            fp_t d;
            const uint32_t kind = msm_pair_kind(P, Q, &d);
            const fp_t inv_j = j > bs ? inv * msm_fp_load(prefix + k - T) : inv;  // 1 / d_j
            inv = inv * d;                                           // 1 / (d_bs ... d_{j-1})
            g1_store(pout + j, msm_pair_finish(kind, P, Q, inv_j));
        }
    }
}

// ---- 5: the same reduction over (key, XYZZ) partial sums -----------------------------------

MONT_HD void msm_accumulate_n_thread(uint32_t t, const g1_xyzz* __restrict__ vals,
                                     const uint32_t* __restrict__ keys, uint32_t Min, uint32_t L,
                                     g1_xyzz* __restrict__ buckets, g1_xyzz* __restrict__ pvals,
                                     uint32_t* __restrict__ pkeys) {
    const uint32_t start = t * L;
    const uint32_t end = start + L < Min ? start + L : Min;
    const bool open_left = start > 0 && keys[start - 1] == keys[start];
    const bool open_right = end < Min && keys[end] == keys[end - 1];
    uint32_t b = keys[start];
    const uint32_t b_first = b;
    uint32_t seg_start = start;
    // The first partial sum goes out as soon as it is finished, the last one at the end: held
    // in registers through the loop, the first spilled the loop (80 bytes at 255 registers).
    g1_xyzz acc = g1_xyzz::inf();
    bool stored0 = false;
    for (uint32_t i = start;; i++) {
        const uint32_t k = i < end ? keys[i] : MSM_NONE;
        if (i == end || k != b) {
            const bool complete = !(seg_start == start && open_left) && !(i == end && open_right);
            if (complete) {
                if (!acc.is_inf()) g1_store(buckets + b, g1_load(buckets + b).add(acc));
            } else if (seg_start == start) {
                g1_store(pvals + 2 * t, acc);
                stored0 = true;
            } else {
                g1_store(pvals + 2 * t + 1, acc);  // the last segment: i == end
            }
            if (i == end) {
                if (complete || seg_start == start) g1_store(pvals + 2 * t + 1, g1_xyzz::inf());
                break;
            }
            b = k;
            seg_start = i;
            acc = g1_xyzz::inf();
        }
        acc = acc.add(g1_load(vals + i));
    }
    if (!stored0) g1_store(pvals + 2 * t, g1_xyzz::inf());
    pkeys[2 * t] = b_first;
    pkeys[2 * t + 1] = b;
}

// ---- 5, when every bucket is short: one thread per cut bucket instead of the levels -------
//
// After stage 4 the partial sums of a bucket cut by chunk boundaries lie in consecutive slots
// (the slots' keys never decrease). A bucket of E entries touches at most ceil(E / L) + 1
// chunks, each leaving at most two slots with its key, so when no bucket holds more than H L
// entries a run is at most 2 (H + 1) slots (infinity in many; H = HEADS_MAX_CHUNKS, 4 in
// kernels/cuda/msm.py: at most 10 slots). Then the run's first slot's thread adds
// the run into the bucket and the bucket is final: one launch over 2 T slots instead of the
// levels' cascade (msm_accumulate_n), whose last launches are a few threads each, each waiting
// on L serial additions. The host takes this path from the largest bucket, known at the
// sizing sync (kernels/cuda/msm.py, accumulate).
MONT_HD void msm_accumulate_heads_thread(uint32_t s, const g1_xyzz* __restrict__ vals,
                                         const uint32_t* __restrict__ keys, uint32_t Min,
                                         g1_xyzz* __restrict__ buckets) {
    const uint32_t k = keys[s];
    if (k == MSM_NONE || (s > 0 && keys[s - 1] == k)) return;  // not the run's first slot
    g1_xyzz acc = g1_xyzz::inf();
    for (uint32_t j = s; j < Min && keys[j] == k; j++) acc = acc.add(g1_load(vals + j));
    if (!acc.is_inf()) g1_store(buckets + k, g1_load(buckets + k).add(acc));
}

// ---- 6, 7: bucket reduction ----------------------------------------------------------------

// Thread (w, g) of W * G, buckets b in [lo, lo + S) of window w with lo = g S:
// R_g = sum_b bucket[b] and A_g = sum_b (b - lo + 1) bucket[b] (running sums from the top), so
// that the window sum is sum_g (A_g + g S R_g). No thread multiplies by g S: the tree below
// (xyzz_sum_weighted) folds the g S R_g terms in with additions and a few doublings. R_g leaves
// doubled log_out times: 0 for the tree that scales at each node (log_span), log2 S for the
// one that carries R pre-scaled by its span (see xyzz_sum_weighted_thread).
MONT_HD void msm_bucket_reduce_thread(uint32_t t, const g1_xyzz* __restrict__ buckets, uint32_t B,
                                      uint32_t S, uint32_t G, uint32_t log_out,
                                      g1_xyzz* __restrict__ outA, g1_xyzz* __restrict__ outR) {
    const uint32_t w = t / G, g = t % G;
    const uint32_t lo = g * S, hi = lo + S < B ? lo + S : B;
    const g1_xyzz* bw = buckets + (uint64_t)w * B;
    g1_xyzz running = g1_xyzz::inf(), acc = g1_xyzz::inf();
    for (uint32_t b = hi; b-- > lo;) {
        running = running.add(g1_load(bw + b));
        acc = acc.add(running);
    }
    g1_store(outA + t, acc);  // first: acc is not live through the doublings
    for (uint32_t k = 0; k < log_out; k++) running = running.dbl();
    g1_store(outR + t, running);
}

// One node of the weighted tree: children i in [lo, hi) of segment s, each child standing for
// 2^span_log consecutive buckets (span_log: log2 S at the first level, + log2 F per level) and
// carrying (A_i, R_i) as above, relative to its own first bucket. The node's pair, relative to
// its first bucket, is
//   A = sum_i A_i + 2^span_log sum_i (i - lo) R_i,   R = sum_i R_i,
// with sum_i (i - lo) R_i by the running-sum trick. Two ways to bring in 2^span_log, chosen by
// the caller (kernels/cuda/msm.py, tuning msm_reduce):
// - "span": R_i arrive unscaled; the node doubles sum_i (i - lo) R_i log_span = span_log times,
//   so the serial doublings grow by log2 F per level (2, 5, 8, 11, 14 at 2^20, F = 8);
// - "scaled": R_i arrive already multiplied by 2^span_log (log_span = 0), and the node doubles
//   its own R log_out = log2 F times for its parent (0 at the root, whose R nobody reads), so
//   every level doubles log2 F times. Same additions; fewer doublings on the critical path,
//   which is what the last levels (a few threads per window) wait on.
MONT_HD void xyzz_sum_weighted_thread(uint32_t t, const g1_xyzz* __restrict__ inA,
                                      const g1_xyzz* __restrict__ inR, uint32_t len_in,
                                      uint32_t F, uint32_t len_out, uint32_t log_span,
                                      uint32_t log_out, g1_xyzz* __restrict__ outA,
                                      g1_xyzz* __restrict__ outR) {
    const uint32_t s = t / len_out, j = t % len_out;
    const uint32_t lo = j * F, hi = lo + F < len_in ? lo + F : len_in;
    const uint64_t base = (uint64_t)s * len_in;
    // Two passes over the children (the R's, then the A's): with all three sums and both loads
    // live in one loop, the node spilled 1.3 KB at 255 registers, inside its serial chain.
    g1_xyzz run = g1_xyzz::inf(), T = g1_xyzz::inf();
    for (uint32_t i = hi; i-- > lo + 1;) {
        run = run.add(g1_load(inR + base + i));
        T = T.add(run);
    }
    run = run.add(g1_load(inR + base + lo));
    for (uint32_t k = 0; k < log_out; k++) run = run.dbl();
    g1_store(outR + t, run);
    for (uint32_t k = 0; k < log_span; k++) T = T.dbl();
    for (uint32_t i = lo; i < hi; i++) T = T.add(g1_load(inA + base + i));
    g1_store(outA + t, T);
}

// A streamed MSM's merge, thread b of K: kept[b] += part[b], and part[b] back to infinity for
// the next chunk. Why a kernel of its own and not an addition where the accumulation finishes a
// bucket: there the threads of a warp finish their buckets at different entries, so each
// finish would stall the other 31 lanes for a whole XYZZ addition (measured on the H200,
// 2026-12-02: the 2^27 streamed MSM took 3.2 s instead of 1.3); here every lane adds at once.
MONT_HD void xyzz_merge_thread(uint32_t b, g1_xyzz* __restrict__ kept,
                               g1_xyzz* __restrict__ part) {
    const g1_xyzz q = g1_load(part + b);
    if (q.is_inf()) return;
    g1_store(kept + b, g1_load(kept + b).add(q));
    g1_store(part + b, g1_xyzz::inf());
}

MONT_HD void xyzz_sum_groups_thread(uint32_t t, const g1_xyzz* __restrict__ in, uint32_t len_in,
                                    uint32_t F, uint32_t len_out, g1_xyzz* __restrict__ out) {
    const uint32_t s = t / len_out, j = t % len_out;
    const uint32_t lo = j * F, hi = lo + F < len_in ? lo + F : len_in;
    g1_xyzz acc = g1_xyzz::inf();
    for (uint32_t i = lo; i < hi; i++) acc = acc.add(g1_load(in + (uint64_t)s * len_in + i));
    g1_store(out + t, acc);
}

#if defined(__CUDACC__)
__device__ __forceinline__ void msm_load_scalar(const uint32_t* scalars, uint64_t i, uint32_t s[8]) {
    const uint4* p = reinterpret_cast<const uint4*>(scalars + 8 * i);
    const uint4 a = __ldg(p), b = __ldg(p + 1);
    s[0] = a.x, s[1] = a.y, s[2] = a.z, s[3] = a.w;
    s[4] = b.x, s[5] = b.y, s[6] = b.z, s[7] = b.w;
}

// MSM_COUNT_MATCH / MSM_SCATTER_MATCH: how the count and the scatter kernel share atomics
// between the lanes of a warp. 1: every key through __match_any_sync, so lanes holding the
// same key share one atomic whatever it is. 0: only the ones bucket's key is shared (a
// __ballot_sync; the key half a witness's scalars hit), every other key takes its own atomic.
// Correct either way (atomics on one address serialize). Measured on the H200 (2026-12-02,
// bench/notes/msm.md, 8d673c1 and b70b2a0): the count without the match took 28.6 -> 20.6 ms
// at 2^27 and 3.9 -> 2.5 at 2^24 on dense scalars (a warp's 32 lanes hold 32 different keys
// almost always, and the match that finds no peers only costs); the scatter did not move on
// dense scalars and lost 1.1 -> 2.4 ms at 2^24 on ones-heavy ones (their repeated keys then
// contend). Hence count 0, scatter 1.
#ifndef MSM_COUNT_MATCH
#define MSM_COUNT_MATCH 0
#endif
#ifndef MSM_SCATTER_MATCH
#define MSM_SCATTER_MATCH 1
#endif

// Warp-aggregated "counter[key] += 1, return my slot": lanes holding the same key share one
// atomic, so a bucket that half the scalars fall into (real witnesses) costs n/32 atomics, not
// n. All 32 lanes must call it; key == 0xffffffff means "nothing to count"; ``ones`` is the
// ones bucket's key (shared in either MSM_COUNT_MATCH setting).
__device__ __forceinline__ uint32_t msm_warp_slot(uint32_t* counter, uint32_t key, uint32_t ones) {
    const uint32_t lane = threadIdx.x & 31;
#if MSM_COUNT_MATCH
    (void)ones;
    const uint32_t peers = __match_any_sync(0xffffffffu, key);
#else
    const uint32_t ballot = __ballot_sync(0xffffffffu, key == ones);
    if (key != ones) return key == 0xffffffffu ? 0u : atomicAdd(counter + key, 1u);
    const uint32_t peers = ballot;
#endif
    const uint32_t leader = __ffs(peers) - 1;
    const uint32_t rank = __popc(peers & ((1u << lane) - 1u));
    uint32_t base = 0;
    if (key != 0xffffffffu && lane == leader) base = atomicAdd(counter + key, __popc(peers));
    base = __shfl_sync(peers, base, leader);
    return base + rank;
}
#else
// The host build's scalar load (radix.cuh compiled as C++ for the CPU tests).
inline void msm_load_scalar(const uint32_t* scalars, uint64_t i, uint32_t s[8]) {
    for (int j = 0; j < 8; j++) s[j] = scalars[8 * i + j];
}
#endif

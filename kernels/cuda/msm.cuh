// Pippenger helpers shared by the MSM and SRS kernels: signed window digits of a 255-bit
// scalar and warp-aggregated bucket counters.
//
// Signed digits: a scalar k < r < 2^255 is written k = sum_w d_w 2^(c w) with
// d_w in [-(2^(c-1) - 1), 2^(c-1)], so a window needs only B = 2^(c-1) buckets (|d| - 1 is the
// bucket; a negative digit adds the negated point, which costs one Fp subtraction). W =
// ceil(256 / c) windows always suffice: the carry out of window W-2 lands in a top window whose
// value is at most 2^(255 - c (W-1)) <= 2^(c-1).
#pragma once
#include "g1.cuh"

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

// ---- per-thread bodies of the MSM kernels (host-callable for the C++ tests) ---------------

// ---- 4: balanced bucket accumulation, level 0 (affine points in) ---------------------------

MONT_HD g1_affine msm_point(const g1_affine* __restrict__ points, uint32_t e) {
    g1_affine p = g1_load(points + (e & 0x7fffffffu));
    if (e >> 31) p.y = p.y.neg();  // negating infinity (0, 0) keeps (0, 0)
    return p;
}

MONT_HD void msm_accumulate0_thread(uint32_t t, const g1_affine* __restrict__ points,
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
    g1_xyzz acc = g1_xyzz::inf(), slot0 = g1_xyzz::inf(), slot1 = g1_xyzz::inf();
    for (uint32_t i = start;; i++) {
        if (i == next || i == end) {
            // finish bucket b over [seg_start, i)
            const bool complete = offs[b] >= start && next <= end;
            if (complete) {
                if (!acc.is_inf()) g1_store(buckets + b, acc);
            } else if (seg_start == start) {
                slot0 = acc;
            } else {
                slot1 = acc;
            }
            if (i == end) break;
            do {
                b++;
                next = offs[b + 1];
            } while (next <= i);
            seg_start = i;
            acc = g1_xyzz::inf();
        }
        acc = acc.add_affine(msm_point(points, sorted[i]));
    }
    g1_store(pvals + 2 * t, slot0);
    g1_store(pvals + 2 * t + 1, slot1);
    pkeys[2 * t] = b_first;
    pkeys[2 * t + 1] = b;
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
    g1_xyzz acc = g1_xyzz::inf(), slot0 = g1_xyzz::inf(), slot1 = g1_xyzz::inf();
    for (uint32_t i = start;; i++) {
        const uint32_t k = i < end ? keys[i] : MSM_NONE;
        if (i == end || k != b) {
            const bool complete = !(seg_start == start && open_left) && !(i == end && open_right);
            if (complete) {
                if (!acc.is_inf()) g1_store(buckets + b, g1_load(buckets + b).add(acc));
            } else if (seg_start == start) {
                slot0 = acc;
            } else {
                slot1 = acc;
            }
            if (i == end) break;
            b = k;
            seg_start = i;
            acc = g1_xyzz::inf();
        }
        acc = acc.add(g1_load(vals + i));
    }
    g1_store(pvals + 2 * t, slot0);
    g1_store(pvals + 2 * t + 1, slot1);
    pkeys[2 * t] = b_first;
    pkeys[2 * t + 1] = b;
}

// ---- 6, 7: bucket reduction ----------------------------------------------------------------

// Thread (w, g) of W * G, buckets b in [lo, lo + S) of window w with lo = g S:
// R_g = sum_b bucket[b] and A_g = sum_b (b - lo + 1) bucket[b] (running sums from the top), so
// that the window sum is sum_g (A_g + g S R_g). No thread multiplies by g S: the tree below
// (xyzz_sum_weighted) folds the g S R_g terms in with additions and a few doublings.
MONT_HD void msm_bucket_reduce_thread(uint32_t t, const g1_xyzz* __restrict__ buckets, uint32_t B,
                                      uint32_t S, uint32_t G, g1_xyzz* __restrict__ outA,
                                      g1_xyzz* __restrict__ outR) {
    const uint32_t w = t / G, g = t % G;
    const uint32_t lo = g * S, hi = lo + S < B ? lo + S : B;
    const g1_xyzz* bw = buckets + (uint64_t)w * B;
    g1_xyzz running = g1_xyzz::inf(), acc = g1_xyzz::inf();
    for (uint32_t b = hi; b-- > lo;) {
        running = running.add(g1_load(bw + b));
        acc = acc.add(running);
    }
    g1_store(outA + t, acc);
    g1_store(outR + t, running);
}

// One node of the weighted tree: children i in [lo, hi) of segment s, each child standing for
// 2^log_span consecutive buckets and carrying (A_i, R_i) as above, relative to its own first
// bucket. The node's pair, relative to its first bucket, is
//   A = sum_i A_i + 2^log_span sum_i (i - lo) R_i,   R = sum_i R_i,
// with sum_i (i - lo) R_i by the running-sum trick and 2^log_span by doublings.
MONT_HD void xyzz_sum_weighted_thread(uint32_t t, const g1_xyzz* __restrict__ inA,
                                      const g1_xyzz* __restrict__ inR, uint32_t len_in,
                                      uint32_t F, uint32_t len_out, uint32_t log_span,
                                      g1_xyzz* __restrict__ outA, g1_xyzz* __restrict__ outR) {
    const uint32_t s = t / len_out, j = t % len_out;
    const uint32_t lo = j * F, hi = lo + F < len_in ? lo + F : len_in;
    const uint64_t base = (uint64_t)s * len_in;
    g1_xyzz A = g1_xyzz::inf(), run = g1_xyzz::inf(), T = g1_xyzz::inf();
    for (uint32_t i = hi; i-- > lo + 1;) {
        run = run.add(g1_load(inR + base + i));
        T = T.add(run);
        A = A.add(g1_load(inA + base + i));
    }
    A = A.add(g1_load(inA + base + lo));
    run = run.add(g1_load(inR + base + lo));
    for (uint32_t k = 0; k < log_span; k++) T = T.dbl();
    g1_store(outA + t, A.add(T));
    g1_store(outR + t, run);
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

// Warp-aggregated "counter[key] += 1, return my slot": lanes holding the same key share one
// atomic, so a bucket that half the scalars fall into (real witnesses) costs n/32 atomics, not
// n. All 32 lanes must call it; key == 0xffffffff means "nothing to count".
__device__ __forceinline__ uint32_t msm_warp_slot(uint32_t* counter, uint32_t key) {
    const uint32_t peers = __match_any_sync(0xffffffffu, key);
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t leader = __ffs(peers) - 1;
    const uint32_t rank = __popc(peers & ((1u << lane) - 1u));
    uint32_t base = 0;
    if (key != 0xffffffffu && lane == leader) base = atomicAdd(counter + key, __popc(peers));
    base = __shfl_sync(peers, base, leader);
    return base + rank;
}
#endif

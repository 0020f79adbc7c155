// Pippenger multi-scalar multiplication on BLS12-381 G1 (host orchestration:
// kernels/cuda/msm.py; the design and its arithmetic: bench/notes/msm.md).
//
// Pipeline for sum_i k_i P_i with window c, W = ceil(256 / c) windows, B = 2^(c-1) buckets per
// window and one extra bucket (key W*B) for the scalars equal to 1:
//   1. msm_count:    signed digits of every scalar; counts[key]++ (zeros and zero digits skip).
//   2. (host)        offsets = exclusive prefix sum of counts (CuPy cumsum).
//   3. msm_scatter:  the same digits again; sorted[cursor[key]++] = point index | sign << 31.
//                    The entries of one bucket are now contiguous: a counting sort by bucket.
//                    (The radix setting replaces this step by a two-level partition with
//                    shared-memory ranks: "2-3, radix setting" below.)
//   4. msm_accumulate0: the sorted list is cut into equal chunks of L entries, one thread each,
//                    whatever the bucket boundaries: every thread does exactly L mixed additions,
//                    so a bucket holding half of all points (the 1-scalars of a real witness)
//                    costs the same time as uniform ones. A bucket that lies wholly inside one
//                    chunk is written out; a bucket cut by a chunk boundary leaves partial sums
//                    in two slots per chunk (first and last segment), with their keys.
//   5. msm_accumulate_n: the same segmented reduction over the (key, XYZZ) slots, repeated until
//                    one chunk holds everything; each level shrinks the slots by L/2. Finished
//                    buckets are added into the bucket array. When no bucket holds more than
//                    2 L entries, msm_accumulate_heads instead: one thread per cut bucket.
//   6. msm_bucket_reduce: per window, sum_b (b+1) bucket[b] in parallel: each thread takes S
//                    consecutive buckets and returns (A, R): the running-sum trick's result
//                    relative to its first bucket, and the plain sum.
//   7. xyzz_sum_weighted: a tree (fan-in F) over the (A, R) pairs of each window that adds the
//                    offsets in with additions and doublings only (msm.cuh), down to one pair.
//   8. (host)        sum_w 2^(c w) S_w + ones-bucket, and the affine conversion.
#include "msm/msm.cuh"
#include "msm/radix.cuh"

// Occupancy of the point-arithmetic kernels: empty by default (the compiler takes up to 255
// registers: 8 warps per SM); msm_lb.cu sets __launch_bounds__ to trade registers for warps.
#ifndef MSM_BOUNDS
#define MSM_BOUNDS
#endif


// ---- 1 and 3: digits, counting sort ----------------------------------------------------------

// Both sort kernels take only windows [w_lo, w_hi), starting from the carry into w_lo
// (msm_carry_into): launched per group of windows, the counters they hit (B per window) are a
// smaller, L2-resident set (bench/notes/msm.md, 2026-11-30, a30e5a8).
//
// FIXED (the fixed-base setting, kernels/cuda/msm_fixed.py): the points come with their window
// shifts precomputed, table[w n + i] = 2^(c w) P_i, so every window's digit d of scalar i is
// the entry w n + i in bucket |d| - 1 of ONE set of B buckets shared by all windows (ones: key
// B). The sum of that set, sum_b (b + 1) bucket[b], is then the whole MSM: one bucket reduction
// instead of W, and no doublings between windows.
template <bool FIXED>
__device__ __forceinline__ uint32_t msm_sort_key(const uint32_t s[8], uint32_t w, uint32_t c,
                                                 uint32_t B, uint32_t W, bool is_zero,
                                                 bool is_one, msm_digits& dg, bool* neg) {
    const uint32_t key = msm_key(s, w, c, B, W, is_zero, is_one, dg, neg);
    if (!FIXED || key == MSM_NONE) return key;
    return key == W * B ? B : key - w * B;
}

template <bool FIXED>
__device__ __forceinline__ void msm_count_body(const uint32_t* __restrict__ scalars, uint32_t n,
                                               uint32_t c, uint32_t W, uint32_t w_lo,
                                               uint32_t w_hi, uint32_t* __restrict__ counts) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t B = 1u << (c - 1);
    uint32_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const bool live = i < n;
    if (live) msm_load_scalar(scalars, i, s);
    const bool is_zero = !live || msm_scalar_is(s, 0);
    const bool is_one = live && msm_scalar_is(s, 1);
    uint32_t limit[8];
    msm_carry_limit(w_lo, c, limit);
    msm_digits dg(c, s, limit, w_lo);
    for (uint32_t w = w_lo; w < w_hi; w++) {
        bool neg;
        const uint32_t key = msm_sort_key<FIXED>(s, w, c, B, W, is_zero, is_one, dg, &neg);
        msm_warp_slot(counts, key, FIXED ? B : W * B);  // all 32 lanes, live or not
    }
}

extern "C" __global__ void msm_count(const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c,
                                     uint32_t W, uint32_t w_lo, uint32_t w_hi,
                                     uint32_t* __restrict__ counts) {
    msm_count_body<false>(scalars, n, c, W, w_lo, w_hi, counts);
}

extern "C" __global__ void msm_count_fixed(const uint32_t* __restrict__ scalars, uint32_t n,
                                           uint32_t c, uint32_t W, uint32_t w_lo, uint32_t w_hi,
                                           uint32_t* __restrict__ counts) {
    msm_count_body<true>(scalars, n, c, W, w_lo, w_hi, counts);
}

// Windows are taken MSM_SCATTER_GROUP at a time: the group's keys first, then its aggregated
// atomics back to back (their returned slots are not needed until the stores), so each thread
// keeps several atomics in flight instead of waiting out one round trip per window.
#define MSM_SCATTER_GROUP 4
template <bool FIXED>
__device__ __forceinline__ void msm_scatter_body(const uint32_t* __restrict__ scalars, uint32_t n,
                                                 uint32_t c, uint32_t W, uint32_t w_lo,
                                                 uint32_t w_hi, uint32_t* __restrict__ cursor,
                                                 uint32_t* __restrict__ sorted) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t B = 1u << (c - 1);
    const uint32_t lane = threadIdx.x & 31;
    uint32_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const bool live = i < n;
    if (live) msm_load_scalar(scalars, i, s);
    const bool is_zero = !live || msm_scalar_is(s, 0);
    const bool is_one = live && msm_scalar_is(s, 1);
    uint32_t limit[8];
    msm_carry_limit(w_lo, c, limit);
    msm_digits dg(c, s, limit, w_lo);
    for (uint32_t w0 = w_lo; w0 < w_hi; w0 += MSM_SCATTER_GROUP) {
        uint32_t key[MSM_SCATTER_GROUP], peers[MSM_SCATTER_GROUP], base[MSM_SCATTER_GROUP];
        bool neg[MSM_SCATTER_GROUP];
#pragma unroll
        for (int j = 0; j < MSM_SCATTER_GROUP; j++) {
            neg[j] = false;
            key[j] = w0 + j < w_hi ? msm_sort_key<FIXED>(s, w0 + j, c, B, W, is_zero, is_one,
                                                         dg, &neg[j])
                                   : MSM_NONE;
        }
#pragma unroll
        for (int j = 0; j < MSM_SCATTER_GROUP; j++) {
#if MSM_SCATTER_MATCH
            peers[j] = __match_any_sync(0xffffffffu, key[j]);
#else  // only the ones key shared (msm.cuh, MSM_SCATTER_MATCH); any other lane its own peer
            const uint32_t ones_key = FIXED ? B : W * B;
            const uint32_t ones = __ballot_sync(0xffffffffu, key[j] == ones_key);
            peers[j] = key[j] == ones_key ? ones : 1u << lane;
#endif
        }
#pragma unroll
        for (int j = 0; j < MSM_SCATTER_GROUP; j++) {
            base[j] = 0;
            if (key[j] != MSM_NONE && lane == (uint32_t)(__ffs(peers[j]) - 1))
                base[j] = atomicAdd(cursor + key[j], __popc(peers[j]));
        }
#pragma unroll
        for (int j = 0; j < MSM_SCATTER_GROUP; j++) {
            const uint32_t leader = __ffs(peers[j]) - 1;
            const uint32_t slot = __shfl_sync(peers[j], base[j], leader) +
                                  __popc(peers[j] & ((1u << lane) - 1u));
            // the fixed setting's entry is the table row of window w0 + j (the ones: window 0)
            const uint32_t row = FIXED ? i + (w0 + j) * n : i;
            if (key[j] != MSM_NONE) sorted[slot] = row | (neg[j] ? 0x80000000u : 0u);
        }
    }
}

extern "C" __global__ void msm_scatter(const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c,
                                       uint32_t W, uint32_t w_lo, uint32_t w_hi,
                                       uint32_t* __restrict__ cursor,
                                       uint32_t* __restrict__ sorted) {
    msm_scatter_body<false>(scalars, n, c, W, w_lo, w_hi, cursor, sorted);
}

extern "C" __global__ void msm_scatter_fixed(const uint32_t* __restrict__ scalars, uint32_t n,
                                             uint32_t c, uint32_t W, uint32_t w_lo,
                                             uint32_t w_hi, uint32_t* __restrict__ cursor,
                                             uint32_t* __restrict__ sorted) {
    msm_scatter_body<true>(scalars, n, c, W, w_lo, w_hi, cursor, sorted);
}

// ---- 2-3, radix setting: thin wrappers over the bodies in radix.cuh (the design is there) -----

extern "C" __global__ void msm_radix_hist(
    const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c, uint32_t W, uint32_t w_lo,
    uint32_t w_hi, uint32_t tile, uint32_t s, uint32_t t, uint32_t* __restrict__ kbuf,
    uint32_t* __restrict__ hist) {
    extern __shared__ uint32_t radix_sh[];
    msm_radix_hist_body(scalars, n, c, W, w_lo, w_hi, tile, s, t, kbuf, hist, radix_sh);
}

extern "C" __global__ void msm_radix_part_a(
    const uint32_t* __restrict__ kbuf, uint32_t n, uint32_t B, uint32_t g, uint32_t tile,
    uint32_t s, uint32_t t, uint32_t chunk, const uint32_t* __restrict__ base,
    uint32_t* __restrict__ a1_e, uint32_t* __restrict__ a1_k, uint32_t* __restrict__ sorted) {
    extern __shared__ uint32_t radix_sh[];
    msm_radix_part_a_body(kbuf, n, B, g, tile, s, t, chunk, base, a1_e, a1_k, sorted, radix_sh);
}

extern "C" __global__ void msm_radix_part_b(
    const uint32_t* __restrict__ a1_e, const uint32_t* __restrict__ a1_k, uint32_t s, uint32_t t,
    uint32_t nsb, uint32_t chunk, const uint32_t* __restrict__ sb_start,
    const uint32_t* __restrict__ pre_b, uint32_t* __restrict__ cursor, uint32_t* __restrict__ a_ent,
    uint16_t* __restrict__ a_lo) {
    extern __shared__ uint32_t radix_sh[];
    msm_radix_part_b_body(a1_e, a1_k, s, t, nsb, chunk, sb_start, pre_b, cursor, a_ent, a_lo,
        radix_sh);
}

extern "C" __global__ void msm_radix_bucket(
    const uint32_t* __restrict__ a_ent, const uint16_t* __restrict__ a_lo,
    const uint32_t* __restrict__ offs, uint32_t key0, uint32_t nbin, uint32_t s, uint32_t chunk,
    const uint32_t* __restrict__ pre, uint32_t* __restrict__ cursor,
    uint32_t* __restrict__ sorted) {
    extern __shared__ uint32_t radix_sh[];
    msm_radix_bucket_body(a_ent, a_lo, offs, key0, nbin, s, chunk, pre, cursor, sorted, radix_sh);
}

// ---- 4-7: thin wrappers over the per-thread bodies in msm.cuh ---------------------------------

#define MSM_TID (blockIdx.x * blockDim.x + threadIdx.x)

extern "C" __global__ void MSM_BOUNDS msm_accumulate0(const g1_affine* __restrict__ points,
                                           const uint32_t* __restrict__ sorted,
                                           const uint32_t* __restrict__ offs, uint32_t K, uint32_t M,
                                           uint32_t L, uint32_t T, g1_xyzz* __restrict__ buckets,
                                           g1_xyzz* __restrict__ pvals, uint32_t* __restrict__ pkeys) {
    if (MSM_TID < T) msm_accumulate0_thread(MSM_TID, points, sorted, offs, K, M, L, buckets, pvals, pkeys);
}

extern "C" __global__ void MSM_BOUNDS msm_accumulate0_kept(const g1_affine* __restrict__ points,
                                                const uint32_t* __restrict__ sorted,
                                                const uint32_t* __restrict__ offs, uint32_t K,
                                                uint32_t M, uint32_t L, uint32_t T,
                                                g1_xyzz* __restrict__ buckets,
                                                g1_xyzz* __restrict__ pvals,
                                                uint32_t* __restrict__ pkeys) {
    if (MSM_TID < T) msm_accumulate0_kept_thread(MSM_TID, points, sorted, offs, K, M, L, buckets, pvals, pkeys);
}

extern "C" __global__ void MSM_BOUNDS msm_affine_pass(
    const g1_affine* __restrict__ pin, const uint32_t* __restrict__ idx,
    const uint32_t* __restrict__ off, const uint32_t* __restrict__ off2, uint32_t K, uint32_t Lc,
    uint32_t NB, uint32_t T, fp_t* __restrict__ prefix, uint32_t* __restrict__ srcs,
    g1_affine* __restrict__ pout) {
    if (MSM_TID < T) msm_affine_pass_thread(MSM_TID, T, pin, idx, off, off2, K, Lc, NB, prefix, srcs, pout);
}

extern "C" __global__ void MSM_BOUNDS msm_accumulate_n(const g1_xyzz* __restrict__ vals,
                                            const uint32_t* __restrict__ keys, uint32_t Min,
                                            uint32_t L, uint32_t T, g1_xyzz* __restrict__ buckets,
                                            g1_xyzz* __restrict__ pvals, uint32_t* __restrict__ pkeys) {
    if (MSM_TID < T) msm_accumulate_n_thread(MSM_TID, vals, keys, Min, L, buckets, pvals, pkeys);
}

extern "C" __global__ void MSM_BOUNDS msm_accumulate_heads(const g1_xyzz* __restrict__ vals,
                                                const uint32_t* __restrict__ keys, uint32_t Min,
                                                g1_xyzz* __restrict__ buckets) {
    if (MSM_TID < Min) msm_accumulate_heads_thread(MSM_TID, vals, keys, Min, buckets);
}

extern "C" __global__ void MSM_BOUNDS msm_bucket_reduce(const g1_xyzz* __restrict__ buckets,
                                                        uint32_t W, uint32_t B, uint32_t S,
                                                        uint32_t G, uint32_t log_out,
                                                        g1_xyzz* __restrict__ outA,
                                                        g1_xyzz* __restrict__ outR) {
    if (MSM_TID < W * G) msm_bucket_reduce_thread(MSM_TID, buckets, B, S, G, log_out, outA, outR);
}

extern "C" __global__ void MSM_BOUNDS xyzz_sum_weighted(
    const g1_xyzz* __restrict__ inA, const g1_xyzz* __restrict__ inR, uint32_t nseg,
    uint32_t len_in, uint32_t F, uint32_t len_out, uint32_t log_span, uint32_t log_out,
    g1_xyzz* __restrict__ outA, g1_xyzz* __restrict__ outR) {
    if (MSM_TID < nseg * len_out)
        xyzz_sum_weighted_thread(MSM_TID, inA, inR, len_in, F, len_out, log_span, log_out, outA,
                                 outR);
}

extern "C" __global__ void MSM_BOUNDS xyzz_sum_groups(const g1_xyzz* __restrict__ in, uint32_t nseg,
                                           uint32_t len_in, uint32_t F, uint32_t len_out,
                                           g1_xyzz* __restrict__ out) {
    if (MSM_TID < nseg * len_out) xyzz_sum_groups_thread(MSM_TID, in, len_in, F, len_out, out);
}

extern "C" __global__ void MSM_BOUNDS xyzz_merge(g1_xyzz* __restrict__ kept,
                                                 g1_xyzz* __restrict__ part, uint32_t K) {
    if (MSM_TID < K) xyzz_merge_thread(MSM_TID, kept, part);
}

// Pippenger multi-scalar multiplication on BLS12-381 G1 (host orchestration:
// kernels/cuda_msm.py; the design and its arithmetic: bench/msm_notes.md).
//
// Pipeline for sum_i k_i P_i with window c, W = ceil(256 / c) windows, B = 2^(c-1) buckets per
// window and one extra bucket (key W*B) for the scalars equal to 1:
//   1. msm_count:    signed digits of every scalar; counts[key]++ (zeros and zero digits skip).
//   2. (host)        offsets = exclusive prefix sum of counts (CuPy cumsum).
//   3. msm_scatter:  the same digits again; sorted[cursor[key]++] = point index | sign << 31.
//                    The entries of one bucket are now contiguous: a counting sort by bucket.
//   4. msm_accumulate0: the sorted list is cut into equal chunks of L entries, one thread each,
//                    whatever the bucket boundaries: every thread does exactly L mixed additions,
//                    so a bucket holding half of all points (the 1-scalars of a real witness)
//                    costs the same time as uniform ones. A bucket that lies wholly inside one
//                    chunk is written out; a bucket cut by a chunk boundary leaves partial sums
//                    in two slots per chunk (first and last segment), with their keys.
//   5. msm_accumulate_n: the same segmented reduction over the (key, XYZZ) slots, repeated until
//                    one chunk holds everything; each level shrinks the slots by L/2. Finished
//                    buckets are added into the bucket array.
//   6. msm_bucket_reduce: per window, sum_b (b+1) bucket[b] in parallel: each thread takes S
//                    consecutive buckets (running-sum trick) and adds lo * running.
//   7. xyzz_sum_groups: tree sum of the per-thread results of each window.
//   8. (host)        sum_w 2^(c w) S_w + ones-bucket, and the affine conversion.
#include "msm.cuh"

#define MSM_NONE 0xffffffffu

// ---- 1 and 3: digits, counting sort ----------------------------------------------------------

// Key of window w for scalar s, or MSM_NONE; *neg receives the sign. `ones` is set for k == 1.
__device__ __forceinline__ uint32_t msm_key(const uint32_t s[8], uint32_t w, uint32_t c, uint32_t B,
                                            uint32_t W, bool is_zero, bool is_one, msm_digits& dg,
                                            bool* neg) {
    if (is_zero) return MSM_NONE;
    if (is_one) {
        *neg = false;
        return w == 0 ? W * B : MSM_NONE;
    }
    const uint32_t m = dg.next(s, w, neg);
    return m ? w * B + (m - 1) : MSM_NONE;
}

extern "C" __global__ void msm_count(const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c,
                                     uint32_t W, uint32_t* __restrict__ counts) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t B = 1u << (c - 1);
    uint32_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const bool live = i < n;
    if (live) msm_load_scalar(scalars, i, s);
    const bool is_zero = !live || msm_scalar_is(s, 0);
    const bool is_one = live && msm_scalar_is(s, 1);
    msm_digits dg(c);
    for (uint32_t w = 0; w < W; w++) {
        bool neg;
        const uint32_t key = msm_key(s, w, c, B, W, is_zero, is_one, dg, &neg);
        msm_warp_slot(counts, key);  // all 32 lanes take part, live or not
    }
}

extern "C" __global__ void msm_scatter(const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c,
                                       uint32_t W, uint32_t* __restrict__ cursor,
                                       uint32_t* __restrict__ sorted) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t B = 1u << (c - 1);
    uint32_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const bool live = i < n;
    if (live) msm_load_scalar(scalars, i, s);
    const bool is_zero = !live || msm_scalar_is(s, 0);
    const bool is_one = live && msm_scalar_is(s, 1);
    msm_digits dg(c);
    for (uint32_t w = 0; w < W; w++) {
        bool neg = false;
        const uint32_t key = msm_key(s, w, c, B, W, is_zero, is_one, dg, &neg);
        const uint32_t pos = msm_warp_slot(cursor, key);
        if (key != MSM_NONE) sorted[pos] = i | (neg ? 0x80000000u : 0u);
    }
}

// ---- 4: balanced bucket accumulation, level 0 (affine points in) ---------------------------

__device__ __forceinline__ g1_affine msm_point(const g1_affine* __restrict__ points, uint32_t e) {
    g1_affine p = g1_load(points + (e & 0x7fffffffu));
    if (e >> 31) p.y = p.y.neg();  // negating infinity (0, 0) keeps (0, 0)
    return p;
}

extern "C" __global__ void msm_accumulate0(const g1_affine* __restrict__ points,
                                           const uint32_t* __restrict__ sorted,
                                           const uint32_t* __restrict__ offs, uint32_t K, uint32_t M,
                                           uint32_t L, uint32_t T, g1_xyzz* __restrict__ buckets,
                                           g1_xyzz* __restrict__ pvals, uint32_t* __restrict__ pkeys) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const uint32_t start = t * L;
    const uint32_t end = min(start + L, M);
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

extern "C" __global__ void msm_accumulate_n(const g1_xyzz* __restrict__ vals,
                                            const uint32_t* __restrict__ keys, uint32_t Min,
                                            uint32_t L, uint32_t T, g1_xyzz* __restrict__ buckets,
                                            g1_xyzz* __restrict__ pvals, uint32_t* __restrict__ pkeys) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const uint32_t start = t * L;
    const uint32_t end = min(start + L, Min);
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

// Thread (w, g) of W * G: sum over b in [g S, min(g S + S, B)) of (b + 1) bucket[w B + b].
extern "C" __global__ void msm_bucket_reduce(const g1_xyzz* __restrict__ buckets, uint32_t W,
                                             uint32_t B, uint32_t S, uint32_t G,
                                             g1_xyzz* __restrict__ out) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= W * G) return;
    const uint32_t w = t / G, g = t % G;
    const uint32_t lo = g * S, hi = min(lo + S, B);
    const g1_xyzz* bw = buckets + (uint64_t)w * B;
    g1_xyzz running = g1_xyzz::inf(), acc = g1_xyzz::inf();
    for (uint32_t b = hi; b-- > lo;) {
        running = running.add(g1_load(bw + b));
        acc = acc.add(running);
    }
    // acc = sum (b - lo + 1) bucket[b]; add lo * running (double-and-add, lo < 2^(c-1))
    if (lo > 0 && !running.is_inf()) {
        g1_xyzz m = g1_xyzz::inf();
        for (int bit = 31 - __clz(lo); bit >= 0; bit--) {
            m = m.dbl();
            if ((lo >> bit) & 1) m = m.add(running);
        }
        acc = acc.add(m);
    }
    g1_store(out + t, acc);
}

// out[s * len_out + j] = sum of in[s * len_in + j F .. + F) (clipped to len_in), for every
// segment s < nseg, with len_out = ceil(len_in / F).
extern "C" __global__ void xyzz_sum_groups(const g1_xyzz* __restrict__ in, uint32_t nseg,
                                           uint32_t len_in, uint32_t F, uint32_t len_out,
                                           g1_xyzz* __restrict__ out) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nseg * len_out) return;
    const uint32_t s = t / len_out, j = t % len_out;
    const uint32_t lo = j * F, hi = min(lo + F, len_in);
    g1_xyzz acc = g1_xyzz::inf();
    for (uint32_t i = lo; i < hi; i++) acc = acc.add(g1_load(in + (uint64_t)s * len_in + i));
    g1_store(out + t, acc);
}

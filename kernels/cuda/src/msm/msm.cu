// Pippenger multi-scalar multiplication on BLS12-381 G1 (host orchestration:
// kernels/cuda/msm.py; the design and its arithmetic: docs/performance-notes.md, "MSM and SRS").
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
//                    buckets are added into the bucket array.
//   6. msm_bucket_reduce: per window, sum_b (b+1) bucket[b] in parallel: each thread takes S
//                    consecutive buckets and returns (A, R): the running-sum trick's result
//                    relative to its first bucket, and the plain sum.
//   7. xyzz_sum_weighted: a tree (fan-in F) over the (A, R) pairs of each window that adds the
//                    offsets in with additions and doublings only (msm.cuh), down to one pair.
//   8. (host)        sum_w 2^(c w) S_w + ones-bucket, and the affine conversion.
#include "msm/msm.cuh"

// Occupancy of the point-arithmetic kernels: empty by default (the compiler takes up to 255
// registers: 8 warps per SM); msm_lb.cu sets __launch_bounds__ to trade registers for warps.
#ifndef MSM_BOUNDS
#define MSM_BOUNDS
#endif


// ---- 1 and 3: digits, counting sort ----------------------------------------------------------

// Both sort kernels take only windows [w_lo, w_hi) (the digits below w_lo are still computed
// for their carries): launched per group of windows, the counters they hit (B per window) are a
// smaller, L2-resident set (docs/performance-notes.md, "MSM and SRS", 2026-11-30).
extern "C" __global__ void msm_count(const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c,
                                     uint32_t W, uint32_t w_lo, uint32_t w_hi,
                                     uint32_t* __restrict__ counts) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t B = 1u << (c - 1);
    uint32_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const bool live = i < n;
    if (live) msm_load_scalar(scalars, i, s);
    const bool is_zero = !live || msm_scalar_is(s, 0);
    const bool is_one = live && msm_scalar_is(s, 1);
    msm_digits dg(c);
    for (uint32_t w = 0; w < w_hi; w++) {
        bool neg;
        const uint32_t key = msm_key(s, w, c, B, W, is_zero, is_one, dg, &neg);
        if (w >= w_lo) msm_warp_slot(counts, key, W * B);  // all 32 lanes, live or not
    }
}

// Windows are taken MSM_SCATTER_GROUP at a time: the group's keys first, then its aggregated
// atomics back to back (their returned slots are not needed until the stores), so each thread
// keeps several atomics in flight instead of waiting out one round trip per window.
#define MSM_SCATTER_GROUP 4
// Entries each thread of the radix bucket kernel holds at once: its loads, then its
// shared-atomic ranks, then its stores, each MSM_RADIX_ILP deep. One at a time, the partition
// (then one level, ranked the same way) measured 1,374 cycles per issued instruction per warp,
// over half of it waiting on the load before the rank (Nsight Compute at 2^24, 2026-12-03).
#ifndef MSM_RADIX_ILP
#define MSM_RADIX_ILP 8
#endif
extern "C" __global__ void msm_scatter(const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c,
                                       uint32_t W, uint32_t w_lo, uint32_t w_hi,
                                       uint32_t* __restrict__ cursor,
                                       uint32_t* __restrict__ sorted) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t B = 1u << (c - 1);
    const uint32_t lane = threadIdx.x & 31;
    uint32_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const bool live = i < n;
    if (live) msm_load_scalar(scalars, i, s);
    const bool is_zero = !live || msm_scalar_is(s, 0);
    const bool is_one = live && msm_scalar_is(s, 1);
    msm_digits dg(c);
    for (uint32_t w0 = 0; w0 < w_hi; w0 += MSM_SCATTER_GROUP) {
        uint32_t key[MSM_SCATTER_GROUP], peers[MSM_SCATTER_GROUP], base[MSM_SCATTER_GROUP];
        bool neg[MSM_SCATTER_GROUP];
#pragma unroll
        for (int j = 0; j < MSM_SCATTER_GROUP; j++) {
            neg[j] = false;
            key[j] = w0 + j < w_hi ? msm_key(s, w0 + j, c, B, W, is_zero, is_one, dg, &neg[j])
                                   : MSM_NONE;
            if (w0 + j < w_lo) key[j] = MSM_NONE;  // digit computed for its carry only
        }
        if (w0 + MSM_SCATTER_GROUP <= w_lo) continue;  // the whole group is below the range
#pragma unroll
        for (int j = 0; j < MSM_SCATTER_GROUP; j++) {
#if MSM_SCATTER_MATCH
            peers[j] = __match_any_sync(0xffffffffu, key[j]);
#else  // only the ones key shared (msm.cuh, MSM_SCATTER_MATCH); any other lane its own peer
            const uint32_t ones = __ballot_sync(0xffffffffu, key[j] == W * B);
            peers[j] = key[j] == W * B ? ones : 1u << lane;
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
            if (key[j] != MSM_NONE) sorted[slot] = i | (neg[j] ? 0x80000000u : 0u);
        }
    }
}

// ---- 2-3, radix setting: a two-level partition in place of the scatter's global cursors -----
//
// msm_count and the scan still give every bucket's offsets (offs). Then, per group of windows:
//   a. msm_radix_hist: tile i (a block) computes its scalars' keys once, stores them in kbuf
//      (row w - w_lo, 4 bytes each, key relative to the group | sign << 31) and counts them per
//      superbin (2^t coarse bins of 2^s consecutive buckets; the ones are one extra superbin)
//      in shared memory: hist[superbin][i]. The host scans each superbin's row over the tiles
//      (plus the superbin's start).
//   b. msm_radix_part_a / _b: tile t places its entries at its superbins' offsets (2^t coarse
//      bins each), staged in shared memory, in (a1_e, a1_k); then each chunk of a superbin goes
//      to its bins' cursors, staged the same way, as entry and low key bits in (a_ent, a_lo),
//      grouped by bin; the ones go straight to their final slots in `sorted` at level a (they
//      are one bucket: nothing left to order).
//   c. msm_radix_bucket: each block takes one bin's entries (or a chunk of a large bin), counts
//      their 2^s low keys in shared memory and writes each entry to offs[key] + its rank. A bin
//      cut into several chunks takes each chunk's range per bucket with one global atomic per
//      (chunk, non-empty bucket) on cursor (a copy of offs); dense scalars never need that.
// No global atomic per entry remains, and the order inside a bucket is whatever the shared
// atomics give: the accumulation sums a bucket in any order. Launch with blockDim.x threads of
// any count; the shared arrays are dynamic (4 bytes per bin, 4 per bucket of a bin).

extern "C" __global__ void msm_radix_hist(const uint32_t* __restrict__ scalars, uint32_t n,
                                          uint32_t c, uint32_t W, uint32_t w_lo, uint32_t w_hi,
                                          uint32_t tile, uint32_t s, uint32_t t,
                                          uint32_t* __restrict__ kbuf,
                                          uint32_t* __restrict__ hist) {
    extern __shared__ uint32_t radix_cnt[];
    const uint32_t B = 1u << (c - 1), g = w_hi - w_lo;
    const uint32_t ones = g * (B >> s);                        // the ones bin
    const uint32_t nsb = ((ones + (1u << t) - 1u) >> t) + 1u;  // superbins, the ones' last
    for (uint32_t j = threadIdx.x; j < nsb; j += blockDim.x) radix_cnt[j] = 0;
    __syncthreads();
    const uint64_t t0 = (uint64_t)blockIdx.x * tile;
    const uint32_t end = t0 + tile < n ? (uint32_t)(t0 + tile) : n;
    for (uint32_t i = (uint32_t)t0 + threadIdx.x; i < end; i += blockDim.x) {
        uint32_t sc[8];
        msm_load_scalar(scalars, i, sc);
        const bool is_zero = msm_scalar_is(sc, 0), is_one = msm_scalar_is(sc, 1);
        msm_digits dg(c);
        for (uint32_t w = 0; w < w_hi; w++) {
            bool neg = false;
            const uint32_t key = msm_key(sc, w, c, B, W, is_zero, is_one, dg, &neg);
            if (w < w_lo) continue;  // digit computed for its carry only
            uint32_t v = MSM_NONE;
            if (key != MSM_NONE) {
                const uint32_t local = key == W * B ? g * B : key - w_lo * B;
                const uint32_t bin = local >> s;
                atomicAdd(radix_cnt + (bin == ones ? nsb - 1u : bin >> t), 1u);
                v = local | (neg ? 0x80000000u : 0u);
            }
            kbuf[(uint64_t)(w - w_lo) * n + i] = v;
        }
    }
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < nsb; j += blockDim.x)
        hist[(uint64_t)j * gridDim.x + blockIdx.x] = radix_cnt[j];
}

// Exclusive prefix sums of in[0, n) into out (in != out), by the whole block: each thread sums
// a segment, the warps scan their threads' sums, warp 0 the warps' totals. tot holds 32 words of
// shared scratch. Every thread of the block must call it; the caller syncs before reading out.
// blockDim.x is a multiple of 32.
__device__ __forceinline__ void radix_block_scan(const uint32_t* in, uint32_t* out, uint32_t n,
                                                 uint32_t* tot) {
    const uint32_t per = (n + blockDim.x - 1) / blockDim.x;
    const uint32_t lo = threadIdx.x * per, hi = lo + per < n ? lo + per : n;
    uint32_t sum = 0;
    for (uint32_t i = lo; i < hi; i++) sum += in[i];
    const uint32_t lane = threadIdx.x & 31u, wid = threadIdx.x >> 5;
    uint32_t x = sum;
#pragma unroll
    for (uint32_t o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) tot[wid] = x;
    __syncthreads();
    if (wid == 0) {
        const uint32_t nw = blockDim.x >> 5, v = lane < nw ? tot[lane] : 0u;
        uint32_t z = v;
#pragma unroll
        for (uint32_t o = 1; o < 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(0xffffffffu, z, o);
            if (lane >= o) z += y;
        }
        if (lane < nw) tot[lane] = z - v;
    }
    __syncthreads();
    uint32_t run = tot[wid] + x - sum;
    for (uint32_t i = lo; i < hi; i++) {
        out[i] = run;
        run += in[i];
    }
}

// The partition in two levels, each staged through shared memory so that its stores leave the
// block in runs: a chunk of entries is ranked per destination (shared atomics), placed in
// shared memory ordered by destination, then written out by consecutive threads to consecutive
// addresses. One level of 8,192 bins left runs of under one entry per bin and chunk (2 scattered
// sectors per entry; Nsight Compute, 2026-12-03); superbins of 2^t bins (at most
// RADIX_SUPERBINS) leave runs of ~16 entries, and a superbin's 2^t bins ~128.
//
// Level a (msm_radix_part_a): tile t's entries to its superbins' offsets base[sb][t] in (a1_e,
// a1_k) (entry, key relative to the group), the ones straight to their final slots in sorted.
// Dynamic shared memory: 3 nsb + 32 words, then 2 chunk words. chunk <= blockDim.x *
// MSM_RADIX_STAGE.
#ifndef MSM_RADIX_STAGE
#define MSM_RADIX_STAGE 16  // entries per thread and chunk: 256 x 16 = a 4,096-entry chunk
#endif
extern "C" __global__ void msm_radix_part_a(const uint32_t* __restrict__ kbuf, uint32_t n,
                                            uint32_t B, uint32_t g, uint32_t tile, uint32_t s,
                                            uint32_t t, uint32_t chunk,
                                            const uint32_t* __restrict__ base,
                                            uint32_t* __restrict__ a1_e,
                                            uint32_t* __restrict__ a1_k,
                                            uint32_t* __restrict__ sorted) {
    extern __shared__ uint32_t radix_sh[];
    const uint32_t ones = g * (B >> s);                // the ones bin
    const uint32_t nsb = ((ones + (1u << t) - 1u) >> t) + 1u;  // superbins, the ones' last
    uint32_t* cur = radix_sh;
    uint32_t* cnt = cur + nsb;
    uint32_t* pre = cnt + nsb;
    uint32_t* tot = pre + nsb;
    uint32_t* st_e = tot + 32;
    uint32_t* st_k = st_e + chunk;
    for (uint32_t j = threadIdx.x; j < nsb; j += blockDim.x)
        cur[j] = base[(uint64_t)j * gridDim.x + blockIdx.x];
    const uint64_t t0 = (uint64_t)blockIdx.x * tile;
    const uint32_t end = t0 + tile < n ? (uint32_t)(t0 + tile) : n;
    for (uint32_t w = 0; w < g; w++) {
        const uint32_t* row = kbuf + (uint64_t)w * n;
        for (uint32_t c0 = (uint32_t)t0; c0 < end; c0 += chunk) {
            const uint32_t c_end = c0 + chunk < end ? c0 + chunk : end;
            for (uint32_t j = threadIdx.x; j < nsb; j += blockDim.x) cnt[j] = 0;
            __syncthreads();
            uint32_t v[MSM_RADIX_STAGE], r[MSM_RADIX_STAGE];
#pragma unroll
            for (int u = 0; u < MSM_RADIX_STAGE; u++) {
                const uint32_t i = c0 + threadIdx.x + u * blockDim.x;
                v[u] = i < c_end ? row[i] : MSM_NONE;
            }
            // the ones (up to half of a witness's entries, all in one superbin) take one shared
            // atomic per warp; the rest one each
            const uint32_t lane = threadIdx.x & 31u;
#pragma unroll
            for (int u = 0; u < MSM_RADIX_STAGE; u++) {
                const uint32_t bin = (v[u] & 0x7fffffffu) >> s;
                const bool one = v[u] != MSM_NONE && bin == ones;
                const uint32_t m1 = __ballot_sync(0xffffffffu, one);
                const uint32_t lead = m1 ? __ffs(m1) - 1u : 0u;
                uint32_t b1 = 0;
                if (m1 && lane == lead) b1 = atomicAdd(cnt + nsb - 1u, __popc(m1));
                b1 = __shfl_sync(0xffffffffu, b1, lead);
                if (one) r[u] = b1 + __popc(m1 & ((1u << lane) - 1u));
                else if (v[u] != MSM_NONE) r[u] = atomicAdd(cnt + (bin >> t), 1u);
            }
            __syncthreads();
            radix_block_scan(cnt, pre, nsb, tot);
            __syncthreads();
#pragma unroll
            for (int u = 0; u < MSM_RADIX_STAGE; u++) {
                if (v[u] == MSM_NONE) continue;
                const uint32_t local = v[u] & 0x7fffffffu, bin = local >> s;
                const uint32_t slot = pre[bin == ones ? nsb - 1u : bin >> t] + r[u];
                st_e[slot] = (c0 + threadIdx.x + u * blockDim.x) | (v[u] & 0x80000000u);
                st_k[slot] = local;
            }
            __syncthreads();
            const uint32_t total = pre[nsb - 1] + cnt[nsb - 1];
            for (uint32_t j = threadIdx.x; j < total; j += blockDim.x) {
                const uint32_t k = st_k[j], bin = k >> s;
                const uint32_t sb = bin == ones ? nsb - 1u : bin >> t;
                const uint32_t dst = cur[sb] + (j - pre[sb]);
                if (sb == nsb - 1u) {
                    sorted[dst] = st_e[j];
                } else {
                    a1_e[dst] = st_e[j];
                    a1_k[dst] = k;
                }
            }
            __syncthreads();
            for (uint32_t j = threadIdx.x; j < nsb; j += blockDim.x) cur[j] += cnt[j];
        }
    }
}

// Level b (msm_radix_part_b): block q takes one chunk of one superbin of (a1_e, a1_k) (pre[sb]:
// the superbin's first block, as msm_radix_bucket maps its blocks), ranks it over the
// superbin's 2^t bins, takes each non-empty bin's range with one global atomic on cursor[bin]
// (the bin's next free slot in a_ent, relative to the group), and writes (entry, low key bits)
// in runs. Superbin sb holds bins [sb 2^t, (sb + 1) 2^t) at [sb_start[sb], sb_start[sb + 1]).
// Dynamic shared memory: 3 x 2^t + 32 words, then 2 chunk words.
extern "C" __global__ void msm_radix_part_b(const uint32_t* __restrict__ a1_e,
                                            const uint32_t* __restrict__ a1_k, uint32_t s,
                                            uint32_t t, uint32_t nsb, uint32_t chunk,
                                            const uint32_t* __restrict__ sb_start,
                                            const uint32_t* __restrict__ pre_b,
                                            uint32_t* __restrict__ cursor,
                                            uint32_t* __restrict__ a_ent,
                                            uint16_t* __restrict__ a_lo) {
    extern __shared__ uint32_t radix_sh[];
    const uint32_t q = blockIdx.x;
    if (q >= pre_b[nsb]) return;  // the same for every thread of the block, before any barrier
    const uint32_t sb = msm_chunk_owner(pre_b, nsb, q), nsub = 1u << t, first = sb << t, low = (1u << s) - 1u;
    const uint32_t start = sb_start[sb] + (q - pre_b[sb]) * chunk;
    const uint32_t sb_end = sb_start[sb + 1];
    const uint32_t end = sb_end - start > chunk ? start + chunk : sb_end;
    uint32_t* cnt = radix_sh;
    uint32_t* pre = cnt + nsub;
    uint32_t* dst0 = pre + nsub;
    uint32_t* tot = dst0 + nsub;
    uint32_t* st_e = tot + 32;
    uint32_t* st_k = st_e + chunk;
    for (uint32_t j = threadIdx.x; j < nsub; j += blockDim.x) cnt[j] = 0;
    __syncthreads();
    uint32_t e[MSM_RADIX_STAGE], k[MSM_RADIX_STAGE], r[MSM_RADIX_STAGE];
#pragma unroll
    for (int u = 0; u < MSM_RADIX_STAGE; u++) {
        const uint32_t i = start + threadIdx.x + u * blockDim.x;
        k[u] = i < end ? a1_k[i] : MSM_NONE;
        e[u] = i < end ? a1_e[i] : 0u;
    }
#pragma unroll
    for (int u = 0; u < MSM_RADIX_STAGE; u++)
        if (k[u] != MSM_NONE) r[u] = atomicAdd(cnt + ((k[u] >> s) - first), 1u);
    __syncthreads();
    radix_block_scan(cnt, pre, nsub, tot);
    for (uint32_t j = threadIdx.x; j < nsub; j += blockDim.x)
        dst0[j] = cnt[j] ? atomicAdd(cursor + first + j, cnt[j]) : 0u;
    __syncthreads();
#pragma unroll
    for (int u = 0; u < MSM_RADIX_STAGE; u++) {
        if (k[u] == MSM_NONE) continue;
        const uint32_t slot = pre[(k[u] >> s) - first] + r[u];
        st_e[slot] = e[u];
        st_k[slot] = k[u];
    }
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < end - start; j += blockDim.x) {
        const uint32_t kk = st_k[j], sub = (kk >> s) - first;
        const uint32_t dst = dst0[sub] + (j - pre[sub]);
        a_ent[dst] = st_e[j];
        a_lo[dst] = (uint16_t)(kk & low);
    }
}

// Bins j in [0, nbin) of the group whose first key is key0: bin j holds keys
// [key0 + j 2^s, key0 + (j + 1) 2^s), at [offs[first] - offs[key0], offs[last + 1] - offs[key0])
// of a_ent / a_lo. pre[j] (nbin + 1 values): the first block of bin j, each bin taking
// ceil(size / chunk) blocks; blocks from pre[nbin] on have nothing to do.
extern "C" __global__ void msm_radix_bucket(const uint32_t* __restrict__ a_ent,
                                            const uint16_t* __restrict__ a_lo,
                                            const uint32_t* __restrict__ offs, uint32_t key0,
                                            uint32_t nbin, uint32_t s, uint32_t chunk,
                                            const uint32_t* __restrict__ pre,
                                            uint32_t* __restrict__ cursor,
                                            uint32_t* __restrict__ sorted) {
    extern __shared__ uint32_t radix_slot[];
    const uint32_t q = blockIdx.x;
    if (q >= pre[nbin]) return;  // the same for every thread of the block, before any barrier
    const uint32_t j = msm_chunk_owner(pre, nbin, q), nb = 1u << s;
    const uint32_t kb = key0 + (j << s), g0 = offs[key0];
    const uint32_t start = offs[kb] - g0 + (q - pre[j]) * chunk;
    const uint32_t b_end = offs[kb + nb] - g0;
    const uint32_t end = b_end - start > chunk ? start + chunk : b_end;
    const bool multi = pre[j + 1] - pre[j] > 1;
    for (uint32_t k = threadIdx.x; k < nb; k += blockDim.x) radix_slot[k] = 0;
    __syncthreads();
    const uint32_t step = blockDim.x * MSM_RADIX_ILP;
    for (uint32_t i0 = start + threadIdx.x; i0 < end; i0 += step) {
        uint32_t lo_[MSM_RADIX_ILP];
#pragma unroll
        for (int u = 0; u < MSM_RADIX_ILP; u++) {
            const uint32_t i = i0 + u * blockDim.x;
            lo_[u] = i < end ? a_lo[i] : 0xffffffffu;
        }
#pragma unroll
        for (int u = 0; u < MSM_RADIX_ILP; u++)
            if (lo_[u] != 0xffffffffu) atomicAdd(radix_slot + lo_[u], 1u);
    }
    __syncthreads();
    for (uint32_t k = threadIdx.x; k < nb; k += blockDim.x) {
        const uint32_t cnt = radix_slot[k];
        radix_slot[k] = multi ? (cnt ? atomicAdd(cursor + kb + k, cnt) : 0u) : offs[kb + k];
    }
    __syncthreads();
    for (uint32_t i0 = start + threadIdx.x; i0 < end; i0 += step) {
        uint32_t lo_[MSM_RADIX_ILP], ent[MSM_RADIX_ILP], pos[MSM_RADIX_ILP];
#pragma unroll
        for (int u = 0; u < MSM_RADIX_ILP; u++) {
            const uint32_t i = i0 + u * blockDim.x;
            lo_[u] = i < end ? a_lo[i] : 0xffffffffu;
            ent[u] = i < end ? a_ent[i] : 0u;
        }
#pragma unroll
        for (int u = 0; u < MSM_RADIX_ILP; u++)
            if (lo_[u] != 0xffffffffu) pos[u] = atomicAdd(radix_slot + lo_[u], 1u);
#pragma unroll
        for (int u = 0; u < MSM_RADIX_ILP; u++)
            if (lo_[u] != 0xffffffffu) sorted[pos[u]] = ent[u];
    }
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

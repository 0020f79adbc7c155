// The MSM's radix sort ("radix" setting of msm_sort): the bodies of its kernels and their
// block-wide scan. msm.cu wraps each in a kernel; the dynamic shared array is the last argument.
// Every loop strides by blockDim.x between barriers and every warp operation is written so that
// one thread per block computes the same result, so this header also compiles as host C++
// with one-thread shims (tests/kernels/test_cuda_msm_radix_host.py runs the host side of
// kernels/cuda/msm.py through it against the reference on the CPU).
#pragma once
#include "msm/msm.cuh"

// Entries each thread of the radix bucket kernel holds at once: its loads, then its
// shared-atomic ranks, then its stores, each MSM_RADIX_ILP deep. One at a time, the partition
// (then one level, ranked the same way) measured 1,374 cycles per issued instruction per warp,
// over half of it waiting on the load before the rank (Nsight Compute at 2^24, 2026-12-03).
#ifndef MSM_RADIX_ILP
#define MSM_RADIX_ILP 8
#endif

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

__device__ __forceinline__ void msm_radix_hist_body(
    const uint32_t* __restrict__ scalars, uint32_t n, uint32_t c, uint32_t W, uint32_t w_lo,
    uint32_t w_hi, uint32_t tile, uint32_t s, uint32_t t, uint32_t* __restrict__ kbuf,
    uint32_t* __restrict__ hist, uint32_t* __restrict__ radix_cnt) {
    const uint32_t B = 1u << (c - 1), g = w_hi - w_lo;
    const uint32_t ones = g * (B >> s);                        // the ones bin
    const uint32_t nsb = ((ones + (1u << t) - 1u) >> t) + 1u;  // superbins, the ones' last
    for (uint32_t j = threadIdx.x; j < nsb; j += blockDim.x) radix_cnt[j] = 0;
    __syncthreads();
    const uint64_t t0 = (uint64_t)blockIdx.x * tile;
    const uint32_t end = t0 + tile < n ? (uint32_t)(t0 + tile) : n;
    uint32_t limit[8];
    msm_carry_limit(w_lo, c, limit);
    for (uint32_t i = (uint32_t)t0 + threadIdx.x; i < end; i += blockDim.x) {
        uint32_t sc[8];
        msm_load_scalar(scalars, i, sc);
        const bool is_zero = msm_scalar_is(sc, 0), is_one = msm_scalar_is(sc, 1);
        msm_digits dg(c, sc, limit, w_lo);
        for (uint32_t w = w_lo; w < w_hi; w++) {
            bool neg = false;
            const uint32_t key = msm_key(sc, w, c, B, W, is_zero, is_one, dg, &neg);
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
__device__ __forceinline__ void radix_block_scan(const uint32_t* in, uint32_t* out, uint32_t n,
                                                 uint32_t* tot) {
    const uint32_t per = (n + blockDim.x - 1) / blockDim.x;
    const uint32_t lo = threadIdx.x * per, hi = lo + per < n ? lo + per : n;
    uint32_t sum = 0;
    for (uint32_t i = lo; i < hi; i++) sum += in[i];
    const uint32_t lane = threadIdx.x & 31u, wid = threadIdx.x >> 5;
    uint32_t x = sum;
    MONT_UNROLL for (uint32_t o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    // the last lane of each warp (of a partial one too: one thread per block on the host)
    const uint32_t last = blockDim.x - (wid << 5) < 32u ? blockDim.x - (wid << 5) - 1u : 31u;
    if (lane == last) tot[wid] = x;
    __syncthreads();
    if (wid == 0) {
        const uint32_t nw = (blockDim.x + 31u) >> 5, v = lane < nw ? tot[lane] : 0u;
        uint32_t z = v;
        MONT_UNROLL for (uint32_t o = 1; o < 32; o <<= 1) {
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

// The shared memory of a staged level: three arrays of n words (per destination), 32 words for
// radix_block_scan, and a chunk's entries and keys, ordered by destination; 4 (3 n + 32 + 2
// chunk) bytes, as kernels/cuda/msm.py launches them.
struct radix_stage_smem {
    uint32_t *a, *b, *c, *tot, *st_e, *st_k;
    __device__ __forceinline__ radix_stage_smem(uint32_t* sh, uint32_t n, uint32_t chunk)
        : a(sh), b(sh + n), c(sh + 2 * n), tot(sh + 3 * n), st_e(sh + 3 * n + 32),
          st_k(sh + 3 * n + 32 + chunk) {}
};

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
__device__ __forceinline__ void msm_radix_part_a_body(
    const uint32_t* __restrict__ kbuf, uint32_t n, uint32_t B, uint32_t g, uint32_t tile,
    uint32_t s, uint32_t t, uint32_t chunk, const uint32_t* __restrict__ base,
    uint32_t* __restrict__ a1_e, uint32_t* __restrict__ a1_k, uint32_t* __restrict__ sorted,
    uint32_t* __restrict__ radix_sh) {
    const uint32_t ones = g * (B >> s);                // the ones bin
    const uint32_t nsb = ((ones + (1u << t) - 1u) >> t) + 1u;  // superbins, the ones' last
    const radix_stage_smem sm(radix_sh, nsb, chunk);
    uint32_t *cur = sm.a, *cnt = sm.b, *pre = sm.c, *tot = sm.tot;
    uint32_t *st_e = sm.st_e, *st_k = sm.st_k;
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
            MONT_UNROLL for (int u = 0; u < MSM_RADIX_STAGE; u++) {
                const uint32_t i = c0 + threadIdx.x + u * blockDim.x;
                v[u] = i < c_end ? row[i] : MSM_NONE;
            }
            // the ones (up to half of a witness's entries, all in one superbin) take one shared
            // atomic per warp; the rest one each
            const uint32_t lane = threadIdx.x & 31u;
            MONT_UNROLL for (int u = 0; u < MSM_RADIX_STAGE; u++) {
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
            MONT_UNROLL for (int u = 0; u < MSM_RADIX_STAGE; u++) {
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
__device__ __forceinline__ void msm_radix_part_b_body(
    const uint32_t* __restrict__ a1_e, const uint32_t* __restrict__ a1_k, uint32_t s, uint32_t t,
    uint32_t nsb, uint32_t chunk, const uint32_t* __restrict__ sb_start,
    const uint32_t* __restrict__ pre_b, uint32_t* __restrict__ cursor, uint32_t* __restrict__ a_ent,
    uint16_t* __restrict__ a_lo, uint32_t* __restrict__ radix_sh) {
    const uint32_t q = blockIdx.x;
    if (q >= pre_b[nsb]) return;  // the same for every thread of the block, before any barrier
    const uint32_t sb = msm_chunk_owner(pre_b, nsb, q), nsub = 1u << t, first = sb << t;
    const uint32_t low = (1u << s) - 1u;
    const uint32_t start = sb_start[sb] + (q - pre_b[sb]) * chunk;
    const uint32_t sb_end = sb_start[sb + 1];
    const uint32_t end = sb_end - start > chunk ? start + chunk : sb_end;
    const radix_stage_smem sm(radix_sh, nsub, chunk);
    uint32_t *cnt = sm.a, *pre = sm.b, *dst0 = sm.c, *tot = sm.tot;
    uint32_t *st_e = sm.st_e, *st_k = sm.st_k;
    for (uint32_t j = threadIdx.x; j < nsub; j += blockDim.x) cnt[j] = 0;
    __syncthreads();
    uint32_t e[MSM_RADIX_STAGE], k[MSM_RADIX_STAGE], r[MSM_RADIX_STAGE];
    MONT_UNROLL for (int u = 0; u < MSM_RADIX_STAGE; u++) {
        const uint32_t i = start + threadIdx.x + u * blockDim.x;
        k[u] = i < end ? a1_k[i] : MSM_NONE;
        e[u] = i < end ? a1_e[i] : 0u;
    }
    MONT_UNROLL for (int u = 0; u < MSM_RADIX_STAGE; u++)
        if (k[u] != MSM_NONE) r[u] = atomicAdd(cnt + ((k[u] >> s) - first), 1u);
    __syncthreads();
    radix_block_scan(cnt, pre, nsub, tot);
    for (uint32_t j = threadIdx.x; j < nsub; j += blockDim.x)
        dst0[j] = cnt[j] ? atomicAdd(cursor + first + j, cnt[j]) : 0u;
    __syncthreads();
    MONT_UNROLL for (int u = 0; u < MSM_RADIX_STAGE; u++) {
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
__device__ __forceinline__ void msm_radix_bucket_body(
    const uint32_t* __restrict__ a_ent, const uint16_t* __restrict__ a_lo,
    const uint32_t* __restrict__ offs, uint32_t key0, uint32_t nbin, uint32_t s, uint32_t chunk,
    const uint32_t* __restrict__ pre, uint32_t* __restrict__ cursor, uint32_t* __restrict__ sorted,
    uint32_t* __restrict__ radix_slot) {
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
        MONT_UNROLL for (int u = 0; u < MSM_RADIX_ILP; u++) {
            const uint32_t i = i0 + u * blockDim.x;
            lo_[u] = i < end ? a_lo[i] : 0xffffffffu;
        }
        MONT_UNROLL for (int u = 0; u < MSM_RADIX_ILP; u++)
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
        MONT_UNROLL for (int u = 0; u < MSM_RADIX_ILP; u++) {
            const uint32_t i = i0 + u * blockDim.x;
            lo_[u] = i < end ? a_lo[i] : 0xffffffffu;
            ent[u] = i < end ? a_ent[i] : 0u;
        }
        MONT_UNROLL for (int u = 0; u < MSM_RADIX_ILP; u++)
            if (lo_[u] != 0xffffffffu) pos[u] = atomicAdd(radix_slot + lo_[u], 1u);
        MONT_UNROLL for (int u = 0; u < MSM_RADIX_ILP; u++)
            if (lo_[u] != 0xffffffffu) sorted[pos[u]] = ent[u];
    }
}

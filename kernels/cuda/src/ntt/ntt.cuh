// Radix-2 NTT passes over Fr in shared memory, plus the fused pre/post steps of the H step.
//
// Why this shape (see bench/notes/ntt.md for the arithmetic): a 2^k transform is split into
// passes of at most NTT_MAX_LEVELS levels (27 = 9+9+9). A pass reads each element once from
// global memory into a shared-memory tile, does its levels there, and writes each element once.
// Gentleman-Sande (DIF) maps natural order to bit-reversed order, Cooley-Tukey (DIT) the
// reverse, so chained transforms (inverse to coefficients, then coset forward) never need a
// separate bit-reversal pass; where an order change is asked for, the first pass gathers its
// input through the bit-reversal map instead (out of place, so no block reads what another
// wrote).
//
// Index algebra of one pass. Let s be the log size of the sub-transforms the pass works in and L
// its number of levels; an element's position p splits as
//     p = hi * 2^s + mid * 2^(s-L) + lo,     mid < 2^L,  lo < 2^(s-L).
// The pass's butterflies only change mid, so a tile = all 2^L mids for C consecutive lo values
// (C = 2^logC columns, contiguous in memory) of one hi. DIF passes run with s = k, k-L1, ...;
// DIT passes with s = L1, L1+L2, ... (each pass's lo bits are the levels already done).
//
// Twiddles: one table per device of T[i] = w^i, i <= 2^(K-1), w the primitive 2^K-th root, for
// the largest K built so far; a level of half-size h uses w_{2h}^j = T[j << (K - log2(2h))].
// The inverse transform uses w^-e = -T[2^(K-1) - e] (the sign folded into the butterfly), so
// one table serves both directions. The lowest two levels of a transform (w = 1 for three of
// the four butterflies of a radix-4 step) skip their multiplications.
#pragma once
#include "field/fr_mul.cuh"  // fr_mul: the Fr multiplication of every kernel here
#include "field/fr_io.cuh"  // fr_load, fr_ldg, fr_store

// Elements each thread loads before it stores any into the tile (the load phase's memory-level
// parallelism): 1 = one at a time (the default); 4 = a whole 2^10 tile of 256 threads in flight
// at once (32 more registers live in the load phase, when nothing else is): measured 1-5 %
// slower on the H200 (2026-12-02, bench/notes/ntt.md, 55c08dc).
#ifndef NTT_LOAD_BATCH
#define NTT_LOAD_BATCH 1
#endif

// NTT_RADIX4: the levels two at a time (radix-4 steps: half the shared-memory round trips and
// barriers, but 4 elements live: ptxas spills 148-160 bytes at the 80 registers of three blocks
// per SM), or one at a time (0: radix-2 steps, 76 registers and no spills; sm_90, nvcc 13.0).
// Radix-2 measured 4.6-6 % slower at 2^24-2^27 on the H200 (2026-12-02): the spills cost less
// than the round trips they save.
#ifndef NTT_RADIX4
#define NTT_RADIX4 1
#endif

// Tile size: chosen per pass by the planner (kernels/cuda/ntt.py): at most 2^10 elements
// (32 KiB of shared memory) by default; with the "small" plans (ntt_small on) 2^11 in a pass of a
// longer transform and 2^12 (128 KiB) for a whole transform in one block, through the
// launch's opt-in dynamic shared memory. The kernel itself takes any tile that fits.

// Flags of one pass (host side: kernels/cuda/ntt.py).
#define NTT_F_GATHER 1       // read src[bitrev_k(p)] instead of src[p]
#define NTT_F_PRE_TABLE 2    // x *= pre_hi[j >> sb] * pre_lo[j & (2^sb-1)], j = coefficient index
#define NTT_F_POST_CONST 4   // y *= post_const[0]
#define NTT_F_POST_TABLE 8   // y *= post_hi[j >> sb] * post_lo[...], j = output's natural index
#define NTT_F_QUOTIENT 16    // y = qa[p] * qb[p] - y (H-step quotient; 1/Z(g) is in the last table)
#define NTT_F_PRE_FULL 32    // the pre table is full: factor = pre_lo[j] (one multiplication less)
#define NTT_F_POST_FULL 64   // the post table is full: factor = post_lo[j]
#define NTT_F_TW_SHARED 128  // the pass's twiddles are loaded into shared memory once (see tw_preload)

__device__ __forceinline__ uint32_t ntt_brev(uint32_t p, int k) {
    return k == 0 ? 0u : (__brev(p) >> (32 - k));
}

// Shared tile, structure of arrays in 64-bit units: word pair q (words 2q, 2q+1) of element e
// lives at sm64[q * ts + e], so a warp touching consecutive elements touches consecutive 8-byte
// slots (two wavefronts per access, the minimum), and an element is 4 LDS.64 / STS.64 instead
// of 8 32-bit accesses (the radix-4 step moves 4 elements in and out: 32 instructions less).
__device__ __forceinline__ fr_t sm_get(const uint32_t* sm, uint32_t ts, uint32_t e) {
    const uint64_t* s2 = reinterpret_cast<const uint64_t*>(sm);
    fr_t r;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const uint64_t v = s2[q * ts + e];
        r.v[2 * q] = (uint32_t)v;
        r.v[2 * q + 1] = (uint32_t)(v >> 32);
    }
    return r;
}
__device__ __forceinline__ void sm_put(uint32_t* sm, uint32_t ts, uint32_t e, const fr_t& x) {
    uint64_t* s2 = reinterpret_cast<uint64_t*>(sm);
#pragma unroll
    for (int q = 0; q < 4; q++)
        s2[q * ts + e] = (uint64_t)x.v[2 * q] | ((uint64_t)x.v[2 * q + 1] << 32);
}

__device__ __forceinline__ fr_t split_factor(const fr_t* hi_tab, const fr_t* lo_tab, int sb,
                                             uint32_t j) {
    return fr_mul(fr_ldg(hi_tab + (j >> sb)), fr_ldg(lo_tab + (j & ((1u << sb) - 1))));
}

struct ntt_pass_args {
    int k;       // log2 n
    int s;       // log size of this pass's sub-transforms
    int L;       // levels in this pass
    int logC;    // log2 of the columns per tile
    int K;       // log2 of the twiddle table's root order (table holds 2^(K-1) + 1 entries)
    int inverse;
    int flags;
    int pre_sb, post_sb;
};

// The twiddle table index of the butterfly whose lower element has mid index mid_a and low
// index lo = lo_base + c at local level l (half-size 2^l in mid space, 2^(l + lowbits)
// globally): w = w_{2h}^j with j = (global index of x) mod h.
// INV (compile time): the inverse uses w^-e = -T[2^(K-1) - e] for every table index e of j,
// e = 0 included (the table has one more entry, T[2^(K-1)] = w^(N/2) = -1). The minus sign
// costs nothing: DIF computes (y - x) T instead of (x - y) (-T), DIT swaps its two outputs
// (x - y T, x + y T). Before: the loaded twiddle was negated at run time (a borrow chain and
// a select per twiddle, and a select on e), about 16 ALU instructions per butterfly.
template <bool INV>
__device__ __forceinline__ uint32_t tw_index(const ntt_pass_args& a, int l, uint32_t m,
                                             int lowbits, uint32_t lo) {
    const uint32_t j = (m << lowbits) | lo;
    const uint32_t e = j << (a.K - l - lowbits - 1);
    return INV ? (1u << (a.K - 1)) - e : e;
}

// Where a pass with lowbits > 0 keeps its twiddles (NTT_F_TW_SHARED): such a pass's tile is one
// hi and C consecutive lo columns, so its level l needs w for every (m, c), m < 2^l, c < C, and
// no other block of the pass needs the same ones (lo differs). Read in the levels' loops, each
// was a separate global load, 3 per radix-4 group and mostly L2 round trips on the critical path
// (long-scoreboard stalls, bench/notes/ntt.md, 2026-12-02, 9a03df2). Instead the block
// loads them once, all at once with its elements, into a second array of the tile's shape:
// slot ((2^l - 1 + m) << logC) | c, levels 0 .. L-1 packed (2^L - 1 rows of C), in the same
// structure of arrays as the tile (stride ts in 64-bit units).
__device__ __forceinline__ uint32_t tw_slot(int l, uint32_t m, int logC, uint32_t c) {
    return (((1u << l) - 1 + m) << logC) | c;
}

template <bool INV>
__device__ __forceinline__ void tw_preload(uint32_t* sm_tw, uint32_t ts, const fr_t* __restrict__ tw,
                                           const ntt_pass_args& a, int lowbits, uint32_t lo_base) {
    const uint32_t C = 1u << a.logC;
    const uint32_t rows = (1u << a.L) - 1;
    for (uint32_t t = threadIdx.x; t < (rows << a.logC); t += blockDim.x) {
        const uint32_t c = t & (C - 1), row = t >> a.logC;
        const int l = 31 - __clz(row + 1);  // row = 2^l - 1 + m
        const uint32_t m = row + 1 - (1u << l);
        sm_put(sm_tw, ts, t, fr_ldg(tw + tw_index<INV>(a, l, m, lowbits, lo_base + c)));
    }
}

// The twiddle of a butterfly (see tw_index): from the block's shared copy (TWS) or the table.
template <bool INV, bool TWS>
__device__ __forceinline__ fr_t tw_get(const fr_t* __restrict__ tw, const uint32_t* sm_tw,
                                       uint32_t ts, const ntt_pass_args& a, int l,
                                       uint32_t mid_a, int lowbits, uint32_t lo_base, uint32_t c) {
    const uint32_t m = mid_a & ((1u << l) - 1);
    if (TWS) return sm_get(sm_tw, ts, tw_slot(l, m, a.logC, c));
    return fr_ldg(tw + tw_index<INV>(a, l, m, lowbits, lo_base + c));
}

// NTT_LAZY: the data between a pass's load and its store stays in [0, 2r) (fr_mul.cuh,
// fr_mul_lazy): each butterfly's product skips its conditional subtraction, and the store
// makes every value canonical again, so passes, tables and callers see canonical values only
// (1, the default: forward 2^20-2^24 -4.5 %, 2^27 -3.2 %, H step 2^27 -2.6 % on the H200,
// 2026-12-03), or canonical throughout (0).
#ifndef NTT_LAZY
#define NTT_LAZY 1
#endif
#if NTT_LAZY
#define NTT_ADD fr_add_lazy
#define NTT_SUB fr_sub_lazy
#define NTT_MUL_TW(w, v) fr_mul_lazy(w, v)  // the twiddle (canonical) first
#else
#define NTT_ADD(x, y) ((x) + (y))
#define NTT_SUB(x, y) ((x) - (y))
#define NTT_MUL_TW(w, v) fr_mul(v, w)
#endif

// One radix-2 butterfly with twiddle w. DIF: (x, y) -> (x + y, (x - y) w); DIT:
// (x, y) -> (x + y w, x - y w). INV: w is minus the twiddle (see tw_index).
template <bool DIT, bool INV>
__device__ __forceinline__ void ntt_butterfly(fr_t& x, fr_t& y, const fr_t& w) {
    if (DIT) {
        const fr_t t = NTT_MUL_TW(w, y);
        const fr_t s = NTT_ADD(x, t), d = NTT_SUB(x, t);
        x = INV ? d : s;
        y = INV ? s : d;
    } else {
        const fr_t u = NTT_ADD(x, y);
        y = NTT_MUL_TW(w, INV ? NTT_SUB(y, x) : NTT_SUB(x, y));
        x = u;
    }
}

// A butterfly with w = 1 (the caller knows j = 0 for every thread): no load, no multiplication.
__device__ __forceinline__ void ntt_butterfly_1(fr_t& x, fr_t& y) {
    const fr_t u = NTT_ADD(x, y);
    y = NTT_SUB(x, y);
    x = u;
}

// Programmatic dependent launch (sm_90 on; kernels/cuda/ntt.py, tuning ntt_launch "pdl"): a
// pass lets the next one launch as soon as all of its own blocks are running, so the next
// pass's blocks take the SM slots that this pass's last wave leaves idle and load what does not
// depend on it (the twiddles); they wait for this pass's completion, and for its writes to be
// visible, before they read any element. Without a programmatic launch both are no-ops.
__device__ __forceinline__ void ntt_let_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void ntt_wait_for_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <bool DIT, bool INV, bool TWS>
__device__ __forceinline__ void ntt_pass_body_t(fr_t* dst, const fr_t* src,  // may alias (in place)
                                              const fr_t* __restrict__ tw, const ntt_pass_args a,
                                              const fr_t* pre_hi, const fr_t* pre_lo,
                                              const fr_t* post_hi, const fr_t* post_lo,
                                              const fr_t* post_const, const fr_t* qa,
                                              const fr_t* qb) {
    extern __shared__ uint32_t sm[];
    const int lowbits = a.s - a.L;
    const uint32_t C = 1u << a.logC;
    const uint32_t ts = 1u << (a.L + a.logC);
    const uint32_t tile = blockIdx.x;
    const uint32_t hi = tile >> (lowbits - a.logC);
    const uint32_t lo_base = (tile & ((1u << (lowbits - a.logC)) - 1)) << a.logC;
    const unsigned long long boff = (unsigned long long)blockIdx.y << a.k;
    src += boff;
    dst += boff;
    uint32_t* sm_tw = sm + 8 * ts;  // TWS: the twiddles' array, after the tile's
    ntt_let_next_launch();
    if (TWS) tw_preload<INV>(sm_tw, ts, tw, a, lowbits, lo_base);  // the table is never written
    ntt_wait_for_previous();

    // ---- load (optionally gathered, optionally pre-multiplied) ----
    // NTT_LOAD_BATCH elements per thread are loaded before any is stored: one element per
    // iteration left each thread's loads one DRAM round trip apart (the loop's back edge is a
    // barrier to ptxas's scheduling), four of them for a 2^10 tile of 256 threads.
    for (uint32_t e0 = threadIdx.x; e0 < ts; e0 += NTT_LOAD_BATCH * blockDim.x) {
        fr_t xs[NTT_LOAD_BATCH];
#pragma unroll
        for (int u = 0; u < NTT_LOAD_BATCH; u++) {
            const uint32_t e = e0 + u * blockDim.x;
            if (e < ts) {
                const uint32_t c = e & (C - 1), mid = e >> a.logC;
                const uint32_t p = (hi << a.s) | (mid << lowbits) | (lo_base + c);
                xs[u] = fr_load(src + ((a.flags & NTT_F_GATHER) ? ntt_brev(p, a.k) : p));
            }
        }
#pragma unroll
        for (int u = 0; u < NTT_LOAD_BATCH; u++) {
            const uint32_t e = e0 + u * blockDim.x;
            if (e < ts) {
                fr_t x = xs[u];
                if (a.flags & NTT_F_PRE_TABLE) {
                    const uint32_t c = e & (C - 1), mid = e >> a.logC;
                    const uint32_t p = (hi << a.s) | (mid << lowbits) | (lo_base + c);
                    const uint32_t j = DIT ? ntt_brev(p, a.k) : p;  // coefficient index of x
                    x = fr_mul(x, (a.flags & NTT_F_PRE_FULL)
                                      ? fr_ldg(pre_lo + j)
                                      : split_factor(pre_hi, pre_lo, a.pre_sb, j));
                }
                sm_put(sm, ts, e, x);
            }
        }
    }
    __syncthreads();

    // ---- the levels: two per shared-memory round trip (radix-4 step), a last single one if
    // L is odd. DIF walks the levels top-down, DIT bottom-up. ----
    int it = 0;
    while (it < a.L) {
        if (NTT_RADIX4 && a.L - it >= 2) {
            const int lo_l = DIT ? it : a.L - 2 - it;  // the two levels are lo_l and lo_l + 1
            for (uint32_t q = threadIdx.x; q < ts / 4; q += blockDim.x) {
                const uint32_t c = q & (C - 1), r = q >> a.logC;
                const uint32_t m0 = ((r >> lo_l) << (lo_l + 2)) | (r & ((1u << lo_l) - 1));
                const uint32_t m1 = m0 | (1u << lo_l), m2 = m0 | (2u << lo_l), m3 = m1 | m2;
                const uint32_t e0 = (m0 << a.logC) | c, e1 = (m1 << a.logC) | c;
                const uint32_t e2 = (m2 << a.logC) | c, e3 = (m3 << a.logC) | c;
                fr_t x0 = sm_get(sm, ts, e0), x1 = sm_get(sm, ts, e1);
                fr_t x2 = sm_get(sm, ts, e2), x3 = sm_get(sm, ts, e3);
                if (lo_l == 0 && lowbits == 0) {
                    // the two lowest levels of the whole transform: j = 0 for three of the four
                    // butterflies (w = 1); the same for every thread of the block
                    const fr_t w = tw_get<INV, TWS>(tw, sm_tw, ts, a, 1, m1, 0, lo_base, c);
                    if (DIT) {
                        ntt_butterfly_1(x0, x1);
                        ntt_butterfly_1(x2, x3);
                        ntt_butterfly_1(x0, x2);
                        ntt_butterfly<true, INV>(x1, x3, w);
                    } else {
                        ntt_butterfly_1(x0, x2);
                        ntt_butterfly<false, INV>(x1, x3, w);
                        ntt_butterfly_1(x0, x1);
                        ntt_butterfly_1(x2, x3);
                    }
                } else {
                    // three twiddles, each fetched just before its first use (fewer live
                    // registers); level lo_l's serves (x0, x1) and (x2, x3), as m0 and m2
                    // differ only above that level's bits
#define NTT_TW(l, m) tw_get<INV, TWS>(tw, sm_tw, ts, a, l, m, lowbits, lo_base, c)
                    if (DIT) {
                        const fr_t w0 = NTT_TW(lo_l, m0);
                        ntt_butterfly<true, INV>(x0, x1, w0);
                        ntt_butterfly<true, INV>(x2, x3, w0);
                        ntt_butterfly<true, INV>(x0, x2, NTT_TW(lo_l + 1, m0));
                        ntt_butterfly<true, INV>(x1, x3, NTT_TW(lo_l + 1, m1));
                    } else {
                        ntt_butterfly<false, INV>(x0, x2, NTT_TW(lo_l + 1, m0));
                        ntt_butterfly<false, INV>(x1, x3, NTT_TW(lo_l + 1, m1));
                        const fr_t w0 = NTT_TW(lo_l, m0);
                        ntt_butterfly<false, INV>(x0, x1, w0);
                        ntt_butterfly<false, INV>(x2, x3, w0);
                    }
#undef NTT_TW
                }
                sm_put(sm, ts, e0, x0);
                sm_put(sm, ts, e1, x1);
                sm_put(sm, ts, e2, x2);
                sm_put(sm, ts, e3, x3);
            }
            it += 2;
        } else {
            const int l = DIT ? it : a.L - 1 - it;  // local level: half-size 2^l in mid space
            for (uint32_t q = threadIdx.x; q < ts / 2; q += blockDim.x) {
                const uint32_t c = q & (C - 1), r = q >> a.logC;
                const uint32_t mid_a = ((r >> l) << (l + 1)) | (r & ((1u << l) - 1));
                const uint32_t ea = (mid_a << a.logC) | c;
                const uint32_t eb = ea + (1u << (l + a.logC));
                fr_t x = sm_get(sm, ts, ea), y = sm_get(sm, ts, eb);
                if (l == 0 && lowbits == 0)  // lowest level of the transform: w = 1
                    ntt_butterfly_1(x, y);
                else
                    ntt_butterfly<DIT, INV>(
                        x, y, tw_get<INV, TWS>(tw, sm_tw, ts, a, l, mid_a, lowbits, lo_base, c));
                sm_put(sm, ts, ea, x);
                sm_put(sm, ts, eb, y);
            }
            it += 1;
        }
        __syncthreads();
    }

    // ---- store (optionally scaled, optionally fused into the quotient) ----
    for (uint32_t e = threadIdx.x; e < ts; e += blockDim.x) {
        const uint32_t c = e & (C - 1), mid = e >> a.logC;
        const uint32_t p = (hi << a.s) | (mid << lowbits) | (lo_base + c);
        fr_t y = sm_get(sm, ts, e);
        if (NTT_LAZY) y = fr_canonical(y);
        if (a.flags & NTT_F_POST_CONST) y = fr_mul(y, fr_ldg(post_const));
        if (a.flags & NTT_F_POST_TABLE) {
            const uint32_t j = DIT ? p : ntt_brev(p, a.k);  // natural index of the output
            y = fr_mul(y, (a.flags & NTT_F_POST_FULL)
                              ? fr_ldg(post_lo + j)
                              : split_factor(post_hi, post_lo, a.post_sb, j));
        }
        if (a.flags & NTT_F_QUOTIENT) {
            y = fr_mul(fr_load(qa + boff + p), fr_load(qb + boff + p)) - y;
        }
        fr_store(dst + p, y);
    }
}

// The pass body for either direction (a.inverse) and either home of the twiddles
// (NTT_F_TW_SHARED), both uniform over the launch: one instantiation each, so the twiddle sign
// and the twiddle loads are decided at compile time.
template <bool DIT>
__device__ __forceinline__ void ntt_pass_body(fr_t* dst, const fr_t* src,
                                              const fr_t* __restrict__ tw, const ntt_pass_args a,
                                              const fr_t* pre_hi, const fr_t* pre_lo,
                                              const fr_t* post_hi, const fr_t* post_lo,
                                              const fr_t* post_const, const fr_t* qa,
                                              const fr_t* qb) {
#define NTT_BODY(INV, TWS) \
    ntt_pass_body_t<DIT, INV, TWS>(dst, src, tw, a, pre_hi, pre_lo, post_hi, post_lo, post_const, qa, qb)
    const bool tws = (a.flags & NTT_F_TW_SHARED) != 0;
    if (a.inverse) {
        if (tws) NTT_BODY(true, true);
        else NTT_BODY(true, false);
    } else {
        if (tws) NTT_BODY(false, true);
        else NTT_BODY(false, false);
    }
#undef NTT_BODY
}

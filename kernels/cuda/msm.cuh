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

// Montgomery arithmetic over an odd prime of N 32-bit little-endian words.
//
// Why one generic template: Fr (8 words) and Fp (12 words) need the same add/sub/mul/inverse,
// and the NTT and MSM kernels must agree bit for bit with the CPU reference. The same source
// compiles three ways:
//   * nvcc / NVRTC device code: the carry chains are PTX (add.cc / addc / mad.lo.cc / madc.hi),
//     which is what makes a 256/384-bit multiply cheap on a GPU;
//   * host C++17 (g++): portable code with 64-bit intermediates, so the CPU tests
//     (tests/test_cuda_fields_host.py) check exactly the algorithm the GPU runs;
//   * NVRTC (CuPy RawModule): no standard headers there, so the fixed-width types are ours.
// Define MONT_PORTABLE to force the portable path on the device too (used to cross-check the PTX).
//
// Layout (kernels/backend.py): an element is N little-endian 32-bit words, Montgomery form with
// radix R = 2^(32 N). The parameter struct P supplies:
//   P::N               number of 32-bit words
//   P::mod(i)          word i of the modulus m (m odd, 2m < 2^(32 N))
//   P::m0()            -m^-1 mod 2^32
//   P::r2(i)           word i of R^2 mod m (canonical -> Montgomery)
//   P::one(i)          word i of R mod m (the Montgomery form of 1)
// Inputs to every operation must be fully reduced (< m); every output is fully reduced.
#pragma once

#if defined(__CUDACC_RTC__)
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef long long int64_t;
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define MONT_HD __host__ __device__ __forceinline__
#define MONT_HDC __host__ __device__ __forceinline__ constexpr
#else
#define MONT_HD inline
#define MONT_HDC constexpr
#endif

#if defined(__CUDA_ARCH__) && !defined(MONT_PORTABLE)
#define MONT_USE_PTX 1
#else
#define MONT_USE_PTX 0
#endif

#if defined(__CUDACC__)
#define MONT_UNROLL _Pragma("unroll")
#else
#define MONT_UNROLL
#endif

namespace mont_detail {

#if MONT_USE_PTX
// Each wrapper is one PTX instruction; 'volatile' keeps the carry-flag chains in order.
__device__ __forceinline__ uint32_t add_cc(uint32_t a, uint32_t b) {
    uint32_t r;
    asm volatile("add.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t addc_cc(uint32_t a, uint32_t b) {
    uint32_t r;
    asm volatile("addc.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t addc(uint32_t a, uint32_t b) {
    uint32_t r;
    asm volatile("addc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t sub_cc(uint32_t a, uint32_t b) {
    uint32_t r;
    asm volatile("sub.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t subc_cc(uint32_t a, uint32_t b) {
    uint32_t r;
    asm volatile("subc.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t subc(uint32_t a, uint32_t b) {
    uint32_t r;
    asm volatile("subc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t mad_lo_cc(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm volatile("mad.lo.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
__device__ __forceinline__ uint32_t madc_lo_cc(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm volatile("madc.lo.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
__device__ __forceinline__ uint32_t mad_hi_cc(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm volatile("mad.hi.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
__device__ __forceinline__ uint32_t madc_hi_cc(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm volatile("madc.hi.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
__device__ __forceinline__ uint32_t madc_hi(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm volatile("madc.hi.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#endif

}  // namespace mont_detail

template <class P>
struct mont_t {
    static constexpr int N = P::N;
    uint32_t v[N];  // no constructors: the type stays trivial, usable in __shared__ arrays

    // ---- constants --------------------------------------------------------------------
    MONT_HD static mont_t zero() {
        mont_t r;
        MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = 0;
        return r;
    }
    MONT_HD static mont_t one() {
        mont_t r;
        MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = P::one(i);
        return r;
    }
    MONT_HD static mont_t modulus() {  // not a field element (= 0 mod m); for tests and shifts
        mont_t r;
        MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = P::mod(i);
        return r;
    }
    MONT_HD static mont_t r2() {
        mont_t r;
        MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = P::r2(i);
        return r;
    }
    // A small canonical integer k (< m), converted to Montgomery form.
    MONT_HD static mont_t from_u32(uint32_t k) {
        mont_t r = zero();
        r.v[0] = k;
        return r.to_mont();
    }

    // ---- comparisons ------------------------------------------------------------------
    MONT_HD bool is_zero() const {
        uint32_t acc = 0;
        MONT_UNROLL for (int i = 0; i < N; i++) acc |= v[i];
        return acc == 0;
    }
    MONT_HD friend bool operator==(const mont_t& a, const mont_t& b) {
        uint32_t acc = 0;
        MONT_UNROLL for (int i = 0; i < N; i++) acc |= a.v[i] ^ b.v[i];
        return acc == 0;
    }
    MONT_HD friend bool operator!=(const mont_t& a, const mont_t& b) { return !(a == b); }

    // ---- reduction helper: x (N words, plus an extra top word) < 2m  ->  x mod m ----------
    MONT_HD static mont_t reduce_once(const uint32_t* x, uint32_t top) {
        mont_t r;
#if MONT_USE_PTX
        uint32_t d[N];
        d[0] = mont_detail::sub_cc(x[0], P::mod(0));
        MONT_UNROLL for (int i = 1; i < N; i++) d[i] = mont_detail::subc_cc(x[i], P::mod(i));
        uint32_t borrow = mont_detail::subc(top, 0);  // 0 if x >= m, else 0xffffffff
        MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = borrow ? x[i] : d[i];
#else
        uint32_t d[N];
        int64_t c = 0;
        for (int i = 0; i < N; i++) {
            c += (int64_t)x[i] - (int64_t)P::mod(i);
            d[i] = (uint32_t)c;
            c >>= 32;  // arithmetic shift: 0 or -1
        }
        c += (int64_t)top;
        bool keep = c < 0;
        for (int i = 0; i < N; i++) r.v[i] = keep ? x[i] : d[i];
#endif
        return r;
    }

    // ---- addition, subtraction, negation ----------------------------------------------
    MONT_HD friend mont_t operator+(const mont_t& a, const mont_t& b) {
        uint32_t s[N];
#if MONT_USE_PTX
        s[0] = mont_detail::add_cc(a.v[0], b.v[0]);
        MONT_UNROLL for (int i = 1; i < N; i++) s[i] = mont_detail::addc_cc(a.v[i], b.v[i]);
        uint32_t top = mont_detail::addc(0, 0);
#else
        uint64_t c = 0;
        for (int i = 0; i < N; i++) {
            c += (uint64_t)a.v[i] + b.v[i];
            s[i] = (uint32_t)c;
            c >>= 32;
        }
        uint32_t top = (uint32_t)c;
#endif
        return reduce_once(s, top);
    }

    MONT_HD friend mont_t operator-(const mont_t& a, const mont_t& b) {
        mont_t r;
#if MONT_USE_PTX
        uint32_t d[N];
        d[0] = mont_detail::sub_cc(a.v[0], b.v[0]);
        MONT_UNROLL for (int i = 1; i < N; i++) d[i] = mont_detail::subc_cc(a.v[i], b.v[i]);
        uint32_t mask = mont_detail::subc(0, 0);  // 0xffffffff if a < b
        r.v[0] = mont_detail::add_cc(d[0], P::mod(0) & mask);
        MONT_UNROLL for (int i = 1; i < N - 1; i++)
            r.v[i] = mont_detail::addc_cc(d[i], P::mod(i) & mask);
        r.v[N - 1] = mont_detail::addc(d[N - 1], P::mod(N - 1) & mask);
#else
        uint32_t d[N];
        int64_t c = 0;
        for (int i = 0; i < N; i++) {
            c += (int64_t)a.v[i] - (int64_t)b.v[i];
            d[i] = (uint32_t)c;
            c >>= 32;
        }
        uint32_t mask = c < 0 ? 0xffffffffu : 0u;
        uint64_t e = 0;
        for (int i = 0; i < N; i++) {
            e += (uint64_t)d[i] + (P::mod(i) & mask);
            r.v[i] = (uint32_t)e;
            e >>= 32;
        }
#endif
        return r;
    }

    MONT_HD mont_t neg() const { return zero() - *this; }
    MONT_HD mont_t dbl() const { return *this + *this; }

    // ---- multiplication (CIOS, 32-bit words) --------------------------------------------
    // t holds N+1 words: with a, b < m and 2m < 2^(32N), t < 2m after every outer step and the
    // pre-shift sum stays below 2^(32(N+1)), so no carry ever leaves word N.
    MONT_HD friend mont_t operator*(const mont_t& a, const mont_t& b) {
        uint32_t t[N + 1];
        MONT_UNROLL for (int j = 0; j <= N; j++) t[j] = 0;
#if MONT_USE_PTX
        using namespace mont_detail;
        MONT_UNROLL for (int i = 0; i < N; i++) {
            const uint32_t bi = b.v[i];
            // t += lo(a * bi)
            t[0] = mad_lo_cc(a.v[0], bi, t[0]);
            MONT_UNROLL for (int j = 1; j < N; j++) t[j] = madc_lo_cc(a.v[j], bi, t[j]);
            t[N] = addc(t[N], 0);
            // t += hi(a * bi) << 32
            t[1] = mad_hi_cc(a.v[0], bi, t[1]);
            MONT_UNROLL for (int j = 1; j < N - 1; j++) t[j + 1] = madc_hi_cc(a.v[j], bi, t[j + 1]);
            t[N] = madc_hi(a.v[N - 1], bi, t[N]);
            // t += m * mod, making word 0 vanish
            const uint32_t m = t[0] * P::m0();
            t[0] = mad_lo_cc(m, P::mod(0), t[0]);
            MONT_UNROLL for (int j = 1; j < N; j++) t[j] = madc_lo_cc(m, P::mod(j), t[j]);
            t[N] = addc(t[N], 0);
            t[1] = mad_hi_cc(m, P::mod(0), t[1]);
            MONT_UNROLL for (int j = 1; j < N - 1; j++) t[j + 1] = madc_hi_cc(m, P::mod(j), t[j + 1]);
            t[N] = madc_hi(m, P::mod(N - 1), t[N]);
            // shift down one word
            MONT_UNROLL for (int j = 0; j < N; j++) t[j] = t[j + 1];
            t[N] = 0;
        }
#else
        for (int i = 0; i < N; i++) {
            const uint64_t bi = b.v[i];
            uint64_t c = 0;
            for (int j = 0; j < N; j++) {
                c += (uint64_t)a.v[j] * bi + t[j];
                t[j] = (uint32_t)c;
                c >>= 32;
            }
            c += t[N];
            t[N] = (uint32_t)c;  // c >> 32 is 0 by the bound above
            const uint64_t m = (uint32_t)(t[0] * P::m0());
            c = (m * P::mod(0) + t[0]) >> 32;
            for (int j = 1; j < N; j++) {
                c += m * P::mod(j) + t[j];
                t[j - 1] = (uint32_t)c;
                c >>= 32;
            }
            c += t[N];
            t[N - 1] = (uint32_t)c;
            t[N] = (uint32_t)(c >> 32);
        }
#endif
        return reduce_once(t, t[N]);
    }

    MONT_HD mont_t sqr() const { return *this * *this; }

    MONT_HD mont_t& operator+=(const mont_t& b) { return *this = *this + b; }
    MONT_HD mont_t& operator-=(const mont_t& b) { return *this = *this - b; }
    MONT_HD mont_t& operator*=(const mont_t& b) { return *this = *this * b; }

    // ---- conversions ------------------------------------------------------------------
    MONT_HD mont_t to_mont() const { return *this * r2(); }  // canonical x -> x R
    MONT_HD mont_t from_mont() const {                        // x R -> canonical x
        mont_t raw_one = zero();
        raw_one.v[0] = 1;
        return *this * raw_one;
    }

    // ---- exponentiation and inverse ---------------------------------------------------
    // e: little-endian words of the exponent, nbits its bit length; left to right.
    MONT_HD mont_t pow(const uint32_t* e, int nbits) const {
        mont_t r = one();
        for (int bit = nbits - 1; bit >= 0; bit--) {
            r = r.sqr();
            if ((e[bit >> 5] >> (bit & 31)) & 1) r = r * *this;
        }
        return r;
    }
    MONT_HD mont_t pow_u32(uint32_t e) const { return pow(&e, 32); }

    // a^(m-2) (Fermat); the inverse of 0 is 0.
    MONT_HD mont_t inverse() const {
        uint32_t e[N];
        int64_t c = -2;
        for (int i = 0; i < N; i++) {
            c += (int64_t)P::mod(i);
            e[i] = (uint32_t)c;
            c >>= 32;
        }
        return pow(e, 32 * N);
    }
    MONT_HD friend mont_t operator/(const mont_t& a, const mont_t& b) { return a * b.inverse(); }
};

// Montgomery arithmetic over an odd prime of N 32-bit little-endian words.
//
// Why one generic template: Fr (8 words) and Fp (12 words) need the same add/sub/mul/inverse,
// and the NTT and MSM kernels must agree bit for bit with the CPU reference. The same source
// compiles three ways:
//   * nvcc / NVRTC device code: the carry chains are PTX (add.cc / addc / mad.lo.cc / madc.hi),
//     which is what makes a 256/384-bit multiply cheap on a GPU;
//   * host C++17 (g++): portable code with 64-bit intermediates, so the CPU tests
//     (tests/kernels/test_cuda_fields_host.py) check exactly the algorithm the GPU runs;
//   * NVRTC (CuPy RawModule): no standard headers there, so the fixed-width types are ours.
// The carry-chain primitives are PTX on the device and an exact emulation (explicit carry) on the
// host, so the host build runs the same instruction sequences. MONT_PORTABLE selects a plain
// 64-bit-intermediate multiplication instead (for comparison).
//
// Layout (kernels/backend.py): an element is N little-endian 32-bit words, Montgomery form with
// radix R = 2^(32 N). The parameter struct P supplies:
//   P::N               number of 32-bit words
//   P::mod(i)          word i of the modulus m (m odd, 2m < 2^(32 N))
//   P::m0()            -m^-1 mod 2^32
//   P::r2(i)           word i of R^2 mod m (canonical -> Montgomery)
//   P::one(i)          word i of R mod m (the Montgomery form of 1)
// Inputs to every operation must be fully reduced (< m); every output is fully reduced.
//
// The lazy form, mont_t<P, true> (fields.cuh: fpz_t), keeps every value in [0, 2m) instead:
// a multiplication then ends without its conditional subtraction. Why that is exact: CIOS of
// a, b < 2m returns t = (a b + M m) / R with M < R, so t < 4 m^2 / R + m, which is < 2m when
// 4m < R (asserted below: m's top word < 2^30; true for Fp, p < 2^381, false for Fr); the row
// totals stay < a + m < 3m, within the N + 1 words the accumulators have. Additions reduce a
// sum < 4m (still N words) by a conditional 2m, subtractions add 2m on a borrow, so every
// output is again in [0, 2m); is_zero and == compare modulo m (0 and m both mean zero), and
// reduced() returns the canonical value. A value is the same residue in either form, so a
// canonical value is a valid lazy one as it stands (lift()).
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

#if defined(__CUDA_ARCH__)
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

// Carry-chain primitives with PTX semantics. On the device each is one PTX instruction and the
// carry flag lives in hardware ('volatile' keeps the chains in order; `cc` is unused). On the
// host the flag is the explicit `cc` argument, so the host build runs the very same chains and
// the CPU tests check the exact instruction sequence the GPU executes.
#if MONT_USE_PTX
#define MONT_PTX2(name, op)                                                              \
    __device__ __forceinline__ uint32_t name(uint32_t a, uint32_t b, uint32_t&) {       \
        uint32_t r;                                                                      \
        asm volatile(op " %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));                      \
        return r;                                                                        \
    }
#define MONT_PTX3(name, op)                                                              \
    __device__ __forceinline__ uint32_t name(uint32_t a, uint32_t b, uint32_t c, uint32_t&) { \
        uint32_t r;                                                                      \
        asm volatile(op " %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));          \
        return r;                                                                        \
    }
MONT_PTX2(add_cc, "add.cc.u32")
MONT_PTX2(addc_cc, "addc.cc.u32")
MONT_PTX2(addc, "addc.u32")
MONT_PTX2(sub_cc, "sub.cc.u32")
MONT_PTX2(subc_cc, "subc.cc.u32")
MONT_PTX2(subc, "subc.u32")
MONT_PTX3(mad_lo_cc, "mad.lo.cc.u32")
MONT_PTX3(madc_lo_cc, "madc.lo.cc.u32")
MONT_PTX3(mad_hi_cc, "mad.hi.cc.u32")
MONT_PTX3(madc_hi_cc, "madc.hi.cc.u32")
MONT_PTX3(madc_hi, "madc.hi.u32")
#undef MONT_PTX2
#undef MONT_PTX3
#else
inline uint32_t add_cc(uint32_t a, uint32_t b, uint32_t& cc) {
    uint64_t s = (uint64_t)a + b;
    cc = (uint32_t)(s >> 32);
    return (uint32_t)s;
}
inline uint32_t addc_cc(uint32_t a, uint32_t b, uint32_t& cc) {
    uint64_t s = (uint64_t)a + b + cc;
    cc = (uint32_t)(s >> 32);
    return (uint32_t)s;
}
inline uint32_t addc(uint32_t a, uint32_t b, uint32_t& cc) { return a + b + cc; }
inline uint32_t sub_cc(uint32_t a, uint32_t b, uint32_t& cc) {
    cc = a < b;
    return a - b;
}
inline uint32_t subc_cc(uint32_t a, uint32_t b, uint32_t& cc) {
    uint64_t d = (uint64_t)a - b - cc;
    cc = (uint32_t)(d >> 63);
    return (uint32_t)d;
}
inline uint32_t subc(uint32_t a, uint32_t b, uint32_t& cc) { return a - b - cc; }
inline uint32_t mad_lo_cc(uint32_t a, uint32_t b, uint32_t c, uint32_t& cc) {
    return add_cc(a * b, c, cc);
}
inline uint32_t madc_lo_cc(uint32_t a, uint32_t b, uint32_t c, uint32_t& cc) {
    return addc_cc(a * b, c, cc);
}
inline uint32_t mad_hi_cc(uint32_t a, uint32_t b, uint32_t c, uint32_t& cc) {
    return add_cc((uint32_t)(((uint64_t)a * b) >> 32), c, cc);
}
inline uint32_t madc_hi_cc(uint32_t a, uint32_t b, uint32_t c, uint32_t& cc) {
    return addc_cc((uint32_t)(((uint64_t)a * b) >> 32), c, cc);
}
inline uint32_t madc_hi(uint32_t a, uint32_t b, uint32_t c, uint32_t& cc) {
    return addc((uint32_t)(((uint64_t)a * b) >> 32), c, cc);
}
#endif

}  // namespace mont_detail

template <class P, bool LAZY = false>
struct mont_t {
    static constexpr int N = P::N;
    static_assert(!LAZY || P::mod(N - 1) < (1u << 30), "the lazy form needs 4m < R");
    typedef mont_t<P, false> canonical_t;
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
    // Every word zero: the value 0 itself (in the lazy form m is zero too: is_zero()).
    MONT_HD bool is_zero_repr() const {
        uint32_t acc = 0;
        MONT_UNROLL for (int i = 0; i < N; i++) acc |= v[i];
        return acc == 0;
    }
    MONT_HD bool is_zero() const {
        if constexpr (!LAZY) return is_zero_repr();
        else {
            uint32_t acc = 0, accm = 0;
            MONT_UNROLL for (int i = 0; i < N; i++) acc |= v[i], accm |= v[i] ^ P::mod(i);
            return acc == 0 || accm == 0;
        }
    }
    MONT_HD friend bool operator==(const mont_t& a, const mont_t& b) {
        if constexpr (LAZY) {
            return (a - b).is_zero();
        } else {
            uint32_t acc = 0;
            MONT_UNROLL for (int i = 0; i < N; i++) acc |= a.v[i] ^ b.v[i];
            return acc == 0;
        }
    }
    MONT_HD friend bool operator!=(const mont_t& a, const mont_t& b) { return !(a == b); }

    // ---- reduction helper: x (N words, plus an extra top word) < 2m  ->  x mod m ----------
    MONT_HD static mont_t reduce_once(const uint32_t* x, uint32_t top) {
        using namespace mont_detail;
        mont_t r;
        uint32_t d[N], cc = 0;
        d[0] = sub_cc(x[0], P::mod(0), cc);
        MONT_UNROLL for (int i = 1; i < N; i++) d[i] = subc_cc(x[i], P::mod(i), cc);
        const uint32_t borrow = subc(top, 0, cc);  // 0 if x >= m, else 0xffffffff
        MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = borrow ? x[i] : d[i];
        return r;
    }

    // Word i of 2m, the lazy form's reduction constant.
    MONT_HDC static uint32_t mod2(int i) {
        return (P::mod(i) << 1) | (i > 0 ? P::mod(i - 1) >> 31 : 0u);
    }

    // The end of every multiplication: x (N words and a top word) < 2m. Canonical: one
    // conditional subtraction of m. Lazy: x as it is (top is 0, since 2m < R).
    MONT_HD static mont_t finish(const uint32_t* x, uint32_t top) {
        if constexpr (!LAZY) {
            return reduce_once(x, top);
        } else {
            mont_t r;
            MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = x[i];
            (void)top;
            return r;
        }
    }

    // ---- the two forms ------------------------------------------------------------------
    // A canonical value is already a lazy one; reduced() gives the canonical value of either.
    MONT_HD static mont_t lift(const canonical_t& c) {
        mont_t r;
        MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = c.v[i];
        return r;
    }
    MONT_HD canonical_t reduced() const {
        if constexpr (LAZY) {
            return canonical_t::reduce_once(v, 0);
        } else {
            canonical_t r;
            MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = v[i];
            return r;
        }
    }

    // ---- addition, subtraction, negation ----------------------------------------------
    MONT_HD friend mont_t operator+(const mont_t& a, const mont_t& b) {
        using namespace mont_detail;
        uint32_t s[N], cc = 0;
        s[0] = add_cc(a.v[0], b.v[0], cc);
        if constexpr (LAZY) {
            // a + b < 4m < R: N words, no carry out; then subtract 2m unless that borrows
            MONT_UNROLL for (int i = 1; i < N; i++) s[i] = addc_cc(a.v[i], b.v[i], cc);
            mont_t r;
            uint32_t d[N];
            d[0] = sub_cc(s[0], mod2(0), cc);
            MONT_UNROLL for (int i = 1; i < N; i++) d[i] = subc_cc(s[i], mod2(i), cc);
            const uint32_t borrow = subc(0, 0, cc);  // 0xffffffff if s < 2m
            MONT_UNROLL for (int i = 0; i < N; i++) r.v[i] = borrow ? s[i] : d[i];
            return r;
        } else {
            MONT_UNROLL for (int i = 1; i < N; i++) s[i] = addc_cc(a.v[i], b.v[i], cc);
            const uint32_t top = addc(0, 0, cc);
            return reduce_once(s, top);
        }
    }

    MONT_HD friend mont_t operator-(const mont_t& a, const mont_t& b) {
        using namespace mont_detail;
        mont_t r;
        uint32_t d[N], cc = 0;
        d[0] = sub_cc(a.v[0], b.v[0], cc);
        MONT_UNROLL for (int i = 1; i < N; i++) d[i] = subc_cc(a.v[i], b.v[i], cc);
        const uint32_t mask = subc(0, 0, cc);  // 0xffffffff if a < b
        // a < b: add m (canonical: a - b > -m) or 2m (lazy: a - b > -2m)
        r.v[0] = add_cc(d[0], (LAZY ? mod2(0) : P::mod(0)) & mask, cc);
        MONT_UNROLL for (int i = 1; i < N - 1; i++)
            r.v[i] = addc_cc(d[i], (LAZY ? mod2(i) : P::mod(i)) & mask, cc);
        r.v[N - 1] = addc(d[N - 1], (LAZY ? mod2(N - 1) : P::mod(N - 1)) & mask, cc);
        return r;
    }

    MONT_HD mont_t neg() const { return zero() - *this; }
    MONT_HD mont_t dbl() const { return *this + *this; }

    // ---- multiplication -----------------------------------------------------------------
    // One CIOS row of the even/odd multiplication: pe += (even pairs of a * bi) with the carry
    // c0 of the previous row's division, po += (odd pairs of a * bi), both += m * mod split the
    // same way with m chosen so that word 0 of pe + po vanishes, then both drop word 0 (the
    // carry out of it, (pe[0] != 0) since pe[0] + po[0] is 0 or 2^32, becomes the new c0).
    // pe holds pairs at words (0,1), (2,3), ... and a lone word N; po a lone word 0 and pairs
    // (1,2), ..., (N-1,N). Each pair is one wide multiply-add in the SASS.
    MONT_HD static void cios_row(uint32_t* pe, uint32_t* po, const mont_t& a, uint32_t bi,
                                 uint32_t& c0) {
        using namespace mont_detail;
        uint32_t cc = 0, tmp;
        // even pairs of a * bi into pe, with the carry c0 of the previous row's division
        tmp = add_cc(c0, 0xffffffffu, cc);  // carry flag := (c0 != 0)
        (void)tmp;
        even_pairs<true>(pe, a.v, bi, cc);
        odd_pairs(po, a.v, bi, cc);
        reduce_row(pe, po, c0, cc);
    }

    // The carry chains of a row, shared by the multiplication, the reduction-only rows and the
    // two-product rows (each pair is one wide multiply-add in the SASS). x: the N words of the
    // full operand (an element's words, or the modulus's through `mod_words`).
    struct mod_words {
        MONT_HDC uint32_t operator[](int j) const { return P::mod(j); }
    };
    // pe += the even pairs (j, j + 1) of x * y, j = 0, 2, ..., N - 2, then the carry into pe[N];
    // the first pair takes the carry flag in when CARRY_IN.
    template <bool CARRY_IN, class X>
    MONT_HD static void even_pairs(uint32_t* pe, const X& x, uint32_t y, uint32_t& cc) {
        using namespace mont_detail;
        if constexpr (CARRY_IN) {
            pe[0] = madc_lo_cc(x[0], y, pe[0], cc);
        } else {
            pe[0] = mad_lo_cc(x[0], y, pe[0], cc);
        }
        pe[1] = madc_hi_cc(x[0], y, pe[1], cc);
        MONT_UNROLL for (int j = 2; j < N; j += 2) {
            pe[j] = madc_lo_cc(x[j], y, pe[j], cc);
            pe[j + 1] = madc_hi_cc(x[j], y, pe[j + 1], cc);
        }
        pe[N] = addc(pe[N], 0, cc);
    }
    // po += the odd pairs (j, j + 1) of x * y, j = 1, 3, ..., N - 1 (no carry out of word N:
    // the row bounds keep it in N + 1 words).
    template <class X>
    MONT_HD static void odd_pairs(uint32_t* po, const X& x, uint32_t y, uint32_t& cc) {
        using namespace mont_detail;
        po[1] = mad_lo_cc(x[1], y, po[1], cc);
        po[2] = madc_hi_cc(x[1], y, po[2], cc);
        MONT_UNROLL for (int j = 3; j < N - 1; j += 2) {
            po[j] = madc_lo_cc(x[j], y, po[j], cc);
            po[j + 1] = madc_hi_cc(x[j], y, po[j + 1], cc);
        }
        po[N - 1] = madc_lo_cc(x[N - 1], y, po[N - 1], cc);
        po[N] = madc_hi(x[N - 1], y, po[N], cc);
    }
    // A row's reduction: m makes word 0 of pe + po vanish, m * mod is added (even pairs into
    // pe, odd into po), then both drop word 0; pe[0] + po[0] is 0 or 2^32 there, so c0 :=
    // pe[0] carries (pe[0] != 0) into the next row.
    MONT_HD static void reduce_row(uint32_t* pe, uint32_t* po, uint32_t& c0, uint32_t& cc) {
        const uint32_t m = (pe[0] + po[0]) * P::m0();
        even_pairs<false>(pe, mod_words(), m, cc);
        odd_pairs(po, mod_words(), m, cc);
        c0 = pe[0];
        shift_row(pe, po);
    }
    // Divide both accumulators by 2^32 (word 0 is known, see the callers).
    MONT_HD static void shift_row(uint32_t* pe, uint32_t* po) {
        MONT_UNROLL for (int j = 0; j < N; j++) {
            pe[j] = pe[j + 1];
            po[j] = po[j + 1];
        }
        pe[N] = po[N] = 0;
    }

    // ---- Karatsuba (MONT_MUL_KARATSUBA) -------------------------------------------------
    // Half product for the Karatsuba multiplication: a * b of H-word operands added into two
    // 2H-word accumulators that start at zero: word products a_i b_j with i + j even go to the
    // pair (i+j, i+j+1) of E, odd ones to O. Each row i is then one carry chain per
    // accumulator over adjacent pairs at fixed register pairs (as in sqr()). Bounds: after row
    // i either accumulator holds part of sum_{r <= i} a b_r 2^(32 r) < 2^(32 (i + H + 1)), so a
    // chain's carry goes at most into word i + H, where the row's last addc puts it.
    template <int H>
    MONT_HD static void half_product(const uint32_t* a, const uint32_t* b, uint32_t* E,
                                     uint32_t* O) {
        using namespace mont_detail;
        uint32_t cc = 0;
        MONT_UNROLL for (int i = 0; i < H; i++) {
            MONT_UNROLL for (int parity = 0; parity < 2; parity++) {
                uint32_t* acc = parity == 0 ? E : O;
                const int j0 = ((i & 1) == parity) ? 0 : 1;  // i + j0 has this parity
                int top = -1;
                MONT_UNROLL for (int j = j0; j < H; j += 2) {
                    acc[i + j] = j == j0 ? mad_lo_cc(a[j], b[i], acc[i + j], cc)
                                         : madc_lo_cc(a[j], b[i], acc[i + j], cc);
                    if (i + j + 1 == i + H) {
                        acc[i + j + 1] = madc_hi(a[j], b[i], acc[i + j + 1], cc);
                    } else {
                        acc[i + j + 1] = madc_hi_cc(a[j], b[i], acc[i + j + 1], cc);
                    }
                    top = i + j + 1;
                }
                if (top >= 0 && top < i + H) acc[i + H] = addc(acc[i + H], 0, cc);
            }
        }
    }

    // |x_lo - x_hi| of the two H-word halves of x, and the mask 0xffffffff when x_lo < x_hi.
    template <int H>
    MONT_HD static uint32_t half_difference(const uint32_t* x, uint32_t* d) {
        using namespace mont_detail;
        uint32_t cc = 0;
        d[0] = sub_cc(x[0], x[H], cc);
        MONT_UNROLL for (int k = 1; k < H; k++) d[k] = subc_cc(x[k], x[H + k], cc);
        const uint32_t neg = subc(0, 0, cc);
        // two's complement negation when negative: (d ^ neg) + (neg & 1)
        d[0] = add_cc(d[0] ^ neg, neg & 1u, cc);
        MONT_UNROLL for (int k = 1; k < H - 1; k++) d[k] = addc_cc(d[k] ^ neg, 0, cc);
        d[H - 1] = addc(d[H - 1] ^ neg, 0, cc);
        return neg;
    }

    // One level of (subtractive) Karatsuba for the product T = a b (2N words): with a = a0 +
    // a1 2^(32H), b likewise (H = N/2), z0 = a0 b0, z2 = a1 b1 and z1 = |a0 - a1| |b0 - b1|,
    // a0 b1 + a1 b0 = z0 + z2 - s z1 where s is the sign of (a0 - a1)(b0 - b1). Three H x H
    // products: 3 N^2 / 4 word products instead of N^2 (108 against 144 for Fp, 48 against 64
    // for Fr), each still one wide multiply-add; the price is ~5 N extra additions on the ALU
    // pipe, which the IMAD-bound multiplication leaves mostly idle (bench/notes/field.md,
    // ce2c0b1). Any a, b < 2^(32N) (the bound T < 2^(64N) is all it needs).
    MONT_HD static void karatsuba_product(const mont_t& a, const mont_t& b, uint32_t* T) {
        static_assert(N % 4 == 0, "the Karatsuba product needs N divisible by 4");
        using namespace mont_detail;
        constexpr int H = N / 2;
        uint32_t E[2 * N], O[2 * N], E1[N], O1[N], da[H], db[H], cc = 0;
        MONT_UNROLL for (int k = 0; k < 2 * N; k++) E[k] = O[k] = 0;
        MONT_UNROLL for (int k = 0; k < N; k++) E1[k] = O1[k] = 0;
        half_product<H>(a.v, b.v, E, O);                  // z0 at words 0 .. N-1
        half_product<H>(a.v + H, b.v + H, E + N, O + N);  // z2 at words N .. 2N-1
        const uint32_t sa = half_difference<H>(a.v, da);
        const uint32_t sb = half_difference<H>(b.v, db);
        half_product<H>(da, db, E1, O1);  // z1
        // T = z0 + z2 2^(32N) (disjoint words), z1 = E1 + O1
        uint32_t z1[N];
        T[0] = add_cc(E[0], O[0], cc);
        MONT_UNROLL for (int k = 1; k < 2 * N - 1; k++) T[k] = addc_cc(E[k], O[k], cc);
        T[2 * N - 1] = addc(E[2 * N - 1], O[2 * N - 1], cc);
        z1[0] = add_cc(E1[0], O1[0], cc);
        MONT_UNROLL for (int k = 1; k < N - 1; k++) z1[k] = addc_cc(E1[k], O1[k], cc);
        z1[N - 1] = addc(E1[N - 1], O1[N - 1], cc);
        // u = z0 + z2 (N words and a top bit)
        uint32_t u[N + 1];
        u[0] = add_cc(T[0], T[N], cc);
        MONT_UNROLL for (int k = 1; k < N; k++) u[k] = addc_cc(T[k], T[N + k], cc);
        u[N] = addc(0, 0, cc);
        // mid = u - z1 when the differences have the same sign, else u + z1: with sub = all
        // ones to subtract, u + (z1 ^ sub) + (sub & 1), the top word adding sub. mid = a0 b1 +
        // a1 b0 < 2^(32N + 1): N words and a top bit.
        const uint32_t sub = ~(sa ^ sb);
        uint32_t mid[N + 1];
        (void)add_cc(sub & 1u, 0xffffffffu, cc);  // carry flag := the + 1 of the negation
        MONT_UNROLL for (int k = 0; k < N; k++) mid[k] = addc_cc(u[k], z1[k] ^ sub, cc);
        mid[N] = addc(u[N], sub, cc);
        // T += mid 2^(32H); T = a b < 2^(64N), so no carry leaves word 2N-1
        T[H] = add_cc(T[H], mid[0], cc);
        MONT_UNROLL for (int k = 1; k <= N; k++) T[H + k] = addc_cc(T[H + k], mid[k], cc);
        MONT_UNROLL for (int k = H + N + 1; k < 2 * N - 1; k++) T[k] = addc_cc(T[k], 0, cc);
        T[2 * N - 1] = addc(T[2 * N - 1], 0, cc);
    }

    // The Karatsuba product, then its Montgomery reduction (redc_wide).
    MONT_HD static mont_t mul_karatsuba(const mont_t& a, const mont_t& b) {
        uint32_t T[2 * N];
        karatsuba_product(a, b, T);
        return redc_wide(T);
    }

    // Montgomery reduction of a full product D < m^2 (2N words): REDC(D) = REDC(D_lo) + D_hi
    // (mod m) with D = D_lo + D_hi R. D_lo goes into the even accumulator and N reduction-only
    // rows divide it by R (roles swapped per row, as in the multiplication); REDC(D_lo) <= m
    // (D_lo < R) and D_hi < m - 1 (D < m^2), so the sum is < 2m and one conditional
    // subtraction finishes. Shared by the SOS squaring and the Karatsuba multiplication.
    MONT_HD static mont_t redc_wide(const uint32_t* D) {
        using namespace mont_detail;
        uint32_t x[N + 1], y[N + 1], c0 = 0, cc = 0, tmp;
        MONT_UNROLL for (int j = 0; j < N; j++) x[j] = D[j], y[j] = 0;
        x[N] = y[N] = 0;
        MONT_UNROLL for (int i = 0; i < N; i += 2) {
            redc_row(x, y, c0);
            redc_row(y, x, c0);
        }
        uint32_t t[N];
        tmp = add_cc(c0, 0xffffffffu, cc);
        (void)tmp;
        MONT_UNROLL for (int j = 0; j < N; j++) t[j] = addc_cc(x[j], y[j], cc);
        uint32_t top = addc(0, 0, cc);
        t[0] = add_cc(t[0], D[N], cc);
        MONT_UNROLL for (int j = 1; j < N; j++) t[j] = addc_cc(t[j], D[N + j], cc);
        top = addc(top, 0, cc);
        return finish(t, top);
    }

    // Default: CIOS over 32-bit words with the row products split into an even-pair and an
    // odd-pair accumulator (both aligned at word 0). The products a[j]*b_i for even j occupy
    // disjoint word pairs (j, j+1) of Pe, those for odd j disjoint pairs of Po, so each row is
    // ONE carry chain of adjacent (mad.lo.cc, madc.hi.cc) pairs per accumulator, which ptxas
    // can issue as wide multiply-adds. After adding m*mod the low word of Pe + Po is 0 mod
    // 2^32; dividing by 2^32 drops word 0 of both and carries c0 = (Pe[0] != 0) into the next
    // row's first multiply-add (the carry flag is set by Pe[0] + 0xffffffff). Bounds: with
    // a, b < m and 2m < 2^(32N) the running total stays < 2m after each row (classic CIOS),
    // so both partial sums fit in N+1 words and no carry leaves word N. The two accumulators
    // swap roles every row (see the default branch below): for Fp that removes 225 of the
    // 712 SASS instructions of one product (register moves), for Fr ptxas had none to remove.
    // MONT_PORTABLE: the same CIOS with 64-bit intermediates and no carry flag.
    // MONT_MUL_SPLIT: the first version (separate lo and hi chains), kept for comparison.
    // MONT_MUL_EVENODD_FIXED: the even/odd version without the role swap, for comparison.
    MONT_HD friend mont_t operator*(const mont_t& a, const mont_t& b) {
#if defined(MONT_MUL_KARATSUBA) && !defined(MONT_PORTABLE)
        return mul_karatsuba(a, b);
#elif defined(MONT_PORTABLE)
        uint32_t t[N + 1];
        MONT_UNROLL for (int j = 0; j <= N; j++) t[j] = 0;
        MONT_UNROLL for (int i = 0; i < N; i++) {
            const uint64_t bi = b.v[i];
            uint64_t c = 0;
            MONT_UNROLL for (int j = 0; j < N; j++) {
                c += (uint64_t)a.v[j] * bi + t[j];
                t[j] = (uint32_t)c;
                c >>= 32;
            }
            c += t[N];
            t[N] = (uint32_t)c;
            const uint64_t m = (uint32_t)(t[0] * P::m0());
            c = (m * P::mod(0) + t[0]) >> 32;
            MONT_UNROLL for (int j = 1; j < N; j++) {
                c += m * P::mod(j) + t[j];
                t[j - 1] = (uint32_t)c;
                c >>= 32;
            }
            c += t[N];
            t[N - 1] = (uint32_t)c;
            t[N] = (uint32_t)(c >> 32);
        }
        return finish(t, t[N]);
#elif defined(MONT_MUL_SPLIT)
        using namespace mont_detail;
        uint32_t t[N + 1], cc = 0;
        MONT_UNROLL for (int j = 0; j <= N; j++) t[j] = 0;
        MONT_UNROLL for (int i = 0; i < N; i++) {
            const uint32_t bi = b.v[i];
            t[0] = mad_lo_cc(a.v[0], bi, t[0], cc);
            MONT_UNROLL for (int j = 1; j < N; j++) t[j] = madc_lo_cc(a.v[j], bi, t[j], cc);
            t[N] = addc(t[N], 0, cc);
            t[1] = mad_hi_cc(a.v[0], bi, t[1], cc);
            MONT_UNROLL for (int j = 1; j < N - 1; j++) t[j + 1] = madc_hi_cc(a.v[j], bi, t[j + 1], cc);
            t[N] = madc_hi(a.v[N - 1], bi, t[N], cc);
            const uint32_t m = t[0] * P::m0();
            t[0] = mad_lo_cc(m, P::mod(0), t[0], cc);
            MONT_UNROLL for (int j = 1; j < N; j++) t[j] = madc_lo_cc(m, P::mod(j), t[j], cc);
            t[N] = addc(t[N], 0, cc);
            t[1] = mad_hi_cc(m, P::mod(0), t[1], cc);
            MONT_UNROLL for (int j = 1; j < N - 1; j++) t[j + 1] = madc_hi_cc(m, P::mod(j), t[j + 1], cc);
            t[N] = madc_hi(m, P::mod(N - 1), t[N], cc);
            MONT_UNROLL for (int j = 0; j < N; j++) t[j] = t[j + 1];
            t[N] = 0;
        }
        return finish(t, t[N]);
#elif defined(MONT_MUL_EVENODD_FIXED)
        // The first even/odd version: pe always takes the even pairs, po the odd ones, and both
        // shift down one word per row. After the shift pe's pairs straddle register pairs, so
        // ptxas re-pairs them with ~19 moves per row (225 MOV per Fp product in the SASS).
        static_assert(N % 2 == 0, "the even/odd multiplication needs an even word count");
        uint32_t pe[N + 1], po[N + 1], c0 = 0;
        MONT_UNROLL for (int j = 0; j <= N; j++) pe[j] = po[j] = 0;
        MONT_UNROLL for (int i = 0; i < N; i++) cios_row(pe, po, a, b.v[i], c0);
        return finish_rows(pe, po, c0);
#else
        // Default: the rows alternate which accumulator takes the even pairs. Dividing by 2^32
        // moves po's pairs (1,2), (3,4), ... to (0,1), (2,3), ...: exactly where the next row's
        // even pairs go, and pe's to the odd positions. So with the roles swapped every row, each
        // (lo, hi) pair a wide multiply-add writes stays in the same register pair from row to
        // row and the shift is a renaming, not moves. Same values, same bounds: whichever
        // accumulator a product goes to, each is at most the CIOS total (< 2m 2^32 before the
        // shift), which fits N + 1 words.
        static_assert(N % 2 == 0, "the even/odd multiplication needs an even word count");
        uint32_t x[N + 1], y[N + 1], c0 = 0;
        MONT_UNROLL for (int j = 0; j <= N; j++) x[j] = y[j] = 0;
        MONT_UNROLL for (int i = 0; i < N; i += 2) {
            cios_row(x, y, a, b.v[i], c0);
            cios_row(y, x, a, b.v[i + 1], c0);
        }
        // after an even number of rows x is again the even accumulator
        return finish_rows(x, y, c0);
#endif
    }

    // The end of an even/odd product: the total x + y + c0 (N words and a top word, < 2m),
    // then finish().
    MONT_HD static mont_t finish_rows(const uint32_t* x, const uint32_t* y, uint32_t c0) {
        using namespace mont_detail;
        uint32_t t[N], cc = 0, tmp;
        tmp = add_cc(c0, 0xffffffffu, cc);  // carry flag := (c0 != 0)
        MONT_UNROLL for (int j = 0; j < N; j++) t[j] = addc_cc(x[j], y[j], cc);
        const uint32_t top = addc(0, 0, cc);
        (void)tmp;
        return finish(t, top);
    }

    // One reduction-only row (the second half of cios_row): m makes word 0 of pe + po + c0
    // vanish, m * mod is added (even pairs into pe with the carry c0 in, odd pairs into po),
    // then both drop word 0 and c0 becomes the carry out of it.
    MONT_HD static void redc_row(uint32_t* pe, uint32_t* po, uint32_t& c0) {
        using namespace mont_detail;
        uint32_t cc = 0, tmp;
        const uint32_t m = (pe[0] + po[0] + c0) * P::m0();
        tmp = add_cc(c0, 0xffffffffu, cc);  // carry flag := (c0 != 0)
        (void)tmp;
        even_pairs<true>(pe, mod_words(), m, cc);
        odd_pairs(po, mod_words(), m, cc);
        c0 = pe[0] != 0;  // pe[0] + po[0] is 0 or 2^32: the carry is 0 or 1
        shift_row(pe, po);
    }

    // One row of a * b + c * d: cios_row with the second product's pairs added into the same
    // two accumulators before the row's reduction, so the two products share one m * mod.
    // Each product is its own carry chain per accumulator (the first even chain takes c0).
    MONT_HD static void cios_row2(uint32_t* pe, uint32_t* po, const mont_t& a, uint32_t bi,
                                  const mont_t& c, uint32_t di, uint32_t& c0) {
        using namespace mont_detail;
        uint32_t cc = 0, tmp;
        tmp = add_cc(c0, 0xffffffffu, cc);  // carry flag := (c0 != 0)
        (void)tmp;
        even_pairs<true>(pe, a.v, bi, cc);
        even_pairs<false>(pe, c.v, di, cc);
        odd_pairs(po, a.v, bi, cc);
        odd_pairs(po, c.v, di, cc);
        reduce_row(pe, po, c0, cc);
    }

    // a b - c d with one Montgomery reduction for both products: computed as a b + c (2m - d),
    // each row adding both products' pairs before its reduction (cios_row2), so 3 N^2 word
    // products instead of 4 N^2. Why exact, for a, c < 2m, b, d < 2m (so 2m - d <= 2m): the
    // row totals t satisfy t' < t / 2^32 + a + c + m, so stay < 5m + 1 < R, within the N + 1
    // words of each accumulator; the result (a b + c (2m - d) + M m) / R with M < R is
    // < 8m^2 / R + m, which is < 2m when 8m < R (asserted: m's top word < 2^29; true for Fp,
    // false for Fr). In the lazy form that is the result; canonical operands are valid lazy
    // ones, so the canonical form takes the lazy result and makes it canonical (one
    // conditional subtraction, as a product's own). MONT_MUL_SUB=0 computes a * b - c * d
    // instead (for comparison).
    MONT_HD static mont_t mul_sub(const mont_t& a, const mont_t& b, const mont_t& c,
                                  const mont_t& d) {
#if defined(MONT_MUL_SUB) && MONT_MUL_SUB == 0
        return a * b - c * d;
#else
        if constexpr (!LAZY) {
            typedef mont_t<P, true> lazy_t;
            return lazy_t::mul_sub(lazy_t::lift(a), lazy_t::lift(b), lazy_t::lift(c),
                                   lazy_t::lift(d))
                .reduced();
        } else {
            static_assert(P::mod(N - 1) < (1u << 29), "mul_sub needs 8m < R");
            static_assert(N % 2 == 0, "the even/odd rows need an even word count");
            using namespace mont_detail;
            uint32_t e[N], cc = 0;  // 2m - d: no borrow, d < 2m
            e[0] = sub_cc(mod2(0), d.v[0], cc);
            MONT_UNROLL for (int i = 1; i < N - 1; i++) e[i] = subc_cc(mod2(i), d.v[i], cc);
            e[N - 1] = subc(mod2(N - 1), d.v[N - 1], cc);
            uint32_t x[N + 1], y[N + 1], c0 = 0;
            MONT_UNROLL for (int j = 0; j <= N; j++) x[j] = y[j] = 0;
            MONT_UNROLL for (int i = 0; i < N; i += 2) {
                cios_row2(x, y, a, b.v[i], c, e[i], c0);
                cios_row2(y, x, a, b.v[i + 1], c, e[i + 1], c0);
            }
            return finish_rows(x, y, c0);
        }
#endif
    }

    // Squaring. Default: the square D = a^2 (2N words) from the N(N-1)/2 cross products, doubled,
    // plus the N diagonal ones (N(N+1)/2 word products instead of N^2: 78 against 144 for Fp),
    // then Montgomery reduction: REDC(D) = REDC(D_lo) + D_hi (mod m) with D = D_lo + D_hi R.
    // The cross products a_i a_j (i < j) go to word pairs (i+j, i+j+1): those with i+j even
    // into E, odd into O, so each row i is one carry chain per accumulator over disjoint adjacent
    // pairs at fixed register pairs (no moves). Bounds: after row i, E + O < 2^(32(i+N+1)), so
    // no carry leaves word i+N; D < m^2 gives D_hi < m - 1, and REDC(D_lo) (the reduction-only
    // rows of the multiplication, from D_lo < R) is at most m, so REDC(D_lo) + D_hi < 2m and
    // one conditional subtraction finishes.
    // Opt-in (MONT_SQR_SOS): in the SASS (nvcc 13.0, sm_90) the Fp squaring has 221 wide products
    // instead of 288 but ~190 other instructions instead of ~100 (the E + O sum, the doubling,
    // the reduction's carries), so it saves ~5% of the issue cycles of a * a; for Fr it is 8
    // instructions longer. Default: a * a (bench/notes/field.md, 2026-11-29, ae63d49).
    MONT_HD mont_t sqr() const {
#if !defined(MONT_SQR_SOS) || defined(MONT_PORTABLE) || defined(MONT_MUL_SPLIT) || \
    defined(MONT_MUL_EVENODD_FIXED)
        return *this * *this;
#else
        static_assert(N % 2 == 0, "the even/odd squaring needs an even word count");
        using namespace mont_detail;
        const uint32_t* a = v;
        uint32_t E[2 * N], O[2 * N], cc = 0;
        MONT_UNROLL for (int k = 0; k < 2 * N; k++) E[k] = O[k] = 0;
        MONT_UNROLL for (int i = 0; i < N - 1; i++) {
            // j = i+1, i+3, ...: word pairs (i+j, i+j+1) at odd i+j, into O
            int top = 0;
            MONT_UNROLL for (int j = i + 1; j < N; j += 2) {
                O[i + j] = j == i + 1 ? mad_lo_cc(a[i], a[j], O[i + j], cc)
                                      : madc_lo_cc(a[i], a[j], O[i + j], cc);
                if (i + j + 1 == i + N) {
                    O[i + j + 1] = madc_hi(a[i], a[j], O[i + j + 1], cc);
                } else {
                    O[i + j + 1] = madc_hi_cc(a[i], a[j], O[i + j + 1], cc);
                }
                top = i + j + 1;
            }
            if (top < i + N) O[i + N] = addc(O[i + N], 0, cc);
            // j = i+2, i+4, ...: even i+j, into E
            top = 0;
            MONT_UNROLL for (int j = i + 2; j < N; j += 2) {
                E[i + j] = j == i + 2 ? mad_lo_cc(a[i], a[j], E[i + j], cc)
                                      : madc_lo_cc(a[i], a[j], E[i + j], cc);
                if (i + j + 1 == i + N) {
                    E[i + j + 1] = madc_hi(a[i], a[j], E[i + j + 1], cc);
                } else {
                    E[i + j + 1] = madc_hi_cc(a[i], a[j], E[i + j + 1], cc);
                }
                top = i + j + 1;
            }
            if (top && top < i + N) E[i + N] = addc(E[i + N], 0, cc);
        }
        // D = 2 (E + O) + sum_i a_i^2 2^(64 i)
        uint32_t D[2 * N];
        D[0] = add_cc(E[0], O[0], cc);
        MONT_UNROLL for (int k = 1; k < 2 * N - 1; k++) D[k] = addc_cc(E[k], O[k], cc);
        D[2 * N - 1] = addc(E[2 * N - 1], O[2 * N - 1], cc);
        D[0] = add_cc(D[0], D[0], cc);
        MONT_UNROLL for (int k = 1; k < 2 * N - 1; k++) D[k] = addc_cc(D[k], D[k], cc);
        D[2 * N - 1] = addc(D[2 * N - 1], D[2 * N - 1], cc);
        D[0] = mad_lo_cc(a[0], a[0], D[0], cc);
        D[1] = madc_hi_cc(a[0], a[0], D[1], cc);
        MONT_UNROLL for (int i = 1; i < N - 1; i++) {
            D[2 * i] = madc_lo_cc(a[i], a[i], D[2 * i], cc);
            D[2 * i + 1] = madc_hi_cc(a[i], a[i], D[2 * i + 1], cc);
        }
        D[2 * N - 2] = madc_lo_cc(a[N - 1], a[N - 1], D[2 * N - 2], cc);
        D[2 * N - 1] = madc_hi(a[N - 1], a[N - 1], D[2 * N - 1], cc);
        return redc_wide(D);
#endif
    }

    MONT_HD mont_t& operator+=(const mont_t& b) { return *this = *this + b; }
    MONT_HD mont_t& operator-=(const mont_t& b) { return *this = *this - b; }
    MONT_HD mont_t& operator*=(const mont_t& b) { return *this = *this * b; }

    // ---- conversions ------------------------------------------------------------------
    MONT_HD mont_t to_mont() const { return *this * r2(); }  // canonical x -> x R
    MONT_HD mont_t from_mont() const {                        // x R -> canonical x
        mont_t raw_one = zero();
        raw_one.v[0] = 1;
        // lazy: x R^-1 is <= m (= m only for x = m), so one subtraction makes it canonical
        return lift((*this * raw_one).reduced());
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

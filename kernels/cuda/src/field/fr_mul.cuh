// Fr Montgomery multiplication specialised for the BLS12-381 scalar modulus r (the NTT's hot
// path). Same inputs, output and radix R = 2^256 as mont_t::operator* (mont.cuh): a, b < r in,
// a b R^-1 mod r out, fully reduced, so the result is bit-identical to the generic one.
//
// Why a second multiplication (bench/notes/ntt.md, 2026-11-29, 1581305): the NTT is bound by the IMAD
// pipe, and on sm_90 a 32x32->64 product (IMAD.WIDE, or IMAD.HI) takes two slots of that pipe
// against one for a plain IMAD (inferred from the SASS of fr_mul_chain and its measured rate:
// 64 IMAD.WIDE + 64 IMAD.HI + 49 IMAD per multiplication = 305 slots = 4.77 SM clocks per
// multiplication = 54.8 G/s at 100%, 51.8 G/s measured). The generic CIOS spends 177 of those
// slots on the reduction m*r, because
//   * it multiplies m by r's two lowest words, 0x00000001 and 0xffffffff, as full products; and
//   * its 32-bit rows shift the accumulators by one word per row, so the (lo, hi) word pairs of
//     the reduction products sit on odd register pairs and ptxas issues each as IMAD (lo, 1
//     slot) + IMAD.HI (2 slots) instead of one IMAD.WIDE (2 slots).
// fr_mul_r fixes the first point only (m r_0 and m r_1 become additions on the ALU pipe: ~275
// slots in the SASS); fr_mul_r2 (the default) also works in 64-bit digits, two rows at a time,
// so that every product pair stays aligned: 112 IMAD.WIDE = 224 slots (SASS of the
// fr_mul_chain loop, per multiplication: 224 + 18 IMAD slots, 110 other instructions).
// Measured on the H200 (2026-11-29, 1581305 and dc8bbb2; bench/notes/ntt.md): 51.6 / 54.9 / 61.0 G/s for the generic,
// fr_mul_r and fr_mul_r2. Note that ptxas balances moves and additions between the IMAD and
// ALU pipes, so in a kernel with other work the SUM of IMAD slots and ALU instructions is what
// a multiplication costs (391 generic, ~350 fr_mul_r2).
//
// Both keep mont.cuh's even/odd accumulators (pe holds products on even word pairs, po on odd
// ones, each row one carry chain per accumulator), whose bounds are argued at each function.
//
// Compiles on the host too (mont.cuh's exact carry-flag emulation): tests/kernels/test_cuda_fr_mul_host.py
// checks the very instruction sequences on the CPU against Python integers.
#pragma once
#include "field/fields.cuh"

// The specialisation is only valid for r: check the words it relies on at compile time.
static_assert(fr_params::mod(0) == 0x00000001u && fr_params::mod(1) == 0xffffffffu,
              "fr_mul.cuh assumes r = ... ffffffff 00000001 (low 64 bits 2^64 - 2^32 + 1)");
static_assert(fr_params::m0() == 0xffffffffu, "fr_mul.cuh assumes -r^-1 mod 2^32 = 0xffffffff");

#define FR_MOD(i) fr_params::mod(i)

// Variant 1, 32-bit rows (mont.cuh's row structure, reduction specialised): a b R^-1 mod r.
// The reduction row adds exactly the values the generic code adds (pe: m r_0 at words 0-1,
// po: m r_1 at words 1-2, the rest as there), so mont.cuh's bounds carry over unchanged (every
// partial total < 2r, no carry out of word N in either accumulator).
MONT_HD fr_t fr_mul_r(const fr_t& a, const fr_t& b) {
    using namespace mont_detail;
    constexpr int N = 8;
    uint32_t pe[N + 1], po[N + 1], cc = 0, c0 = 0;
    MONT_UNROLL for (int j = 0; j <= N; j++) pe[j] = po[j] = 0;
    MONT_UNROLL for (int i = 0; i < N; i++) {
        const uint32_t bi = b.v[i];
        // ---- a * bi: even words into pe (with the carry c0 of the last row's division) ----
        (void)add_cc(c0, 0xffffffffu, cc);  // carry flag := (c0 != 0)
        pe[0] = madc_lo_cc(a.v[0], bi, pe[0], cc);
        pe[1] = madc_hi_cc(a.v[0], bi, pe[1], cc);
        MONT_UNROLL for (int j = 2; j < N; j += 2) {
            pe[j] = madc_lo_cc(a.v[j], bi, pe[j], cc);
            pe[j + 1] = madc_hi_cc(a.v[j], bi, pe[j + 1], cc);
        }
        pe[N] = addc(pe[N], 0, cc);
        // ---- odd words into po (words 1..N) ----
        po[1] = mad_lo_cc(a.v[1], bi, po[1], cc);
        po[2] = madc_hi_cc(a.v[1], bi, po[2], cc);
        MONT_UNROLL for (int j = 3; j < N - 1; j += 2) {
            po[j] = madc_lo_cc(a.v[j], bi, po[j], cc);
            po[j + 1] = madc_hi_cc(a.v[j], bi, po[j + 1], cc);
        }
        po[N - 1] = madc_lo_cc(a.v[N - 1], bi, po[N - 1], cc);
        po[N] = madc_hi(a.v[N - 1], bi, po[N], cc);
        // ---- m = -(word 0 of the total) (M0 = -r^-1 = -1 mod 2^32) ----
        const uint32_t s = pe[0] + po[0];
        const uint32_t m = 0u - s;
        // m r_1 = m (2^32 - 1) = (m << 32) - m: lo = -m = s, hi = m - (m != 0)
        const uint32_t h_lo = sub_cc(0u, m, cc);
        const uint32_t h_hi = subc(m, 0u, cc);
        // pe += m r_0 (= m, at word 0) + m r_{2,4,6}
        pe[0] = add_cc(pe[0], m, cc);
        pe[1] = addc_cc(pe[1], 0u, cc);
        MONT_UNROLL for (int j = 2; j < N; j += 2) {
            pe[j] = madc_lo_cc(m, FR_MOD(j), pe[j], cc);
            pe[j + 1] = madc_hi_cc(m, FR_MOD(j), pe[j + 1], cc);
        }
        pe[N] = addc(pe[N], 0, cc);
        // po += m r_1 (words 1-2) + m r_{3,5,7}
        po[1] = add_cc(po[1], h_lo, cc);
        po[2] = addc_cc(po[2], h_hi, cc);
        MONT_UNROLL for (int j = 3; j < N - 1; j += 2) {
            po[j] = madc_lo_cc(m, FR_MOD(j), po[j], cc);
            po[j + 1] = madc_hi_cc(m, FR_MOD(j), po[j + 1], cc);
        }
        po[N - 1] = madc_lo_cc(m, FR_MOD(N - 1), po[N - 1], cc);
        po[N] = madc_hi(m, FR_MOD(N - 1), po[N], cc);
        // ---- divide by 2^32: pe[0] + po[0] is 0 or 2^32, the carry is (pe[0] != 0) ----
        c0 = pe[0];
        MONT_UNROLL for (int j = 0; j < N; j++) {
            pe[j] = pe[j + 1];
            po[j] = po[j + 1];
        }
        pe[N] = po[N] = 0;
    }
    // total = pe + po + c0 (< 2r), then one conditional subtraction
    uint32_t t[N];
    (void)add_cc(c0, 0xffffffffu, cc);
    MONT_UNROLL for (int j = 0; j < N; j++) t[j] = addc_cc(pe[j], po[j], cc);
    const uint32_t top = addc(0, 0, cc);
    return fr_t::reduce_once(t, top);
}

// Two rows at a time (64-bit digits of b and of m), so that every product pair lands on an
// even-aligned word pair of its accumulator in every row (pe: pairs at even word positions, po:
// at odd ones; the division is by 2^64 = two words, which keeps that parity, where the 32-bit
// rows above shift it by one each row and leave ptxas pairs it cannot issue as IMAD.WIDE).
// Per double row (digits b_i, b_{i+1} of b):
//   * a b_i: a_j b_i at word j (even j -> pe, odd j -> po), a b_{i+1}: a_j b_{i+1} at word j+1
//     (odd j -> pe, even j -> po), 16 IMAD.WIDE;
//   * m = -T r^-1 mod 2^64 with T the low 64 bits of the total; r = 2^64 - 2^32 + 1 mod 2^64,
//     whose inverse is 1 + 2^32 ((1 - x)(1 + x) = 1 - x^2 = 1 mod 2^64 for x = 2^32), so
//     m = -(T + T 2^32) mod 2^64 costs three additions;
//   * m r: m_lo r_j at word j, m_hi r_j at word j+1; r_0 = 1 and r_1 = 2^32 - 1 as additions
//     (x (2^32 - 1) = (x << 32) - x: low word -x, high word x - (x != 0)), the other 12 products
//     as IMAD.WIDE: 28 IMAD.WIDE = 56 slots per double row, 224 per multiplication;
//   * the total is now 0 mod 2^64: drop two words of each accumulator; the carry out of the
//     dropped words is (pe's two low words != 0) (pe + po = 0 or 2^64 there), fed into the next
//     double row's first chain.
// Bounds: with a < r, B = b_i + b_{i+1} 2^32 < 2^64, m < 2^64 and a total T < 2r before the
// double row, T + a B + m r <= (2r - 1) + (r - 1)(2^64 - 1) + (2^64 - 1) r = 2^64 (2r - 1), so
// the total stays < 2r after the division and < 2^320 before it. Every term added to pe or po
// is non-negative, so each accumulator stays below the total: 10 words hold it (no carry out
// of word 9), and below 2^256 after each division (words 8, 9 are zero at the end).
// REDUCE = false (fr_mul_lazy below): the total is returned as it is, in [0, 2r).
template <bool REDUCE = true>
MONT_HD fr_t fr_mul_r2(const fr_t& a, const fr_t& b) {
    using namespace mont_detail;
    constexpr int N = 8;
    const uint32_t* A = a.v;
    uint32_t pe[N + 2], po[N + 2], cc = 0, cw = 0;
    MONT_UNROLL for (int j = 0; j < N + 2; j++) pe[j] = po[j] = 0;
    MONT_UNROLL for (int i = 0; i < N; i += 2) {
        const uint32_t b0 = b.v[i], b1 = b.v[i + 1];
        // Chain order and carry propagation: pe[8..9] and po[8..9] are 0 here (zeroed by the last
        // division), so chain 1 ends with pe[8] = its carry (<= 1) and chain 2 ends in po[8]
        // with no carry out (high word + carry < 2^32); chain A then leaves pe[8] <= 2. The
        // chains that end at word 9 need no carry out (each accumulator < 2^320). That saves
        // three carry-propagating additions per double row against propagating every chain.
        // chain 1: a b_i, even j into pe (carry of the last division in)
        (void)add_cc(cw, 0xffffffffu, cc);  // carry flag := (cw != 0)
        MONT_UNROLL for (int j = 0; j < N; j += 2) {
            pe[j] = madc_lo_cc(A[j], b0, pe[j], cc);
            pe[j + 1] = madc_hi_cc(A[j], b0, pe[j + 1], cc);
        }
        pe[N] = addc(pe[N], 0u, cc);
        // chain 2: a b_i, odd j into po (words 1..8)
        po[1] = mad_lo_cc(A[1], b0, po[1], cc);
        po[2] = madc_hi_cc(A[1], b0, po[2], cc);
        MONT_UNROLL for (int j = 3; j < N - 1; j += 2) {
            po[j] = madc_lo_cc(A[j], b0, po[j], cc);
            po[j + 1] = madc_hi_cc(A[j], b0, po[j + 1], cc);
        }
        po[N - 1] = madc_lo_cc(A[N - 1], b0, po[N - 1], cc);
        po[N] = madc_hi(A[N - 1], b0, po[N], cc);
        // chain 4: a b_{i+1} at word j+1, even j into po (words 1..8)
        po[1] = mad_lo_cc(A[0], b1, po[1], cc);
        po[2] = madc_hi_cc(A[0], b1, po[2], cc);
        MONT_UNROLL for (int j = 2; j < N; j += 2) {
            po[j + 1] = madc_lo_cc(A[j], b1, po[j + 1], cc);
            po[j + 2] = madc_hi_cc(A[j], b1, po[j + 2], cc);
        }
        po[N + 1] = addc(po[N + 1], 0u, cc);
        // m = -(T + T 2^32) mod 2^64, T = low 64 bits of pe + po (chain 3 below only touches
        // words 2..9, so T is final here)
        const uint32_t t0 = add_cc(pe[0], po[0], cc);
        const uint32_t t1 = addc(pe[1], po[1], cc);
        const uint32_t m_lo = sub_cc(0u, t0, cc);
        const uint32_t m_hi = subc(0u, t0 + t1, cc);
        // m_lo (2^32 - 1) and m_hi (2^32 - 1) as (low, high) words
        const uint32_t y_lo = sub_cc(0u, m_lo, cc);
        const uint32_t y_hi = subc(m_lo, 0u, cc);
        const uint32_t x_lo = sub_cc(0u, m_hi, cc);
        const uint32_t x_hi = subc(m_hi, 0u, cc);
        // chain A: pe += m (words 0-1: m_lo r_0, m_hi r_0) + m_lo r_{2,4,6}
        pe[0] = add_cc(pe[0], m_lo, cc);
        pe[1] = addc_cc(pe[1], m_hi, cc);
        MONT_UNROLL for (int j = 2; j < N; j += 2) {
            pe[j] = madc_lo_cc(m_lo, FR_MOD(j), pe[j], cc);
            pe[j + 1] = madc_hi_cc(m_lo, FR_MOD(j), pe[j + 1], cc);
        }
        pe[N] = addc(pe[N], 0u, cc);
        // chain 3: a b_{i+1} at word j+1, odd j into pe (words 2..9)
        pe[2] = mad_lo_cc(A[1], b1, pe[2], cc);
        pe[3] = madc_hi_cc(A[1], b1, pe[3], cc);
        MONT_UNROLL for (int j = 3; j < N - 1; j += 2) {
            pe[j + 1] = madc_lo_cc(A[j], b1, pe[j + 1], cc);
            pe[j + 2] = madc_hi_cc(A[j], b1, pe[j + 2], cc);
        }
        pe[N] = madc_lo_cc(A[N - 1], b1, pe[N], cc);
        pe[N + 1] = madc_hi(A[N - 1], b1, pe[N + 1], cc);
        // chain B: pe += m_hi r_1 (words 2-3) + m_hi r_{3,5,7} (words 4..9)
        pe[2] = add_cc(pe[2], x_lo, cc);
        pe[3] = addc_cc(pe[3], x_hi, cc);
        MONT_UNROLL for (int j = 3; j < N - 1; j += 2) {
            pe[j + 1] = madc_lo_cc(m_hi, FR_MOD(j), pe[j + 1], cc);
            pe[j + 2] = madc_hi_cc(m_hi, FR_MOD(j), pe[j + 2], cc);
        }
        pe[N] = madc_lo_cc(m_hi, FR_MOD(N - 1), pe[N], cc);
        pe[N + 1] = madc_hi(m_hi, FR_MOD(N - 1), pe[N + 1], cc);
        // chain C: po += m_lo r_1 (words 1-2) + m_lo r_{3,5,7} (words 3..8)
        po[1] = add_cc(po[1], y_lo, cc);
        po[2] = addc_cc(po[2], y_hi, cc);
        MONT_UNROLL for (int j = 3; j < N; j += 2) {
            po[j] = madc_lo_cc(m_lo, FR_MOD(j), po[j], cc);
            po[j + 1] = madc_hi_cc(m_lo, FR_MOD(j), po[j + 1], cc);
        }
        po[N + 1] = addc(po[N + 1], 0u, cc);
        // chain D: po += m_hi r_{2,4,6} (words 3..8)
        po[3] = mad_lo_cc(m_hi, FR_MOD(2), po[3], cc);
        po[4] = madc_hi_cc(m_hi, FR_MOD(2), po[4], cc);
        MONT_UNROLL for (int j = 4; j < N; j += 2) {
            po[j + 1] = madc_lo_cc(m_hi, FR_MOD(j), po[j + 1], cc);
            po[j + 2] = madc_hi_cc(m_hi, FR_MOD(j), po[j + 2], cc);
        }
        po[N + 1] = addc(po[N + 1], 0u, cc);
        // divide by 2^64
        cw = pe[0] | pe[1];
        MONT_UNROLL for (int j = 0; j < N; j++) {
            pe[j] = pe[j + 2];
            po[j] = po[j + 2];
        }
        pe[N] = pe[N + 1] = po[N] = po[N + 1] = 0;
    }
    uint32_t t[N];
    (void)add_cc(cw, 0xffffffffu, cc);
    MONT_UNROLL for (int j = 0; j < N; j++) t[j] = addc_cc(pe[j], po[j], cc);
    const uint32_t top = addc(0, 0, cc);
    if constexpr (REDUCE) {
        return fr_t::reduce_once(t, top);
    } else {
        fr_t r;  // the total is < 2r < 2^256: top is 0
        MONT_UNROLL for (int j = 0; j < N; j++) r.v[j] = t[j];
        (void)top;
        return r;
    }
}

// ---- the NTT's lazy Fr (NTT_LAZY in ntt.cuh): values in [0, 2r) between multiplications ----
// Fr has no lazy form for both operands (4r > 2^256: mont.cuh), but fr_mul_r2 needs only its
// FIRST operand below r: the bounds above hold for any 64-bit digits of b, so for any b <
// 2^256, and the total before the final subtraction is < (r 2^256 + 2^256 r) / 2^256 = 2r. So
// with a canonical twiddle first, the butterflies' data may stay in [0, 2r): the product
// skips its conditional subtraction, and the additions reduce by 2r instead of r.
MONT_HD fr_t fr_mul_lazy(const fr_t& w_canonical, const fr_t& b_below_2r) {
    return fr_mul_r2<false>(w_canonical, b_below_2r);
}

// x + y for x, y < 2r: the sum (< 4r < 2^257, so with its carry word) less 2r if it is >= 2r.
MONT_HD fr_t fr_add_lazy(const fr_t& x, const fr_t& y) {
    using namespace mont_detail;
    constexpr int N = 8;
    uint32_t s[N], d[N], cc = 0;
    s[0] = add_cc(x.v[0], y.v[0], cc);
    MONT_UNROLL for (int j = 1; j < N; j++) s[j] = addc_cc(x.v[j], y.v[j], cc);
    const uint32_t top = addc(0, 0, cc);
    d[0] = sub_cc(s[0], fr_t::mod2(0), cc);
    MONT_UNROLL for (int j = 1; j < N; j++) d[j] = subc_cc(s[j], fr_t::mod2(j), cc);
    const uint32_t borrow = subc(top, 0, cc);  // 0xffffffff if the sum < 2r
    fr_t r;
    MONT_UNROLL for (int j = 0; j < N; j++) r.v[j] = borrow ? s[j] : d[j];
    return r;
}

// x - y for x, y < 2r: the difference, plus 2r if it borrowed.
MONT_HD fr_t fr_sub_lazy(const fr_t& x, const fr_t& y) {
    using namespace mont_detail;
    constexpr int N = 8;
    uint32_t d[N], cc = 0;
    d[0] = sub_cc(x.v[0], y.v[0], cc);
    MONT_UNROLL for (int j = 1; j < N; j++) d[j] = subc_cc(x.v[j], y.v[j], cc);
    const uint32_t mask = subc(0, 0, cc);  // 0xffffffff if x < y
    fr_t r;
    r.v[0] = add_cc(d[0], fr_t::mod2(0) & mask, cc);
    MONT_UNROLL for (int j = 1; j < N - 1; j++) r.v[j] = addc_cc(d[j], fr_t::mod2(j) & mask, cc);
    r.v[N - 1] = addc(d[N - 1], fr_t::mod2(N - 1) & mask, cc);
    return r;
}

// The canonical value of x < 2r.
MONT_HD fr_t fr_canonical(const fr_t& x) { return fr_t::reduce_once(x.v, 0); }

// The Fr multiplication of the NTT kernels: FR_MUL_VARIANT 0 = mont.cuh's generic CIOS,
// 1 = fr_mul_r, 2 (default) = fr_mul_r2. Every variant returns the same fully reduced value.
// (A Karatsuba product with fr_mul_r2's reduction rows, 96 wide products against 112, measured
// 0.68x in the chain and 0.69x in the NTT on the H200: bench/notes/field.md, ce2c0b1, where
// its code is; removed after that measurement.)
#ifndef FR_MUL_VARIANT
#define FR_MUL_VARIANT 2
#endif
MONT_HD fr_t fr_mul(const fr_t& a, const fr_t& b) {
#if FR_MUL_VARIANT == 0
    return a * b;
#elif FR_MUL_VARIANT == 1
    return fr_mul_r(a, b);
#else
    return fr_mul_r2(a, b);
#endif
}

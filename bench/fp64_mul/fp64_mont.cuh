// Montgomery multiplication for the BLS12-381 fields on the FP64 FMA units, after Emmart, Zheng
// and Weems, "Faster modular exponentiation using double precision floating point arithmetic on
// the GPU" (ARITH 2018). A micro-benchmark candidate (bench/fp64_mul/README.md), not used by the
// prover.
//
// Representation: an element is N limbs of 52 bits, each an integer held EXACTLY in a double
// (0 <= limb < 2^52, every such integer is a double), little-endian: Fr N = 5 (260 bits for
// the 255-bit r), Fp N = 8 (416 bits for the 381-bit p). Montgomery radix R' = 2^(52 N):
// 2^260 (Fr) and 2^416 (Fp), NOT the 2^256 / 2^384 of mont.cuh. Inputs and outputs of
// fp64_mul are fully reduced (< m, canonical limbs).
//
// One 52 x 52 -> 104-bit product a b (a, b integers in [0, 2^52), p = a b < 2^104) costs three
// FP64-pipe instructions and no rounding error:
//   hi = fma_rz(a, b, C1), C1 = 2^104. p + 2^104 lies in [2^104, 2^105), where doubles are the
//        multiples of 2^52 (53-bit significand, ulp = 2^(104 - 52)); rounding toward zero gives
//        hi = 2^104 + H 2^52 with H = floor(p / 2^52) in [0, 2^52 - 2] (p <= (2^52 - 1)^2).
//        Its bit pattern is K_HI + H, K_HI = bits(2^104) = (1023 + 104) << 52 =
//        0x4670000000000000: the exponent field is fixed, the significand field IS H.
//   s  = C2 - hi, C2 = 2^104 + 2^52 (a double: a multiple of the ulp 2^52). s = (1 - H) 2^52
//        is a multiple of 2^52 of magnitude < 2^104, so it is a double and the subtraction is
//        exact (also by Sterbenz: C2 / 2 <= hi <= 2 C2), in any rounding mode.
//   lo = fma(a, b, s) = p - H 2^52 + 2^52 = (p mod 2^52) + 2^52, an integer in [2^52, 2^53):
//        a double, so the fma is exact in any rounding mode. Its bit pattern is K_LO + (p mod
//        2^52), K_LO = bits(2^52) = (1023 + 52) << 52 = 0x4330000000000000.
// So p = (bits(hi) - K_HI) 2^52 + (bits(lo) - K_LO), and the column sums of a product are
// integer additions of the raw bit patterns (reinterpreted, no conversion instruction), with
// the known exponent biases K_HI / K_LO subtracted once per column per row (their low 52 bits
// are 0, so they never disturb the low bits, and K_LO = 0 mod 2^52).
// Why round toward zero for hi: with round-to-nearest H could be floor + 1, lo = p - H 2^52 would
// lie in [-2^51, 2^51], and no double constant C2 puts lo + C2 - 2^104 in a single binade
// (that needs an offset of 3 2^51, not a multiple of the ulp 2^52 at 2^104); an extra FP64
// addition per product would be needed. RZ keeps it at three.
// The host build (g++) computes fma_rz with std::fma under fesetround(FE_TOWARDZERO): IEEE 754
// defines fma in every rounding mode, so the host values are bit-identical to the GPU's
// __fma_rz (tests/kernels/test_fp64_mul_host.py; compile with -frounding-math).
//
// Montgomery multiplication (CIOS over 52-bit digits, columns t[0..N] in 64-bit integers):
// per row i: t += a b_i (N products: lo to column j, hi to column j + 1); m = t_0 mu mod 2^52
// with mu = -m^-1 mod 2^52; t += m M (N products); t_0 is now 0 mod 2^52: t_1 += t_0 >> 52
// and the columns shift down by one. The columns are not normalised inside the rows (only
// column 0's carry moves), so a row is 4N additions of raw patterns; the biases are tracked as
// compile-time constants and subtracted only where a true value is needed (column 0's carry,
// the end).
// Bounds: T (the value sum t_j 2^(52 j)) < 2M before a row and a, b < M, m < 2^52 give
// T + a b_i + m M < 2M + (M - 1)(2^52 - 1) + (2^52 - 1) M < 2^52 2M, so T < 2M after every row
// (classic CIOS; 2M < 2^(52 N) for both fields). Every term is non-negative; a column receives
// at most 4 terms < 2^52 + 2^52 per row plus carries, over at most N + 1 rows: < 2^58, so the
// true column values fit a signed 64-bit integer with room and the arithmetic shift is exact.
// End: carries are propagated (T < 2M < 2^(52 N) fits N limbs), one conditional subtraction
// of M, and each limb goes back to a double as bits(K_LO | limb) - 2^52 (exact: one DADD).
//
// SPLIT (template argument, 0..N): the reduction products m M_j with j < SPLIT take only hi
// from the FP64 pipe (one fma_rz) and their low half from the integer pipe: (m M_j) mod 2^52 =
// (m M_j mod 2^64) & (2^52 - 1), a 64-bit multiplication by a constant (IMAD.WIDE + 2 IMAD);
// with hi rounded toward zero, H = floor(m M_j / 2^52), so the two halves agree. That moves two
// FP64 instructions per product onto the IMAD pipe (4 slots): SPLIT = 0 is the all-FP64
// multiplication, SPLIT = N puts the whole reduction's low halves on IMAD.
//
// Conversions (fp64_load_* / fp64_store_*): mont.cuh's Montgomery form x 2^256 (Fr) / x 2^384
// (Fp), as little-endian 64-bit words, <-> x R'. To R': repack the words into 52-bit limbs (shifts
// and masks) and one fp64_mul by CIN = R'^2 / R mod m (x R CIN / R' = x R'); back: one fp64_mul
// by COUT = R mod m (x R' R / R' = x R) and repack. So a conversion costs one multiplication
// plus ~3N integer instructions; a kernel that keeps its data in this form pays it only at
// load and store. From / to canonical: multiply by R2 = R'^2 mod m / by 1.
#pragma once
#include "field/fields.cuh"

#if !defined(__CUDACC_RTC__)
#include <cfenv>
#include <cmath>
#include <cstring>
#endif

namespace fp64m {

constexpr uint64_t MASK52 = (1ull << 52) - 1;
constexpr double C1 = 0x1p104;           // 2^104: hi lands in [2^104, 2^105), ulp 2^52
constexpr double C2 = 0x1p104 + 0x1p52;  // 2^104 + 2^52: lo lands in [2^52, 2^53), ulp 1
constexpr double TWO52 = 0x1p52;         // 2^52: limb <-> bits(K_LO | limb)
constexpr uint64_t K_HI = 0x4670000000000000ull;  // bits(2^104) = (1023 + 104) << 52
constexpr uint64_t K_LO = 0x4330000000000000ull;  // bits(2^52) = (1023 + 52) << 52

MONT_HD uint64_t dbits(double x) {
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(x);
#else
    uint64_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
#endif
}
MONT_HD double bitsd(uint64_t u) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double x;
    std::memcpy(&x, &u, sizeof x);
    return x;
#endif
}
// a b + c rounded toward zero (one DFMA.RZ on the device).
MONT_HD double fma_rz(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
    return __fma_rz(a, b, c);
#else
    // volatile: the fma is evaluated between the two mode switches
    volatile double va = a, vb = b, vc = c;
    const int old = std::fegetround();
    std::fesetround(FE_TOWARDZERO);
    volatile double r = std::fma(va, vb, vc);
    std::fesetround(old);
    return r;
#endif
}
// a b + c rounded to nearest (only used where the result is exact).
MONT_HD double fma_rn(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
    return __fma_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}
// limb (integer < 2^52) -> double, exactly: 2^52 + limb has bit pattern K_LO | limb.
MONT_HD double limb_to_double(uint64_t x) { return bitsd(K_LO | x) - TWO52; }
// double holding an integer < 2^52 -> limb: x + 2^52 is exact, its pattern is K_LO + x.
MONT_HD uint64_t double_to_limb(double x) { return dbits(x + TWO52) & MASK52; }

// The exact product of two 52-bit integers as raw bit patterns: a b = (hib - K_HI) 2^52 +
// (lob - K_LO). Three FP64 instructions (see the top of the file).
MONT_HD void mul52(double a, double b, uint64_t& hib, uint64_t& lob) {
    const double hi = fma_rz(a, b, C1);
    const double s = C2 - hi;
    const double lo = fma_rn(a, b, s);
    hib = dbits(hi);
    lob = dbits(lo);
}

template <int N>
struct f64x {
    double v[N];  // 52-bit limbs, little-endian; trivial type (usable in shared memory)
};

}  // namespace fp64m

// ---- field parameters, 52-bit limbs -------------------------------------------------------
// Values computed with Python from kernels/constants.py (FR_MODULUS, FP_MODULUS) on 2026-12-02;
// tests/kernels/test_fp64_mul_host.py recomputes each one and compares it with what the host build of
// this header prints. Limb j is bits [52 j, 52 j + 52).
//   MOD  : the modulus m;
//   MU   : -m^-1 mod 2^52. For r: r = 1 - 2^32 mod 2^52, whose inverse is 1 + 2^32
//          ((1 - x)(1 + x) = 1 - x^2 and x^2 = 2^64 = 0 mod 2^52), so MU = 2^52 - 2^32 - 1;
//   CIN  : R'^2 / R mod m = 2^(2*52N - 256) = 2^264 mod r, 2^(832 - 384) = 2^448 mod p;
//   COUT : R mod m (mont.cuh's radix: 2^256 mod r, 2^384 mod p);
//   R2   : R'^2 mod m (canonical -> this form), ONE : R' mod m (the form of 1).
#define FP64M_LIMB_FN(fn, ...)                       \
    MONT_HDC static uint64_t fn(int j) {             \
        const uint64_t w[] = {__VA_ARGS__};          \
        return w[j];                                 \
    }

struct fr52_params {
    static constexpr int N = 5;      // 260 bits >= 2 r (r < 2^255)
    static constexpr int WORDS = 4;  // 64-bit words of mont.cuh's fr_t
    static constexpr int RBITS = 256;
    typedef fr_t old_t;
    FP64M_LIMB_FN(mod, 0xfffff00000001ull, 0x02fffe5bfefffull, 0x9a1d80553bda4ull,
                  0x7d483339d8080ull, 0x073eda753299dull)
    static constexpr uint64_t MU = 0xffffeffffffffull;
    FP64M_LIMB_FN(cin, 0x00234fffffdcbull, 0x61039ef635000ull, 0xdce3c3e2e7505ull,
                  0x7fa6f1563642bull, 0x0247db575276aull)
    FP64M_LIMB_FN(cout, 0x00001fffffffeull, 0xfa00034802000ull, 0xcbc4ff55884b7ull,
                  0x056f998c4fefeull, 0x01824b159acc5ull)
    FP64M_LIMB_FN(r2, 0x99103f29c6cf0ull, 0x57927663d999eull, 0xa1c0ed631138bull,
                  0x3c829f7715f1bull, 0x009ff646cc027ull)
    FP64M_LIMB_FN(one, 0x00022ffffffddull, 0x9700396c23000ull, 0xedf77458d1293ull,
                  0xdf20ff1776e6aull, 0x026821fa14f77ull)
};

struct fp52_params {
    static constexpr int N = 8;      // 416 bits >= 2 p (p < 2^381)
    static constexpr int WORDS = 6;  // 64-bit words of mont.cuh's fp_t
    static constexpr int RBITS = 384;
    typedef fp_t old_t;
    FP64M_LIMB_FN(mod, 0xeffffffffaaabull, 0xfeb153ffffb9full, 0x6b0f6241eabffull,
                  0x12bf6730d2a0full, 0x764774b84f385ull, 0x1ba7b6434bacdull, 0x1ea397fe69a4bull,
                  0x000000001a011ull)
    static constexpr uint64_t MU = 0x3fffcfffcfffdull;
    FP64M_LIMB_FN(cin, 0x7fde37dba9366ull, 0x4e27525bc342bull, 0x1f5b1e9778489ull,
                  0xb872b2b91b9dcull, 0xb206f497dfcafull, 0x4137cc89a9b0bull, 0xd9d20d7e39959ull,
                  0x000000000411cull)
    FP64M_LIMB_FN(cout, 0x900000002fffdull, 0x0bc40c0002760ull, 0x3c758baebf400ull,
                  0x57455f4898575ull, 0xd77ce58537052ull, 0x071a97a256ec6ull, 0xec3fa80e4935cull,
                  0x0000000015f65ull)
    FP64M_LIMB_FN(r2, 0xa5bf4cb89af51ull, 0x3afbba7ca31a2ull, 0x2646160ec71f1ull,
                  0xa84d710465903ull, 0x3480a4a188311ull, 0x98e5907ad91f5ull, 0x2075d74507266ull,
                  0x0000000008746ull)
    FP64M_LIMB_FN(one, 0x6480ea8e9b9afull, 0x65766c8fe444full, 0x8b540fea96f7dull,
                  0x3b2ee82efd422ull, 0xa6723e5f0ade5ull, 0xff6eb6fdd4230ull, 0xe06ef23c24a25ull,
                  0x0000000014c8eull)
};
#undef FP64M_LIMB_FN

typedef fp64m::f64x<fr52_params::N> fr52_t;
typedef fp64m::f64x<fp52_params::N> fp52_t;

// ---- the multiplication ---------------------------------------------------------------------
// a b R'^-1 mod m for a, b < m (canonical limbs); fully reduced output.
// LAZY: a, b < 2m in, a b R'^-1 mod m + (0 or m) < 2m out, no final subtraction (valid because
// 4m < R': then a b + m' m < 4m^2 + R' m, and dividing by R' leaves < m (4m / R' + 1) < 2m).
template <class P, int SPLIT = 0, bool LAZY = false>
MONT_HD fp64m::f64x<P::N> fp64_mul(const fp64m::f64x<P::N>& a, const fp64m::f64x<P::N>& b) {
    using namespace fp64m;
    constexpr int N = P::N;
    static_assert(SPLIT >= 0 && SPLIT <= N, "SPLIT counts reduction products, 0..N");
    // t: the columns as raw sums (true value + bias, mod 2^64); bias: the exponent biases
    // (K_LO per lo pattern, K_HI per hi pattern) each column holds. bias is a compile-time
    // constant at every point of the unrolled code (the compiler folds it away), so the biases
    // cost nothing inside the rows: they are subtracted where a true value is needed (the carry
    // out of column 0, and the end). All biases are multiples of 2^52, so the low 52 bits of a
    // raw column are always the true ones (m below needs no correction).
    uint64_t t[N + 1], bias[N + 1];
    MONT_UNROLL for (int j = 0; j <= N; j++) t[j] = bias[j] = 0;
    MONT_UNROLL for (int i = 0; i < N; i++) {
        const double bi = b.v[i];
        // t += a b_i
        MONT_UNROLL for (int j = 0; j < N; j++) {
            uint64_t h, l;
            mul52(a.v[j], bi, h, l);
            t[j] += l;
            t[j + 1] += h;
            bias[j] += K_LO;
            bias[j + 1] += K_HI;
        }
        // m = t_0 mu mod 2^52
        const uint64_t m = (t[0] * P::MU) & MASK52;
        const double md = limb_to_double(m);
        // t += m M
        MONT_UNROLL for (int j = 0; j < N; j++) {
            uint64_t h, l;
            if (j < SPLIT) {
                // hi from the FP64 pipe, lo = (m M_j) mod 2^52 from the integer pipe:
                // m M_j - (H << 52) mod 2^64, and h << 52 = H << 52 mod 2^64 (K_HI << 52 = 0)
                h = dbits(fma_rz(md, (double)P::mod(j), C1));
                l = m * P::mod(j) - (h << 52);  // true value, no bias
            } else {
                mul52(md, (double)P::mod(j), h, l);
                bias[j] += K_LO;
            }
            t[j] += l;
            t[j + 1] += h;
            bias[j + 1] += K_HI;
        }
        // the true t_0 is 0 mod 2^52 now: carry its quotient into t_1 and drop it (high words
        // only: both low 52 bits of t_0 and of its bias are 0)
        const uint32_t c0 = ((uint32_t)(t[0] >> 32) - (uint32_t)(bias[0] >> 32)) >> 20;
        t[1] += c0;
        MONT_UNROLL for (int j = 0; j < N; j++) {
            t[j] = t[j + 1];
            bias[j] = bias[j + 1];
        }
        t[N] = bias[N] = 0;
    }
    MONT_UNROLL for (int j = 0; j < N; j++) t[j] -= bias[j];
    // T = sum t_j 2^(52 j) < 2M: normalise (true columns are non-negative and < 2^58, so each
    // carry is the column's high word >> 20)
    MONT_UNROLL for (int j = 0; j < N - 1; j++) {
        t[j + 1] += (uint32_t)(t[j] >> 52);
        t[j] &= MASK52;
    }
    f64x<N> r;
    if (LAZY) {  // T < 2M is the output
        MONT_UNROLL for (int j = 0; j < N; j++) r.v[j] = limb_to_double(t[j]);
        return r;
    }
    // subtract M once if T >= M
    uint64_t d[N];
    int64_t c = 0;
    MONT_UNROLL for (int j = 0; j < N; j++) {
        const int64_t x = (int64_t)t[j] - (int64_t)P::mod(j) + c;
        d[j] = (uint64_t)x & MASK52;
        c = x >> 52;  // 0 or -1 (arithmetic shift)
    }
    MONT_UNROLL for (int j = 0; j < N; j++) r.v[j] = limb_to_double(c ? t[j] : d[j]);
    return r;
}

// ---- conversions ----------------------------------------------------------------------------
// W little-endian 64-bit words (value < 2^(64 W)) -> N 52-bit limbs (value must fit 52 N bits).
template <int W, int N>
MONT_HD void words_to_limbs(const uint64_t* w, uint64_t* l) {
    MONT_UNROLL for (int j = 0; j < N; j++) {
        const int k = 52 * j / 64, o = 52 * j % 64;
        uint64_t v = k < W ? w[k] >> o : 0;
        if (o > 12 && k + 1 < W) v |= w[k + 1] << (64 - o);
        l[j] = v & fp64m::MASK52;
    }
}
// N limbs (each < 2^52) -> W words.
template <int W, int N>
MONT_HD void limbs_to_words(const uint64_t* l, uint64_t* w) {
    MONT_UNROLL for (int k = 0; k < W; k++) {
        uint64_t v = 0;
        MONT_UNROLL for (int j = 0; j < N; j++) {
            const int s = 52 * j - 64 * k;
            if (s >= 0 && s < 64) v |= l[j] << s;
            if (s < 0 && s > -52) v |= l[j] >> -s;
        }
        w[k] = v;
    }
}
template <class P>
MONT_HD fp64m::f64x<P::N> fp64_from_words(const uint64_t* w) {  // integer, no Montgomery step
    uint64_t l[P::N];
    words_to_limbs<P::WORDS, P::N>(w, l);
    fp64m::f64x<P::N> r;
    MONT_UNROLL for (int j = 0; j < P::N; j++) r.v[j] = fp64m::limb_to_double(l[j]);
    return r;
}
template <class P>
MONT_HD void fp64_to_words(const fp64m::f64x<P::N>& x, uint64_t* w) {
    uint64_t l[P::N];
    MONT_UNROLL for (int j = 0; j < P::N; j++) l[j] = fp64m::double_to_limb(x.v[j]);
    limbs_to_words<P::WORDS, P::N>(l, w);
}
template <class P, int K>
MONT_HD fp64m::f64x<P::N> fp64_const() {  // K: 0 cin, 1 cout, 2 r2, 3 one, 4 mod
    fp64m::f64x<P::N> r;
    MONT_UNROLL for (int j = 0; j < P::N; j++) {
        const uint64_t v = K == 0 ? P::cin(j) : K == 1 ? P::cout(j) : K == 2 ? P::r2(j)
                                                      : K == 3 ? P::one(j) : P::mod(j);
        r.v[j] = (double)v;
    }
    return r;
}
// mont.cuh's Montgomery form (x 2^256 / x 2^384, as 64-bit words) -> x R'
template <class P, int SPLIT = 0>
MONT_HD fp64m::f64x<P::N> fp64_load_mont(const uint64_t* w) {
    return fp64_mul<P, SPLIT>(fp64_from_words<P>(w), fp64_const<P, 0>());
}
// x R' -> mont.cuh's Montgomery form, as 64-bit words
template <class P, int SPLIT = 0>
MONT_HD void fp64_store_mont(const fp64m::f64x<P::N>& x, uint64_t* w) {
    fp64_to_words<P>(fp64_mul<P, SPLIT>(x, fp64_const<P, 1>()), w);
}
// mont_t (32-bit words) <-> 64-bit words
template <class T, int W>
MONT_HD void mont_to_words(const T& x, uint64_t* w) {
    MONT_UNROLL for (int k = 0; k < W; k++) w[k] = x.v[2 * k] | ((uint64_t)x.v[2 * k + 1] << 32);
}
template <class T, int W>
MONT_HD T words_to_mont(const uint64_t* w) {
    T x;
    MONT_UNROLL for (int k = 0; k < W; k++) {
        x.v[2 * k] = (uint32_t)w[k];
        x.v[2 * k + 1] = (uint32_t)(w[k] >> 32);
    }
    return x;
}

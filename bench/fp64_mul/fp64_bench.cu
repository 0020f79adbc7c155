// Micro-benchmark kernels: the integer Montgomery multiplications of today (fr_mul_r2 for Fr,
// mont.cuh's generic CIOS for Fr and Fp) against the FP64 ones of fp64_mont.cuh, in the same
// module and the same harness (bench/fp64_mul/run.py). Every array is little-endian 64-bit
// words per element (Fr 4, Fp 6), one element per thread.
//
//   chain_<v>(io, iters, n): thread i loads element z (mont.cuh's Montgomery form z R), runs
//       C = 4 independent chains x_c <- x_c z (x_c starting at z^(c+1)) for `iters` steps,
//       multiplies the four together and stores the result: the Montgomery form (R = 2^256 /
//       2^384) of z^(10 + 4 iters), whatever the variant (the FP64 ones convert to their radix
//       R' at load and back at store), so the driver checks the chains' last values too. 4
//       chains per thread as fr_mul_chain4 in kernels/cuda/ntt.cu.
//   chain_<v>_c8: the same with C = 8 chains (more independent work per thread against
//       latency): the result is z^(36 + 8 iters). No map kernels of their own (the
//       multiplication is the 4-chain variant's).
//   map_<v>(out, a, b, n): out = a b Rv^-1 mod m for canonical a, b < m, where Rv is the
//       variant's own radix (2^256 / 2^384 for the integer ones, 2^260 / 2^416 for FP64): the
//       exactness check of the multiplication alone.
//   mapc_<v>(out, a, b, n) (FP64 only): a, b in mont.cuh's form -> R' -> multiply -> back:
//       must equal mont.cuh's a b 2^-256 / 2^-384, the check of the conversions.
#include "field/fr_mul.cuh"
#include "fp64_mont.cuh"

// ---- variants: T, load/store of mont.cuh's form (64-bit words), raw load/store, mul --------
struct v_fr_r2 {
    typedef fr_t T;
    static constexpr int W = 4;
    __device__ static T load(const uint64_t* w) { return words_to_mont<fr_t, 4>(w); }
    __device__ static void store(const T& x, uint64_t* w) { mont_to_words<fr_t, 4>(x, w); }
    __device__ static T load_raw(const uint64_t* w) { return load(w); }
    __device__ static void store_raw(const T& x, uint64_t* w) { store(x, w); }
    __device__ static T mul(const T& a, const T& b) { return fr_mul_r2(a, b); }
};
struct v_fr_generic : v_fr_r2 {
    __device__ static T mul(const T& a, const T& b) { return a * b; }
};
struct v_fp_generic {
    typedef fp_t T;
    static constexpr int W = 6;
    __device__ static T load(const uint64_t* w) { return words_to_mont<fp_t, 6>(w); }
    __device__ static void store(const T& x, uint64_t* w) { mont_to_words<fp_t, 6>(x, w); }
    __device__ static T load_raw(const uint64_t* w) { return load(w); }
    __device__ static void store_raw(const T& x, uint64_t* w) { store(x, w); }
    __device__ static T mul(const T& a, const T& b) { return a * b; }
};
// One level of Karatsuba for the product (3 half products instead of 4), the same Montgomery
// reduction rows (mont.cuh, mul_karatsuba): same inputs and output as the generic ones.
struct v_fp_kara : v_fp_generic {
    __device__ static T mul(const T& a, const T& b) { return fp_t::mul_karatsuba(a, b); }
};
struct v_fr_kara : v_fr_generic {
    __device__ static T mul(const T& a, const T& b) { return fr_t::mul_karatsuba(a, b); }
};
template <class P, int SPLIT, bool LAZY = false>
struct v_f64 {
    typedef fp64m::f64x<P::N> T;
    static constexpr int W = P::WORDS;
    __device__ static T load(const uint64_t* w) { return fp64_load_mont<P, SPLIT>(w); }
    __device__ static void store(const T& x, uint64_t* w) { fp64_store_mont<P, SPLIT>(x, w); }
    __device__ static T load_raw(const uint64_t* w) { return fp64_from_words<P>(w); }
    __device__ static void store_raw(const T& x, uint64_t* w) { fp64_to_words<P>(x, w); }
    __device__ static T mul(const T& a, const T& b) { return fp64_mul<P, SPLIT, LAZY>(a, b); }
};

__device__ __forceinline__ unsigned long long gtid() {
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}

// C independent chains per thread (C = 4 or 8); the combine multiplies the C chains together
// in a tree: C = 4 (x0 x1)(x2 x3), C = 8 ((x0 x1)(x2 x3))((x4 x5)(x6 x7)).
template <class V, int C>
__device__ __forceinline__ void chainN(uint64_t* io, int iters, unsigned long long n) {
    static_assert(C == 4 || C == 8, "4 or 8 chains");
    const unsigned long long i = gtid();
    if (i >= n) return;
    typedef typename V::T T;
    uint64_t w[V::W];
#pragma unroll
    for (int k = 0; k < V::W; k++) w[k] = io[i * V::W + k];
    const T z = V::load(w);
    T x[C];
    x[0] = z;
#pragma unroll
    for (int c = 1; c < C; c++) x[c] = V::mul(x[c - 1], z);
#pragma unroll 1
    for (int it = 0; it < iters; it++) {  // not unrolled: the SASS of one iteration = C mults
#pragma unroll
        for (int c = 0; c < C; c++) x[c] = V::mul(x[c], z);
    }
    x[0] = V::mul(V::mul(x[0], x[1]), V::mul(x[2], x[3]));
    if constexpr (C == 8) {
        x[4] = V::mul(V::mul(x[4], x[5]), V::mul(x[6], x[7]));
        x[0] = V::mul(x[0], x[4]);
    }
    V::store(x[0], w);
#pragma unroll
    for (int k = 0; k < V::W; k++) io[i * V::W + k] = w[k];
}

template <class V, bool CONV>
__device__ __forceinline__ void map1(uint64_t* out, const uint64_t* a, const uint64_t* b,
                                     unsigned long long n) {
    const unsigned long long i = gtid();
    if (i >= n) return;
    uint64_t wa[V::W], wb[V::W];
#pragma unroll
    for (int k = 0; k < V::W; k++) wa[k] = a[i * V::W + k], wb[k] = b[i * V::W + k];
    if (CONV) {
        V::store(V::mul(V::load(wa), V::load(wb)), wa);
    } else {
        V::store_raw(V::mul(V::load_raw(wa), V::load_raw(wb)), wa);
    }
#pragma unroll
    for (int k = 0; k < V::W; k++) out[i * V::W + k] = wa[k];
}

#define FP64B_KERNELS(name, V)                                                                \
    extern "C" __global__ void chain_##name(uint64_t* io, int iters, unsigned long long n) { \
        chainN<V, 4>(io, iters, n);                                                           \
    }                                                                                         \
    extern "C" __global__ void map_##name(uint64_t* out, const uint64_t* a, const uint64_t* b, \
                                          unsigned long long n) {                             \
        map1<V, false>(out, a, b, n);                                                         \
    }
#define FP64B_CONV_KERNEL(name, V)                                                             \
    extern "C" __global__ void mapc_##name(uint64_t* out, const uint64_t* a, const uint64_t* b, \
                                           unsigned long long n) {                             \
        map1<V, true>(out, a, b, n);                                                           \
    }

FP64B_KERNELS(fr_r2, v_fr_r2)
FP64B_KERNELS(fr_generic, v_fr_generic)
FP64B_KERNELS(fp_generic, v_fp_generic)
FP64B_KERNELS(fp_kara, v_fp_kara)
FP64B_KERNELS(fr_kara, v_fr_kara)

typedef v_f64<fr52_params, 0> v_fr_f64;
typedef v_f64<fr52_params, 0, true> v_fr_f64_lazy;
typedef v_f64<fr52_params, 5> v_fr_f64_s5;
typedef v_f64<fp52_params, 0> v_fp_f64;
typedef v_f64<fp52_params, 0, true> v_fp_f64_lazy;
typedef v_f64<fp52_params, 8> v_fp_f64_s8;
FP64B_KERNELS(fr_f64, v_fr_f64)
FP64B_KERNELS(fr_f64_lazy, v_fr_f64_lazy)
FP64B_KERNELS(fr_f64_s5, v_fr_f64_s5)
FP64B_KERNELS(fp_f64, v_fp_f64)
FP64B_KERNELS(fp_f64_lazy, v_fp_f64_lazy)
FP64B_KERNELS(fp_f64_s8, v_fp_f64_s8)
FP64B_CONV_KERNEL(fr_f64, v_fr_f64)
FP64B_CONV_KERNEL(fr_f64_s5, v_fr_f64_s5)
FP64B_CONV_KERNEL(fp_f64, v_fp_f64)
FP64B_CONV_KERNEL(fp_f64_s8, v_fp_f64_s8)

// 8 chains per thread: does more independent work per thread lift the latency-bound kernels?
#define FP64B_CHAIN8_KERNEL(name, V)                                                             \
    extern "C" __global__ void chain_##name##_c8(uint64_t* io, int iters, unsigned long long n) { \
        chainN<V, 8>(io, iters, n);                                                             \
    }
FP64B_CHAIN8_KERNEL(fr_r2, v_fr_r2)
FP64B_CHAIN8_KERNEL(fr_f64, v_fr_f64)
FP64B_CHAIN8_KERNEL(fr_f64_lazy, v_fr_f64_lazy)
FP64B_CHAIN8_KERNEL(fp_generic, v_fp_generic)
FP64B_CHAIN8_KERNEL(fp_f64, v_fp_f64)

// 8 chains with registers capped so that 2 blocks of 256 threads fit an SM (65536 registers /
// 512 threads = 128 per thread): twice the independent work per scheduler of the 4-chain
// kernels at their own occupancy, if the cap costs no spills inside the loop.
#define FP64B_CHAIN8_BOUNDED_KERNEL(name, V)                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2)                                      \
        chain_##name##_c8b(uint64_t* io, int iters, unsigned long long n) {                   \
        chainN<V, 8>(io, iters, n);                                                           \
    }
FP64B_CHAIN8_BOUNDED_KERNEL(fr_f64, v_fr_f64)
FP64B_CHAIN8_BOUNDED_KERNEL(fr_f64_lazy, v_fr_f64_lazy)
FP64B_CHAIN8_BOUNDED_KERNEL(fr_r2, v_fr_r2)

// Split across multiplications: of the 4 chains of a thread, 2 run on the integer
// multiplication VI and 2 on the FP64 one VF, so the scheduler overlaps the IMAD-bound and
// the FP64-bound instruction streams (the pipes are separate; the issue slot is shared).
template <class VI, class VF>
__device__ __forceinline__ void chain_mix(uint64_t* io, int iters, unsigned long long n) {
    const unsigned long long i = gtid();
    if (i >= n) return;
    static_assert(VI::W == VF::W, "same field");
    uint64_t w[VI::W];
#pragma unroll
    for (int k = 0; k < VI::W; k++) w[k] = io[i * VI::W + k];
    const typename VI::T zi = VI::load(w);
    const typename VF::T zf = VF::load(w);
    typename VI::T x0 = zi, x1 = VI::mul(zi, zi);              // z, z^2
    typename VF::T x2 = VF::mul(VF::mul(zf, zf), zf);           // z^3
    typename VF::T x3 = VF::mul(x2, zf);                        // z^4
#pragma unroll 1
    for (int it = 0; it < iters; it++) {
        x0 = VI::mul(x0, zi);
        x1 = VI::mul(x1, zi);
        x2 = VF::mul(x2, zf);
        x3 = VF::mul(x3, zf);
    }
    VF::store(VF::mul(x2, x3), w);
    x0 = VI::mul(VI::mul(x0, x1), VI::load(w));
    VI::store(x0, w);
#pragma unroll
    for (int k = 0; k < VI::W; k++) io[i * VI::W + k] = w[k];
}
extern "C" __global__ void chain_fr_mix(uint64_t* io, int iters, unsigned long long n) {
    chain_mix<v_fr_r2, v_fr_f64>(io, iters, n);
}
extern "C" __global__ void chain_fp_mix(uint64_t* io, int iters, unsigned long long n) {
    chain_mix<v_fp_generic, v_fp_f64>(io, iters, n);
}

// Kernels of the GPU NTT and H step (loaded by kernels/cuda/ntt.py through kernels/cuda/runtime.py).
// Every array is Fr, 8 little-endian 32-bit words per element (= the (n, 4) uint64 layout),
// Montgomery form unless a kernel says otherwise.
#include "ntt/ntt.cuh"

#ifndef NTT_BLOCK
#define NTT_BLOCK 256  // = BLOCK in kernels/cuda/ntt.py: one thread per radix-4 group of a tile
#endif
#ifndef NTT_MIN_BLOCKS
#define NTT_MIN_BLOCKS 3  // 80 registers: 3 blocks of 256 threads per SM; measured best on the H200 (notes)
#endif

#define NTT_PASS_PARAMS                                                                       \
    fr_t *dst, const fr_t *src, const fr_t *tw, int k, int s, int L, int logC, int K,         \
        int inverse, int flags, int pre_sb, int post_sb, const fr_t *pre_hi,                  \
        const fr_t *pre_lo, const fr_t *post_hi, const fr_t *post_lo, const fr_t *post_const, \
        const fr_t *qa, const fr_t *qb

#define NTT_PASS_ARGS                                                                          \
    dst, src, tw, ntt_pass_args{k, s, L, logC, K, inverse, flags, pre_sb, post_sb}, pre_hi,    \
        pre_lo, post_hi, post_lo, post_const, qa, qb

// One pass of Gentleman-Sande (natural -> bit-reversed) butterflies.
extern "C" __global__ void __launch_bounds__(NTT_BLOCK, NTT_MIN_BLOCKS)
    ntt_pass_dif(NTT_PASS_PARAMS) {
    ntt_pass_body<false>(NTT_PASS_ARGS);
}

// One pass of Cooley-Tukey (bit-reversed -> natural) butterflies.
extern "C" __global__ void __launch_bounds__(NTT_BLOCK, NTT_MIN_BLOCKS)
    ntt_pass_dit(NTT_PASS_PARAMS) {
    ntt_pass_body<true>(NTT_PASS_ARGS);
}

// out[i] = hi[i >> sb] * lo[i & (2^sb - 1)] for i < count: the twiddle table T[i] = w^i from two
// small host-built tables (w^(t 2^sb) and w^u), one multiplication per entry.
extern "C" __global__ void fr_build_powers(fr_t *out, const fr_t *hi, const fr_t *lo, int sb,
                                           unsigned long long count) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    fr_store(out + i, fr_mul(fr_ldg(hi + (i >> sb)), fr_ldg(lo + (i & ((1ull << sb) - 1)))));
}

// out[t] = sum_{i < m} c[t m + i] x^i (Horner inside each chunk of m coefficients; the host
// combines chunks with x^m, recursively): polynomial evaluation on the GPU for the H identity.
extern "C" __global__ void fr_horner_chunks(fr_t *out, const fr_t *c, unsigned long long n, int m,
                                            const fr_t *xp) {
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long start = t * (unsigned long long)m;
    if (start >= n) return;
    unsigned long long end = start + m;
    if (end > n) end = n;
    const fr_t x = fr_ldg(xp);
    fr_t acc = fr_t::zero();
    for (unsigned long long i = end; i > start; i--) acc = fr_mul(acc, x) + fr_load(c + i - 1);
    fr_store(out + t, acc);
}

// Elementwise Fr operations (tests, conversions): op 0 a*b, 1 a+b, 2 a-b, 3 to Montgomery,
// 4 from Montgomery, 5 a^2, 6 a^-1, 7 -a.
extern "C" __global__ void fr_elementwise(fr_t *out, const fr_t *a, const fr_t *b, int op,
                                          unsigned long long n) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const fr_t x = fr_load(a + i);
    fr_t y;
    switch (op) {
        case 0: y = fr_mul(x, fr_load(b + i)); break;  // the NTT multiplication (fr_mul.cuh)
        case 1: y = x + fr_load(b + i); break;
        case 2: y = x - fr_load(b + i); break;
        case 3: y = x.to_mont(); break;
        case 4: y = x.from_mont(); break;
        case 5: y = x.sqr(); break;
        case 6: y = x.inverse(); break;
        default: y = x.neg(); break;
    }
    fr_store(out + i, y);
}

// out[i] = in[bitrev_k(i)] per vector (gridDim.y = batch); out of place.
extern "C" __global__ void fr_bitrev_permute(fr_t *out, const fr_t *in, int k) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >> k) return;
    const unsigned long long off = (unsigned long long)blockIdx.y << k;
    fr_store(out + off + i, fr_load(in + off + ntt_brev((uint32_t)i, k)));
}

// x[i] <-> x[bitrev_k(i)] in place, per vector (gridDim.y = batch): bitrev_k is an involution,
// so the thread of the smaller index of each pair swaps it and every other thread does nothing.
// The last step of the H step in one or two slots (kernels/cuda/h_streamed.py), which has no
// second buffer to gather into.
extern "C" __global__ void fr_bitrev_swap(fr_t *x, int k) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >> k) return;
    const unsigned long long j = ntt_brev((uint32_t)i, k);
    if (j <= i) return;
    const unsigned long long off = (unsigned long long)blockIdx.y << k;
    const fr_t xi = fr_load(x + off + i), xj = fr_load(x + off + j);
    fr_store(x + off + i, xj);
    fr_store(x + off + j, xi);
}

// Throughput probes: independent chains of `iters` Fr multiplications per thread (fr_mul, the
// NTT's; MUL picks a variant for the same-run comparison: 0 mont.cuh generic, 1 fr_mul_r,
// 2 fr_mul_r2).
template <int MUL>
__device__ __forceinline__ fr_t fr_mul_v(const fr_t &a, const fr_t &b) {
    if (MUL == 0) return a * b;
    if (MUL == 1) return fr_mul_r(a, b);
    return fr_mul_r2(a, b);
}
template <int MUL, int CHAINS>
__device__ __forceinline__ void mul_chain(fr_t *io, int iters, unsigned long long n) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const fr_t z = fr_load(io + i);
    fr_t x[CHAINS];
    x[0] = z;
#pragma unroll
    for (int c = 1; c < CHAINS; c++) x[c] = x[c - 1] + z;  // distinct starting values
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int c = 0; c < CHAINS; c++) x[c] = fr_mul_v<MUL>(x[c], z);
    }
#pragma unroll
    for (int c = 1; c < CHAINS; c++) x[0] = x[0] + x[c];
    fr_store(io + i, x[0]);
}
extern "C" __global__ void fr_mul_chain(fr_t *io, int iters, unsigned long long n) {
    mul_chain<FR_MUL_VARIANT, 2>(io, iters, n);
}
extern "C" __global__ void fr_mul_chain4(fr_t *io, int iters, unsigned long long n) {
    mul_chain<FR_MUL_VARIANT, 4>(io, iters, n);
}
extern "C" __global__ void fr_mul_chain_v0(fr_t *io, int iters, unsigned long long n) {
    mul_chain<0, 2>(io, iters, n);
}
extern "C" __global__ void fr_mul_chain_v1(fr_t *io, int iters, unsigned long long n) {
    mul_chain<1, 2>(io, iters, n);
}
extern "C" __global__ void fr_mul_chain_v2(fr_t *io, int iters, unsigned long long n) {
    mul_chain<2, 2>(io, iters, n);
}

// out[3 i + v] = a[i] * b[i] by multiplication variant v (0 generic, 1 fr_mul_r, 2 fr_mul_r2):
// the GPU test of the device builds of every variant.
extern "C" __global__ void fr_mul_variants(fr_t *out, const fr_t *a, const fr_t *b,
                                           unsigned long long n) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const fr_t x = fr_load(a + i), y = fr_load(b + i);
    fr_store(out + 3 * i, fr_mul_v<0>(x, y));
    fr_store(out + 3 * i + 1, fr_mul_v<1>(x, y));
    fr_store(out + 3 * i + 2, fr_mul_v<2>(x, y));
}

// Random Fr elements below 2^254 < r (valid in either form): splitmix64 of (seed, index), so
// large test and benchmark inputs need no host round trip and no library RNG. Element i of a
// launch is element first + i of the sequence, so a vector made in chunks is the same vector
// whatever the chunk size.
__device__ __forceinline__ unsigned long long splitmix64(unsigned long long &state) {
    unsigned long long z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
extern "C" __global__ void fr_random(fr_t *out, unsigned long long n, unsigned long long seed,
                                     unsigned long long first) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long st = seed ^ ((first + i) * 0xD1B54A32D192ED03ull);
    fr_t x;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const unsigned long long z = splitmix64(st);
        x.v[2 * w] = (uint32_t)z;
        x.v[2 * w + 1] = (uint32_t)(z >> 32);
    }
    x.v[7] &= 0x3fffffffu;
    fr_store(out + i, x);
}

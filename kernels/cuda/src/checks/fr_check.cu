// Exact checks of a partition on the GPU (loaded by kernels/cuda/check.py): the sums behind
// the two SRS identities of kernels/cpu/srs.py, streamed over chunks of a vector so that a
// 2^27-element check needs a few hundred MiB of device memory, not 4 GiB per vector.
//
// Every array is Fr, 8 little-endian 32-bit words per element (= the (n, 4) uint64 layout).
// The sum kernels loop over groups of CHECK_K elements with a grid stride and add one partial
// sum per block into acc[block] (acc zeroed once by the host, kept across chunk launches on
// one stream), so a whole check ends with one small copy of at most GRID partials per sum
// (GRID in kernels/cuda/check.py).
#include "field/fr_io.cuh"  // fr_t, fr_load, fr_store

// Elements per thread. The barycentric kernel shares one inversion among them (Montgomery's
// trick: 3 (K - 1) multiplications + one ~380-multiplication inversion, so ~50 multiplications
// per element at K = 8 instead of ~380); the powers kernels share one exponentiation.
#define CHECK_K 8
// Threads per block; = BLOCK in kernels/cuda/check.py. Shared memory: 3 sums x 256 x 32 B.
#define CHECK_BLOCK 256

// base^e for a 64-bit exponent (base in Montgomery form).
__device__ __forceinline__ fr_t chk_pow64(const fr_t& base, unsigned long long e) {
    uint32_t w[2] = {(uint32_t)e, (uint32_t)(e >> 32)};
    return base.pow(w, 64);
}

// Adds the blockDim.x values of each of `nsum` shared arrays; thread 0 adds them to
// acc[blockIdx.x * nsum + j]. blockDim.x must be a power of two (CHECK_BLOCK).
template <int NSUM>
__device__ void chk_block_sum(fr_t (*sm)[CHECK_BLOCK], fr_t* acc) {
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
        __syncthreads();
        if (threadIdx.x < half) {
            #pragma unroll
            for (int j = 0; j < NSUM; j++) sm[j][threadIdx.x] += sm[j][threadIdx.x + half];
        }
    }
    if (threadIdx.x == 0) {
        #pragma unroll
        for (int j = 0; j < NSUM; j++) {
            fr_t* slot = acc + blockIdx.x * NSUM + j;
            fr_store(slot, fr_load(slot) + sm[j][0]);
        }
    }
}

// out[j] = base^(start + j) for j < count, canonical when `canonical` (else Montgomery):
// the secrets s_i = sigma^i of one SRS query, made on the device for srs.cu's kernel.
extern "C" __global__ void fr_powers_range(fr_t* out, const fr_t* basep, unsigned long long start,
                                           unsigned long long count, int canonical) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * CHECK_K;
    const fr_t base = fr_load(basep);
    for (unsigned long long j0 = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) *
                                 CHECK_K;
         j0 < count; j0 += stride) {  // grid-stride: the host caps the grid (GRID)
        fr_t x = chk_pow64(base, start + j0);
        for (int k = 0; k < CHECK_K && j0 + k < count; k++) {
            fr_store(out + j0 + k, canonical ? x.from_mont() : x);
            x *= base;
        }
    }
}

// Partial sums of v[j] * sigma^(start + j), j < count, added into acc: <k, s> for the MSM identity
// (v canonical scalars: a Montgomery product with the Montgomery power is then canonical) and
// h(tau) for the H identity (v = h's canonical coefficients). One value per block.
extern "C" __global__ void __launch_bounds__(CHECK_BLOCK)
    fr_dot_powers(fr_t* acc, const fr_t* v, const fr_t* sigmap, unsigned long long start,
                  unsigned long long count) {
    __shared__ fr_t sm[1][CHECK_BLOCK];
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * CHECK_K;
    const fr_t sigma = fr_load(sigmap);
    fr_t sum = fr_t::zero();
    for (unsigned long long j0 = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) *
                                 CHECK_K;
         j0 < count; j0 += stride) {
        fr_t x = chk_pow64(sigma, start + j0);
        for (int k = 0; k < CHECK_K && j0 + k < count; k++) {
            sum += fr_load(v + j0 + k) * x;
            x *= sigma;
        }
    }
    sm[0][threadIdx.x] = sum;
    chk_block_sum<1>(sm, acc);
}

// Partial sums (added into acc) of the barycentric form of three polynomials given by their evaluations on the
// domain <omega>: sum_j v[j] * w_i / (tau - w_i), w_i = omega^i, i = start + j, for v = a, b, c
// (Montgomery). The host multiplies by (tau^n - 1) / n to get A(tau), B(tau), C(tau). tau must
// not be a domain point (the host checks tau^n != 1). consts = [omega, tau] (Montgomery).
extern "C" __global__ void __launch_bounds__(CHECK_BLOCK)
    fr_barycentric3(fr_t* acc, const fr_t* a, const fr_t* b, const fr_t* c, const fr_t* consts,
                    unsigned long long start, unsigned long long count) {
    __shared__ fr_t sm[3][CHECK_BLOCK];
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * CHECK_K;
    const fr_t omega = fr_load(consts), tau = fr_load(consts + 1);
    fr_t sa = fr_t::zero(), sb = fr_t::zero(), sc = fr_t::zero();
    for (unsigned long long j0 = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) *
                                 CHECK_K;
         j0 < count; j0 += stride) {
        const int m = (count - j0) < CHECK_K ? (int)(count - j0) : CHECK_K;
        fr_t w[CHECK_K], pre[CHECK_K];
        fr_t x = chk_pow64(omega, start + j0);
        fr_t run = fr_t::one();
        #pragma unroll
        for (int k = 0; k < CHECK_K; k++) {  // w_k and the prefix products of d_k = tau - w_k
            w[k] = x;
            if (k < m) run *= tau - x;
            pre[k] = run;
            x *= omega;
        }
        fr_t inv = run.inverse();  // 1 / (d_0 ... d_{m-1})
        #pragma unroll
        for (int k = CHECK_K - 1; k >= 0; k--) {
            if (k >= m) continue;
            const fr_t dinv = k ? inv * pre[k - 1] : inv;  // 1 / d_k
            inv *= tau - w[k];                             // 1 / (d_0 ... d_{k-1})
            const fr_t term = w[k] * dinv;
            sa += fr_load(a + j0 + k) * term;
            sb += fr_load(b + j0 + k) * term;
            sc += fr_load(c + j0 + k) * term;
        }
    }
    sm[0][threadIdx.x] = sa;
    sm[1][threadIdx.x] = sb;
    sm[2][threadIdx.x] = sc;
    chk_block_sum<3>(sm, acc);
}

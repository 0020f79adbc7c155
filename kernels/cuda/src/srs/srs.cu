// SRS generation on the GPU: P_i = [s_i] G for known secrets s_i (host side: kernels/cuda/srs.py).
//
// Fixed base, so the work is moved into a table: T[w][d - 1] = d 2^(c w) G for every window w
// and digit magnitude 1 <= d <= B = 2^(c-1). With signed digits s = sum_w d_w 2^(c w), [s] G is
// then W mixed additions of table entries (negated for d_w < 0) and no doubling at all. The
// result is made affine with one inversion per batch of points (Montgomery's trick), not one
// per point.
#include "msm/msm.cuh"

// Table entry t = w B + (d - 1) as XYZZ: [d] G by double-and-add, then c w doublings.
extern "C" __global__ void srs_table_build(const g1_affine* __restrict__ gen, uint32_t c, uint32_t W,
                                          g1_xyzz* __restrict__ out) {
    const uint32_t B = 1u << (c - 1);
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= W * B) return;
    const uint32_t w = t / B, d = t % B + 1;
    const g1_affine g = *gen;
    g1_xyzz r = g1_xyzz::inf();
    for (int bit = 31 - __clz(d); bit >= 0; bit--) {
        r = r.dbl();
        if ((d >> bit) & 1) r = r.add_affine(g);
    }
    for (uint32_t k = 0; k < c * w; k++) r = r.dbl();
    g1_store(out + t, r);
}

// out[i] = [s_i] G in XYZZ for i < n, from the affine table (W windows of B entries).
extern "C" __global__ void srs_mul(const uint32_t* __restrict__ secrets, uint32_t n,
                                   const g1_affine* __restrict__ table, uint32_t c, uint32_t W,
                                   g1_xyzz* __restrict__ out) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint32_t B = 1u << (c - 1);
    uint32_t s[8];
    msm_load_scalar(secrets, i, s);
    msm_digits dg(c);
    g1_xyzz acc = g1_xyzz::inf();
    for (uint32_t w = 0; w < W; w++) {
        bool neg;
        const uint32_t m = dg.next(s, w, &neg);
        if (m == 0) continue;
        g1_affine p = g1_load(table + w * B + (m - 1));
        if (neg) p.y = p.y.neg();
        acc = acc.add_affine(p);
    }
    g1_store(out + i, acc);
}

// Affine conversion of in[0..n) with one inversion per run of `per` consecutive points:
// prefix products of d_j = ZZ_j ZZZ_j (1 for infinity) go to `prefix`, one inversion of the
// last, then a backward pass peels off each 1 / d_j.
extern "C" __global__ void xyzz_to_affine_batch(const g1_xyzz* __restrict__ in, uint32_t n,
                                                uint32_t per, fp_t* __restrict__ prefix,
                                                g1_affine* __restrict__ out) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t lo = (uint64_t)t * per;
    if (lo >= n) return;
    const uint32_t hi = (uint32_t)(lo + per < n ? lo + per : n);
    fp_t acc = fp_t::one();
    for (uint32_t j = (uint32_t)lo; j < hi; j++) {
        const g1_xyzz p = g1_load(in + j);
        if (!p.is_inf()) acc = acc * (p.ZZ * p.ZZZ);
        prefix[j] = acc;
    }
    fp_t inv = acc.inverse();  // 1 / prod d_j
    for (uint32_t j = hi; j-- > (uint32_t)lo;) {
        const g1_xyzz p = g1_load(in + j);
        if (p.is_inf()) {
            g1_store(out + j, g1_affine::inf());
            continue;
        }
        const fp_t before = j > lo ? prefix[j - 1] : fp_t::one();
        const fp_t dinv = inv * before;  // 1 / d_j
        inv = inv * (p.ZZ * p.ZZZ);
        g1_store(out + j, p.to_affine_with(dinv));
    }
}

// ---- fixed-base tables of arbitrary points (kernels/cuda/msm_fixed.py) ------------------------
// The shifted copies 2^(c w) P_i of a fixed point set are built window after window from a
// running XYZZ copy: c doublings per point and window, then the affine conversion above.

// out[i] = [2^k] in[i] as XYZZ, from affine points (infinity stays infinity).
extern "C" __global__ void affine_double_k(const g1_affine* __restrict__ in, uint32_t n, uint32_t k,
                                           g1_xyzz* __restrict__ out) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    g1_xyzz r = g1_xyzz::from_affine(g1_load(in + i));
    for (uint32_t j = 0; j < k; j++) r = r.dbl();
    g1_store(out + i, r);
}

// io[i] = [2^k] io[i], XYZZ in place.
extern "C" __global__ void xyzz_double_k(g1_xyzz* __restrict__ io, uint32_t n, uint32_t k) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    g1_xyzz r = g1_load(io + i);
    for (uint32_t j = 0; j < k; j++) r = r.dbl();
    g1_store(io + i, r);
}

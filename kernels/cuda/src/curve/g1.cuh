// BLS12-381 G1 (y^2 = x^3 + 4 over Fp) for the MSM and SRS kernels.
//
// Why these coordinate systems: Pippenger buckets absorb one affine point per step, and the
// cheapest such "mixed" addition is in XYZZ coordinates (x = X/ZZ, y = Y/ZZZ, ZZ^3 = ZZZ^2):
// 8M + 2S against 7M + 4S in Jacobian, with no squaring chain on the critical path. Jacobian
// (x = X/Z^2, y = Y/Z^3) is kept for callers that want the classic form and for cross-checks.
// The formulas are the EFD's "madd-2008-s", "add-2008-s", "dbl-2008-s-1", "mdbl-2008-s-1"
// (XYZZ) and "madd-2007-bl", "add-2007-bl", "dbl-2009-l" (Jacobian), with every exceptional case
// (infinity on either side, P == Q, P == -Q) handled explicitly so that repeated points and the
// point at infinity in an MSM give exact results. Every XYZZ formula's Y3 is a difference of
// two products, X Y - Z W, which mont.cuh's mul_sub computes with one Montgomery reduction for
// both (three quarters of the word products); the costs below count it as two products.
//
// Layout (kernels/backend.py): affine = x, y (each 12 little-endian 32-bit words, Montgomery);
// the point at infinity is all zeros. XYZZ = X, Y, ZZ, ZZZ with infinity <=> ZZ == 0 (the
// kernels write all zeros). Jacobian = X, Y, Z with infinity <=> Z == 0.
//
// Compiles as device code (nvcc, NVRTC) and as host C++17 (g++), like mont.cuh, so that
// tests/kernels/test_cuda_g1_host.py checks the very formulas the GPU runs.
#pragma once
#include "field/fields.cuh"

// The doubling inside the mixed addition (P == Q: a bucket meets its own point) is out of line
// on the device with G1_COLD_DBL: it almost never runs, and inlined it adds 6 of the 16 Fp
// products to every loop that adds affine points (msm_accumulate0: ~7,950 SASS instructions,
// ~127 KB, where Nsight Compute counted 0.64 `no_instruction` stalls per issue: the hot loop
// does not fit the instruction cache). Opt-in: measured 3 % slower on the H200 (2026-12-02,
// accumulation 748 -> 772 ms at 2^27): the call's frame and register saves sit in the loop.
#if defined(__CUDACC__) && defined(G1_COLD_DBL)
#define G1_COLD __host__ __device__ __noinline__
#else
#define G1_COLD MONT_HD
#endif

template <class F>
struct g1_affine_t {
    F x, y;
    MONT_HD static g1_affine_t inf() { return {F::zero(), F::zero()}; }
    MONT_HD bool is_inf() const { return x.is_zero() && y.is_zero(); }
    MONT_HD g1_affine_t neg() const { return {x, y.neg()}; }
};

// F may be the lazy Fp (fpz_t, values in [0, 2p)): the accumulation's buckets, whose
// multiplications then skip their final subtraction. Affine inputs are always canonical (C),
// and reduced() / lift() convert a whole point between the forms.
template <class F>
struct g1_xyzz_t {
    typedef typename F::canonical_t C;
    F X, Y, ZZ, ZZZ;

    MONT_HD static g1_xyzz_t inf() { return {F::zero(), F::zero(), F::zero(), F::zero()}; }
    // Infinity is ZZ == 0 word for word, in the lazy form too: the only ZZ set to zero is
    // inf()'s, and every other ZZ is a product of non-zero values (1, P^2 with P != 0, (2Y)^2
    // where no finite point has Y = 0: the curve's group order h r is odd), which no
    // multiplication returns as p (a lazy product is p only when it is 0 mod p).
    MONT_HD bool is_inf() const { return ZZ.is_zero_repr(); }
    MONT_HD g1_xyzz_t<C> reduced() const {
        return {X.reduced(), Y.reduced(), ZZ.reduced(), ZZZ.reduced()};
    }
    MONT_HD static g1_xyzz_t lift(const g1_xyzz_t<C>& c) {
        return {F::lift(c.X), F::lift(c.Y), F::lift(c.ZZ), F::lift(c.ZZZ)};
    }
    MONT_HD static g1_xyzz_t from_affine(const g1_affine_t<F>& p) {
        if (p.is_inf()) return inf();
        return {p.x, p.y, F::one(), F::one()};
    }
    MONT_HD g1_xyzz_t neg() const { return {X, Y.neg(), ZZ, ZZZ}; }

    // 2 * (x, y) for an affine point (mdbl-2008-s-1): 3M + 3S; the result has ZZ = V, ZZZ = W.
    G1_COLD static g1_xyzz_t dbl_affine(const g1_affine_t<F>& p) {
        if (p.is_inf()) return inf();
        F U = p.y.dbl();
        F V = U.sqr();
        F W = U * V;
        F S = p.x * V;
        F x2 = p.x.sqr();
        F M = x2.dbl() + x2;
        g1_xyzz_t r;
        r.X = M.sqr() - S.dbl();
        r.Y = F::mul_sub(M, S - r.X, W, p.y);  // one reduction for both products
        r.ZZ = V;
        r.ZZZ = W;
        return r;
    }

    // 2 * this (dbl-2008-s-1, a = 0): 6M + 3S. Infinity maps to ZZ = 0 by itself (V * 0).
    MONT_HD g1_xyzz_t dbl() const {
        if (is_inf()) return inf();
        F U = Y.dbl();
        F V = U.sqr();
        F W = U * V;
        F S = X * V;
        F x2 = X.sqr();
        F M = x2.dbl() + x2;
        g1_xyzz_t r;
        r.X = M.sqr() - S.dbl();
        r.Y = F::mul_sub(M, S - r.X, W, Y);
        r.ZZ = V * ZZ;
        r.ZZZ = W * ZZZ;
        return r;
    }

    // this + q for an affine q (madd-2008-s): 8M + 2S.
    MONT_HD g1_xyzz_t add_affine(const g1_affine_t<C>& qc) const {
        if (qc.is_inf()) return *this;
        const g1_affine_t<F> q = {F::lift(qc.x), F::lift(qc.y)};
        if (is_inf()) return from_affine(q);
        F U2 = q.x * ZZ;
        F S2 = q.y * ZZZ;
        F P = U2 - X;
        F R = S2 - Y;
        if (P.is_zero()) {
            if (R.is_zero()) return dbl_affine(q);
            return inf();
        }
        F PP = P.sqr();
        F PPP = P * PP;
        F Q = X * PP;
        g1_xyzz_t r;
        r.X = R.sqr() - PPP - Q.dbl();
        r.Y = F::mul_sub(R, Q - r.X, Y, PPP);
        r.ZZ = ZZ * PP;
        r.ZZZ = ZZZ * PPP;
        return r;
    }

    // this + q (add-2008-s): 12M + 2S.
    MONT_HD g1_xyzz_t add(const g1_xyzz_t& q) const {
        if (q.is_inf()) return *this;
        if (is_inf()) return q;
        F U1 = X * q.ZZ;
        F U2 = q.X * ZZ;
        F S1 = Y * q.ZZZ;
        F S2 = q.Y * ZZZ;
        F P = U2 - U1;
        F R = S2 - S1;
        if (P.is_zero()) {
            if (R.is_zero()) return dbl();
            return inf();
        }
        F PP = P.sqr();
        F PPP = P * PP;
        F Q = U1 * PP;
        g1_xyzz_t r;
        r.X = R.sqr() - PPP - Q.dbl();
        r.Y = F::mul_sub(R, Q - r.X, S1, PPP);
        r.ZZ = ZZ * q.ZZ * PP;
        r.ZZZ = ZZZ * q.ZZZ * PPP;
        return r;
    }

    // Affine form through one inversion (x = X / ZZ, y = Y / ZZZ); infinity -> all zeros.
    MONT_HD g1_affine_t<F> to_affine() const {
        if (is_inf()) return g1_affine_t<F>::inf();
        F w = (ZZ * ZZZ).inverse();  // 1 / (ZZ ZZZ)
        return {X * (w * ZZZ), Y * (w * ZZ)};
    }
    // Affine form given w = 1 / (ZZ * ZZZ) from a batched inversion.
    MONT_HD g1_affine_t<F> to_affine_with(const F& w) const {
        if (is_inf()) return g1_affine_t<F>::inf();
        return {X * (w * ZZZ), Y * (w * ZZ)};
    }
};

template <class F>
struct g1_jacobian_t {
    F X, Y, Z;

    MONT_HD static g1_jacobian_t inf() { return {F::one(), F::one(), F::zero()}; }
    MONT_HD bool is_inf() const { return Z.is_zero(); }
    MONT_HD static g1_jacobian_t from_affine(const g1_affine_t<F>& p) {
        if (p.is_inf()) return inf();
        return {p.x, p.y, F::one()};
    }
    MONT_HD g1_jacobian_t neg() const { return {X, Y.neg(), Z}; }

    // 2 * this (dbl-2009-l, a = 0): 2M + 5S.
    MONT_HD g1_jacobian_t dbl() const {
        if (is_inf()) return inf();
        F A = X.sqr();
        F B = Y.sqr();
        F C = B.sqr();
        F D = ((X + B).sqr() - A - C).dbl();
        F E = A.dbl() + A;
        F Fs = E.sqr();
        g1_jacobian_t r;
        r.X = Fs - D.dbl();
        F C8 = C.dbl().dbl().dbl();
        r.Y = E * (D - r.X) - C8;
        r.Z = (Y * Z).dbl();
        return r;
    }

    // this + q for an affine q (madd-2007-bl): 7M + 4S.
    MONT_HD g1_jacobian_t add_affine(const g1_affine_t<F>& q) const {
        if (q.is_inf()) return *this;
        if (is_inf()) return from_affine(q);
        F Z1Z1 = Z.sqr();
        F U2 = q.x * Z1Z1;
        F S2 = q.y * Z * Z1Z1;
        F H = U2 - X;
        F rr = (S2 - Y).dbl();
        if (H.is_zero()) {
            if (rr.is_zero()) return from_affine(q).dbl();
            return inf();
        }
        F HH = H.sqr();
        F I = HH.dbl().dbl();
        F J = H * I;
        F V = X * I;
        g1_jacobian_t r;
        r.X = rr.sqr() - J - V.dbl();
        r.Y = rr * (V - r.X) - (Y * J).dbl();
        r.Z = (Z + H).sqr() - Z1Z1 - HH;
        return r;
    }

    // this + q (add-2007-bl): 11M + 5S.
    MONT_HD g1_jacobian_t add(const g1_jacobian_t& q) const {
        if (q.is_inf()) return *this;
        if (is_inf()) return q;
        F Z1Z1 = Z.sqr();
        F Z2Z2 = q.Z.sqr();
        F U1 = X * Z2Z2;
        F U2 = q.X * Z1Z1;
        F S1 = Y * q.Z * Z2Z2;
        F S2 = q.Y * Z * Z1Z1;
        F H = U2 - U1;
        F rr = (S2 - S1).dbl();
        if (H.is_zero()) {
            if (rr.is_zero()) return dbl();
            return inf();
        }
        F I = H.dbl().sqr();
        F J = H * I;
        F V = U1 * I;
        g1_jacobian_t r;
        r.X = rr.sqr() - J - V.dbl();
        r.Y = rr * (V - r.X) - (S1 * J).dbl();
        r.Z = ((Z + q.Z).sqr() - Z1Z1 - Z2Z2) * H;
        return r;
    }

    MONT_HD g1_affine_t<F> to_affine() const {
        if (is_inf()) return g1_affine_t<F>::inf();
        F zi = Z.inverse();
        F zi2 = zi.sqr();
        return {X * zi2, Y * zi2 * zi};
    }
};

typedef g1_affine_t<fp_t> g1_affine;
typedef g1_xyzz_t<fp_t> g1_xyzz;
typedef g1_jacobian_t<fp_t> g1_jacobian;

// Loads and stores of whole points as 16-byte vectors on the device: an affine point is 96
// bytes, an XYZZ point 192, both multiples of 16, and every row of a CuPy (n, 12) / (n, 24)
// uint64 array is 16-byte aligned. On the host (the C++ tests) they are plain copies.
template <class T>
MONT_HD T g1_load(const T* p) {
#if defined(__CUDA_ARCH__)
    static_assert(sizeof(T) % 16 == 0, "point size must be a multiple of 16 bytes");
    T r;
    const uint4* s = reinterpret_cast<const uint4*>(p);
    uint32_t* w = reinterpret_cast<uint32_t*>(&r);
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 16); i++) {
        const uint4 q = __ldg(s + i);
        w[4 * i] = q.x, w[4 * i + 1] = q.y, w[4 * i + 2] = q.z, w[4 * i + 3] = q.w;
    }
    return r;
#else
    return *p;
#endif
}
template <class T>
MONT_HD void g1_store(T* p, const T& v) {
#if defined(__CUDA_ARCH__)
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
    uint4* d = reinterpret_cast<uint4*>(p);
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 16); i++)
        d[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
#else
    *p = v;
#endif
}

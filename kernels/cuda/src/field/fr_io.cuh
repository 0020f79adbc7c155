// Loading and storing one Fr element (8 little-endian 32-bit words = the (n, 4) uint64 layout)
// as two 16-byte vector accesses: the element is 32-byte aligned in every array the kernels
// take, so each access is one LDG.128 / STG.128. Shared by the NTT and the exact checks.
#pragma once
#include "field/fields.cuh"

__device__ __forceinline__ fr_t fr_load(const fr_t* ptr) {
    const uint4* q = reinterpret_cast<const uint4*>(ptr);
    uint4 a = q[0], b = q[1];
    fr_t r;
    r.v[0] = a.x; r.v[1] = a.y; r.v[2] = a.z; r.v[3] = a.w;
    r.v[4] = b.x; r.v[5] = b.y; r.v[6] = b.z; r.v[7] = b.w;
    return r;
}

__device__ __forceinline__ fr_t fr_ldg(const fr_t* ptr) {
    const uint4* q = reinterpret_cast<const uint4*>(ptr);
    uint4 a = __ldg(q), b = __ldg(q + 1);
    fr_t r;
    r.v[0] = a.x; r.v[1] = a.y; r.v[2] = a.z; r.v[3] = a.w;
    r.v[4] = b.x; r.v[5] = b.y; r.v[6] = b.z; r.v[7] = b.w;
    return r;
}

__device__ __forceinline__ void fr_store(fr_t* ptr, const fr_t& x) {
    uint4* q = reinterpret_cast<uint4*>(ptr);
    q[0] = make_uint4(x.v[0], x.v[1], x.v[2], x.v[3]);
    q[1] = make_uint4(x.v[4], x.v[5], x.v[6], x.v[7]);
}

// BLS12-381 fields for the CUDA kernels: fr_t (scalar field, modulus r) and fp_t (base field,
// modulus p), as instantiations of the Montgomery template in mont.cuh.
//
// The literal values below are rendered from kernels/constants.py (the single source of truth)
// by kernels/cuda/fields_gen.py; tests/kernels/test_cuda_fields_host.py re-renders and compares them.
// How each one is derived:
//   MOD_WORDS : the modulus m in little-endian 32-bit words (Fr: 8 words, Fp: 12 words);
//   M0        : -m^-1 mod 2^32, the per-word factor of word-by-word (CIOS) reduction. For r,
//               whose low word is 1, m^-1 = 1 mod 2^32 so M0 = 0xffffffff;
//   R2_WORDS  : R^2 mod m with R = 2^256 (Fr) / 2^384 (Fp); multiplying a canonical x by it in
//               Montgomery form gives x R mod m;
//   ONE_WORDS : R mod m, the Montgomery form of 1.
#pragma once
#include "field/mont.cuh"

// BEGIN GENERATED CONSTANTS (python -m provetop.kernels.cuda.fields_gen); do not edit by hand
// FR: m = 0x73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001 (255 bits), 8 words, R = 2^256
#define FR_WORDS 8
#define FR_MOD_WORDS 0x00000001u, 0xffffffffu, 0xfffe5bfeu, 0x53bda402u, 0x09a1d805u, 0x3339d808u, 0x299d7d48u, 0x73eda753u
// -m^-1 mod 2^32
#define FR_M0 0xffffffffu
// R^2 mod m = 2^512 mod m
#define FR_R2_WORDS 0xf3f29c6du, 0xc999e990u, 0x87925c23u, 0x2b6cedcbu, 0x7254398fu, 0x05d31496u, 0x9f59ff11u, 0x0748d9d9u
// R mod m = 2^256 mod m: the Montgomery form of 1
#define FR_ONE_WORDS 0xfffffffeu, 0x00000001u, 0x00034802u, 0x5884b7fau, 0xecbc4ff5u, 0x998c4fefu, 0xacc5056fu, 0x1824b159u
// FP: m = 0x1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab (381 bits), 12 words, R = 2^384
#define FP_WORDS 12
#define FP_MOD_WORDS 0xffffaaabu, 0xb9feffffu, 0xb153ffffu, 0x1eabfffeu, 0xf6b0f624u, 0x6730d2a0u, 0xf38512bfu, 0x64774b84u, 0x434bacd7u, 0x4b1ba7b6u, 0x397fe69au, 0x1a0111eau
// -m^-1 mod 2^32
#define FP_M0 0xfffcfffdu
// R^2 mod m = 2^768 mod m
#define FP_R2_WORDS 0x1c341746u, 0xf4df1f34u, 0x09d104f1u, 0x0a76e6a6u, 0x4c95b6d5u, 0x8de5476cu, 0x939d83c0u, 0x67eb88a9u, 0xb519952du, 0x9a793e85u, 0x92cae3aau, 0x11988fe5u
// R mod m = 2^384 mod m: the Montgomery form of 1
#define FP_ONE_WORDS 0x0002fffdu, 0x76090000u, 0xc40c0002u, 0xebf4000bu, 0x53c758bau, 0x5f489857u, 0x70525745u, 0x77ce5853u, 0xa256ec6du, 0x5c071a97u, 0xfa80e493u, 0x15f65ec3u
// END GENERATED CONSTANTS

// Word i of a constant list, as a constexpr function (usable on host and device; with the
// unrolled loops of mont.cuh every index is a compile-time constant and the lookup folds away).
#define MONT_FIELD_WORD_FN(fn, LIST)                 \
    MONT_HDC static uint32_t fn(int i) {             \
        const uint32_t w[] = {LIST};                 \
        return w[i];                                 \
    }

struct fr_params {
    static constexpr int N = FR_WORDS;
    MONT_FIELD_WORD_FN(mod, FR_MOD_WORDS)
    MONT_FIELD_WORD_FN(r2, FR_R2_WORDS)
    MONT_FIELD_WORD_FN(one, FR_ONE_WORDS)
    MONT_HDC static uint32_t m0() { return FR_M0; }
};

struct fp_params {
    static constexpr int N = FP_WORDS;
    MONT_FIELD_WORD_FN(mod, FP_MOD_WORDS)
    MONT_FIELD_WORD_FN(r2, FP_R2_WORDS)
    MONT_FIELD_WORD_FN(one, FP_ONE_WORDS)
    MONT_HDC static uint32_t m0() { return FP_M0; }
};

typedef mont_t<fr_params> fr_t;
typedef mont_t<fp_params> fp_t;
// Fp in the lazy form [0, 2p) (mont.cuh): the MSM's bucket accumulation, where every
// multiplication's final subtraction is work on the critical path. Fr has no such form
// (4r > 2^256).
typedef mont_t<fp_params, true> fpz_t;

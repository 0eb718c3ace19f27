/*
 * fp16.h — IEEE half and bfloat16 <-> float32 conversions (scalar, exact,
 * round-to-nearest-even), as ggml defines them.  Fast paths (F16C) live in
 * the kernels; these are the reference.
 */
#ifndef DJ_CORE_FP16_H
#define DJ_CORE_FP16_H

#include <stdint.h>
#include <string.h>

static inline float dj_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t dj_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float dj_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return dj_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return dj_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return dj_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t dj_f32_to_fp16(float f) {
    uint32_t x = dj_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14 + (112 - e) + 13 - 13 ... bits to drop */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

static inline float dj_bf16_to_f32(uint16_t b) { return dj_bits_to_f32((uint32_t)b << 16); }

static inline uint16_t dj_f32_to_bf16(float f) {
    uint32_t x = dj_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet nan */
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1))) >> 16);
}

#endif

/*
 * kernels_testutil.h — seeded random rows for the kernel tests.
 *
 * One generator (splitmix64) with an explicit state, so every test input is
 * reproducible from its seed.  Rows come in several "modes" that reach the
 * quantizers' corner cases: gaussian, uniform with an offset, outliers, many
 * zeros, many exact ties, all positive, zero sub-blocks, and tiny groups (below
 * the k-quants' 1e-15 all-zero threshold).  trng_raw_row fills a weight row of any
 * block type with random bytes and sane scale fields.
 */
#ifndef DJ_TESTS_KERNELS_TESTUTIL_H
#define DJ_TESTS_KERNELS_TESTUTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"

struct trng {
    uint64_t s;
};

static inline uint64_t trng_next(struct trng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static inline double trng_unif(struct trng *r) { return (double)(trng_next(r) >> 11) / 9007199254740992.0; }

static inline float trng_gauss(struct trng *r) {
    const double u1 = trng_unif(r) + 1e-300, u2 = trng_unif(r);
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

enum { TROW_MODES = 8 };

/* A row of k floats of overall size `scale` in one of TROW_MODES modes. */
static inline void trng_row(struct trng *r, float *x, int64_t k, int mode, float scale) {
    for (int64_t i = 0; i < k; i++) {
        float v = trng_gauss(r) * scale;
        switch (mode) {
        case 1: v = (float)(trng_unif(r) - 0.3) * scale; break;        /* offset uniform */
        case 2: if (trng_next(r) % 17 == 0) v *= 30; break;             /* outliers */
        case 3: if (trng_next(r) % 3 == 0) v = 0; break;                /* many zeros */
        case 4: v = (float)(int)(trng_gauss(r) * 4) * scale; break;     /* exact ties */
        case 5: v = fabsf(v); break;                                    /* all positive */
        case 6: if (i % 256 < 16) v = 0; break;                         /* zero sub-blocks */
        case 7: v *= 1e-18f; break;                                     /* tiny groups */
        default: break;
        }
        x[i] = v;
    }
}

/* A sane random f16 scale: magnitude 2^-12 .. 2^-4, random sign. */
static inline uint16_t trng_scale_f16(struct trng *r) {
    const float v = ldexpf(1.0f + (float)trng_unif(r), -4 - (int)(trng_next(r) % 9));
    return dj_f32_to_fp16(trng_next(r) & 1 ? -v : v);
}

/* One weight row of k elements of `type` as random raw blocks: any bits in the values,
 * levels, signs, grid indices and small scales; the scale fields sane (finite, modest:
 * trng_scale_f16 for the f16 ones, positive for q4_K as its quantizer makes them;
 * MXFP4's E8M0 exponent 110..140; NVFP4's UE4M3 bytes any — all finite); F32/F16/BF16
 * gaussian values.  False for a type it does not know. */
static inline bool trng_raw_row(struct trng *r, uint32_t type, uint8_t *row, int64_t k) {
    const struct dj_type_info *ti = dj_type_info(type);
    size_t n = 0;
    if (!ti || !dj_row_bytes(type, k, &n)) return false;
    for (size_t i = 0; i < n; i++) row[i] = (uint8_t)trng_next(r);
    if (ti->blck == 1) {
        for (int64_t i = 0; i < k; i++) {
            const float v = trng_gauss(r);
            if (type == DJ_TYPE_F32) memcpy(row + 4 * i, &v, 4);
            else if (type == DJ_TYPE_F16) ((uint16_t *)row)[i] = dj_f32_to_fp16(v);
            else if (type == DJ_TYPE_BF16) ((uint16_t *)row)[i] = dj_f32_to_bf16(v);
            else return false;
        }
        return true;
    }
    int off[2] = {-1, -1}; /* byte offsets of the f16 scales in a block */
    switch (type) {
    case DJ_TYPE_Q8_0: case DJ_TYPE_Q4_0: case DJ_TYPE_Q5_0: case DJ_TYPE_IQ4_NL: case DJ_TYPE_Q1_0:
    case DJ_TYPE_Q2_0: case DJ_TYPE_IQ2_XXS: case DJ_TYPE_IQ2_XS: case DJ_TYPE_IQ2_S: case DJ_TYPE_IQ3_XXS:
    case DJ_TYPE_IQ3_S: case DJ_TYPE_IQ1_S: case DJ_TYPE_IQ4_XS: off[0] = 0; break;
    case DJ_TYPE_Q4_1: case DJ_TYPE_Q5_1: case DJ_TYPE_Q4_K: case DJ_TYPE_Q5_K: off[0] = 0, off[1] = 2; break;
    case DJ_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case DJ_TYPE_Q3_K: off[0] = 108; break;
    case DJ_TYPE_Q6_K: off[0] = 208; break;
    case DJ_TYPE_TQ1_0: off[0] = 52; break;
    case DJ_TYPE_TQ2_0: off[0] = 64; break;
    case DJ_TYPE_IQ1_M: case DJ_TYPE_MXFP4: case DJ_TYPE_NVFP4: break;
    default: return false;
    }
    for (int64_t b = 0; b < k / ti->blck; b++) {
        uint8_t *blk = row + (size_t)b * ti->bytes;
        for (int j = 0; j < 2; j++) {
            if (off[j] < 0) continue;
            uint16_t h = trng_scale_f16(r);
            if (type == DJ_TYPE_Q4_K) h &= 0x7fff;
            memcpy(blk + off[j], &h, 2);
        }
        if (type == DJ_TYPE_MXFP4) blk[0] = (uint8_t)(110 + trng_next(r) % 31);
        if (type == DJ_TYPE_IQ1_M) { /* the f16 scale's nibble j is the top nibble of scale word j */
            const uint16_t h = trng_scale_f16(r);
            for (int j = 0; j < 4; j++) {
                uint16_t w;
                memcpy(&w, blk + 48 + 2 * j, 2);
                w = (uint16_t)((w & 0x0fff) | (((h >> (4 * j)) & 0xf) << 12));
                memcpy(blk + 48 + 2 * j, &w, 2);
            }
        }
    }
    return true;
}

#endif

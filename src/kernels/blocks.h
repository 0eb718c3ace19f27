/*
 * blocks.h — the quantized block layouts of GGUF/ggml, byte for byte.
 *
 * A quantized row of K elements is K/QK consecutive blocks; a block holds
 * QK values as small integers plus the scale(s) to turn them back into
 * floats.  The structs below have exactly ggml's field order, sizes and
 * (absence of) padding, so a row in a mapped GGUF file can be read through
 * them directly.  Scales stored as `uint16_t` are IEEE half floats (see
 * core/fp16.h).  All fields are little-endian, as GGUF is.
 *
 * Weights:
 *
 *   q8_0  (34 B / 32 values)  x[i] = d * qs[i]
 *         +------+--------------------------------+
 *         | d:f16| qs[32]: int8                   |
 *         +------+--------------------------------+
 *
 *   q4_0  (18 B / 32 values)  x[i] = d * ((nibble i) - 8)
 *         +------+----------------+   qs[j] & 0xF -> element j      (j < 16)
 *         | d:f16| qs[16]: 2x4bit |   qs[j] >> 4  -> element j + 16
 *         +------+----------------+
 *
 *   q4_K  (144 B / 256 values: 8 sub-blocks of 32)
 *         +------+---------+------------+---------------------------+
 *         | d:f16|dmin:f16 | scales[12] | qs[128]: 2x4bit            |
 *         +------+---------+------------+---------------------------+
 *         sub-block s (0..7) has a 6-bit scale sc_s and a 6-bit min m_s:
 *           s < 4:  sc = scales[s] & 63,                 m = scales[s+4] & 63
 *           s >= 4: sc = (scales[s+4] & 0xF) | (scales[s-4] >> 6) << 4,
 *                   m  = (scales[s+4] >> 4)  | (scales[s]   >> 6) << 4
 *         (ggml's get_scale_min_k4).  Elements 64c .. 64c+31 are the low
 *         nibbles of qs[32c .. 32c+31] (sub-block 2c), elements 64c+32 ..
 *         64c+63 their high nibbles (sub-block 2c+1), c = 0..3.
 *         x = d*sc_s * q - dmin*m_s.
 *
 *   q6_K  (210 B / 256 values: 16 sub-blocks of 16)
 *         +-------------+------------+-----------------+------+
 *         | ql[128]:4bit| qh[64]:2bit| scales[16]: int8| d:f16|
 *         +-------------+------------+-----------------+------+
 *         For half h (elements 128h .. 128h+127), l = 0..31, with
 *         L = ql + 64h, H = qh + 32h:
 *           element 128h + l      = (L[l]    & 0xF) | ((H[l] >> 0) & 3) << 4
 *           element 128h + l + 32 = (L[l+32] & 0xF) | ((H[l] >> 2) & 3) << 4
 *           element 128h + l + 64 = (L[l]    >> 4)  | ((H[l] >> 4) & 3) << 4
 *           element 128h + l + 96 = (L[l+32] >> 4)  | ((H[l] >> 6) & 3) << 4
 *         x = d * scales[element/16] * (q - 32).
 *
 * Activations (deja quantizes one activation row at a time, DESIGN.md §3):
 *
 *   q8_0  as above (paired with q8_0 and q4_0 weights)
 *   q8_K  (292 B / 256 values)  x[i] = d * qs[i]; bsums[g] = sum of qs[16g .. 16g+15]
 *         +-------+----------------+-----------------+
 *         | d:f32 | qs[256]: int8  | bsums[16]: int16|
 *         +-------+----------------+-----------------+
 *
 * Layouts confirmed against llama.cpp's ggml-common.h (block_q8_0, block_q4_0,
 * block_q4_K, block_q6_K, block_q8_K) and the dequantizers in ggml-quants.c.
 */
#ifndef DJ_KERNELS_BLOCKS_H
#define DJ_KERNELS_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#include "core/ggml_type.h"

#define DJ_QK8_0 32
#define DJ_QK4_0 32
#define DJ_QK_K 256
#define DJ_K_SCALE_SIZE 12

struct dj_block_q8_0 {
    uint16_t d;            /* f16 scale */
    int8_t qs[DJ_QK8_0];   /* values */
};

struct dj_block_q4_0 {
    uint16_t d;                /* f16 scale */
    uint8_t qs[DJ_QK4_0 / 2];  /* nibbles, +8 offset */
};

struct dj_block_q4_K {
    uint16_t d;                        /* f16 super-scale of the 6-bit scales */
    uint16_t dmin;                     /* f16 super-scale of the 6-bit mins */
    uint8_t scales[DJ_K_SCALE_SIZE];   /* 8 scales + 8 mins, 6 bits each, packed */
    uint8_t qs[DJ_QK_K / 2];           /* nibbles */
};

struct dj_block_q6_K {
    uint8_t ql[DJ_QK_K / 2];      /* low 4 bits */
    uint8_t qh[DJ_QK_K / 4];      /* high 2 bits */
    int8_t scales[DJ_QK_K / 16];  /* 8-bit sub-block scales */
    uint16_t d;                   /* f16 super-scale */
};

struct dj_block_q8_K {
    float d;                       /* f32 scale */
    int8_t qs[DJ_QK_K];            /* values */
    int16_t bsums[DJ_QK_K / 16];   /* sums of 16 consecutive values */
};

/* ---- the other weight types of ggml's type table (ggml-common.h of the
 * d32676d7 snapshot).  Field order, sizes and packing are ggml's; the value
 * formulas live with the reference dequantizers (kernels/ref/ref_quants.c),
 * the lookup tables and grids in kernels/quant_tables.h. */
#define DJ_QK4_1 32
#define DJ_QK5_0 32
#define DJ_QK5_1 32
#define DJ_QK_MXFP4 32
#define DJ_QK_NVFP4 64
#define DJ_QK_NVFP4_SUB 16
#define DJ_QK4_NL 32
#define DJ_QK1_0 128
#define DJ_QK2_0 64

struct dj_block_q4_1 { uint16_t d, m; uint8_t qs[DJ_QK4_1 / 2]; };                 /* x = d*q + m */
struct dj_block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[DJ_QK5_0 / 2]; };       /* x = d*(q - 16) */
struct dj_block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[DJ_QK5_1 / 2]; };    /* x = d*q + m */
struct dj_block_mxfp4 { uint8_t e; uint8_t qs[DJ_QK_MXFP4 / 2]; };                   /* E8M0 scale, e2m1 nibbles */
struct dj_block_nvfp4 { uint8_t d[DJ_QK_NVFP4 / DJ_QK_NVFP4_SUB]; uint8_t qs[DJ_QK_NVFP4 / 2]; }; /* UE4M3 per 16 */
struct dj_block_iq4_nl { uint16_t d; uint8_t qs[DJ_QK4_NL / 2]; };                   /* x = d*kvalues_iq4nl[q] */
struct dj_block_q1_0 { uint16_t d; uint8_t qs[DJ_QK1_0 / 8]; };                      /* x = bit ? d : -d */
struct dj_block_q2_0 { uint16_t d; uint8_t qs[DJ_QK2_0 / 4]; };                      /* x = d*(q - 1) */

struct dj_block_q2_K {
    uint8_t scales[DJ_QK_K / 16]; /* 4-bit scale | 4-bit min << 4, per 16 */
    uint8_t qs[DJ_QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;
};
struct dj_block_q3_K {
    uint8_t hmask[DJ_QK_K / 8]; /* high bit (set: no -4 offset) */
    uint8_t qs[DJ_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 16 6-bit scales, packed */
    uint16_t d;
};
struct dj_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[DJ_K_SCALE_SIZE]; /* as q4_K */
    uint8_t qh[DJ_QK_K / 8];         /* 5th bit */
    uint8_t qs[DJ_QK_K / 2];         /* low 4 bits */
};
struct dj_block_tq1_0 {
    uint8_t qs[(DJ_QK_K - 4 * DJ_QK_K / 64) / 5]; /* 5 base-3 digits a byte */
    uint8_t qh[DJ_QK_K / 64];                     /* 4 digits a byte */
    uint16_t d;
};
struct dj_block_tq2_0 { uint8_t qs[DJ_QK_K / 4]; uint16_t d; };
struct dj_block_iq2_xxs { uint16_t d; uint16_t qs[DJ_QK_K / 8]; };
struct dj_block_iq2_xs { uint16_t d; uint16_t qs[DJ_QK_K / 8]; uint8_t scales[DJ_QK_K / 32]; };
struct dj_block_iq2_s { uint16_t d; uint8_t qs[DJ_QK_K / 4]; uint8_t qh[DJ_QK_K / 32]; uint8_t scales[DJ_QK_K / 32]; };
struct dj_block_iq3_xxs { uint16_t d; uint8_t qs[3 * DJ_QK_K / 8]; };
struct dj_block_iq3_s {
    uint16_t d;
    uint8_t qs[DJ_QK_K / 4];
    uint8_t qh[DJ_QK_K / 32];
    uint8_t signs[DJ_QK_K / 8];
    uint8_t scales[DJ_QK_K / 64];
};
struct dj_block_iq1_s { uint16_t d; uint8_t qs[DJ_QK_K / 8]; uint16_t qh[DJ_QK_K / 32]; };
struct dj_block_iq1_m {
    uint8_t qs[DJ_QK_K / 8];      /* grid index, low 8 bits */
    uint8_t qh[DJ_QK_K / 16];     /* grid index high 3 bits + delta sign, per 8 */
    uint8_t scales[DJ_QK_K / 32]; /* 3-bit scales; the f16 super-scale in their top nibbles */
};
struct dj_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;              /* high 2 bits of the 8 6-bit scales */
    uint8_t scales_l[DJ_QK_K / 64]; /* low 4 bits */
    uint8_t qs[DJ_QK_K / 2];
};

static_assert(sizeof(struct dj_block_q8_0) == 34, "q8_0 block must be 34 bytes");
static_assert(sizeof(struct dj_block_q4_0) == 18, "q4_0 block must be 18 bytes");
static_assert(sizeof(struct dj_block_q4_K) == 144, "q4_K block must be 144 bytes");
static_assert(sizeof(struct dj_block_q6_K) == 210, "q6_K block must be 210 bytes");
static_assert(sizeof(struct dj_block_q8_K) == 292, "q8_K block must be 292 bytes");
#define DJ_BLOCK_SIZE_(T, b) static_assert(sizeof(struct dj_block_##T) == (b), #T " block size")
DJ_BLOCK_SIZE_(q4_1, 20); DJ_BLOCK_SIZE_(q5_0, 22); DJ_BLOCK_SIZE_(q5_1, 24); DJ_BLOCK_SIZE_(mxfp4, 17);
DJ_BLOCK_SIZE_(nvfp4, 36); DJ_BLOCK_SIZE_(iq4_nl, 18); DJ_BLOCK_SIZE_(q1_0, 18); DJ_BLOCK_SIZE_(q2_0, 18);
DJ_BLOCK_SIZE_(q2_K, 84); DJ_BLOCK_SIZE_(q3_K, 110); DJ_BLOCK_SIZE_(q5_K, 176); DJ_BLOCK_SIZE_(tq1_0, 54);
DJ_BLOCK_SIZE_(tq2_0, 66); DJ_BLOCK_SIZE_(iq2_xxs, 66); DJ_BLOCK_SIZE_(iq2_xs, 74); DJ_BLOCK_SIZE_(iq2_s, 82);
DJ_BLOCK_SIZE_(iq3_xxs, 98); DJ_BLOCK_SIZE_(iq3_s, 110); DJ_BLOCK_SIZE_(iq1_s, 50); DJ_BLOCK_SIZE_(iq1_m, 56);
DJ_BLOCK_SIZE_(iq4_xs, 136);
#undef DJ_BLOCK_SIZE_

/* The 6-bit scale and min of sub-block s (0..7) of a q4_K block. */
static inline void dj_q4_K_scale_min(int s, const uint8_t *scales, uint8_t *sc, uint8_t *m) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *m = scales[s + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[s + 4] & 0xF) | ((scales[s - 4] >> 6) << 4));
        *m = (uint8_t)((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
    }
}

/* The activation type paired with weight type `wtype` (an enum dj_ggml_type
 * value) by the generic, avx2 and avx512 tables, or -1 if deja has no kernel for
 * it (a table may pair differently: struct dj_wtype_kernels.act_type; the
 * avx512bf16 and amx tables pair BF16 with BF16):
 *   F32, BF16, F16 -> F32 (F16 weights with F32 activations: measured on
 *     codelm-15m-f16, the last-position logits are within 5.7e-6 of
 *     golden/codelm's f32kv reference this way and 4.3e-3 with activations
 *     rounded to f16 — the reference run did not round them);
 *   the types with blocks of 32, 64 or 128 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 *     IQ4_NL, MXFP4, NVFP4, Q1_0, Q2_0) -> Q8_0 (ggml pairs Q4_1/Q5_1 with
 *     Q8_1, whose f16 block sum deja does not need: the kernels sum the q8_0
 *     integers themselves);
 *   the 256-element super-block types (Q2_K..Q6_K, IQ*, TQ*) -> Q8_K. */
static inline int dj_kernels_act_type(uint32_t wtype) {
    switch (wtype) {
    case DJ_TYPE_F32:
    case DJ_TYPE_F16:
    case DJ_TYPE_BF16: return DJ_TYPE_F32;
    case DJ_TYPE_Q8_0:
    case DJ_TYPE_Q4_0:
    case DJ_TYPE_Q4_1:
    case DJ_TYPE_Q5_0:
    case DJ_TYPE_Q5_1:
    case DJ_TYPE_IQ4_NL:
    case DJ_TYPE_MXFP4:
    case DJ_TYPE_NVFP4:
    case DJ_TYPE_Q1_0:
    case DJ_TYPE_Q2_0: return DJ_TYPE_Q8_0;
    case DJ_TYPE_Q2_K:
    case DJ_TYPE_Q3_K:
    case DJ_TYPE_Q4_K:
    case DJ_TYPE_Q5_K:
    case DJ_TYPE_Q6_K:
    case DJ_TYPE_IQ2_XXS:
    case DJ_TYPE_IQ2_XS:
    case DJ_TYPE_IQ2_S:
    case DJ_TYPE_IQ3_XXS:
    case DJ_TYPE_IQ3_S:
    case DJ_TYPE_IQ1_S:
    case DJ_TYPE_IQ1_M:
    case DJ_TYPE_IQ4_XS:
    case DJ_TYPE_TQ1_0:
    case DJ_TYPE_TQ2_0: return DJ_TYPE_Q8_K;
    default: return -1;
    }
}

#endif

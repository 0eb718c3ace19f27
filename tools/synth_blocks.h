/*
 * synth_blocks.h — random quantized blocks of any weight type, for `deja synth`
 * and the tests that need a type without a quantizer (the importance-matrix IQ
 * types, TQ*, MXFP4, NVFP4, Q1_0, Q2_0, ...).
 *
 * A row of n_blocks blocks is filled with bytes from a xorshift64 stream seeded
 * by `s` (the same seed gives the same bytes, on any machine), then each block's
 * scale fields are overwritten with "sane" values: finite, nonzero (some f16
 * scales subnormal, see synth_scale_f16), varying from block to block (a kernel that
 * reads another block's scale must not get the same number), chosen so that
 * weights stay within about +-0.035..0.1 like `deja synth`'s other types, with
 * a mean near zero in every block: the mins are tied to the scale (dmin, m) so
 * that E[x] = 0, and types whose quants are not symmetric (q2_0, tq2_0, iq4_nl)
 * get a random sign on the scale.  (Independent random mins gave every row of a
 * 256-wide output matrix its own offset, and every prompt the same top tokens.)  Every
 * other byte (quants, grid indices, sign indices, packed sub-block scales and
 * mins, high bits) stays random: for every type every bit pattern of those is a
 * valid block (grid indices and sign indices cover their tables exactly), so
 * random bytes reach every table entry and every branch of the decoders.
 *
 * Scale field per type (x: the dequantized weight; ggml's formulas):
 *   q4_1, q5_1   d (f16), m = -7.5 d, -15.5 d   x = d q + m (zero mean)
 *   q5_0         d                          x = d (q - 16)
 *   iq4_nl       +-d                        x = d kvalues[q]          (|kv| <= 127)
 *   mxfp4        e (E8M0) 119..121          x = 2^(e-128) kv          (|kv| <= 12)
 *   nvfp4        d[4] (UE4M3) exp 0, 1 (1/8) x = ue4m3(d)/2 kv
 *   q1_0         d                          x = +-d
 *   q2_0         +-d                        x = d (q - 1)
 *   q2_K         d, dmin = 1.5 d            x = d sc q - dmin m       (sc, m 4-bit)
 *   q3_K         d                          x = d (sc - 32) q         (q -4..3)
 *   q4_K, q5_K   d, dmin (= 15.5 d for q5_K) x = d sc q - dmin m      (sc, m 6-bit)
 *   q6_K         d; scales forced to 1..63  x = d sc (q - 32)
 *   tq1_0, tq2_0 d, +-d (smaller: q 0..3)   x = d (t - 1)
 *   iq2_xxs/xs/s d                          x = d (0.5 + s) / 4 grid sign  (grid <= 43)
 *   iq3_xxs      d                          x = d (0.5 + s) / 2 grid sign  (grid <= 62)
 *   iq3_s        d                          x = d (1 + 2 s) grid sign      (grid <= 15)
 *   iq1_s        d                          x = d (2 s + 1) (grid + delta)
 *   iq1_m        d in the top nibbles of the four 16-bit scale words
 *   iq4_xs       d                          x = d (ls - 32) kvalues[q]
 * q4_K and q6_K keep `deja synth`'s original fixed super-scales (random_k_blocks
 * before this header existed), so files synthesized before are unchanged.
 */
#ifndef DJ_TOOLS_SYNTH_BLOCKS_H
#define DJ_TOOLS_SYNTH_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "kernels/blocks.h"

static inline uint64_t synth_xorshift(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* True for the types synth_random_blocks writes. */
static inline bool synth_random_type(uint32_t type) {
    switch (type) {
    case DJ_TYPE_Q4_1: case DJ_TYPE_Q5_0: case DJ_TYPE_Q5_1: case DJ_TYPE_IQ4_NL: case DJ_TYPE_MXFP4:
    case DJ_TYPE_NVFP4: case DJ_TYPE_Q1_0: case DJ_TYPE_Q2_0: case DJ_TYPE_Q2_K: case DJ_TYPE_Q3_K:
    case DJ_TYPE_Q4_K: case DJ_TYPE_Q5_K: case DJ_TYPE_Q6_K: case DJ_TYPE_TQ1_0: case DJ_TYPE_TQ2_0:
    case DJ_TYPE_IQ2_XXS: case DJ_TYPE_IQ2_XS: case DJ_TYPE_IQ2_S: case DJ_TYPE_IQ3_XXS: case DJ_TYPE_IQ3_S:
    case DJ_TYPE_IQ1_S: case DJ_TYPE_IQ1_M: case DJ_TYPE_IQ4_XS: return true;
    default: return false;
    }
}

/* An f16 scale: base times a factor in [0.5, 1), from the stream.  Small bases give
 * subnormal f16 scales (iq4_xs always, iq3_xxs and iq3_s in part), as real files of
 * small weights have: d = (largest sub-block scale) / 32 or so is below 2^-14 there. */
static inline uint16_t synth_scale_f16(float base, uint64_t *s) {
    return dj_f32_to_fp16(base * (0.5f + 0.5f * (float)(synth_xorshift(s) >> 40) / (float)(1 << 24)));
}

/* h with a random sign (types whose random quants have a nonzero mean: it cancels over blocks). */
static inline uint16_t synth_signed(uint16_t h, uint64_t *s) {
    return (uint16_t)(h | (synth_xorshift(s) & 1) << 15);
}

/* Fills n_blocks blocks of `type` at row (synth_random_type(type) must hold). */
static inline void synth_random_blocks(uint32_t type, uint8_t *row, int64_t n_blocks, uint64_t s) {
    const size_t bb = dj_type_info(type)->bytes;
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *p = row + (size_t)b * bb;
        for (size_t i = 0; i < bb; i += 8) {
            synth_xorshift(&s);
            memcpy(p + i, &s, bb - i < 8 ? bb - i : 8);
        }
        switch (type) {
        case DJ_TYPE_Q4_K: { /* the original fixed scales (see the role paragraph) */
            struct dj_block_q4_K *q = (struct dj_block_q4_K *)p;
            q->d = dj_f32_to_fp16(0.07f / (63.0f * 15.0f));
            q->dmin = dj_f32_to_fp16(0.035f / 63.0f);
            break;
        }
        case DJ_TYPE_Q6_K: {
            struct dj_block_q6_K *q = (struct dj_block_q6_K *)p;
            for (int i = 0; i < DJ_QK_K / 16; i++) q->scales[i] = (int8_t)(1 + (uint8_t)q->scales[i] % 63);
            q->d = dj_f32_to_fp16(0.035f / (63.0f * 32.0f));
            break;
        }
        case DJ_TYPE_Q4_1: {
            struct dj_block_q4_1 *q = (struct dj_block_q4_1 *)p;
            q->d = synth_scale_f16(0.07f / 15.0f, &s);
            q->m = dj_f32_to_fp16(-7.5f * dj_fp16_to_f32(q->d));
            break;
        }
        case DJ_TYPE_Q5_1: {
            struct dj_block_q5_1 *q = (struct dj_block_q5_1 *)p;
            q->d = synth_scale_f16(0.07f / 31.0f, &s);
            q->m = dj_f32_to_fp16(-15.5f * dj_fp16_to_f32(q->d));
            break;
        }
        case DJ_TYPE_Q5_0: ((struct dj_block_q5_0 *)p)->d = synth_scale_f16(0.035f / 16.0f, &s); break;
        case DJ_TYPE_IQ4_NL: ((struct dj_block_iq4_nl *)p)->d = synth_signed(synth_scale_f16(0.035f / 127.0f, &s), &s); break;
        case DJ_TYPE_MXFP4: ((struct dj_block_mxfp4 *)p)->e = (uint8_t)(119 + synth_xorshift(&s) % 3); break;
        case DJ_TYPE_NVFP4: {
            struct dj_block_nvfp4 *q = (struct dj_block_nvfp4 *)p;
            for (int i = 0; i < DJ_QK_NVFP4 / DJ_QK_NVFP4_SUB; i++) {
                const uint64_t r = synth_xorshift(&s);
                /* exponent 1 one time in 8 (the normal values), else 0 (subnormal); mantissa 1..7 */
                q->d[i] = (uint8_t)(((r & 7) == 0) << 3 | (1 + (r >> 8) % 7));
            }
            break;
        }
        case DJ_TYPE_Q1_0: ((struct dj_block_q1_0 *)p)->d = synth_scale_f16(0.02f, &s); break;
        case DJ_TYPE_Q2_0: ((struct dj_block_q2_0 *)p)->d = synth_signed(synth_scale_f16(0.0175f, &s), &s); break;
        case DJ_TYPE_Q2_K: {
            struct dj_block_q2_K *q = (struct dj_block_q2_K *)p;
            q->d = synth_scale_f16(0.07f / (15.0f * 3.0f), &s);
            q->dmin = dj_f32_to_fp16(1.5f * dj_fp16_to_f32(q->d));
            break;
        }
        case DJ_TYPE_Q3_K: ((struct dj_block_q3_K *)p)->d = synth_scale_f16(0.035f / (32.0f * 4.0f), &s); break;
        case DJ_TYPE_Q5_K: {
            struct dj_block_q5_K *q = (struct dj_block_q5_K *)p;
            q->d = synth_scale_f16(0.07f / (63.0f * 31.0f), &s);
            q->dmin = dj_f32_to_fp16(15.5f * dj_fp16_to_f32(q->d));
            break;
        }
        case DJ_TYPE_TQ1_0: ((struct dj_block_tq1_0 *)p)->d = synth_scale_f16(0.035f, &s); break;
        case DJ_TYPE_TQ2_0: ((struct dj_block_tq2_0 *)p)->d = synth_signed(synth_scale_f16(0.025f, &s), &s); break;
        case DJ_TYPE_IQ2_XXS: ((struct dj_block_iq2_xxs *)p)->d = synth_scale_f16(0.035f / (15.5f * 0.25f * 43.0f), &s); break;
        case DJ_TYPE_IQ2_XS: ((struct dj_block_iq2_xs *)p)->d = synth_scale_f16(0.035f / (15.5f * 0.25f * 43.0f), &s); break;
        case DJ_TYPE_IQ2_S: ((struct dj_block_iq2_s *)p)->d = synth_scale_f16(0.035f / (15.5f * 0.25f * 43.0f), &s); break;
        case DJ_TYPE_IQ3_XXS: ((struct dj_block_iq3_xxs *)p)->d = synth_scale_f16(0.035f / (15.5f * 0.5f * 62.0f), &s); break;
        case DJ_TYPE_IQ3_S: ((struct dj_block_iq3_s *)p)->d = synth_scale_f16(0.035f / (31.0f * 15.0f), &s); break;
        case DJ_TYPE_IQ1_S: ((struct dj_block_iq1_s *)p)->d = synth_scale_f16(0.035f / (15.0f * 1.125f), &s); break;
        case DJ_TYPE_IQ1_M: {
            /* the f16 super-scale is spread over the top nibbles of the four 16-bit scale words
             * (low nibble of the f16 in word 0); the 3-bit sub-scales below stay random */
            struct dj_block_iq1_m *q = (struct dj_block_iq1_m *)p;
            const uint16_t d = synth_scale_f16(0.035f / (15.0f * 1.125f), &s);
            for (int w = 0; w < 4; w++) {
                uint16_t v = (uint16_t)(q->scales[2 * w] | q->scales[2 * w + 1] << 8);
                v = (uint16_t)((v & 0x0FFF) | ((d >> (4 * w)) & 0xF) << 12);
                q->scales[2 * w] = (uint8_t)v, q->scales[2 * w + 1] = (uint8_t)(v >> 8);
            }
            break;
        }
        case DJ_TYPE_IQ4_XS: ((struct dj_block_iq4_xs *)p)->d = synth_scale_f16(0.035f / (32.0f * 127.0f), &s); break;
        default: break;
        }
    }
}

#endif

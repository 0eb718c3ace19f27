/*
 * ref_quants.c — reference dequantizers and dot products of the weight types beyond
 * the seven of ref.c: Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0, Q2_0.
 *
 * Dequantizers: ggml's dequantize_row_* (ggml-quants.c, llama.cpp d32676d7), the same
 * float operations in the same order, so the results are bitwise ggml's (checked
 * against llama.cpp's own to_float and the gguf package's numpy dequantizers by
 * tests/kernels/test_quant_vectors.c).  Per block, with d, dmin f16 scales:
 *
 *   Q4_1   x = q*d + m                     q: 4 bits, element j: qs[j] & 15, j+16: qs[j] >> 4
 *   Q5_0   x = (q - 16)*d                  q: 4 bits as Q4_1 | bit j of the 32-bit qh << 4
 *   Q5_1   x = q*d + m                     q: as Q5_0
 *   Q2_K   x = (d*sc)*q - dmin*m           per 16: sc, m = scales[i] & 15, >> 4; q: 2 bits
 *   Q3_K   x = (d*(sc - 32))*(q - 4h)      per 16: 6-bit sc; q: 2 bits; h = hmask bit clear
 *   Q5_K   x = (d*sc)*q - dmin*m           per 32: Q4_K's 6-bit sc, m; q: 4 bits | qh bit << 4
 *   TQ1_0  x = (t - 1)*d                   t: base-3 digits, 5 per byte (4 in qh)
 *   TQ2_0  x = (q - 1)*d                   q: 2 bits
 *   IQ2_XXS/XS/S  x = (d*(0.5 + s)*0.25) * g * sign    g: grid byte, s: 4-bit scale
 *   IQ3_XXS       x = (d*(0.5 + s)*0.5) * g * sign
 *   IQ3_S         x = (d*(1 + 2s)) * g * sign
 *   IQ1_S/M       x = (d*(2s + 1)) * (g + delta)        g in {-1, 0, 1}, delta = ±1/8
 *   IQ4_NL x = d * kvalues_iq4nl[q]        IQ4_XS: (d*(ls - 32)) * kvalues_iq4nl[q], 6-bit ls
 *   MXFP4  x = kvalues_fp4[q] * e8m0_half(e)
 *   NVFP4  x = kvalues_fp4[q] * ue4m3_half(d[s])        per 16 (4 scales per 64)
 *   Q1_0   x = bit ? d : -d                Q2_0: x = (q - 1)*d, q: 2 bits
 *
 * (bit layouts: each dequantizer below; tables: kernels/quant_tables.h).
 *
 * Dot products: the exact value of sum_i w_i * a_i, in double, where a_i = d_a * q_a,i
 * is the activation (q8_0 for the types with blocks of 32..128, q8_K for the
 * 256-super-block types: dj_kernels_act_type) and w_i the weight's value by the formula
 * above.  Every weight value above except the four with a min is exact in float (a
 * product of an f16 or power-of-two scale, a scale factor of at most 6 bits and a level
 * of at most 7 bits: at most 24 significant bits), so w_i is the dequantizer's own
 * float.  For Q4_1, Q5_1, Q2_K and Q5_K the dequantizer rounds s_i - m_i (both parts
 * exact: s = (d*sc)*q, m = dmin*mn or -m); the dot takes the exact s_i - m_i instead,
 * as a kernel that sums the two parts over a block does.  IQ1_S/IQ1_M are split too:
 * s = dl*g, m = -dl*delta.  *mag is sum |s_i a_i| + |m_i a_i| (sum |w_i a_i| where
 * there is no split): the size of the terms a float kernel adds.
 */
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "kernels/quant_tables.h"
#include "kernels/ref/ref.h"

static inline float f16(uint16_t h) { return dj_fp16_to_f32(h); }
static inline uint16_t load_u16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
/* Byte j of a little-endian grid word. */
static inline int grid_byte(uint64_t g, int j) { return (int)(uint8_t)(g >> (8 * j)); }
static inline int grid_i8(uint64_t g, int j) { return (int)(int8_t)(uint8_t)(g >> (8 * j)); }

/* ---- 32/64/128-element blocks ------------------------------------------------------ */

void dj_ref_dequantize_q4_1(const void *xv, float *y, int64_t n) {
    const struct dj_block_q4_1 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK4_1; i++, y += DJ_QK4_1) {
        const float d = f16(x[i].d), m = f16(x[i].m);
        for (int j = 0; j < DJ_QK4_1 / 2; j++) {
            const int x0 = x[i].qs[j] & 0x0F, x1 = x[i].qs[j] >> 4;
            y[j] = x0 * d + m;
            y[j + DJ_QK4_1 / 2] = x1 * d + m;
        }
    }
}

/* The 5-bit values of a Q5_0/Q5_1 block: element j (< 16) = low nibble of qs[j] | bit j of
 * qh << 4; element j + 16 = high nibble | bit j + 16 of qh << 4. */
static inline void q5_values(const uint8_t *qs, const uint8_t *qhb, int q[32]) {
    const uint32_t qh = load_u32(qhb);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) | (int)(((qh >> j) << 4) & 0x10);
        q[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
    }
}

void dj_ref_dequantize_q5_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q5_0 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK5_0; i++, y += DJ_QK5_0) {
        const float d = f16(x[i].d);
        int q[32];
        q5_values(x[i].qs, x[i].qh, q);
        for (int j = 0; j < 32; j++) y[j] = (q[j] - 16) * d;
    }
}

void dj_ref_dequantize_q5_1(const void *xv, float *y, int64_t n) {
    const struct dj_block_q5_1 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK5_1; i++, y += DJ_QK5_1) {
        const float d = f16(x[i].d), m = f16(x[i].m);
        int q[32];
        q5_values(x[i].qs, x[i].qh, q);
        for (int j = 0; j < 32; j++) y[j] = q[j] * d + m;
    }
}

void dj_ref_dequantize_iq4_nl(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq4_nl *x = xv;
    for (int64_t i = 0; i < n / DJ_QK4_NL; i++, y += DJ_QK4_NL) {
        const float d = f16(x[i].d);
        for (int j = 0; j < DJ_QK4_NL / 2; j++) {
            y[j] = d * dj_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + DJ_QK4_NL / 2] = d * dj_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void dj_ref_dequantize_mxfp4(const void *xv, float *y, int64_t n) {
    const struct dj_block_mxfp4 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_MXFP4; i++, y += DJ_QK_MXFP4) {
        const float d = dj_e8m0_to_f32_half(x[i].e);
        for (int j = 0; j < DJ_QK_MXFP4 / 2; j++) {
            y[j] = dj_kvalues_fp4[x[i].qs[j] & 0x0F] * d;
            y[j + DJ_QK_MXFP4 / 2] = dj_kvalues_fp4[x[i].qs[j] >> 4] * d;
        }
    }
}

/* 4 sub-blocks of 16, each with its own UE4M3 scale; sub-block s holds its elements j and
 * j + 8 in the low and high nibbles of qs[8s + j]. */
void dj_ref_dequantize_nvfp4(const void *xv, float *y, int64_t n) {
    const struct dj_block_nvfp4 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_NVFP4; i++) {
        for (int s = 0; s < DJ_QK_NVFP4 / DJ_QK_NVFP4_SUB; s++, y += DJ_QK_NVFP4_SUB) {
            const float d = dj_ue4m3_to_f32_half(x[i].d[s]);
            for (int j = 0; j < DJ_QK_NVFP4_SUB / 2; j++) {
                const uint8_t b = x[i].qs[s * (DJ_QK_NVFP4_SUB / 2) + j];
                y[j] = dj_kvalues_fp4[b & 0x0F] * d;
                y[j + DJ_QK_NVFP4_SUB / 2] = dj_kvalues_fp4[b >> 4] * d;
            }
        }
    }
}

/* Element j is bit j % 8 of qs[j / 8]. */
void dj_ref_dequantize_q1_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q1_0 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK1_0; i++, y += DJ_QK1_0) {
        const float d = f16(x[i].d), neg_d = -d;
        for (int j = 0; j < DJ_QK1_0; j++) y[j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : neg_d;
    }
}

/* Element j is bits 2(j % 4) .. 2(j % 4) + 1 of qs[j / 4]. */
void dj_ref_dequantize_q2_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q2_0 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK2_0; i++, y += DJ_QK2_0) {
        const float d = f16(x[i].d);
        for (int j = 0; j < DJ_QK2_0; j++) y[j] = ((int)((x[i].qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

/* ---- 256-element super-blocks: k-quants and ternary ---------------------------------- */

/* Q2_K: element e = 128h + 32c + l (h 0..1, c 0..3, l 0..31) is bits 2c, 2c+1 of
 * qs[32h + l]; its scale byte is scales[e / 16]. */
void dj_ref_dequantize_q2_K(const void *xv, float *y, int64_t n) {
    const struct dj_block_q2_K *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d), min = f16(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int c = 0, shift = 0; c < 4; c++, shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((int8_t)((q[l + 16 * half] >> shift) & 3)) - ml;
                }
            }
        }
    }
}

/* Q3_K: element e = 128h + 32c + l: low 2 bits as Q2_K's; minus 4 unless bit e / 32 of
 * hmask[l] is set. */
void dj_ref_dequantize_q3_K(const void *xv, float *y, int64_t n) {
    const struct dj_block_q3_K *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d_all = f16(x[i].d);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int c = 0, shift = 0; c < 4; c++, shift += 2, m <<= 1) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (dj_q3_K_scale(x[i].scales, is++) - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * ((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

/* Q5_K: sub-block s (32 elements) has Q4_K's 6-bit scale and min; element 32s + l is the
 * low (s even) or high (s odd) nibble of qs[32(s / 2) + l], plus 16 if bit s of qh[l]. */
void dj_ref_dequantize_q5_K(const void *xv, float *y, int64_t n) {
    const struct dj_block_q5_K *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        const float d = f16(x[i].d), min = f16(x[i].dmin);
        uint8_t u1 = 1, u2 = 2;
        for (int s = 0; s < 8; s += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            dj_q4_K_scale_min(s, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            dj_q4_K_scale_min(s + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Base-3 digit n (0 = most significant) of a TQ1_0 byte: the byte holds
 * ceil(v * 256 / 243) for v the 5-digit (4 in qh) base-3 number; multiplying by 3^n
 * (mod 256) shifts digit n to the top, and (q * 3) >> 8 reads it. */
static inline int tq1_digit(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(byte * pow3[n]);
    return ((uint16_t)q * 3) >> 8;
}

/* TQ1_0: elements 0..159: digit n of qs[m] is element 32n + m (m < 32); 160..239: digit
 * n of qs[32 + m] is element 160 + 16n + m (m < 16); 240..255: digit n of qh[j] is
 * element 240 + 4n + j. */
void dj_ref_dequantize_tq1_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_tq1_0 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        for (int j = 0; j < 32; j += 32)
            for (int nd = 0; nd < 5; nd++)
                for (int m = 0; m < 32; m++) *y++ = (float)(tq1_digit(x[i].qs[j + m], nd) - 1) * d;
        for (int j = 32; j < 48; j += 16)
            for (int nd = 0; nd < 5; nd++)
                for (int m = 0; m < 16; m++) *y++ = (float)(tq1_digit(x[i].qs[j + m], nd) - 1) * d;
        for (int nd = 0; nd < 4; nd++)
            for (int j = 0; j < 4; j++) *y++ = (float)(tq1_digit(x[i].qh[j], nd) - 1) * d;
    }
}

/* TQ2_0: element 128c + 32l + m is bits 2l, 2l+1 of qs[32c + m]. */
void dj_ref_dequantize_tq2_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_tq2_0 *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        for (int c = 0; c < 2; c++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *y++ = (float)((int8_t)((x[i].qs[32 * c + m] >> (2 * l)) & 3) - 1) * d;
    }
}

/* ---- i-quants ------------------------------------------------------------------------ */

static inline float sign_of(uint8_t signs, int j) { return signs & dj_kmask_iq2xs[j] ? -1.f : 1.f; }

/* IQ2_XXS: per 32 elements two words: word 0 = four 8-bit grid indices (one per group of
 * 8); word 1 = four 7-bit sign codes (bits 7l .. 7l+6) and the 4-bit scale in bits 28..31. */
void dj_ref_dequantize_iq2_xxs(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq2_xxs *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        for (int ib = 0; ib < DJ_QK_K / 32; ib++) {
            const uint8_t *p = (const uint8_t *)x[i].qs + 8 * ib;
            const uint32_t idx = load_u32(p), aux = load_u32(p + 4);
            const float db = d * (0.5f + (aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t g = dj_iq2xxs_grid[(idx >> (8 * l)) & 255];
                const uint8_t signs = dj_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) y[j] = db * grid_byte(g, j) * sign_of(signs, j);
            }
        }
    }
}

/* IQ2_XS: per group of 8 a 16-bit word: 9-bit grid index, 7-bit sign code; per 32 one
 * scale byte: low nibble for groups 0-1, high for 2-3. */
void dj_ref_dequantize_iq2_xs(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq2_xs *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        for (int ib = 0; ib < DJ_QK_K / 32; ib++) {
            float db[2];
            db[0] = d * (0.5f + (x[i].scales[ib] & 0xf)) * 0.25f;
            db[1] = d * (0.5f + (x[i].scales[ib] >> 4)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t w = load_u16(&x[i].qs[4 * ib + l]);
                const uint64_t g = dj_iq2xs_grid[w & 511];
                const uint8_t signs = dj_ksigns_iq2xs[w >> 9];
                for (int j = 0; j < 8; j++) y[j] = db[l / 2] * grid_byte(g, j) * sign_of(signs, j);
            }
        }
    }
}

/* IQ2_S: group l of sub-block ib: grid index qs[4ib + l] | bits 2l, 2l+1 of qh[ib] << 8;
 * signs: the full byte qs[32 + 4ib + l]; scales as IQ2_XS. */
void dj_ref_dequantize_iq2_s(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq2_s *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        const uint8_t *qs = x[i].qs, *qh = x[i].qh, *signs = qs + DJ_QK_K / 8;
        for (int ib = 0; ib < DJ_QK_K / 32; ib++, qs += 4, signs += 4) {
            float db[2];
            db[0] = d * (0.5f + (x[i].scales[ib] & 0xf)) * 0.25f;
            db[1] = d * (0.5f + (x[i].scales[ib] >> 4)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const float dl = db[l / 2];
                const uint64_t g = dj_iq2s_grid[qs[l] | ((qh[ib] << (8 - 2 * l)) & 0x300)];
                for (int j = 0; j < 8; j++) y[j] = dl * grid_byte(g, j) * sign_of(signs[l], j);
            }
        }
    }
}

/* IQ3_XXS: qs[0..63]: 8-bit indices of 4-element grid entries (two per group of 8);
 * then per 32 one word of four 7-bit sign codes and the 4-bit scale in bits 28..31. */
void dj_ref_dequantize_iq3_xxs(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq3_xxs *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        const uint8_t *qs = x[i].qs, *scales_and_signs = qs + DJ_QK_K / 4;
        for (int ib = 0; ib < DJ_QK_K / 32; ib++, qs += 8) {
            const uint32_t aux = load_u32(scales_and_signs + 4 * ib);
            const float db = d * (0.5f + (aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint8_t signs = dj_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                const uint32_t g1 = dj_iq3xxs_grid[qs[2 * l]], g2 = dj_iq3xxs_grid[qs[2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    y[j] = db * grid_byte(g1, j) * sign_of(signs, j);
                    y[j + 4] = db * grid_byte(g2, j) * sign_of(signs, j + 4);
                }
            }
        }
    }
}

/* IQ3_S: sub-block ib, group l: grid indices qs[8ib + 2l] | bit 2l of qh[ib] << 8 and
 * qs[8ib + 2l + 1] | bit 2l + 1 of qh[ib] << 8; signs: the byte signs[4ib + l]; the scale
 * is the low (ib even) or high (ib odd) nibble of scales[ib / 2]. */
void dj_ref_dequantize_iq3_s(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq3_s *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        const uint8_t *qs = x[i].qs, *qh = x[i].qh, *signs = x[i].signs;
        for (int ib = 0; ib < DJ_QK_K / 32; ib += 2, qh += 2) {
            const float db1 = d * (1 + 2 * (x[i].scales[ib / 2] & 0xf));
            const float db2 = d * (1 + 2 * (x[i].scales[ib / 2] >> 4));
            for (int half = 0; half < 2; half++, qs += 8, signs += 4) {
                const float db = half ? db2 : db1;
                for (int l = 0; l < 4; l++, y += 8) {
                    const uint32_t g1 = dj_iq3s_grid[qs[2 * l] | ((qh[half] << (8 - 2 * l)) & 256)];
                    const uint32_t g2 = dj_iq3s_grid[qs[2 * l + 1] | ((qh[half] << (7 - 2 * l)) & 256)];
                    for (int j = 0; j < 4; j++) {
                        y[j] = db * grid_byte(g1, j) * sign_of(signs[l], j);
                        y[j + 4] = db * grid_byte(g2, j) * sign_of(signs[l], j + 4);
                    }
                }
            }
        }
    }
}

/* IQ1_S: per 32 a 16-bit qh: bits 3l .. 3l+2 are the high bits of group l's 11-bit grid
 * index (low 8: qs[4ib + l]), bits 12..14 the 3-bit scale, bit 15 the sign of delta. */
void dj_ref_dequantize_iq1_s(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq1_s *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < DJ_QK_K / 32; ib++, qs += 4) {
            const uint16_t qh = load_u16(&x[i].qh[ib]);
            const float dl = d * (2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -DJ_IQ1S_DELTA : DJ_IQ1S_DELTA;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t g = dj_iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
                for (int j = 0; j < 8; j++) y[j] = dl * (grid_i8(g, j) + delta);
            }
        }
    }
}

/* IQ1_M: per 32 elements (sub-block ib): two 3-bit scales, bits 6(ib%2) .. +2 (groups 0-1)
 * and 6(ib%2)+3 .. +5 (groups 2-3) of scale word ib/2; group l's 11-bit grid index is
 * qs[4ib + l] | 3 bits of qh[2ib + l/2] (bits 0..2 for even l, 4..6 for odd) << 8, and
 * bit 3 (even l) or 7 (odd l) of that byte is the sign of delta. */
void dj_ref_dequantize_iq1_m(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq1_m *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const float d = f16(dj_iq1_m_d(x[i].scales));
        const uint8_t *qs = x[i].qs, *qh = x[i].qh;
        for (int ib = 0; ib < DJ_QK_K / 32; ib++, qs += 4, qh += 2) {
            const uint16_t sc = load_u16(x[i].scales + 2 * (ib / 2));
            const float dl1 = d * (2 * ((sc >> (6 * (ib % 2) + 0)) & 0x7) + 1);
            const float dl2 = d * (2 * ((sc >> (6 * (ib % 2) + 3)) & 0x7) + 1);
            const uint16_t idx[4] = {(uint16_t)(qs[0] | ((qh[0] << 8) & 0x700)), (uint16_t)(qs[1] | ((qh[0] << 4) & 0x700)),
                                     (uint16_t)(qs[2] | ((qh[1] << 8) & 0x700)), (uint16_t)(qs[3] | ((qh[1] << 4) & 0x700))};
            const float delta[4] = {qh[0] & 0x08 ? -DJ_IQ1S_DELTA : DJ_IQ1S_DELTA,
                                    qh[0] & 0x80 ? -DJ_IQ1S_DELTA : DJ_IQ1S_DELTA,
                                    qh[1] & 0x08 ? -DJ_IQ1S_DELTA : DJ_IQ1S_DELTA,
                                    qh[1] & 0x80 ? -DJ_IQ1S_DELTA : DJ_IQ1S_DELTA};
            for (int l = 0; l < 4; l++, y += 8) {
                const float dl = l < 2 ? dl1 : dl2;
                const uint64_t g = dj_iq1s_grid[idx[l]];
                for (int j = 0; j < 8; j++) y[j] = dl * (grid_i8(g, j) + delta[l]);
            }
        }
    }
}

/* IQ4_XS: sub-block ib's 6-bit scale: nibble ib%2 of scales_l[ib/2] | bits 2ib, 2ib+1 of
 * scales_h << 4; its 32 elements are the low then the high nibbles of qs[16ib .. 16ib+15]. */
void dj_ref_dequantize_iq4_xs(const void *xv, float *y, int64_t n) {
    const struct dj_block_iq4_xs *x = xv;
    for (int64_t i = 0; i < n / DJ_QK_K; i++) {
        const uint8_t *qs = x[i].qs;
        const float d = f16(x[i].d);
        const uint16_t scales_h = load_u16(&x[i].scales_h);
        for (int ib = 0; ib < DJ_QK_K / 32; ib++, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * dj_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * dj_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ---- the split weights of the types with a min or delta (see the top) ---------------- */

/* One block of w into s[] and m[], w_i = s_i - m_i exactly. */
static void split_q4_1(const void *b, float *s, float *m) {
    const struct dj_block_q4_1 *x = b;
    const float d = f16(x->d), mn = f16(x->m);
    for (int j = 0; j < 16; j++) {
        s[j] = d * (x->qs[j] & 0xF);
        s[j + 16] = d * (x->qs[j] >> 4);
    }
    for (int j = 0; j < 32; j++) m[j] = -mn;
}

static void split_q5_1(const void *b, float *s, float *m) {
    const struct dj_block_q5_1 *x = b;
    const float d = f16(x->d), mn = f16(x->m);
    int q[32];
    q5_values(x->qs, x->qh, q);
    for (int j = 0; j < 32; j++) {
        s[j] = d * q[j];
        m[j] = -mn;
    }
}

static void split_q2_K(const void *b, float *s, float *m) {
    const struct dj_block_q2_K *x = b;
    const float d = f16(x->d), dmin = f16(x->dmin);
    for (int e = 0; e < DJ_QK_K; e++) {
        const int q = (x->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        const uint8_t sc = x->scales[e / 16];
        s[e] = d * (sc & 0xF) * q;
        m[e] = dmin * (sc >> 4);
    }
}

static void split_q5_K(const void *b, float *s, float *m) {
    const struct dj_block_q5_K *x = b;
    const float d = f16(x->d), dmin = f16(x->dmin);
    for (int e = 0; e < DJ_QK_K; e++) {
        const int sb = e / 32, l = e % 32;
        uint8_t sc, mn;
        dj_q4_K_scale_min(sb, x->scales, &sc, &mn);
        const uint8_t byte = x->qs[32 * (sb / 2) + l];
        const int q = ((sb & 1) ? byte >> 4 : byte & 0xF) + ((x->qh[l] >> sb) & 1) * 16;
        s[e] = d * sc * q;
        m[e] = dmin * mn;
    }
}

static void split_iq1_s(const void *b, float *s, float *m) {
    const struct dj_block_iq1_s *x = b;
    const float d = f16(x->d);
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t qh = load_u16(&x->qh[ib]);
        const float dl = d * (2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -DJ_IQ1S_DELTA : DJ_IQ1S_DELTA;
        for (int l = 0; l < 4; l++) {
            const uint64_t g = dj_iq1s_grid[x->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
            for (int j = 0; j < 8; j++) {
                s[32 * ib + 8 * l + j] = dl * grid_i8(g, j);
                m[32 * ib + 8 * l + j] = -(dl * delta);
            }
        }
    }
}

static void split_iq1_m(const void *b, float *s, float *m) {
    const struct dj_block_iq1_m *x = b;
    const float d = f16(dj_iq1_m_d(x->scales));
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t sc = load_u16(x->scales + 2 * (ib / 2));
        for (int l = 0; l < 4; l++) {
            const int ls = (sc >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
            const uint8_t h = x->qh[2 * ib + l / 2] >> (4 * (l % 2)); /* index bits 0..2, sign bit 3 */
            const uint64_t g = dj_iq1s_grid[x->qs[4 * ib + l] | ((h & 7) << 8)];
            const float dl = d * (2 * ls + 1), delta = h & 8 ? -DJ_IQ1S_DELTA : DJ_IQ1S_DELTA;
            for (int j = 0; j < 8; j++) {
                s[32 * ib + 8 * l + j] = dl * grid_i8(g, j);
                m[32 * ib + 8 * l + j] = -(dl * delta);
            }
        }
    }
}

/* ---- the type table -------------------------------------------------------------------- */

struct qtype {
    uint32_t type;
    dj_ref_dequantize_fn dequantize;
    void (*split)(const void *block, float *s, float *m); /* NULL: w is the dequantizer's */
};

static const struct qtype qtypes[] = {
    {DJ_TYPE_Q4_1, dj_ref_dequantize_q4_1, split_q4_1},
    {DJ_TYPE_Q5_0, dj_ref_dequantize_q5_0, NULL},
    {DJ_TYPE_Q5_1, dj_ref_dequantize_q5_1, split_q5_1},
    {DJ_TYPE_Q2_K, dj_ref_dequantize_q2_K, split_q2_K},
    {DJ_TYPE_Q3_K, dj_ref_dequantize_q3_K, NULL},
    {DJ_TYPE_Q5_K, dj_ref_dequantize_q5_K, split_q5_K},
    {DJ_TYPE_IQ1_S, dj_ref_dequantize_iq1_s, split_iq1_s},
    {DJ_TYPE_IQ1_M, dj_ref_dequantize_iq1_m, split_iq1_m},
    {DJ_TYPE_IQ2_XXS, dj_ref_dequantize_iq2_xxs, NULL},
    {DJ_TYPE_IQ2_XS, dj_ref_dequantize_iq2_xs, NULL},
    {DJ_TYPE_IQ2_S, dj_ref_dequantize_iq2_s, NULL},
    {DJ_TYPE_IQ3_XXS, dj_ref_dequantize_iq3_xxs, NULL},
    {DJ_TYPE_IQ3_S, dj_ref_dequantize_iq3_s, NULL},
    {DJ_TYPE_IQ4_NL, dj_ref_dequantize_iq4_nl, NULL},
    {DJ_TYPE_IQ4_XS, dj_ref_dequantize_iq4_xs, NULL},
    {DJ_TYPE_MXFP4, dj_ref_dequantize_mxfp4, NULL},
    {DJ_TYPE_TQ1_0, dj_ref_dequantize_tq1_0, NULL},
    {DJ_TYPE_TQ2_0, dj_ref_dequantize_tq2_0, NULL},
    {DJ_TYPE_NVFP4, dj_ref_dequantize_nvfp4, NULL},
    {DJ_TYPE_Q1_0, dj_ref_dequantize_q1_0, NULL},
    {DJ_TYPE_Q2_0, dj_ref_dequantize_q2_0, NULL},
};

static const struct qtype *find(uint32_t type) {
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; i++)
        if (qtypes[i].type == type) return &qtypes[i];
    return NULL;
}

dj_ref_dequantize_fn dj_ref_quants_dequantizer(uint32_t type) {
    const struct qtype *q = find(type);
    return q ? q->dequantize : NULL;
}

double dj_ref_dot_quants(uint32_t wtype, int64_t n, const void *w, const void *a, double *mag) {
    const struct qtype *qt = find(wtype);
    DJ_ASSERT(qt && "dj_ref_dot: weight type without a kernel");
    const struct dj_type_info *ti = dj_type_info(wtype);
    const int at = dj_kernels_act_type(wtype);
    const int64_t wb = ti->blck, ab = at == DJ_TYPE_Q8_K ? DJ_QK_K : DJ_QK8_0;
    DJ_ASSERT(n % wb == 0 && wb % ab == 0 && wb <= DJ_QK_K);
    float s[DJ_QK_K], m[DJ_QK_K];
    double sum = 0, mg = 0;
    for (int64_t ib = 0; ib < n / wb; ib++) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)ib * ti->bytes;
        if (qt->split) {
            qt->split(blk, s, m);
        } else {
            qt->dequantize(blk, s, wb);
            memset(m, 0, sizeof(float) * (size_t)wb);
        }
        for (int64_t ia = 0; ia < wb / ab; ia++) {
            const int64_t e0 = ia * ab, blk_a = ib * (wb / ab) + ia;
            const int8_t *q;
            double da;
            if (at == DJ_TYPE_Q8_K) {
                const struct dj_block_q8_K *ak = (const struct dj_block_q8_K *)a + blk_a;
                q = ak->qs;
                da = ak->d;
            } else {
                const struct dj_block_q8_0 *a0 = (const struct dj_block_q8_0 *)a + blk_a;
                q = a0->qs;
                da = f16(a0->d);
            }
            /* each s*q and m*q is exact in double (24 + 8 bits) */
            double part = 0, part_abs = 0;
            for (int64_t j = 0; j < ab; j++) {
                const double sq = (double)s[e0 + j] * q[j], mq = (double)m[e0 + j] * q[j];
                part += sq - mq;
                part_abs += fabs(sq) + fabs(mq);
            }
            sum += da * part;
            mg += fabs(da) * part_abs;
        }
    }
    if (mag) *mag = mg;
    return sum;
}

/*
 * quants_generic.c — the reference-path kernels of the weight types beyond the seven of
 * kernels_generic.c: Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, NVFP4, Q1_0, Q2_0 (with q8_0
 * activations) and Q2_K, Q3_K, Q5_K, TQ1_0, TQ2_0, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ4_XS (with q8_K).  Portable C, what a CPU without a fast kernel for
 * the type runs; the AVX2 table overrides some (quants_avx2.c).
 *
 * Scheme, as kernels_generic.c's quantized dots:
 *   - dot: per block (per super-block for the 256-element types) an exact integer dot of
 *     the weight's integer levels with the activation's int8 values, sub-block scales
 *     applied as integers where they are integers; then a fixed sequence of float
 *     operations per block into one float sum, in block order:
 *       Q5_0, IQ4_NL, Q2_0, Q1_0, MXFP4 ... sum += (d_w * d_a) * (float)isum   (per q8_0 block)
 *       Q4_1, Q5_1                          sum += (d*d_a)*(float)isum + (m*d_a)*(float)asum
 *       NVFP4                               per 16: sum += (ue4m3_half(s) * d_a) * (float)isum
 *       Q3_K, IQ3_S, IQ4_XS, TQ*            sum += (d * d8) * (float)isum
 *       IQ2_*, IQ3_XXS, IQ1_*               sum += (d * d8 * 2^-3 or 2^-2) * (float)isum
 *       Q2_K, Q5_K                          sum += (d*d8)*(float)isc; sum -= (dmin*d8)*(float)imn
 *     where the i-quants' isum carries the odd scale factors 2s+1 (their scale is
 *     d*(2s+1)/8 or /4: ggml's (0.5 + s)*0.25 and (0.5 + s)*0.5) and IQ1's ±1/8 delta as
 *     8*sum(g*a) ± sum(a), all exact;
 *   - matmul: each (row, token) element is that dot (tiles only group the calls), so
 *     matmul == dot bitwise whatever the batch, tile or row split (kernels.h);
 *   - dequantize_row: the reference dequantizer itself (ref_quants.c), bitwise ggml's.
 * Integer ranges: the largest |isum| is IQ3_XXS's 8 * 31 * 32 * 62 * 127 < 2^26.
 */
#include <string.h>

#include "core/fp16.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/quant_tables.h"
#include "kernels/ref/ref.h"

static inline float f16(uint16_t h) { return dj_fp16_to_f32(h); }
static inline int gbyte(uint64_t g, int j) { return (int)(uint8_t)(g >> (8 * j)); }
static inline int gi8(uint64_t g, int j) { return (int)(int8_t)(uint8_t)(g >> (8 * j)); }
/* v with the sign of bit j of signs */
static inline int sgn(int v, unsigned signs, int j) { return (signs >> j) & 1 ? -v : v; }

/* The integer dot of n decoded weight levels with n activation values.  The kernels below
 * decode a (sub-)block into int8 levels first and then take this dot: each step is a plain
 * loop (GCC 12 -O2 vectorizes the dot with 16-byte vectors; the decoding, table lookups
 * and scattered bits, stays scalar). */
static inline int32_t dot_i8(const int8_t *q, const int8_t *x, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += q[i] * x[i];
    return s;
}
static inline int32_t sum_i8(const int8_t *x, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s;
}

/* ---- q8_0 activations ------------------------------------------------------------------ */

static float dot_q4_1(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q4_1 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK4_1; ib++) {
        const int8_t *x = a[ib].qs;
        int32_t isum = 0, asum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (w[ib].qs[j] & 0xF) * x[j] + (w[ib].qs[j] >> 4) * x[j + 16];
            asum += x[j] + x[j + 16];
        }
        const float da = f16(a[ib].d);
        sum += (f16(w[ib].d) * da) * (float)isum + (f16(w[ib].m) * da) * (float)asum;
    }
    return sum;
}

/* The 5-bit values' dot with x, and the sum of x: Q5_0 / Q5_1 (element layout: ref_quants.c). */
static inline int32_t q5_isum(const uint8_t *qs, const uint8_t *qhb, const int8_t *x, int32_t *asum) {
    const uint32_t qh = dj_load_u32(qhb);
    int8_t q[32];
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((qs[j] & 0xF) | (((qh >> j) & 1) << 4));
        q[j + 16] = (int8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
    *asum = sum_i8(x, 32);
    return dot_i8(q, x, 32);
}

static float dot_q5_0(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q5_0 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK5_0; ib++) {
        int32_t asum;
        const int32_t isum = q5_isum(w[ib].qs, w[ib].qh, a[ib].qs, &asum) - 16 * asum;
        sum += (f16(w[ib].d) * f16(a[ib].d)) * (float)isum;
    }
    return sum;
}

static float dot_q5_1(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q5_1 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK5_1; ib++) {
        int32_t asum;
        const int32_t isum = q5_isum(w[ib].qs, w[ib].qh, a[ib].qs, &asum);
        const float da = f16(a[ib].d);
        sum += (f16(w[ib].d) * da) * (float)isum + (f16(w[ib].m) * da) * (float)asum;
    }
    return sum;
}

/* 32 nibbles (low halves: elements 0..15, high: 16..31) through a 16-entry level table. */
static inline int32_t nl_isum(const int8_t *levels, const uint8_t *qs, const int8_t *x) {
    int8_t q[32];
    for (int j = 0; j < 16; j++) {
        q[j] = levels[qs[j] & 0xF];
        q[j + 16] = levels[qs[j] >> 4];
    }
    return dot_i8(q, x, 32);
}

static float dot_iq4_nl(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq4_nl *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK4_NL; ib++)
        sum += (f16(w[ib].d) * f16(a[ib].d)) * (float)nl_isum(dj_kvalues_iq4nl, w[ib].qs, a[ib].qs);
    return sum;
}

static float dot_mxfp4(int64_t k, const void *wv, const void *av) {
    const struct dj_block_mxfp4 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_MXFP4; ib++)
        sum += (dj_e8m0_to_f32_half(w[ib].e) * f16(a[ib].d)) * (float)nl_isum(dj_kvalues_fp4, w[ib].qs, a[ib].qs);
    return sum;
}

/* A 64-block over two q8_0 blocks; sub-block s (16 elements, its own scale) is half s % 2
 * of activation block s / 2. */
static float dot_nvfp4(int64_t k, const void *wv, const void *av) {
    const struct dj_block_nvfp4 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_NVFP4; ib++) {
        for (int s = 0; s < 4; s++) {
            const struct dj_block_q8_0 *ab = &a[2 * ib + s / 2];
            const int8_t *x = ab->qs + 16 * (s % 2);
            const uint8_t *q = w[ib].qs + 8 * s;
            int8_t v[16];
            for (int j = 0; j < 8; j++) {
                v[j] = dj_kvalues_fp4[q[j] & 0xF];
                v[j + 8] = dj_kvalues_fp4[q[j] >> 4];
            }
            sum += (dj_ue4m3_to_f32_half(w[ib].d[s]) * f16(ab->d)) * (float)dot_i8(v, x, 16);
        }
    }
    return sum;
}

/* A 128-block over four q8_0 blocks: element j is +d if bit j % 8 of qs[j / 8] is set, else -d. */
static float dot_q1_0(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q1_0 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK1_0; ib++) {
        const float d = f16(w[ib].d);
        for (int b = 0; b < 4; b++) {
            const struct dj_block_q8_0 *ab = &a[4 * ib + b];
            int8_t q[32];
            for (int j = 0; j < 32; j++) q[j] = (int8_t)((w[ib].qs[4 * b + j / 8] >> (j % 8)) & 1 ? 1 : -1);
            sum += (d * f16(ab->d)) * (float)dot_i8(q, ab->qs, 32);
        }
    }
    return sum;
}

/* A 64-block over two q8_0 blocks: element j is bits 2(j % 4), +1 of qs[j / 4], minus 1. */
static float dot_q2_0(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q2_0 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK2_0; ib++) {
        const float d = f16(w[ib].d);
        for (int b = 0; b < 2; b++) {
            const struct dj_block_q8_0 *ab = &a[2 * ib + b];
            const uint8_t *q = w[ib].qs + 8 * b;
            int8_t v[32];
            for (int j = 0; j < 32; j++) v[j] = (int8_t)(((q[j / 4] >> (2 * (j % 4))) & 3) - 1);
            sum += (d * f16(ab->d)) * (float)dot_i8(v, ab->qs, 32);
        }
    }
    return sum;
}

/* ---- q8_K activations: k-quants and ternary ---------------------------------------------- */

/* Q2_K / Q3_K: sub-block t (16 elements) takes bits 2c, 2c+1 of qs[32h + 16 half + l],
 * h = t / 8, c = (t % 8) / 2, half = t % 2 (ref_quants.c). */
static float dot_q2_K(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q2_K *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        int32_t isc = 0, imn = 0;
        for (int t = 0; t < 16; t++) {
            const uint8_t *q = w[ib].qs + 32 * (t / 8) + 16 * (t % 2);
            const int shift = 2 * ((t % 8) / 2);
            const int8_t *x = a[ib].qs + 16 * t;
            int32_t dot = 0;
            for (int l = 0; l < 16; l++) dot += ((q[l] >> shift) & 3) * x[l];
            isc += (w[ib].scales[t] & 0xF) * dot;
            imn += (w[ib].scales[t] >> 4) * a[ib].bsums[t];
        }
        const float dd = f16(w[ib].d) * a[ib].d, dm = f16(w[ib].dmin) * a[ib].d;
        sum += dd * (float)isc;
        sum -= dm * (float)imn;
    }
    return sum;
}

/* Q3_K: Q2_K's 2 bits, minus 4 where bit t / 2 of hmask[16 half + l] is clear. */
static float dot_q3_K(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q3_K *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        int32_t isum = 0;
        for (int t = 0; t < 16; t++) {
            const uint8_t *q = w[ib].qs + 32 * (t / 8) + 16 * (t % 2), *hm = w[ib].hmask + 16 * (t % 2);
            const int shift = 2 * ((t % 8) / 2), bit = t / 2;
            const int8_t *x = a[ib].qs + 16 * t;
            int8_t v[16];
            for (int l = 0; l < 16; l++) v[l] = (int8_t)(((q[l] >> shift) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4));
            isum += (dj_q3_K_scale(w[ib].scales, t) - 32) * dot_i8(v, x, 16);
        }
        sum += (f16(w[ib].d) * a[ib].d) * (float)isum;
    }
    return sum;
}

/* Q5_K: Q4_K's scales and nibbles, plus 16 where bit s of qh[l] is set (sub-block s). */
static float dot_q5_K(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q5_K *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        uint64_t sc, m;
        dj_q4_K_unpack_scales(w[ib].scales, &sc, &m);
        int32_t isc = 0, imn = 0;
        for (int s = 0; s < 8; s++) {
            const uint8_t *q = w[ib].qs + 32 * (s / 2), *qh = w[ib].qh;
            const int8_t *x = a[ib].qs + 32 * s;
            const int shift = (s & 1) * 4;
            int32_t dot = 0;
            for (int l = 0; l < 32; l++) dot += (((q[l] >> shift) & 0xF) | (((qh[l] >> s) & 1) << 4)) * x[l];
            isc += (int32_t)((sc >> (8 * s)) & 0xFF) * dot;
            imn += (int32_t)((m >> (8 * s)) & 0xFF) * (a[ib].bsums[2 * s] + a[ib].bsums[2 * s + 1]);
        }
        const float dd = f16(w[ib].d) * a[ib].d, dm = f16(w[ib].dmin) * a[ib].d;
        sum += dd * (float)isc;
        sum -= dm * (float)imn;
    }
    return sum;
}

/* Base-3 digit n of a TQ1_0 byte, as ref_quants.c reads it. */
static inline int tq1_digit(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((uint16_t)(uint8_t)(byte * pow3[n]) * 3) >> 8;
}

static float dot_tq1_0(int64_t k, const void *wv, const void *av) {
    const struct dj_block_tq1_0 *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const int8_t *x = a[ib].qs;
        int32_t isum = 0;
        for (int n = 0; n < 5; n++) /* elements 32n + m */
            for (int m = 0; m < 32; m++) isum += (tq1_digit(w[ib].qs[m], n) - 1) * x[32 * n + m];
        for (int n = 0; n < 5; n++) /* 160 + 16n + m */
            for (int m = 0; m < 16; m++) isum += (tq1_digit(w[ib].qs[32 + m], n) - 1) * x[160 + 16 * n + m];
        for (int n = 0; n < 4; n++) /* 240 + 4n + j */
            for (int j = 0; j < 4; j++) isum += (tq1_digit(w[ib].qh[j], n) - 1) * x[240 + 4 * n + j];
        sum += (f16(w[ib].d) * a[ib].d) * (float)isum;
    }
    return sum;
}

static float dot_tq2_0(int64_t k, const void *wv, const void *av) {
    const struct dj_block_tq2_0 *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const int8_t *x = a[ib].qs;
        int32_t isum = 0;
        for (int c = 0; c < 2; c++) /* element 128c + 32l + m: bits 2l of qs[32c + m] */
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) isum += ((int)((w[ib].qs[32 * c + m] >> (2 * l)) & 3) - 1) * x[128 * c + 32 * l + m];
        sum += (f16(w[ib].d) * a[ib].d) * (float)isum;
    }
    return sum;
}

/* ---- q8_K activations: i-quants (layouts: ref_quants.c) -------------------------------------- */

/* A group of 8: grid byte j with the sign of bit j of signs, into q[j]. */
static inline void grid8(uint64_t g, unsigned signs, int8_t *q) {
    for (int j = 0; j < 8; j++) q[j] = (int8_t)sgn(gbyte(g, j), signs, j);
}

static float dot_iq2_xxs(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq2_xxs *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const uint8_t *qs = (const uint8_t *)w[ib].qs;
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            const uint32_t idx = dj_load_u32(qs + 8 * s), aux = dj_load_u32(qs + 8 * s + 4);
            int8_t q[32];
            for (int l = 0; l < 4; l++)
                grid8(dj_iq2xxs_grid[(idx >> (8 * l)) & 255], dj_ksigns_iq2xs[(aux >> (7 * l)) & 127], q + 8 * l);
            isum += (int32_t)(2 * (aux >> 28) + 1) * dot_i8(q, a[ib].qs + 32 * s, 32);
        }
        sum += (f16(w[ib].d) * a[ib].d * 0.125f) * (float)isum;
    }
    return sum;
}

static float dot_iq2_xs(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq2_xs *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            int8_t q[32];
            for (int l = 0; l < 4; l++) {
                const uint16_t qw = dj_load_u16(&w[ib].qs[4 * s + l]);
                grid8(dj_iq2xs_grid[qw & 511], dj_ksigns_iq2xs[qw >> 9], q + 8 * l);
            }
            const int8_t *x = a[ib].qs + 32 * s;
            isum += (2 * (w[ib].scales[s] & 0xF) + 1) * dot_i8(q, x, 16) + (2 * (w[ib].scales[s] >> 4) + 1) * dot_i8(q + 16, x + 16, 16);
        }
        sum += (f16(w[ib].d) * a[ib].d * 0.125f) * (float)isum;
    }
    return sum;
}

static float dot_iq2_s(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq2_s *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const uint8_t *qs = w[ib].qs, *signs = w[ib].qs + DJ_QK_K / 8;
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            int8_t q[32];
            for (int l = 0; l < 4; l++)
                grid8(dj_iq2s_grid[qs[4 * s + l] | ((w[ib].qh[s] << (8 - 2 * l)) & 0x300)], signs[4 * s + l], q + 8 * l);
            const int8_t *x = a[ib].qs + 32 * s;
            isum += (2 * (w[ib].scales[s] & 0xF) + 1) * dot_i8(q, x, 16) + (2 * (w[ib].scales[s] >> 4) + 1) * dot_i8(q + 16, x + 16, 16);
        }
        sum += (f16(w[ib].d) * a[ib].d * 0.125f) * (float)isum;
    }
    return sum;
}

/* Two 4-element grid entries as a group of 8 (g1: elements 0..3, g2: 4..7), signed, into q. */
static inline void grid44(uint32_t g1, uint32_t g2, unsigned signs, int8_t *q) {
    grid8((uint64_t)g1 | (uint64_t)g2 << 32, signs, q);
}

static float dot_iq3_xxs(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq3_xxs *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const uint8_t *qs = w[ib].qs;
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            const uint32_t aux = dj_load_u32(qs + DJ_QK_K / 4 + 4 * s);
            int8_t q[32];
            for (int l = 0; l < 4; l++)
                grid44(dj_iq3xxs_grid[qs[8 * s + 2 * l]], dj_iq3xxs_grid[qs[8 * s + 2 * l + 1]],
                       dj_ksigns_iq2xs[(aux >> (7 * l)) & 127], q + 8 * l);
            isum += (int32_t)(2 * (aux >> 28) + 1) * dot_i8(q, a[ib].qs + 32 * s, 32);
        }
        sum += (f16(w[ib].d) * a[ib].d * 0.25f) * (float)isum;
    }
    return sum;
}

static float dot_iq3_s(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq3_s *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = w[ib].qs + 8 * s;
            const int qh = w[ib].qh[s];
            int8_t q[32];
            for (int l = 0; l < 4; l++)
                grid44(dj_iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)],
                       dj_iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)], w[ib].signs[4 * s + l], q + 8 * l);
            isum += (1 + 2 * ((w[ib].scales[s / 2] >> (4 * (s % 2))) & 0xF)) * dot_i8(q, a[ib].qs + 32 * s, 32);
        }
        sum += (f16(w[ib].d) * a[ib].d) * (float)isum;
    }
    return sum;
}

/* An IQ1 grid entry's 8 levels (-1, 0, 1) into q. */
static inline void grid8_i8(uint64_t g, int8_t *q) {
    for (int j = 0; j < 8; j++) q[j] = (int8_t)gi8(g, j);
}

static float dot_iq1_s(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq1_s *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            const uint16_t qh = dj_load_u16(&w[ib].qh[s]);
            int8_t q[32];
            for (int l = 0; l < 4; l++) grid8_i8(dj_iq1s_grid[w[ib].qs[4 * s + l] | (((qh >> (3 * l)) & 7) << 8)], q + 8 * l);
            /* 8 times the dot with g + delta: 8 sum(g x) +- sum(x) */
            const int32_t xs = a[ib].bsums[2 * s] + a[ib].bsums[2 * s + 1];
            isum += (2 * ((qh >> 12) & 7) + 1) * (8 * dot_i8(q, a[ib].qs + 32 * s, 32) + (qh & 0x8000 ? -xs : xs));
        }
        sum += (f16(w[ib].d) * a[ib].d * 0.125f) * (float)isum;
    }
    return sum;
}

static float dot_iq1_m(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq1_m *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            const uint16_t sc = dj_load_u16(w[ib].scales + 2 * (s / 2));
            for (int l = 0; l < 4; l++) {
                const int ls = 2 * ((sc >> (6 * (s % 2) + 3 * (l / 2))) & 7) + 1;
                const int h = w[ib].qh[2 * s + l / 2] >> (4 * (l % 2)); /* index bits 0..2, delta sign bit 3 */
                const int8_t *x = a[ib].qs + 32 * s + 8 * l;
                int8_t q[8];
                grid8_i8(dj_iq1s_grid[w[ib].qs[4 * s + l] | ((h & 7) << 8)], q);
                const int32_t xs = sum_i8(x, 8); /* 8 times the dot with g + delta, as IQ1_S */
                isum += ls * (8 * dot_i8(q, x, 8) + (h & 8 ? -xs : xs));
            }
        }
        sum += (f16(dj_iq1_m_d(w[ib].scales)) * a[ib].d * 0.125f) * (float)isum;
    }
    return sum;
}

static float dot_iq4_xs(int64_t k, const void *wv, const void *av) {
    const struct dj_block_iq4_xs *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const uint16_t sh = dj_load_u16(&w[ib].scales_h);
        int32_t isum = 0;
        for (int s = 0; s < 8; s++) {
            const int ls = ((w[ib].scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4);
            isum += (ls - 32) * nl_isum(dj_kvalues_iq4nl, w[ib].qs + 16 * s, a[ib].qs + 32 * s);
        }
        sum += (f16(w[ib].d) * a[ib].d) * (float)isum;
    }
    return sum;
}

/* ---- matmul: one dot per (row, token), as kernels_generic.c ------------------------------- */

#define DEF_MATMUL(name)                                                                      \
    static void tile_##name(int mr, int nt, int64_t k, const uint8_t *w, size_t ws,           \
                            const uint8_t *a, size_t as, float *c, int64_t ldc) {              \
        for (int j = 0; j < nt; j++)                                                          \
            for (int i = 0; i < mr; i++) c[j * ldc + i] = dot_##name(k, w + (size_t)i * ws, a + (size_t)j * as); \
    }                                                                                         \
    static void matmul_##name(int64_t k, const void *w, size_t ws, const void *a, size_t as,  \
                              float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) { \
        dj_matmul_drive(tile_##name, n_tok <= 2 ? 1 : 4, 4, k, w, ws, a, as, c, ldc, r0, r1, n_tok); \
    }

DEF_MATMUL(q4_1)
DEF_MATMUL(q5_0)
DEF_MATMUL(q5_1)
DEF_MATMUL(iq4_nl)
DEF_MATMUL(mxfp4)
DEF_MATMUL(nvfp4)
DEF_MATMUL(q1_0)
DEF_MATMUL(q2_0)
DEF_MATMUL(q2_K)
DEF_MATMUL(q3_K)
DEF_MATMUL(q5_K)
DEF_MATMUL(tq1_0)
DEF_MATMUL(tq2_0)
DEF_MATMUL(iq2_xxs)
DEF_MATMUL(iq2_xs)
DEF_MATMUL(iq2_s)
DEF_MATMUL(iq3_xxs)
DEF_MATMUL(iq3_s)
DEF_MATMUL(iq1_s)
DEF_MATMUL(iq1_m)
DEF_MATMUL(iq4_xs)

void dj_kernels_init_generic_quants(struct dj_kernels *k) {
#define SET(T, name)                                                                          \
    k->w[T] = (struct dj_wtype_kernels){.act_type = dj_kernels_act_type(T), .matmul = matmul_##name, \
                                        .dot = dot_##name, .dequantize_row = dj_ref_dequantize_##name}
    SET(DJ_TYPE_Q4_1, q4_1);
    SET(DJ_TYPE_Q5_0, q5_0);
    SET(DJ_TYPE_Q5_1, q5_1);
    SET(DJ_TYPE_IQ4_NL, iq4_nl);
    SET(DJ_TYPE_MXFP4, mxfp4);
    SET(DJ_TYPE_NVFP4, nvfp4);
    SET(DJ_TYPE_Q1_0, q1_0);
    SET(DJ_TYPE_Q2_0, q2_0);
    SET(DJ_TYPE_Q2_K, q2_K);
    SET(DJ_TYPE_Q3_K, q3_K);
    SET(DJ_TYPE_Q5_K, q5_K);
    SET(DJ_TYPE_TQ1_0, tq1_0);
    SET(DJ_TYPE_TQ2_0, tq2_0);
    SET(DJ_TYPE_IQ2_XXS, iq2_xxs);
    SET(DJ_TYPE_IQ2_XS, iq2_xs);
    SET(DJ_TYPE_IQ2_S, iq2_s);
    SET(DJ_TYPE_IQ3_XXS, iq3_xxs);
    SET(DJ_TYPE_IQ3_S, iq3_s);
    SET(DJ_TYPE_IQ1_S, iq1_s);
    SET(DJ_TYPE_IQ1_M, iq1_m);
    SET(DJ_TYPE_IQ4_XS, iq4_xs);
#undef SET
}

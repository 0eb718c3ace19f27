/*
 * kernels_generic.c — the portable kernels: plain C for any CPU, and the
 * base table the x86 files override.
 *
 * Accumulation scheme (what makes matmul == dot bitwise here): matmul calls
 * the dot function for every (row, token) pair, so there is nothing to keep
 * in step.  The dots themselves:
 *   - float types: 8 partial sums, element i into sum i % 8, combined as
 *     ((s0+s4)+(s1+s5)) + ((s2+s6)+(s3+s7)) — independent chains the
 *     compiler can keep in one or two vector registers;
 *   - quantized types: exact integer dot per block, then one float
 *     multiply-add per block (per super-block for the k-quants) into a
 *     single sum, in block order.
 */
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "core/status.h"
#include "kernels/cpu/cpu_internal.h"

#define NLANE 8

static inline float reduce8(const float s[NLANE]) {
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* ---- dots ---------------------------------------------------------------------- */

static float dot_f32(int64_t k, const void *wv, const void *av) {
    const float *w = wv, *a = av;
    float s[NLANE] = {0};
    for (int64_t i = 0; i < k; i++) s[i % NLANE] += w[i] * a[i];
    return reduce8(s);
}

static float dot_f16(int64_t k, const void *wv, const void *av) {
    const uint16_t *w = wv;
    const float *a = av;
    float s[NLANE] = {0};
    for (int64_t i = 0; i < k; i++) s[i % NLANE] += dj_fp16_to_f32(w[i]) * a[i];
    return reduce8(s);
}

static float dot_bf16(int64_t k, const void *wv, const void *av) {
    const uint16_t *w = wv;
    const float *a = av;
    float s[NLANE] = {0};
    for (int64_t i = 0; i < k; i++) s[i % NLANE] += dj_bf16_to_f32(w[i]) * a[i];
    return reduce8(s);
}

static float dot_q8_0(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q8_0 *w = wv, *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK8_0; ib++) {
        int32_t isum = 0;
        for (int j = 0; j < DJ_QK8_0; j++) isum += w[ib].qs[j] * a[ib].qs[j];
        const float d = dj_fp16_to_f32(w[ib].d) * dj_fp16_to_f32(a[ib].d);
        sum += d * (float)isum;
    }
    return sum;
}

static float dot_q4_0(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q4_0 *w = wv;
    const struct dj_block_q8_0 *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK4_0; ib++) {
        int32_t isum = 0;
        for (int j = 0; j < DJ_QK4_0 / 2; j++) {
            isum += ((w[ib].qs[j] & 0xF) - 8) * a[ib].qs[j];
            isum += ((w[ib].qs[j] >> 4) - 8) * a[ib].qs[j + DJ_QK4_0 / 2];
        }
        const float d = dj_fp16_to_f32(w[ib].d) * dj_fp16_to_f32(a[ib].d);
        sum += d * (float)isum;
    }
    return sum;
}

static float dot_q4_K(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q4_K *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        uint64_t sc, m;
        dj_q4_K_unpack_scales(w[ib].scales, &sc, &m);
        int32_t isc = 0, imn = 0;
        for (int s = 0; s < 8; s++) {
            const uint8_t *q = w[ib].qs + 32 * (s / 2);
            const int8_t *x = a[ib].qs + 32 * s;
            const int shift = (s & 1) * 4;
            int32_t dot = 0;
            for (int l = 0; l < 32; l++) dot += ((q[l] >> shift) & 0xF) * x[l];
            isc += (int32_t)((sc >> (8 * s)) & 0xFF) * dot;
            imn += (int32_t)((m >> (8 * s)) & 0xFF) * (a[ib].bsums[2 * s] + a[ib].bsums[2 * s + 1]);
        }
        const float dd = dj_fp16_to_f32(w[ib].d) * a[ib].d;
        const float dm = dj_fp16_to_f32(w[ib].dmin) * a[ib].d;
        sum += dd * (float)isc;
        sum -= dm * (float)imn;
    }
    return sum;
}

static float dot_q6_K(int64_t k, const void *wv, const void *av) {
    const struct dj_block_q6_K *w = wv;
    const struct dj_block_q8_K *a = av;
    float sum = 0;
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const struct dj_block_q6_K *b = &w[ib];
        const int8_t *x = a[ib].qs;
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            int32_t dot[8] = {0}; /* sub-blocks 8h .. 8h+7 */
            for (int l = 0; l < 32; l++) {
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                const int8_t *xh = x + 128 * h;
                dot[l / 16 + 0] += q1 * xh[l];
                dot[l / 16 + 2] += q2 * xh[l + 32];
                dot[l / 16 + 4] += q3 * xh[l + 64];
                dot[l / 16 + 6] += q4 * xh[l + 96];
            }
            for (int s = 0; s < 8; s++) isum += b->scales[8 * h + s] * dot[s];
        }
        const float d = dj_fp16_to_f32(b->d) * a[ib].d;
        sum += d * (float)isum;
    }
    return sum;
}

/* ---- matmul: one dot per (row, token) ------------------------------------------- */

#define DEF_MATMUL(name, dotfn)                                                               \
    static void tile_##name(int mr, int nt, int64_t k, const uint8_t *w, size_t ws,           \
                            const uint8_t *a, size_t as, float *c, int64_t ldc) {              \
        for (int j = 0; j < nt; j++)                                                          \
            for (int i = 0; i < mr; i++)                                                      \
                c[j * ldc + i] = dotfn(k, w + (size_t)i * ws, a + (size_t)j * as);            \
    }                                                                                         \
    static void matmul_##name(int64_t k, const void *w, size_t ws, const void *a, size_t as,  \
                              float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) { \
        /* one row at a time for decode: one sequential weight stream (see cpu/tile.h) */      \
        dj_matmul_drive(tile_##name, n_tok <= 2 ? 1 : 4, 4, k, w, ws, a, as, c, ldc, r0, r1,  \
                        n_tok);                                                               \
    }

DEF_MATMUL(f32, dot_f32)
DEF_MATMUL(f16, dot_f16)
DEF_MATMUL(bf16, dot_bf16)
DEF_MATMUL(q8_0, dot_q8_0)
DEF_MATMUL(q4_0, dot_q4_0)
DEF_MATMUL(q4_K, dot_q4_K)
DEF_MATMUL(q6_K, dot_q6_K)

/* ---- dequantizers (ggml's formulas; see ref.c) ------------------------------------ */

static void dequant_f32(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void dequant_f16(const void *xv, float *y, int64_t n) {
    const uint16_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = dj_fp16_to_f32(x[i]);
}

static void dequant_bf16(const void *xv, float *y, int64_t n) {
    const uint16_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = dj_bf16_to_f32(x[i]);
}

static void dequant_q8_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q8_0 *x = xv;
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++) {
        const float d = dj_fp16_to_f32(x[ib].d);
        for (int j = 0; j < DJ_QK8_0; j++) *y++ = x[ib].qs[j] * d;
    }
}

static void dequant_q4_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q4_0 *x = xv;
    for (int64_t ib = 0; ib < n / DJ_QK4_0; ib++, y += DJ_QK4_0) {
        const float d = dj_fp16_to_f32(x[ib].d);
        for (int j = 0; j < DJ_QK4_0 / 2; j++) {
            y[j] = ((x[ib].qs[j] & 0xF) - 8) * d;
            y[j + DJ_QK4_0 / 2] = ((x[ib].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_K(const void *xv, float *y, int64_t n) {
    const struct dj_block_q4_K *x = xv;
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        uint64_t sc, m;
        dj_q4_K_unpack_scales(x[ib].scales, &sc, &m);
        const float d = dj_fp16_to_f32(x[ib].d), dmin = dj_fp16_to_f32(x[ib].dmin);
        for (int s = 0; s < 8; s++) {
            const float ds = d * (uint8_t)(sc >> (8 * s)), ms = dmin * (uint8_t)(m >> (8 * s));
            const uint8_t *q = x[ib].qs + 32 * (s / 2);
            const int shift = (s & 1) * 4;
            for (int l = 0; l < 32; l++) *y++ = ds * ((q[l] >> shift) & 0xF) - ms;
        }
    }
}

static void dequant_q6_K(const void *xv, float *y, int64_t n) {
    const struct dj_block_q6_K *x = xv;
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        const float d = dj_fp16_to_f32(x[ib].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = x[ib].ql + 64 * h, *qh = x[ib].qh + 32 * h;
            const int8_t *sc = x[ib].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int8_t q1 = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                const int8_t q2 = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                const int8_t q3 = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                const int8_t q4 = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                y[l + 0] = d * sc[l / 16 + 0] * q1;
                y[l + 32] = d * sc[l / 16 + 2] * q2;
                y[l + 64] = d * sc[l / 16 + 4] * q3;
                y[l + 96] = d * sc[l / 16 + 6] * q4;
            }
        }
    }
}

/* ---- activation quantizers (definitions in ref.h) ----------------------------------- */

/* Round half to even for |v| < 2^22 (same as ggml's nearest_int). */
static inline int round_even(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static void quant_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void quant_f16(const float *x, void *yv, int64_t n) {
    uint16_t *y = yv;
    for (int64_t i = 0; i < n; i++) y[i] = dj_f32_to_fp16(x[i]);
}

static void quant_q8_0(const float *x, void *yv, int64_t n) {
    struct dj_block_q8_0 *y = yv;
    DJ_ASSERT(n % DJ_QK8_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++, x += DJ_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < DJ_QK8_0; j++) {
            const float ax = x[j] < 0 ? -x[j] : x[j];
            amax = amax > ax ? amax : ax;
        }
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[ib].d = dj_f32_to_fp16(amax / 127.f);
        for (int j = 0; j < DJ_QK8_0; j++) y[ib].qs[j] = (int8_t)round_even(x[j] * id);
    }
}

static void quant_q8_K(const float *x, void *yv, int64_t n) {
    struct dj_block_q8_K *y = yv;
    DJ_ASSERT(n % DJ_QK_K == 0);
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q8_K *b = &y[ib];
        float amax = 0, max = 0;
        for (int j = 0; j < DJ_QK_K; j++) {
            const float ax = x[j] < 0 ? -x[j] : x[j];
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0) {
            memset(b, 0, sizeof *b);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < DJ_QK_K; j++) {
            const int v = round_even(iscale * x[j]);
            b->qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < DJ_QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += b->qs[16 * g + i];
            b->bsums[g] = (int16_t)sum;
        }
        b->d = 1 / iscale;
    }
}

/* ---- attention ------------------------------------------------------------------------ */

/* Eight partial sums (element i in sum i % 8) combined in a fixed tree. */
static void attn_scores_generic(int64_t hd, const float *q, const float *k, size_t stride, int64_t n, float scale,
                                float *s) {
    for (int64_t p = 0; p < n; p++, k += stride) {
        float acc[8] = {0};
        for (int64_t i = 0; i < hd; i++) acc[i % 8] += q[i] * k[i];
        s[p] = (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) * scale;
    }
}

static void attn_values_generic(int64_t hd, const float *w, const float *v, size_t stride, int64_t n, float *out,
                                bool acc) {
    if (!acc)
        for (int64_t d = 0; d < hd; d++) out[d] = 0.0f;
    for (int64_t p = 0; p < n; p++, v += stride)
        for (int64_t d = 0; d < hd; d++) out[d] += w[p] * v[d];
}

static void attn_softmax_generic(float *s, int64_t n, float sink) {
    float mx = -INFINITY;
    for (int64_t p = 0; p < n; p++) mx = s[p] > mx ? s[p] : mx;
    if (sink > mx) mx = sink;
    double sum = 0.0;
    for (int64_t p = 0; p < n; p++) {
        s[p] = expf(s[p] - mx);
        sum += (double)s[p];
    }
    if (sink > -INFINITY) sum += (double)expf(sink - mx);
    const float inv = (float)(1.0 / sum);
    for (int64_t p = 0; p < n; p++) s[p] *= inv;
}

static void attn_values_generic_n(int64_t hd, int nr, const float *const *w, const float *v, size_t stride, int64_t n,
                               float *const *out, bool acc) {
    for (int r = 0; r < nr; r++) attn_values_generic(hd, w[r], v, stride, n, out[r], acc);
}

/* ---- the table ------------------------------------------------------------------------ */

DJ_KV_ROWS_TO_F32(kv_rows_to_f32_generic, dequant_f16, dequant_bf16, dequant_q8_0, dequant_q4_0)

void dj_kernels_init_generic(struct dj_kernels *k) {
    memset(k, 0, sizeof *k);
    k->name = "generic";
    k->isa = DJ_ISA_GENERIC;
    for (int t = 0; t < DJ_TYPE_COUNT; t++) k->w[t].act_type = -1;
#define SET(T, name)                                                                          \
    k->w[T] = (struct dj_wtype_kernels){.act_type = dj_kernels_act_type(T), .matmul = matmul_##name, \
                                        .dot = dot_##name, .dequantize_row = dequant_##name}
    SET(DJ_TYPE_F32, f32);
    SET(DJ_TYPE_F16, f16);
    SET(DJ_TYPE_BF16, bf16);
    SET(DJ_TYPE_Q8_0, q8_0);
    SET(DJ_TYPE_Q4_0, q4_0);
    SET(DJ_TYPE_Q4_K, q4_K);
    SET(DJ_TYPE_Q6_K, q6_K);
#undef SET
    k->quantize_act[DJ_TYPE_F32] = quant_f32;
    k->quantize_act[DJ_TYPE_F16] = quant_f16;
    k->quantize_act[DJ_TYPE_Q8_0] = quant_q8_0;
    k->quantize_act[DJ_TYPE_Q8_K] = quant_q8_K;
    k->attn_scores = attn_scores_generic;
    k->attn_values = attn_values_generic;
    k->attn_values_n = attn_values_generic_n;
    k->attn_softmax = attn_softmax_generic;
    k->kv_rows_to_f32 = kv_rows_to_f32_generic;
    dj_kernels_init_generic_quants(k);
}

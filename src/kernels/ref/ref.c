/*
 * ref.c — reference dequantizers and dot products.
 *
 * Dequantizers use ggml's float formulas (dequantize_row_* in ggml-quants.c)
 * operation for operation; a fast dequantizer must reproduce them bitwise.
 * The dot product is the exact value of sum_i w_i * a_i over the
 * dequantized rows, computed in double from the integer form of each block
 * (e.g. for q8_0: d_w * d_a * sum q_w q_a), so it carries no float32
 * rounding at all: fast kernels are measured against it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "kernels/ref/ref.h"

static inline float f16(uint16_t h) { return dj_fp16_to_f32(h); }

/* ---- dequantizers ------------------------------------------------------------ */

static void dequant_q8_0(const struct dj_block_q8_0 *x, float *y, int64_t n) {
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++) {
        const float d = f16(x[ib].d);
        for (int j = 0; j < DJ_QK8_0; j++) y[ib * DJ_QK8_0 + j] = x[ib].qs[j] * d;
    }
}

static void dequant_q4_0(const struct dj_block_q4_0 *x, float *y, int64_t n) {
    for (int64_t ib = 0; ib < n / DJ_QK4_0; ib++) {
        const float d = f16(x[ib].d);
        for (int j = 0; j < DJ_QK4_0 / 2; j++) {
            const int x0 = (x[ib].qs[j] & 0x0F) - 8;
            const int x1 = (x[ib].qs[j] >> 4) - 8;
            y[ib * DJ_QK4_0 + j] = x0 * d;
            y[ib * DJ_QK4_0 + j + DJ_QK4_0 / 2] = x1 * d;
        }
    }
}

static void dequant_q4_K(const struct dj_block_q4_K *x, float *y, int64_t n) {
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        const uint8_t *q = x[ib].qs;
        const float d = f16(x[ib].d);
        const float min = f16(x[ib].dmin);
        for (int s = 0; s < 8; s += 2, q += 32) {
            uint8_t sc, m;
            dj_q4_K_scale_min(s, x[ib].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            dj_q4_K_scale_min(s + 1, x[ib].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* The 6-bit value of element e (0..255) of a q6_K block, 0..63. */
static inline int q6_K_value(const struct dj_block_q6_K *b, int e) {
    const int h = e / 128, r = e % 128, l = r % 32, part = r / 32; /* part 0..3 */
    const uint8_t ql = b->ql[64 * h + l + (part & 1) * 32];
    const int lo = (part < 2) ? (ql & 0xF) : (ql >> 4);
    const int hi = (b->qh[32 * h + l] >> (2 * part)) & 3;
    return lo | (hi << 4);
}

static void dequant_q6_K(const struct dj_block_q6_K *x, float *y, int64_t n) {
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        const float d = f16(x[ib].d);
        for (int e = 0; e < DJ_QK_K; e++) {
            const int8_t q = (int8_t)(q6_K_value(&x[ib], e) - 32);
            *y++ = d * x[ib].scales[e / 16] * q;
        }
    }
}

static void dequant_q8_K(const struct dj_block_q8_K *x, float *y, int64_t n) {
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++)
        for (int j = 0; j < DJ_QK_K; j++) *y++ = x[ib].d * x[ib].qs[j];
}

bool dj_ref_dequantize_row(uint32_t type, const void *x, float *y, int64_t n) {
    const struct dj_type_info *ti = dj_type_info(type);
    if (!ti || n < 0 || n % ti->blck != 0) return false;
    const uint16_t *h = x;
    switch (type) {
    case DJ_TYPE_F32: memcpy(y, x, (size_t)n * sizeof(float)); return true;
    case DJ_TYPE_F16:
        for (int64_t i = 0; i < n; i++) y[i] = dj_fp16_to_f32(h[i]);
        return true;
    case DJ_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) y[i] = dj_bf16_to_f32(h[i]);
        return true;
    case DJ_TYPE_Q8_0: dequant_q8_0(x, y, n); return true;
    case DJ_TYPE_Q4_0: dequant_q4_0(x, y, n); return true;
    case DJ_TYPE_Q4_K: dequant_q4_K(x, y, n); return true;
    case DJ_TYPE_Q6_K: dequant_q6_K(x, y, n); return true;
    case DJ_TYPE_Q8_K: dequant_q8_K(x, y, n); return true;
    default: {
        const dj_ref_dequantize_fn f = dj_ref_quants_dequantizer(type); /* ref_quants.c */
        if (!f) return false;
        f(x, y, n);
        return true;
    }
    }
}

/* ---- dot products ------------------------------------------------------------ */

/* Plain types: each product w_i a_i is exact in double.  Activations are F32, or BF16
 * (the avx512bf16 and amx tables' pairing for BF16 weights). */
static double dot_plain(uint32_t wtype, uint32_t act_type, int64_t n, const void *w, const void *a, double *mag) {
    double sum = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double wi;
        if (wtype == DJ_TYPE_F32) wi = ((const float *)w)[i];
        else if (wtype == DJ_TYPE_BF16) wi = dj_bf16_to_f32(((const uint16_t *)w)[i]);
        else wi = dj_fp16_to_f32(((const uint16_t *)w)[i]); /* F16 */
        const double ai = act_type == DJ_TYPE_BF16 ? dj_bf16_to_f32(((const uint16_t *)a)[i]) : ((const float *)a)[i];
        sum += wi * ai;
        m += fabs(wi * ai);
    }
    if (mag) *mag = m;
    return sum;
}

static double dot_q8_0(int64_t n, const struct dj_block_q8_0 *w, const struct dj_block_q8_0 *a,
                       double *mag) {
    double sum = 0, m = 0;
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++) {
        long isum = 0, iabs = 0;
        for (int j = 0; j < DJ_QK8_0; j++) {
            isum += w[ib].qs[j] * a[ib].qs[j];
            iabs += labs((long)(w[ib].qs[j] * a[ib].qs[j]));
        }
        const double d = (double)f16(w[ib].d) * f16(a[ib].d);
        sum += d * isum;
        m += fabs(d) * iabs;
    }
    if (mag) *mag = m;
    return sum;
}

static double dot_q4_0(int64_t n, const struct dj_block_q4_0 *w, const struct dj_block_q8_0 *a,
                       double *mag) {
    double sum = 0, m = 0;
    for (int64_t ib = 0; ib < n / DJ_QK4_0; ib++) {
        long isum = 0, iabs = 0;
        for (int j = 0; j < DJ_QK4_0 / 2; j++) {
            const int p0 = ((w[ib].qs[j] & 0xF) - 8) * a[ib].qs[j];
            const int p1 = ((w[ib].qs[j] >> 4) - 8) * a[ib].qs[j + DJ_QK4_0 / 2];
            isum += p0 + p1;
            iabs += labs((long)p0) + labs((long)p1);
        }
        const double d = (double)f16(w[ib].d) * f16(a[ib].d);
        sum += d * isum;
        m += fabs(d) * iabs;
    }
    if (mag) *mag = m;
    return sum;
}

static double dot_q4_K(int64_t n, const struct dj_block_q4_K *w, const struct dj_block_q8_K *a,
                       double *mag) {
    double sum = 0, m = 0;
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        const double d = f16(w[ib].d), dmin = f16(w[ib].dmin), d8 = a[ib].d;
        for (int s = 0; s < 8; s++) {
            uint8_t sc, mn;
            dj_q4_K_scale_min(s, w[ib].scales, &sc, &mn);
            long qa = 0, qa_abs = 0, asum = 0, a_abs = 0;
            for (int l = 0; l < 32; l++) {
                const int e = 32 * s + l;
                const uint8_t byte = w[ib].qs[32 * (s / 2) + l];
                const int q = (s & 1) ? (byte >> 4) : (byte & 0xF);
                qa += q * a[ib].qs[e];
                qa_abs += labs((long)(q * a[ib].qs[e]));
                asum += a[ib].qs[e];
                a_abs += labs((long)a[ib].qs[e]);
            }
            sum += d8 * (d * sc * qa - dmin * mn * asum);
            m += fabs(d8) * (fabs(d) * sc * qa_abs + fabs(dmin) * mn * a_abs);
        }
    }
    if (mag) *mag = m;
    return sum;
}

static double dot_q6_K(int64_t n, const struct dj_block_q6_K *w, const struct dj_block_q8_K *a,
                       double *mag) {
    double sum = 0, m = 0;
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        const double d = f16(w[ib].d), d8 = a[ib].d;
        for (int s = 0; s < 16; s++) {
            long qa = 0, qa_abs = 0;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * s + l;
                const int p = (q6_K_value(&w[ib], e) - 32) * a[ib].qs[e];
                qa += p;
                qa_abs += labs((long)p);
            }
            sum += d8 * d * w[ib].scales[s] * qa;
            m += fabs(d8 * d * w[ib].scales[s]) * qa_abs;
        }
    }
    if (mag) *mag = m;
    return sum;
}

double dj_ref_dot_act(uint32_t wtype, uint32_t act_type, int64_t n, const void *w, const void *a, double *mag) {
    if (wtype == DJ_TYPE_BF16 && act_type == DJ_TYPE_BF16) return dot_plain(wtype, act_type, n, w, a, mag);
    DJ_ASSERT((int)act_type == dj_kernels_act_type(wtype) && "dj_ref_dot_act: no such pairing");
    return dj_ref_dot(wtype, n, w, a, mag);
}

double dj_ref_dot(uint32_t wtype, int64_t n, const void *w, const void *a, double *mag) {
    switch (wtype) {
    case DJ_TYPE_F32:
    case DJ_TYPE_F16:
    case DJ_TYPE_BF16: return dot_plain(wtype, DJ_TYPE_F32, n, w, a, mag);
    case DJ_TYPE_Q8_0: DJ_ASSERT(n % DJ_QK8_0 == 0); return dot_q8_0(n, w, a, mag);
    case DJ_TYPE_Q4_0: DJ_ASSERT(n % DJ_QK4_0 == 0); return dot_q4_0(n, w, a, mag);
    case DJ_TYPE_Q4_K: DJ_ASSERT(n % DJ_QK_K == 0); return dot_q4_K(n, w, a, mag);
    case DJ_TYPE_Q6_K: DJ_ASSERT(n % DJ_QK_K == 0); return dot_q6_K(n, w, a, mag);
    default: return dj_ref_dot_quants(wtype, n, w, a, mag); /* ref_quants.c; asserts on unknown types */
    }
}

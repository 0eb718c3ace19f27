/*
 * quantize_ref.c — reference quantizers: float rows to weight blocks exactly
 * as llama.cpp's reference quantizers do (quantize_row_{q8_0,q4_0,q4_K,q6_K}
 * _ref and their helpers make_qkx2_quants / make_qx_quants in ggml-quants.c,
 * the path `llama-quantize` takes without an importance matrix), plus the
 * activation quantizers (q8_0, q8_K) that the dot products consume.
 *
 * Byte-identical output is the contract, so every float expression below
 * keeps ggml's operand order and types (an int multiplied into a float
 * expression converts at the same place), with no fused multiply-add
 * (src/kernels is compiled with -ffp-contract=off; ggml-base, where these
 * live in llama.cpp, is compiled without FMA).  Do not "simplify" them.
 */
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "kernels/ref/ref.h"

/* Below this a group counts as all zero (ggml's GROUP_MAX_EPS). */
#define GROUP_MAX_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 puts the
 * integer part in the low mantissa bits (ggml's nearest_int; replicated bit
 * for bit, including what it returns for out-of-range input). */
static inline int nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- q8_0 / q4_0 weights ------------------------------------------------ */

void dj_ref_quantize_row_q8_0(const float *x, struct dj_block_q8_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK8_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++) {
        const float *xb = x + ib * DJ_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < DJ_QK8_0; j++) amax = amax > fabsf(xb[j]) ? amax : fabsf(xb[j]);
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[ib].d = dj_f32_to_fp16(d);
        for (int j = 0; j < DJ_QK8_0; j++) y[ib].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void dj_ref_quantize_row_q4_0(const float *x, struct dj_block_q4_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK4_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK4_0; ib++) {
        const float *xb = x + ib * DJ_QK4_0;
        float amax = 0.0f, max = 0.0f; /* max: the signed value of largest magnitude */
        for (int j = 0; j < DJ_QK4_0; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[ib].d = dj_f32_to_fp16(d);
        for (int j = 0; j < DJ_QK4_0 / 2; j++) {
            /* truncation toward zero after +8.5 is ggml's rounding here */
            const uint8_t lo = (uint8_t)imin(15, (int8_t)(xb[j] * id + 8.5f));
            const uint8_t hi = (uint8_t)imin(15, (int8_t)(xb[j + DJ_QK4_0 / 2] * id + 8.5f));
            y[ib].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ---- k-quant helpers ------------------------------------------------------ */

/* Fits x[0..n) ~ scale * L[i] - the_min with L in [0, nmax], minimizing the
 * weighted error; tries nstep+1 scale candidates around the min/max one
 * (ggml's make_qkx2_quants).  Returns the scale; *the_min >= 0. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              bool use_mad) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Fits x[0..n) ~ scale * (L[i] - nmax) with L - nmax in [-nmax, nmax-1],
 * weighting errors by x^2 (ggml's make_qx_quants with rmse_type 1 and no
 * importance weights — the only form q6_K_ref uses).  Returns the scale. */
static float make_qx_quants_rmse1(int n, int nmax, const float *x, int8_t *L) {
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = imax(-nmax, imin(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ---- q4_K ------------------------------------------------------------------ */

void dj_ref_quantize_row_q4_K(const float *x, struct dj_block_q4_K *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    uint8_t L[DJ_QK_K];
    uint8_t Laux[32];
    float weights[32];
    float mins[DJ_QK_K / 32];
    float scales[DJ_QK_K / 32];

    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q4_K *b = &y[ib];
        float max_scale = 0; /* scales are positive: the min is taken out */
        float max_min = 0;
        for (int j = 0; j < DJ_QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                         -1.f, 0.1f, 20, false);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }

        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < DJ_QK_K / 32; ++j) {
            uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
            uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
            ls = (uint8_t)imin(63, ls);
            lm = (uint8_t)imin(63, lm);
            if (j < 4) {
                b->scales[j] = ls;
                b->scales[j + 4] = lm;
            } else {
                b->scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                b->scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                b->scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        b->d = dj_f32_to_fp16(max_scale / 63.f);
        b->dmin = dj_f32_to_fp16(max_min / 63.f);

        /* Requantize against the rounded (6-bit, f16) scales actually stored. */
        for (int j = 0; j < DJ_QK_K / 32; ++j) {
            uint8_t sc, m;
            dj_q4_K_scale_min(j, b->scales, &sc, &m);
            const float d = dj_fp16_to_f32(b->d) * sc;
            if (!d) continue;
            const float dm = dj_fp16_to_f32(b->dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                int l = nearest_int((x[32 * j + ii] + dm) / d);
                L[32 * j + ii] = (uint8_t)imax(0, imin(15, l));
            }
        }

        uint8_t *q = b->qs;
        for (int j = 0; j < DJ_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

/* ---- q6_K ------------------------------------------------------------------ */

void dj_ref_quantize_row_q6_K(const float *x, struct dj_block_q6_K *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    int8_t L[DJ_QK_K];
    float scales[DJ_QK_K / 16];

    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q6_K *b = &y[ib];
        float max_scale = 0;
        float max_abs_scale = 0;
        for (int j = 0; j < DJ_QK_K / 16; ++j) {
            const float scale = make_qx_quants_rmse1(16, 32, x + 16 * j, L + 16 * j);
            scales[j] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }

        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(b, 0, sizeof *b);
            b->d = dj_f32_to_fp16(0.f);
            continue;
        }

        float iscale = -128.f / max_scale;
        b->d = dj_f32_to_fp16(1 / iscale);
        for (int j = 0; j < DJ_QK_K / 16; ++j)
            b->scales[j] = (int8_t)imin(127, nearest_int(iscale * scales[j]));

        for (int j = 0; j < DJ_QK_K / 16; ++j) {
            float d = dj_fp16_to_f32(b->d) * b->scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-32, imin(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }

        uint8_t *ql = b->ql;
        uint8_t *qh = b->qh;
        for (int j = 0; j < DJ_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* ---- float types ------------------------------------------------------------ */

void dj_ref_quantize_row_f16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = dj_f32_to_fp16(x[i]);
}

void dj_ref_quantize_row_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = dj_f32_to_bf16(x[i]);
}

bool dj_ref_quantize_row(uint32_t type, const float *x, void *y, int64_t n) {
    const struct dj_type_info *ti = dj_type_info(type);
    if (!ti || n < 0 || n % ti->blck != 0) return false;
    switch (type) {
    case DJ_TYPE_F32: memcpy(y, x, (size_t)n * sizeof(float)); return true;
    case DJ_TYPE_F16: dj_ref_quantize_row_f16(x, y, n); return true;
    case DJ_TYPE_BF16: dj_ref_quantize_row_bf16(x, y, n); return true;
    case DJ_TYPE_Q8_0: dj_ref_quantize_row_q8_0(x, y, n); return true;
    case DJ_TYPE_Q4_0: dj_ref_quantize_row_q4_0(x, y, n); return true;
    case DJ_TYPE_Q4_K: dj_ref_quantize_row_q4_K(x, y, n); return true;
    case DJ_TYPE_Q6_K: dj_ref_quantize_row_q6_K(x, y, n); return true;
    default: return false;
    }
}

/* ---- activations ------------------------------------------------------------ */

void dj_ref_quantize_act_q8_0(const float *x, struct dj_block_q8_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK8_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++) {
        const float *xb = x + ib * DJ_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < DJ_QK8_0; j++) amax = amax > fabsf(xb[j]) ? amax : fabsf(xb[j]);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[ib].d = dj_f32_to_fp16(d);
        for (int j = 0; j < DJ_QK8_0; j++) y[ib].qs[j] = (int8_t)nearest_int(xb[j] * id);
    }
}

void dj_ref_quantize_act_q8_K(const float *x, struct dj_block_q8_K *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q8_K *b = &y[ib];
        float max = 0, amax = 0; /* max: first value of largest magnitude */
        for (int j = 0; j < DJ_QK_K; ++j) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            memset(b, 0, sizeof *b);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < DJ_QK_K; ++j) b->qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int g = 0; g < DJ_QK_K / 16; ++g) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += b->qs[16 * g + i];
            b->bsums[g] = (int16_t)sum;
        }
        b->d = 1 / iscale;
    }
}

bool dj_ref_quantize_act(uint32_t act_type, const float *x, void *y, int64_t n) {
    switch (act_type) {
    case DJ_TYPE_F32: memcpy(y, x, (size_t)n * sizeof(float)); return true;
    case DJ_TYPE_F16: dj_ref_quantize_row_f16(x, y, n); return true;
    case DJ_TYPE_Q8_0:
        if (n % DJ_QK8_0) return false;
        dj_ref_quantize_act_q8_0(x, y, n);
        return true;
    case DJ_TYPE_Q8_K:
        if (n % DJ_QK_K) return false;
        dj_ref_quantize_act_q8_K(x, y, n);
        return true;
    default: return false;
    }
}

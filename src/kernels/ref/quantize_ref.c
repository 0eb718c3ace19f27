/*
 * quantize_ref.c — reference quantizers: float rows to weight blocks exactly
 * as llama-quantize writes them without an importance matrix, plus the
 * activation quantizers (q8_0, q8_K) that the dot products consume.
 *
 * What llama-quantize runs per type (ggml_quantize_chunk -> quantize_<type>
 * with quant_weights NULL, ggml-quants.c of the d32676d7 snapshot):
 *   q4_0 q4_1 q5_0 q5_1 q8_0 q1_0 q2_0 mxfp4 q2_K q3_K q4_K q5_K q6_K tq1_0
 *   tq2_0: the whole chunk through quantize_row_<type>_ref (rows are whole
 *     blocks, so this is the same as row by row);
 *   iq4_nl, iq4_xs: quantize_row_iq4_nl_impl with ntry = 7 — NOT
 *     quantize_row_iq4_nl_ref, which passes ntry = -1 (no scale search) and
 *     gives other bytes; both take x^2 as the weights when there is no
 *     importance matrix;
 *   iq3_s: quantize_row_iq3_s_impl (block 32, weights x^2), the one
 *     i-quant llama-quantize writes without an importance matrix (the other
 *     IQ1/IQ2/IQ3_XXS types need one and are not here).
 * The k-quant helpers (make_qkx2_quants, make_qx_quants, make_q3_quants,
 * nearest_int, best_index_int8) are ggml's, replicated bit for bit.
 *
 * Byte-identical output is the contract, so every float expression below
 * keeps ggml's operand order and types (an int multiplied into a float
 * expression converts at the same place), with no fused multiply-add
 * (src/kernels is compiled with -ffp-contract=off; ggml-base, where these
 * live in llama.cpp, is compiled without FMA).  Do not "simplify" them.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "kernels/quant_tables.h"
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

/* ---- q4_1 / q5_0 / q5_1: min-max and absmax 32-blocks ---------------------- */

void dj_ref_quantize_row_q4_1(const float *x, struct dj_block_q4_1 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK4_1 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK4_1; ib++) {
        const float *xb = x + ib * DJ_QK4_1;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < DJ_QK4_1; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[ib].d = dj_f32_to_fp16(d);
        y[ib].m = dj_f32_to_fp16(min);
        for (int j = 0; j < DJ_QK4_1 / 2; j++) {
            const float x0 = (xb[j] - min) * id;
            const float x1 = (xb[j + DJ_QK4_1 / 2] - min) * id;
            const uint8_t lo = (uint8_t)imin(15, (int8_t)(x0 + 0.5f));
            const uint8_t hi = (uint8_t)imin(15, (int8_t)(x1 + 0.5f));
            y[ib].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* The fifth bits of a 32-block's quants, bit j for quant j, stored
 * little-endian (ggml memcpy's a uint32_t into qh). */
static void store_qh(uint8_t qh[4], uint32_t bits) {
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(bits >> (8 * k));
}

void dj_ref_quantize_row_q5_0(const float *x, struct dj_block_q5_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK5_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK5_0; ib++) {
        const float *xb = x + ib * DJ_QK5_0;
        float amax = 0.0f, max = 0.0f; /* max: the signed value of largest magnitude */
        for (int j = 0; j < DJ_QK5_0; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[ib].d = dj_f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < DJ_QK5_0 / 2; j++) {
            const float x0 = xb[j] * id;
            const float x1 = xb[j + DJ_QK5_0 / 2] * id;
            const uint8_t q0 = (uint8_t)imin(31, (int8_t)(x0 + 16.5f));
            const uint8_t q1 = (uint8_t)imin(31, (int8_t)(x1 + 16.5f));
            y[ib].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + DJ_QK5_0 / 2);
        }
        store_qh(y[ib].qh, qh);
    }
}

void dj_ref_quantize_row_q5_1(const float *x, struct dj_block_q5_1 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK5_1 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK5_1; ib++) {
        const float *xb = x + ib * DJ_QK5_1;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < DJ_QK5_1; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[ib].d = dj_f32_to_fp16(d);
        y[ib].m = dj_f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < DJ_QK5_1 / 2; j++) {
            const float x0 = (xb[j] - min) * id;
            const float x1 = (xb[j + DJ_QK5_1 / 2] - min) * id;
            /* no clamp to 31 here (ggml has none either): a rounding overshoot
             * to 32 loses its fifth bit, as in ggml */
            const uint8_t q0 = (uint8_t)(x0 + 0.5f);
            const uint8_t q1 = (uint8_t)(x1 + 0.5f);
            y[ib].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + DJ_QK5_1 / 2);
        }
        store_qh(y[ib].qh, qh);
    }
}

/* ---- q1_0 / q2_0: sign bits and 2-bit {-1,0,1,2} ---------------------------- */

void dj_ref_quantize_row_q1_0(const float *x, struct dj_block_q1_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK1_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK1_0; ib++) {
        const float *xb = x + ib * DJ_QK1_0;
        float sum_abs = 0.0f;
        for (int j = 0; j < DJ_QK1_0; j++) sum_abs += fabsf(xb[j]);
        y[ib].d = dj_f32_to_fp16(sum_abs / DJ_QK1_0);
        memset(y[ib].qs, 0, sizeof y[ib].qs);
        for (int j = 0; j < DJ_QK1_0; j++)
            if (xb[j] >= 0.0f) y[ib].qs[j / 8] |= (uint8_t)(1 << (j % 8));
    }
}

void dj_ref_quantize_row_q2_0(const float *x, struct dj_block_q2_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK2_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK2_0; ib++) {
        const float *xb = x + ib * DJ_QK2_0;
        float amax = 0.0f;
        for (int j = 0; j < DJ_QK2_0; j++)
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]);
        const float d = amax;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        y[ib].d = dj_f32_to_fp16(d);
        memset(y[ib].qs, 0, sizeof y[ib].qs);
        for (int j = 0; j < DJ_QK2_0; j++) {
            int q = (int)roundf(xb[j] * id) + 1;
            q = imax(0, imin(3, q));
            y[ib].qs[j / 4] |= (uint8_t)(q << ((j % 4) * 2));
        }
    }
}

/* ---- mxfp4: a power-of-two scale and e2m1 values ---------------------------- */

/* The first index of least |dj_kvalues_fp4[i]*d - x| (ggml's best_index_mxfp4). */
static int best_index_mxfp4(float x, float d) {
    int best = 0;
    float best_err = fabsf(dj_kvalues_fp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(dj_kvalues_fp4[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void dj_ref_quantize_row_mxfp4(const float *x, struct dj_block_mxfp4 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_MXFP4 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK_MXFP4; ib++) {
        const float *xb = x + ib * DJ_QK_MXFP4;
        float amax = 0.0f;
        for (int j = 0; j < DJ_QK_MXFP4; j++)
            if (amax < fabsf(xb[j])) amax = fabsf(xb[j]);
        /* libm's log2f, as ggml calls it: same machine, same bytes */
        const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = dj_e8m0_to_f32_half(e);
        y[ib].e = e;
        for (int j = 0; j < DJ_QK_MXFP4 / 2; j++) {
            const int q0 = best_index_mxfp4(xb[j], d);
            const int q1 = best_index_mxfp4(xb[j + DJ_QK_MXFP4 / 2], d);
            y[ib].qs[j] = (uint8_t)(q0 | (q1 << 4));
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

/* Fits x[0..n) ~ scale * L[i] with L in [-nmax, nmax-1], then (do_rmse)
 * moves single quants while that lowers the x^2-weighted error, at most 5
 * passes (ggml's make_q3_quants).  L is returned offset by +nmax. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L, bool do_rmse) {
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
    if (do_rmse) {
        float sumlx = 0;
        float suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = imax(-nmax, imin(nmax - 1, l));
            L[i] = (int8_t)l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        for (int itry = 0; itry < 5; ++itry) {
            int n_changed = 0;
            for (int i = 0; i < n; ++i) {
                float w = x[i] * x[i];
                float slx = sumlx - w * x[i] * L[i];
                if (slx > 0) {
                    float sl2 = suml2 - w * L[i] * L[i];
                    int new_l = nearest_int(x[i] * sl2 / slx);
                    new_l = imax(-nmax, imin(nmax - 1, new_l));
                    if (new_l != L[i]) {
                        slx += w * x[i] * new_l;
                        sl2 += w * new_l * new_l;
                        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                            L[i] = (int8_t)new_l;
                            sumlx = slx;
                            suml2 = sl2;
                            ++n_changed;
                        }
                    }
                }
            }
            if (!n_changed) break;
        }
        for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
    }
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
    }
    return 1 / iscale;
}

/* ---- q2_K ------------------------------------------------------------------ */

void dj_ref_quantize_row_q2_K(const float *x, struct dj_block_q2_K *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    uint8_t L[DJ_QK_K];
    uint8_t Laux[16];
    float weights[16];
    float mins[DJ_QK_K / 16];
    float scales[DJ_QK_K / 16];
    const float q4scale = 15.f;

    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q2_K *b = &y[ib];
        float max_scale = 0; /* scales are positive: the min is taken out */
        float max_min = 0;
        for (int j = 0; j < DJ_QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15,
                                         true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }

        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < DJ_QK_K / 16; ++j) b->scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            b->d = dj_f32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < DJ_QK_K / 16; ++j) b->scales[j] = 0;
            b->d = dj_f32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < DJ_QK_K / 16; ++j) b->scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            b->dmin = dj_f32_to_fp16(max_min / q4scale);
        } else {
            b->dmin = dj_f32_to_fp16(0.f);
        }

        /* Requantize against the rounded (4-bit, f16) scales and mins stored. */
        for (int j = 0; j < DJ_QK_K / 16; ++j) {
            const float d = dj_fp16_to_f32(b->d) * (b->scales[j] & 0xF);
            if (!d) continue;
            const float dm = dj_fp16_to_f32(b->dmin) * (b->scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }

        for (int j = 0; j < DJ_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                b->qs[j / 4 + l] =
                    (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* ---- q3_K ------------------------------------------------------------------ */

void dj_ref_quantize_row_q3_K(const float *x, struct dj_block_q3_K *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    int8_t L[DJ_QK_K];
    float scales[DJ_QK_K / 16];

    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q3_K *b = &y[ib];
        float max_scale = 0; /* the signed scale of largest magnitude */
        float amax = 0;
        for (int j = 0; j < DJ_QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }

        /* 16 6-bit scales: low nibbles in scales[0..8), high 2-bit pairs in
         * scales[8..12) */
        memset(b->scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < DJ_QK_K / 16; ++j) {
                int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                l = (int8_t)(imax(-32, imin(31, l)) + 32);
                if (j < 8) b->scales[j] = (uint8_t)(l & 0xF);
                else b->scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l = (int8_t)(l >> 4);
                b->scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            b->d = dj_f32_to_fp16(1 / iscale);
        } else {
            b->d = dj_f32_to_fp16(0.f);
        }

        for (int j = 0; j < DJ_QK_K / 16; ++j) {
            int8_t sc = (int8_t)(j < 8 ? b->scales[j] & 0xF : b->scales[j - 8] >> 4);
            sc = (int8_t)((sc | (((b->scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
            float d = dj_fp16_to_f32(b->d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-4, imin(3, l));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }

        /* the high bit of quant j goes to hmask[j % 32], bit j / 32 */
        memset(b->hmask, 0, DJ_QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < DJ_QK_K; ++j) {
            if (L[j] > 3) {
                b->hmask[m] |= hm;
                L[j] = (int8_t)(L[j] - 4);
            }
            if (++m == DJ_QK_K / 8) {
                m = 0;
                hm = (uint8_t)(hm << 1);
            }
        }
        for (int j = 0; j < DJ_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                b->qs[j / 4 + l] =
                    (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* ---- q4_K ------------------------------------------------------------------ */

/* q4_K / q5_K: the 8 sub-block scales and mins as 6-bit values against the f16
 * super-scales (ggml's packing, see dj_q4_K_scale_min). */
static void k_pack_scales(const float *scales, const float *mins, float max_scale, float max_min, uint8_t *out,
                          uint16_t *d, uint16_t *dmin) {
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < DJ_QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = (uint8_t)imin(63, ls);
        lm = (uint8_t)imin(63, lm);
        if (j < 4) {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            out[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d = dj_f32_to_fp16(max_scale / 63.f);
    *dmin = dj_f32_to_fp16(max_min / 63.f);
}

/* q4_K / q5_K: the levels 0..nmax of a super-block against its stored scales. */
static void k_requant(const float *x, const uint8_t *scales, uint16_t dh, uint16_t dminh, int nmax, uint8_t *L) {
    for (int j = 0; j < DJ_QK_K / 32; ++j) {
        uint8_t sc, m;
        dj_q4_K_scale_min(j, scales, &sc, &m);
        const float d = dj_fp16_to_f32(dh) * sc;
        if (!d) continue;
        const float dm = dj_fp16_to_f32(dminh) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

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

        k_pack_scales(scales, mins, max_scale, max_min, b->scales, &b->d, &b->dmin);

        /* Requantize against the rounded (6-bit, f16) scales actually stored. */
        k_requant(x, b->scales, b->d, b->dmin, 15, L);

        uint8_t *q = b->qs;
        for (int j = 0; j < DJ_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

/* ---- q5_K ------------------------------------------------------------------ */

void dj_ref_quantize_row_q5_K(const float *x, struct dj_block_q5_K *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    uint8_t L[DJ_QK_K];
    uint8_t Laux[32];
    float weights[32];
    float mins[DJ_QK_K / 32];
    float scales[DJ_QK_K / 32];

    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q5_K *b = &y[ib];
        float max_scale = 0;
        float max_min = 0;
        for (int j = 0; j < DJ_QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = make_qkx2_quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15,
                                         false);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }

        k_pack_scales(scales, mins, max_scale, max_min, b->scales, &b->d, &b->dmin);

        k_requant(x, b->scales, b->d, b->dmin, 31, L);

        /* low nibbles of quants n+j and n+j+32 share qs[n/2 + j]; their fifth
         * bits are bits 2k and 2k+1 of qh[j] for the k-th 64-group */
        uint8_t *qh = b->qh;
        uint8_t *ql = b->qs;
        memset(qh, 0, DJ_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int g = 0; g < DJ_QK_K; g += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[g + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[g + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
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

/* ---- tq1_0 / tq2_0: ternary {-1, 0, 1} * max|x| ---------------------------- */

/* round(x*id) + 1 in {0, 1, 2}: ggml's lroundf (half away from zero). */
static int trit(float v, float id) { return (int)lroundf(v * id) + 1; }

void dj_ref_quantize_row_tq1_0(const float *x, struct dj_block_tq1_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    const size_t n_qs = sizeof y->qs, n_qh = sizeof y->qh, n_qs32 = n_qs - n_qs % 32;
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        struct dj_block_tq1_0 *b = &y[ib];
        float amax = 0.0f;
        for (int j = 0; j < DJ_QK_K; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = dj_f32_to_fp16(d);
        /* five trits a byte, most significant first, scaled to 256/243 so
         * that the dequantizer reads digits by multiplying by 3 */
        for (size_t j = 0; j < n_qs32; j += 32, x += 5 * 32) {
            for (size_t m = 0; m < 32; ++m) {
                uint8_t q = 0;
                for (size_t k = 0; k < 5; ++k) q = (uint8_t)(q * 3 + trit(x[m + k * 32], id));
                b->qs[j + m] = (uint8_t)(((uint16_t)q * 256 + (243 - 1)) / 243);
            }
        }
        for (size_t j = n_qs32; j < n_qs; j += 16, x += 5 * 16) {
            for (size_t m = 0; m < 16; ++m) {
                uint8_t q = 0;
                for (size_t k = 0; k < 5; ++k) q = (uint8_t)(q * 3 + trit(x[m + k * 16], id));
                b->qs[j + m] = (uint8_t)(((uint16_t)q * 256 + (243 - 1)) / 243);
            }
        }
        for (size_t j = 0; j < n_qh; ++j) {
            uint8_t q = 0;
            for (size_t m = 0; m < 4; ++m) q = (uint8_t)(q * 3 + trit(x[j + m * n_qh], id));
            q = (uint8_t)(q * 3); /* four trits, shifted to the top of five */
            b->qh[j] = (uint8_t)(((uint16_t)q * 256 + (243 - 1)) / 243);
        }
        x += 4 * n_qh;
    }
}

void dj_ref_quantize_row_tq2_0(const float *x, struct dj_block_tq2_0 *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++) {
        struct dj_block_tq2_0 *b = &y[ib];
        float amax = 0.0f;
        for (int j = 0; j < DJ_QK_K; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = dj_f32_to_fp16(d);
        for (size_t j = 0; j < sizeof b->qs; j += 32, x += 4 * 32) {
            for (size_t m = 0; m < 32; ++m) {
                uint8_t q = 0;
                for (size_t k = 0; k < 4; ++k) q = (uint8_t)(q + ((trit(x[m + k * 32], id) & 3) << (2 * k)));
                b->qs[j + m] = q;
            }
        }
    }
}

/* ---- iq4_nl / iq4_xs: a non-linear 4-bit grid ------------------------------- */

/* Index of the grid value nearest x, ggml's best_index_int8 for a strictly
 * increasing grid of 16: ggml bisects to the bracket val[ml] <= x < val[ml+1],
 * which for strictly increasing values is ml = #{k : val[k] <= x} - 1; counting
 * gives the same bracket without ggml's four unpredictable branches (measured:
 * `deja quantize` codelm to IQ4_NL 4.6 -> 2.6 s on 2 threads), then the same
 * comparison picks an end (the lower one on a tie). */
static int best_index_iq4nl(const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = -1;
    for (int k = 0; k < 16; k++) ml += x >= val[k];
    if (ml < 0) return 15; /* NaN: where ggml's bisection ends */
    const int mu = ml + 1;
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* One super-block of `sb` values (32 for iq4_nl, 256 for iq4_xs) in
 * 32-blocks: ggml's quantize_row_iq4_nl_impl as quantize_iq4_{nl,xs} call
 * it, without importance weights (weights x^2) and ntry = 7 (15 scale
 * candidates per block).  With several blocks (iq4_xs) the block scales
 * become 6-bit multiples of an f16 super-scale and the quants are redone
 * against them; scales_h/scales_l are unused for iq4_nl. */
static void quantize_iq4_superblock(int sb, const float *x, uint16_t *dh, uint8_t *q4, uint16_t *scales_h,
                                    uint8_t *scales_l) {
    enum { NTRY = 7, BS = 32 };
    const int8_t *values = dj_kvalues_iq4nl;
    uint8_t L[DJ_QK_K];
    float scales[DJ_QK_K / BS];
    float weight[BS];

    memset(q4, 0, (size_t)sb / 2);
    *dh = dj_f32_to_fp16(0.f);

    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sb / BS; ++ib) {
        const float *xb = x + ib * BS;
        uint8_t *Lb = L + ib * BS;
        for (int j = 0; j < BS; ++j) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < BS; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < BS; ++j) {
            float al = id * xb[j];
            int l = best_index_iq4nl(values, al);
            Lb[j] = (uint8_t)l;
            float q = values[l];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -NTRY; itry <= NTRY; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < BS; ++j) {
                float al = id * xb[j];
                int l = best_index_iq4nl(values, al);
                float q = values[l];
                float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    if (sb / BS > 1) {
        const int nb = sb / BS;
        memset(scales_h, 0, (size_t)((nb + 7) / 8) * sizeof(uint16_t));
        float d = -max_scale / 32;
        *dh = dj_f32_to_fp16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nb; ++ib) {
            int l = nearest_int(id * scales[ib]);
            l = imax(-32, imin(31, l));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            uint8_t *Lb = L + ib * BS;
            const float *xb = x + ib * BS;
            for (int j = 0; j < BS; ++j) Lb[j] = (uint8_t)best_index_iq4nl(values, idl * xb[j]);
            l += 32;
            const uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0) scales_l[ib / 2] = l_l;
            else scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            scales_h[ib / 8] |= (uint16_t)(l_h << 2 * (ib % 8));
        }
    } else {
        *dh = dj_f32_to_fp16(scales[0]);
        float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < sb; ++j) L[j] = (uint8_t)best_index_iq4nl(values, id * x[j]);
    }

    for (int i = 0; i < sb / 32; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void dj_ref_quantize_row_iq4_nl(const float *x, struct dj_block_iq4_nl *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK4_NL == 0);
    for (int64_t ib = 0; ib < n / DJ_QK4_NL; ib++)
        quantize_iq4_superblock(DJ_QK4_NL, x + ib * DJ_QK4_NL, &y[ib].d, y[ib].qs, NULL, NULL);
}

void dj_ref_quantize_row_iq4_xs(const float *x, struct dj_block_iq4_xs *y, int64_t n) {
    DJ_ASSERT(n % DJ_QK_K == 0);
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++)
        quantize_iq4_superblock(DJ_QK_K, x + ib * DJ_QK_K, &y[ib].d, y[ib].qs, &y[ib].scales_h, y[ib].scales_l);
}

/* ---- iq3_s: 4-value points of a 512-point grid, signs apart ----------------- */

/* The grid's lookup structures, built once as ggml's iq3xs_init_impl(512) does:
 * map[u] for the 4096 points u (4 coordinates of 3 bits, (value-1)/2, 3 bits
 * each) is the grid index when u is on the grid, else -(o+1) where
 * neighbours[o] is the count n and neighbours[o+1..o+n] the grid points at the
 * three smallest distinct squared distances from u, by distance then index
 * (ggml's qsort order).  3584 points are off the grid with 24733 neighbours. */
#define IQ3S_NEIGHBOURS_MAX 32768
static struct {
    int map[4096];
    uint16_t neighbours[IQ3S_NEIGHBOURS_MAX];
} iq3s;
static pthread_once_t iq3s_once = PTHREAD_ONCE_INIT;

static int8_t iq3s_coord(int g, int i) { return (int8_t)((dj_iq3s_grid[g] >> (8 * i)) & 0xff); }

static void iq3s_init(void) {
    for (int u = 0; u < 4096; u++) iq3s.map[u] = -1;
    for (int g = 0; g < 512; g++) {
        int u = 0;
        for (int i = 0; i < 4; i++) u |= ((iq3s_coord(g, i) - 1) / 2) << (3 * i);
        iq3s.map[u] = g;
    }
    int o = 0;
    int d2[512];
    for (int u = 0; u < 4096; u++) {
        if (iq3s.map[u] >= 0) continue;
        int dmin[3] = {INT32_MAX, INT32_MAX, INT32_MAX}; /* the three smallest distinct distances */
        for (int g = 0; g < 512; g++) {
            int d = 0;
            for (int i = 0; i < 4; i++) {
                const int diff = iq3s_coord(g, i) - (2 * ((u >> (3 * i)) & 7) + 1);
                d += diff * diff;
            }
            d2[g] = d;
            if (d == dmin[0] || d == dmin[1] || d == dmin[2]) continue;
            if (d < dmin[0]) dmin[2] = dmin[1], dmin[1] = dmin[0], dmin[0] = d;
            else if (d < dmin[1]) dmin[2] = dmin[1], dmin[1] = d;
            else if (d < dmin[2]) dmin[2] = d;
        }
        iq3s.map[u] = -(o + 1);
        const int start = o++;
        for (int r = 0; r < 3; r++)
            for (int g = 0; g < 512; g++)
                if (d2[g] == dmin[r]) {
                    DJ_ASSERT(o < IQ3S_NEIGHBOURS_MAX);
                    iq3s.neighbours[o++] = (uint16_t)g;
                }
        iq3s.neighbours[start] = (uint16_t)(o - start - 1);
    }
}

/* The neighbour of least weighted error at `scale`; its coordinates go to L
 * (ggml's iq3_find_best_neighbour). */
static int iq3s_best_neighbour(const uint16_t *neighbours, const float *xval, const float *weight, float scale,
                               int8_t *L) {
    const int n = neighbours[0];
    DJ_ASSERT(n > 0);
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= n; ++j) {
        float d2 = 0;
        for (int i = 0; i < 4; ++i) {
            float q = iq3s_coord(neighbours[j], i);
            float diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = neighbours[j];
        }
    }
    DJ_ASSERT(best >= 0);
    for (int i = 0; i < 4; ++i) L[i] = (int8_t)((iq3s_coord(best, i) - 1) / 2);
    return best;
}

/* ggml's quantize_row_iq3_s_impl with block_size 32 and no importance
 * weights (weights x^2), as quantize_iq3_s runs it: per 32-block, 19 scales
 * tried with points snapped to the grid (off-grid ones to their best
 * neighbour), then 4-bit block scales of an f16 super-scale.  One ggml quirk
 * is kept on purpose: an all-zero 32-block skips the advance of the qs and
 * signs cursors, so the blocks after it are written 8 and 4 bytes earlier. */
void dj_ref_quantize_row_iq3_s(const float *x, struct dj_block_iq3_s *y, int64_t n) {
    enum { BS = 32, BS4 = BS / 4, BS8 = BS / 8, KMAXQ = 8 };
    DJ_ASSERT(n % DJ_QK_K == 0);
    pthread_once(&iq3s_once, iq3s_init);
    float scales[DJ_QK_K / BS], weight[BS], xval[BS], waux[BS];
    int8_t L[BS], Laux[BS];
    bool is_on_grid[BS4], is_on_grid_aux[BS4];
    uint8_t block_signs[BS8];

    for (int64_t ibl = 0; ibl < n / DJ_QK_K; ++ibl) {
        struct dj_block_iq3_s *b = &y[ibl];
        memset(b, 0, sizeof *b);
        b->d = dj_f32_to_fp16(0.f);
        uint8_t *qs = b->qs, *qh = b->qh, *signs = b->signs;
        float max_scale = 0;
        const float *xbl = x + DJ_QK_K * ibl;

        for (int ib = 0; ib < DJ_QK_K / BS; ++ib) {
            const float *xb = xbl + BS * ib;
            for (int i = 0; i < BS; ++i) weight[i] = xb[i] * xb[i];
            for (int i = 0; i < BS; ++i) waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < BS8; ++k) {
                uint8_t s = 0;
                for (int i = 0; i < 8; ++i) {
                    if (xb[8 * k + i] >= 0) xval[8 * k + i] = xb[8 * k + i];
                    else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        s |= (uint8_t)(1 << i);
                    }
                }
                block_signs[k] = s;
            }
            float max = xval[0];
            for (int i = 1; i < BS; ++i) max = max > xval[i] ? max : xval[i];
            memset(L, 0, BS);
            if (!max) {
                scales[ib] = 0;
                continue; /* (ggml's: qs and signs stay where they are) */
            }
            float best = 0;
            float scale = max / (2 * KMAXQ - 1);
            for (int k = 0; k < BS4; ++k) is_on_grid[k] = false;
            for (int is = -9; is <= 9; ++is) {
                float id = (2 * KMAXQ - 1 + is * 0.2f) / max;
                float this_scale = 1 / id;
                for (int k = 0; k < BS4; ++k) {
                    for (int i = 0; i < 4; ++i) {
                        int l = nearest_int(0.5f * (id * xval[4 * k + i] - 1));
                        Laux[4 * k + i] = (int8_t)imax(0, imin(KMAXQ - 1, l));
                    }
                    int u = 0;
                    for (int i = 0; i < 4; ++i) u |= Laux[4 * k + i] << (3 * i);
                    is_on_grid_aux[k] = true;
                    if (iq3s.map[u] < 0) {
                        is_on_grid_aux[k] = false;
                        iq3s_best_neighbour(iq3s.neighbours - iq3s.map[u] - 1, xval + 4 * k, waux + 4 * k, this_scale,
                                            Laux + 4 * k);
                    }
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < BS; ++i) {
                    float w = weight[i];
                    float q = 2 * Laux[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    for (int i = 0; i < BS; ++i) L[i] = Laux[i];
                    for (int k = 0; k < BS4; ++k) is_on_grid[k] = is_on_grid_aux[k];
                }
            }
            int n_not_ongrid = 0;
            for (int k = 0; k < BS4; ++k) n_not_ongrid += !is_on_grid[k];
            if (n_not_ongrid > 0 && scale > 0) {
                float id = 1 / scale;
                for (int k = 0; k < BS4; ++k) {
                    int u = 0;
                    for (int i = 0; i < 4; ++i) {
                        int l = nearest_int(0.5f * (id * xval[4 * k + i] - 1));
                        u |= imax(0, imin(KMAXQ - 1, l)) << (3 * i);
                    }
                    int g = iq3s.map[u];
                    if (g < 0)
                        g = iq3s_best_neighbour(iq3s.neighbours - iq3s.map[u] - 1, xval + 4 * k, waux + 4 * k, scale,
                                                L + 4 * k);
                    for (int i = 0; i < 4; ++i) L[4 * k + i] = (int8_t)((iq3s_coord(g, i) - 1) / 2);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < BS; ++i) {
                    float w = weight[i];
                    float q = 2 * L[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0) scale = sumqx / sumq2;
            }
            if (scale < 0) { /* "should never happen": flip the scale and the signs */
                scale = -scale;
                for (int k = 0; k < BS8; ++k) block_signs[k] = (uint8_t)~block_signs[k];
            }
            for (int k = 0; k < BS4; ++k) {
                int u = 0;
                for (int i = 0; i < 4; ++i) u |= L[4 * k + i] << (3 * i);
                const int g = iq3s.map[u];
                DJ_ASSERT(g >= 0);
                qs[k] = (uint8_t)(g & 255);
                qh[(ib * BS4 + k) / 8] |= (uint8_t)((g >> 8) << ((ib * BS4 + k) % 8));
            }
            qs += BS4;
            for (int k = 0; k < BS8; ++k) signs[k] = block_signs[k];
            signs += BS8;
            scales[ib] = scale;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        if (!max_scale) continue;

        float d = max_scale / 31;
        b->d = dj_f32_to_fp16(d * 1.033f);
        float id = 1 / d;
        for (int ib = 0; ib < DJ_QK_K / BS; ib += 2) {
            int l1 = nearest_int(0.5f * (id * scales[ib + 0] - 1));
            l1 = imax(0, imin(15, l1));
            int l2 = nearest_int(0.5f * (id * scales[ib + 1] - 1));
            l2 = imax(0, imin(15, l2));
            b->scales[ib / 2] = (uint8_t)(l1 | (l2 << 4));
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
    case DJ_TYPE_Q4_1: dj_ref_quantize_row_q4_1(x, y, n); return true;
    case DJ_TYPE_Q5_0: dj_ref_quantize_row_q5_0(x, y, n); return true;
    case DJ_TYPE_Q5_1: dj_ref_quantize_row_q5_1(x, y, n); return true;
    case DJ_TYPE_Q1_0: dj_ref_quantize_row_q1_0(x, y, n); return true;
    case DJ_TYPE_Q2_0: dj_ref_quantize_row_q2_0(x, y, n); return true;
    case DJ_TYPE_MXFP4: dj_ref_quantize_row_mxfp4(x, y, n); return true;
    case DJ_TYPE_Q2_K: dj_ref_quantize_row_q2_K(x, y, n); return true;
    case DJ_TYPE_Q3_K: dj_ref_quantize_row_q3_K(x, y, n); return true;
    case DJ_TYPE_Q5_K: dj_ref_quantize_row_q5_K(x, y, n); return true;
    case DJ_TYPE_TQ1_0: dj_ref_quantize_row_tq1_0(x, y, n); return true;
    case DJ_TYPE_TQ2_0: dj_ref_quantize_row_tq2_0(x, y, n); return true;
    case DJ_TYPE_IQ4_NL: dj_ref_quantize_row_iq4_nl(x, y, n); return true;
    case DJ_TYPE_IQ4_XS: dj_ref_quantize_row_iq4_xs(x, y, n); return true;
    case DJ_TYPE_IQ3_S: dj_ref_quantize_row_iq3_s(x, y, n); return true;
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
    case DJ_TYPE_BF16: dj_ref_quantize_row_bf16(x, y, n); return true;
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

/*
 * test_kernels_ref.c — the reference kernels (src/kernels/ref) on their own.
 *
 *  1. Block sizes (every block struct of blocks.h) agree with the GGUF type table.
 *  2. q4_K scale/min packing: every 6-bit (sc, m) pair packed as the
 *     quantizer packs it is recovered by dj_q4_K_scale_min.
 *  3. Known answers: FNV-1a hashes of the reference quantizers' output for
 *     seeded rows of every mode.  The expected values were produced by deja
 *     and checked, byte for byte, against llama.cpp's own quantize_row_*_ref
 *     (transcribed into a scratch harness, not part of deja) on the same
 *     rows; any change to the quantizers' bytes fails here.
 *  4. Round trips quantize -> dequantize: per-element bounds where the
 *     format gives one (q8_0, q4_0: half a step, one step at the clamped
 *     end), relative RMSE bounds for the k-quants, exact for F32, the f16/bf16
 *     rounding bound for those.
 *  5. q8_0 requantization is idempotent (quantize(dequantize(q)) == q).
 *  6. The activation quantizers: q8_K's bsums are the sums of its values, an
 *     all-zero block is all zero, and q8_0/q8_K values stay within ±127.
 *  7. E8M0 and UE4M3 (MXFP4's and NVFP4's scales): every byte against the formula.
 *  8. dj_ref_dot of the types of ref_quants.c on random raw rows equals the dot of the
 *     reference-dequantized rows (whose bits tests/kernels/test_quant_vectors.c ties to
 *     llama.cpp and gguf).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/hash.h"
#include "kernels/kernels_testutil.h"
#include "kernels/quant_tables.h"
#include "kernels/ref/ref.h"
#include "test.h"

static const uint32_t wtypes[] = {DJ_TYPE_F32, DJ_TYPE_F16, DJ_TYPE_BF16, DJ_TYPE_Q8_0,
                                  DJ_TYPE_Q4_0, DJ_TYPE_Q4_K, DJ_TYPE_Q6_K};
enum { NW = sizeof wtypes / sizeof wtypes[0] };

static size_t row_bytes(uint32_t type, int64_t k) {
    size_t n = 0;
    if (!dj_row_bytes(type, k, &n)) abort();
    return n;
}

static void test_sizes(void) {
    /* every block layout of blocks.h against the type table (ggml's sizes) */
#define SIZE_(T, S, QK) CHECKF(dj_type_info(T)->bytes == sizeof(struct S) && dj_type_info(T)->blck == (QK), \
                               "%s: %u bytes / %u elements, struct %zu / %d", dj_type_name(T), dj_type_info(T)->bytes, \
                               dj_type_info(T)->blck, sizeof(struct S), (int)(QK))
    SIZE_(DJ_TYPE_Q4_1, dj_block_q4_1, DJ_QK4_1);
    SIZE_(DJ_TYPE_Q5_0, dj_block_q5_0, DJ_QK5_0);
    SIZE_(DJ_TYPE_Q5_1, dj_block_q5_1, DJ_QK5_1);
    SIZE_(DJ_TYPE_Q2_K, dj_block_q2_K, DJ_QK_K);
    SIZE_(DJ_TYPE_Q3_K, dj_block_q3_K, DJ_QK_K);
    SIZE_(DJ_TYPE_Q5_K, dj_block_q5_K, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ1_S, dj_block_iq1_s, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ1_M, dj_block_iq1_m, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ2_XXS, dj_block_iq2_xxs, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ2_XS, dj_block_iq2_xs, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ2_S, dj_block_iq2_s, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ3_XXS, dj_block_iq3_xxs, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ3_S, dj_block_iq3_s, DJ_QK_K);
    SIZE_(DJ_TYPE_IQ4_NL, dj_block_iq4_nl, DJ_QK4_NL);
    SIZE_(DJ_TYPE_IQ4_XS, dj_block_iq4_xs, DJ_QK_K);
    SIZE_(DJ_TYPE_MXFP4, dj_block_mxfp4, DJ_QK_MXFP4);
    SIZE_(DJ_TYPE_NVFP4, dj_block_nvfp4, DJ_QK_NVFP4);
    SIZE_(DJ_TYPE_TQ1_0, dj_block_tq1_0, DJ_QK_K);
    SIZE_(DJ_TYPE_TQ2_0, dj_block_tq2_0, DJ_QK_K);
    SIZE_(DJ_TYPE_Q1_0, dj_block_q1_0, DJ_QK1_0);
    SIZE_(DJ_TYPE_Q2_0, dj_block_q2_0, DJ_QK2_0);
#undef SIZE_
    CHECK(dj_type_info(DJ_TYPE_Q8_0)->bytes == sizeof(struct dj_block_q8_0));
    CHECK(dj_type_info(DJ_TYPE_Q4_0)->bytes == sizeof(struct dj_block_q4_0));
    CHECK(dj_type_info(DJ_TYPE_Q4_K)->bytes == sizeof(struct dj_block_q4_K));
    CHECK(dj_type_info(DJ_TYPE_Q6_K)->bytes == sizeof(struct dj_block_q6_K));
    CHECK(dj_type_info(DJ_TYPE_Q8_K)->bytes == sizeof(struct dj_block_q8_K));
    CHECK(dj_type_info(DJ_TYPE_Q4_K)->blck == DJ_QK_K && dj_type_info(DJ_TYPE_Q8_0)->blck == DJ_QK8_0);
}

/* Pack as quantize_row_q4_K does, unpack with dj_q4_K_scale_min. */
static void test_q4_K_scales(void) {
    int bad = 0;
    struct trng r = {7};
    for (int trial = 0; trial < 20000; trial++) {
        uint8_t ls[8], lm[8], s[12] = {0};
        for (int j = 0; j < 8; j++) {
            ls[j] = (uint8_t)(trial < 64 ? (uint64_t)trial : trng_next(&r) % 64);
            lm[j] = (uint8_t)(trial < 64 ? (uint64_t)(63 - trial) : trng_next(&r) % 64);
        }
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                s[j] = ls[j];
                s[j + 4] = lm[j];
            } else {
                s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
                s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
                s[j] |= (uint8_t)((lm[j] >> 4) << 6);
            }
        }
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            dj_q4_K_scale_min(j, s, &sc, &m);
            if (sc != ls[j] || m != lm[j]) bad++;
        }
    }
    CHECKF(bad == 0, "%d q4_K scale/min pairs not recovered", bad);
}

/* Hash of the quantizer's bytes for 16 seeded rows of k = 4096, two per mode. */
static uint64_t quant_hash(uint32_t type) {
    enum { K = 4096 };
    static float x[K];
    static uint8_t y[K * 4];
    struct trng r = {12345};
    uint64_t h = DJ_FNV_OFFSET;
    for (int row = 0; row < 2 * TROW_MODES; row++) {
        const float scale = (float)exp((trng_unif(&r) - 0.5) * 20);
        trng_row(&r, x, K, row % TROW_MODES, scale);
        size_t n;
        if (type == DJ_TYPE_Q8_K) {
            dj_ref_quantize_act_q8_K(x, (struct dj_block_q8_K *)y, K);
            n = row_bytes(DJ_TYPE_Q8_K, K);
        } else {
            if (!dj_ref_quantize_row(type, x, y, K)) abort();
            n = row_bytes(type, K);
        }
        h = dj_fnv1a(h, y, n);
    }
    return h;
}

static void test_known_answers(void) {
    static const struct {
        uint32_t type;
        uint64_t hash;
    } want[] = {
        {DJ_TYPE_Q8_0, 0x2d0280de2704a556ull},
        {DJ_TYPE_Q4_0, 0xb014ce99c5e97dd3ull},
        {DJ_TYPE_Q4_K, 0x3e3943c55ea51c48ull},
        {DJ_TYPE_Q6_K, 0x6651fe0f947a3e52ull},
        {DJ_TYPE_Q8_K, 0xd820f5103293aca5ull},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const uint64_t h = quant_hash(want[i].type);
        CHECKF(h == want[i].hash, "%s: quantizer bytes hash %016llx, expected %016llx",
               dj_type_name(want[i].type), (unsigned long long)h, (unsigned long long)want[i].hash);
    }
}

/* Round trips.  Returns the relative RMSE over all rows (rmse / rms of x). */
static void test_round_trips(void) {
    enum { K = 2048, ROWS = 48 };
    static float x[K], y[K];
    static uint8_t q[K * 4];
    /* RMSE of gaussian rows relative to their rms, with ~25% margin over what these
     * quantizers reach here (measured: q8_0 0.0054, q4_0 0.0865, q4_K 0.0702, q6_K 0.0176) */
    const double rel_bound[DJ_TYPE_COUNT] = {[DJ_TYPE_Q8_0] = 0.0068, [DJ_TYPE_Q4_0] = 0.11,
                                             [DJ_TYPE_Q4_K] = 0.088, [DJ_TYPE_Q6_K] = 0.022};
    /* an f16 scale rounds to zero (or a subnormal) below 2^-14: values up to 128 of its
     * smallest steps can be lost there (the "tiny groups" rows) */
    const double tiny = 128 * 0x1p-24;
    for (int t = 0; t < NW; t++) {
        const uint32_t type = wtypes[t];
        struct trng r = {1000 + type};
        double se = 0, sx = 0;
        int bad = 0;
        for (int row = 0; row < ROWS; row++) {
            const int mode = row < ROWS / 2 ? 0 : row % TROW_MODES;
            const float scale = (float)exp((trng_unif(&r) - 0.5) * 8);
            trng_row(&r, x, K, mode, scale);
            CHECK(dj_ref_quantize_row(type, x, q, K));
            CHECK(dj_ref_dequantize_row(type, q, y, K));
            for (int64_t i = 0; i < K; i++) {
                const double e = (double)y[i] - x[i];
                if (mode == 0) {
                    se += e * e;
                    sx += (double)x[i] * x[i];
                }
                double bound;
                switch (type) {
                case DJ_TYPE_F32: bound = 0; break;
                case DJ_TYPE_F16: bound = fabs(x[i]) * 0x1p-11 + 0x1p-25; break;
                case DJ_TYPE_BF16: bound = fabs(x[i]) * 0x1p-8; break;
                case DJ_TYPE_Q8_0: { /* half a step of the f32 scale, plus the f16 rounding of d */
                    const double d = dj_fp16_to_f32(((struct dj_block_q8_0 *)q)[i / 32].d);
                    bound = 0.5 * d * (1 + 0x1p-10) + 127 * d * 0x1p-11 + tiny;
                    break;
                }
                case DJ_TYPE_Q4_0: { /* one step at most (the +8 end is clamped to +7) */
                    const double d = fabs(dj_fp16_to_f32(((struct dj_block_q4_0 *)q)[i / 32].d));
                    bound = d * (1 + 0x1p-10) + 8 * d * 0x1p-11 + tiny;
                    break;
                }
                default: bound = INFINITY; /* k-quants: RMSE only */
                }
                if (fabs(e) > bound) bad++;
            }
        }
        CHECKF(bad == 0, "%s: %d round-trip errors beyond the per-element bound", dj_type_name(type), bad);
        if (rel_bound[type] > 0) {
            const double rel = sqrt(se / sx);
            CHECKF(rel < rel_bound[type], "%s: relative RMSE %.4f >= %.4f", dj_type_name(type), rel, rel_bound[type]);
            printf("%-5s round trip: relative RMSE %.4f (bound %.3f)\n", dj_type_name(type), rel, rel_bound[type]);
        }
    }
}

static void test_q8_0_idempotent(void) {
    enum { K = 1024 };
    static float x[K], y[K];
    static struct dj_block_q8_0 q1[K / 32], q2[K / 32];
    struct trng r = {99};
    int bad = 0;
    for (int row = 0; row < 64; row++) {
        /* not the tiny mode: there the f16 scale underflows and dequantizes to zeros */
        trng_row(&r, x, K, row % (TROW_MODES - 1), (float)exp((trng_unif(&r) - 0.5) * 8));
        dj_ref_quantize_row_q8_0(x, q1, K);
        dj_ref_dequantize_row(DJ_TYPE_Q8_0, q1, y, K);
        dj_ref_quantize_row_q8_0(y, q2, K);
        bad += memcmp(q1, q2, sizeof q1) != 0;
    }
    CHECKF(bad == 0, "%d q8_0 rows change on requantization", bad);
}

static void test_act_quantizers(void) {
    enum { K = 1024 };
    static float x[K];
    static struct dj_block_q8_K qk[K / 256];
    static struct dj_block_q8_0 q0[K / 32];
    struct trng r = {5};
    int bad = 0;
    for (int row = 0; row < 64; row++) {
        trng_row(&r, x, K, row % TROW_MODES, (float)exp((trng_unif(&r) - 0.5) * 8));
        if (row == 3) memset(x, 0, sizeof x);
        dj_ref_quantize_act_q8_K(x, qk, K);
        dj_ref_quantize_act_q8_0(x, q0, K);
        for (int b = 0; b < K / 256; b++) {
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += qk[b].qs[16 * g + i];
                if (s != qk[b].bsums[g]) bad++;
            }
            for (int i = 0; i < 256; i++) if (qk[b].qs[i] < -127) bad++;
        }
        for (int b = 0; b < K / 32; b++)
            for (int i = 0; i < 32; i++) if (q0[b].qs[i] < -127) bad++;
        if (row == 3) {
            for (int b = 0; b < K / 256; b++) {
                static const struct dj_block_q8_K zero;
                if (memcmp(&qk[b], &zero, sizeof zero)) bad++;
            }
        }
    }
    CHECKF(bad == 0, "%d activation quantizer invariants broken", bad);
}

/* The 8-bit scale formats, every byte, against their definitions written another way
 * (ggml-impl.h's ggml_e8m0_to_fp32 / _half and ggml_ue4m3_to_fp32, which deja's bit-built
 * versions must equal: 2^(e-127) with 2^-127 at e = 0; UE4M3 via ldexpf, 0 and 0x7f as
 * zero, bit 7 ignored), and dj_f32_to_ue4m3 as their inverse on every value it can give. */
static void test_scale_formats(void) {
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        const float want = e == 0 ? 0x1p-127f : (float)ldexp(1.0, e - 127);
        if (e < 255 && (dj_e8m0_to_f32((uint8_t)e) != want || dj_e8m0_to_f32_half((uint8_t)e) != want * 0.5f)) bad++;
        if (e == 255 && !isinf(dj_e8m0_to_f32(255))) bad++;
    }
    CHECKF(bad == 0, "%d E8M0 conversions wrong", bad);
    bad = 0;
    for (int x = 0; x < 256; x++) {
        const int ex = (x >> 3) & 0xF, man = x & 7;
        float raw = ex == 0 ? ldexpf((float)man, -9) : ldexpf(1.0f + (float)man / 8.0f, ex - 7);
        if (x == 0 || x == 0x7F) raw = 0.0f;
        if (memcmp(&(float){raw * 0.5f}, &(float){dj_ue4m3_to_f32_half((uint8_t)x)}, 4)) bad++;
        /* round trip: every positive code below exponent 15 comes back; ggml's encoder
         * saturates at exponent 15 (256 .. 448 all give 0x7e, 448), and so does deja's */
        const uint8_t back = dj_f32_to_ue4m3(2 * dj_ue4m3_to_f32_half((uint8_t)x));
        if (x > 0 && x < 0x78 && back != x) bad++;
        if (x >= 0x78 && x < 0x7F && back != 0x7E) bad++;
    }
    CHECKF(bad == 0, "%d UE4M3 conversions wrong", bad);
    CHECK(dj_f32_to_ue4m3(0.0f) == 0 && dj_f32_to_ue4m3(-1.0f) == 0 && dj_f32_to_ue4m3(NAN) == 0);
    CHECK(dj_f32_to_ue4m3(1e9f) == 0x7E && dj_f32_to_ue4m3(448.0f) == 0x7E);
    CHECK(dj_f32_to_ue4m3(0x1p-12f) == 0); /* below half the smallest subnormal, 2^-9 */
}

/* dj_ref_dot on random raw rows of every type of ref_quants.c against the double sum of the
 * reference dequantizer's floats times the dequantized activations: equal to 2^-40 of mag
 * where the dequantized weights are exact, within 2^-24 of mag more where the dequantizer
 * rounds d*q - m (ref_quants.c's top comment); and mag at least the sum of |w_i a_i| (less
 * that rounding). */
static void test_ref_dot_quants(void) {
    static const uint32_t qt[] = {DJ_TYPE_Q4_1, DJ_TYPE_Q5_0, DJ_TYPE_Q5_1, DJ_TYPE_Q2_K, DJ_TYPE_Q3_K, DJ_TYPE_Q5_K,
                                  DJ_TYPE_IQ1_S, DJ_TYPE_IQ1_M, DJ_TYPE_IQ2_XXS, DJ_TYPE_IQ2_XS, DJ_TYPE_IQ2_S,
                                  DJ_TYPE_IQ3_XXS, DJ_TYPE_IQ3_S, DJ_TYPE_IQ4_NL, DJ_TYPE_IQ4_XS, DJ_TYPE_MXFP4,
                                  DJ_TYPE_TQ1_0, DJ_TYPE_TQ2_0, DJ_TYPE_NVFP4, DJ_TYPE_Q1_0, DJ_TYPE_Q2_0};
    enum { K = 1024 };
    static float x[K], wf[K], af[K];
    static uint8_t w[K * 2], a[K * 2];
    struct trng r = {4242};
    for (size_t t = 0; t < sizeof qt / sizeof qt[0]; t++) {
        const uint32_t type = qt[t];
        const int at = dj_kernels_act_type(type);
        const bool rounds = type == DJ_TYPE_Q4_1 || type == DJ_TYPE_Q5_1 || type == DJ_TYPE_Q2_K || type == DJ_TYPE_Q5_K;
        int bad = 0;
        for (int row = 0; row < 24; row++) {
            CHECK(trng_raw_row(&r, type, w, K));
            trng_row(&r, x, K, row % TROW_MODES, (float)exp((trng_unif(&r) - 0.5) * 6));
            CHECK(dj_ref_quantize_act((uint32_t)at, x, a, K));
            CHECK(dj_ref_dequantize_row(type, w, wf, K));
            double want = 0, wmag = 0;
            if (at == DJ_TYPE_Q8_K) {
                for (int i = 0; i < K; i++) {
                    const struct dj_block_q8_K *b = (const struct dj_block_q8_K *)a + i / 256;
                    const double ai = (double)b->d * b->qs[i % 256];
                    want += wf[i] * ai;
                    wmag += fabs(wf[i] * ai);
                }
            } else {
                CHECK(dj_ref_dequantize_row((uint32_t)at, a, af, K)); /* q8_0: d * q is exact in float */
                for (int i = 0; i < K; i++) {
                    want += (double)wf[i] * af[i];
                    wmag += fabs((double)wf[i] * af[i]);
                }
            }
            double mag = 0;
            const double got = dj_ref_dot(type, K, w, a, &mag);
            const double tol = ((rounds ? 0x1p-24 : 0) + 0x1p-40) * mag;
            if (!(fabs(got - want) <= tol) || !(mag >= wmag * (1 - (rounds ? 0x1p-23 : 0x1p-40)))) {
                if (bad++ < 3)
                    fprintf(stderr, "%s row %d: ref dot %.17g, dequantized %.17g, mag %.6g (|w a| %.6g)\n",
                            dj_type_name(type), row, got, want, mag, wmag);
            }
        }
        CHECKF(bad == 0, "%s: %d reference dots off the dequantized rows' dot", dj_type_name(type), bad);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    test_sizes();
    test_q4_K_scales();
    test_known_answers();
    test_round_trips();
    test_q8_0_idempotent();
    test_act_quantizers();
    test_scale_formats();
    test_ref_dot_quants();
    TEST_END();
}

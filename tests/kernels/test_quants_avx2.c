/*
 * test_quants_avx2.c — the paths of quants_avx2.c that test_kernels' shapes do not
 * reach, for every type whose AVX2 kernel that file sets (the AVX2 table's entries
 * that differ from the generic table's).
 *
 * quants_avx2.c / quants32_avx2.c have three ways to one result: the dot, rows decoded
 * as they stream (up to 4 tokens, or any batch without scratch), and rows decoded whole
 * into a scratch buffer that every token tile of a token chunk reads (prefill: 2 rows of
 * super-blocks, or 8 rows of 32-blocks in the lanes of a vector).  Per case:
 *  1. matmul with scratch == matmul with every scratch allocation failing
 *     (dj_kernel_scratch_fail_for_test) == dot of each pair, bitwise — over a k whose
 *     token chunks (256 KiB of activations) end inside the batch, k of 25 and 9 blocks
 *     of 32 (a partial group of 8 blocks), row ranges that start and end off the 2-row
 *     and 8-row tiles, and 1 .. 6, 9 and 40 tokens;
 *  2. the columns outside [r0, r1) are left alone;
 *  3. dot within 2 * (n + 16) * 2^-24 * mag of the exact dj_ref_dot (n = k / 16, more
 *     roundings than any of these kernels takes), also with every activation at
 *     +-127 against random raw weight blocks (largest levels, scales, every grid
 *     index and sign: trng_raw_row), where an int16 saturation in maddubs or a
 *     wrapped int32 would be off by far more.
 * The same for the amx table's AMX-INT8 matmul of the super-block types (quants_avx2.c:
 * batches of more than 16 tokens, 16-row groups), which keeps the avx2 table's dot.
 * The reference is independent code (kernels/ref, itself tied to llama.cpp's
 * dequantizers by test_quant_vectors).  On a CPU without AVX2 it says so and passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ggml_type.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kernels_testutil.h"
#include "test.h"

struct shape {
    int64_t k, n_rows, n_tok, r0, r1;
};

/* One shape of one type: raw random weights, activations gaussian or all +-127. */
static void check_case(const struct dj_kernels *kt, uint32_t wtype, struct shape s, bool extreme, struct trng *r) {
    const struct dj_wtype_kernels *K = &kt->w[wtype];
    const int at = K->act_type;
    size_t ws = 0;
    CHECK(dj_row_bytes(wtype, s.k, &ws));
    const size_t as = dj_kernels_act_row_bytes(at, s.k);
    uint8_t *w = malloc(ws * (size_t)s.n_rows), *a = malloc(as * (size_t)s.n_tok);
    float *x = malloc(sizeof(float) * (size_t)s.k);
    const size_t nc = (size_t)(s.n_tok * s.n_rows);
    float *c0 = malloc(sizeof(float) * nc), *c1 = malloc(sizeof(float) * nc);
    for (int64_t i = 0; i < s.n_rows; i++) CHECK(trng_raw_row(r, wtype, w + (size_t)i * ws, s.k));
    for (int64_t t = 0; t < s.n_tok; t++) {
        for (int64_t i = 0; i < s.k; i++) x[i] = extreme ? (trng_next(r) & 1 ? 1.0f : -1.0f) : trng_gauss(r);
        kt->quantize_act[at](x, a + (size_t)t * as, s.k);
    }
    for (size_t i = 0; i < nc; i++) c0[i] = c1[i] = -1234.5f;
    K->matmul(s.k, w, ws, a, as, c0, s.n_rows, s.r0, s.r1, s.n_tok);
    dj_kernel_scratch_fail_for_test(1);
    K->matmul(s.k, w, ws, a, as, c1, s.n_rows, s.r0, s.r1, s.n_tok);
    dj_kernel_scratch_fail_for_test(0);
    int bad_scr = 0, bad_dot = 0, bad_out = 0, bad_ref = 0;
    double worst = 0;
    for (int64_t t = 0; t < s.n_tok; t++)
        for (int64_t i = 0; i < s.n_rows; i++) {
            const size_t e = (size_t)(t * s.n_rows + i);
            if (i < s.r0 || i >= s.r1) {
                bad_out += c0[e] != -1234.5f || c1[e] != -1234.5f;
                continue;
            }
            const uint8_t *wr = w + (size_t)i * ws, *ar = a + (size_t)t * as;
            const float d = K->dot(s.k, wr, ar);
            bad_scr += memcmp(&c0[e], &c1[e], 4) != 0;
            bad_dot += memcmp(&c0[e], &d, 4) != 0;
            double mag = 0;
            const double ref = dj_ref_dot(wtype, s.k, wr, ar, &mag);
            const double tol = 2.0 * ((double)s.k / 16 + 16) * ldexp(1, -24) * mag;
            const double err = fabs((double)d - ref);
            if (mag > 0 && err / mag > worst) worst = err / mag;
            bad_ref += !(err <= tol);
        }
    CHECKF(bad_scr == 0, "%s k=%lld tok=%lld: %d elements differ without scratch", dj_type_name(wtype),
           (long long)s.k, (long long)s.n_tok, bad_scr);
    CHECKF(bad_dot == 0, "%s k=%lld tok=%lld: %d elements differ from dot", dj_type_name(wtype), (long long)s.k,
           (long long)s.n_tok, bad_dot);
    CHECKF(bad_out == 0, "%s: %d elements outside [r0, r1) written", dj_type_name(wtype), bad_out);
    CHECKF(bad_ref == 0, "%s k=%lld%s: %d dots off the reference (worst |err|/mag %.3g)", dj_type_name(wtype),
           (long long)s.k, extreme ? " +-127" : "", bad_ref, worst);
    free(w);
    free(a);
    free(x);
    free(c0);
    free(c1);
}

int main(void) {
    const struct dj_kernels *avx2 = dj_kernels_for_isa(DJ_ISA_AVX2), *gen = dj_kernels_for_isa(DJ_ISA_GENERIC);
    if (!avx2) {
        printf("no AVX2 table on this CPU: nothing to test\n");
        TEST_END();
    }
    /* k = 8192 of q8_K is 9344 bytes a token: token chunks of 28 end inside 40 tokens */
    /* 800 and 288: 25 and 9 blocks of 32 (the 32-block types' last group of 8 is partial;
     * the super-block types skip them); 11 and 13 rows: 8-row groups that end mid-range */
    static const struct shape shapes[] = {
        {8192, 5, 40, 1, 4}, {512, 9, 5, 1, 8}, {512, 7, 4, 0, 7}, {256, 4, 3, 3, 4}, {1024, 3, 1, 0, 3},
        {800, 11, 9, 2, 11}, {288, 13, 6, 0, 13}, {800, 3, 2, 0, 3},
    };
    struct trng r = {20261204};
    int n_types = 0;
    for (uint32_t t = 0; t < DJ_TYPE_COUNT; t++) {
        const struct dj_wtype_kernels *K = &avx2->w[t];
        if (!K->matmul || K->matmul == gen->w[t].matmul) continue;
        if (t == DJ_TYPE_F32 || t == DJ_TYPE_F16 || t == DJ_TYPE_BF16 || t == DJ_TYPE_Q8_0 || t == DJ_TYPE_Q4_0 ||
            t == DJ_TYPE_Q4_K || t == DJ_TYPE_Q6_K)
            continue; /* kernels_avx2.c's own: test_kernels_scratch */
        const int64_t blck = dj_type_info(t)->blck;
        n_types++;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (shapes[i].k % blck) continue;
            check_case(avx2, t, shapes[i], false, &r);
            check_case(avx2, t, shapes[i], true, &r);
        }
    }
    printf("avx2: %d types of quants_avx2.c checked\n", n_types);
    CHECK(n_types >= 18);
    /* The avx512 table's own kernels of quants_avx2.c's types (TQ1_0, IQ4_XS, Q5_K, the grid types: decode): the same
     * cases, and their dot bitwise the avx2 table's (the same exact totals, the same fma). */
    const struct dj_kernels *k512 = dj_kernels_for_isa(DJ_ISA_AVX512);
    int n_512 = 0;
    for (uint32_t t = 0; k512 && t < DJ_TYPE_COUNT; t++) {
        if (!avx2->w[t].dot || !dj_type_info(t) || dj_type_info(t)->blck != 256 || k512->w[t].dot == avx2->w[t].dot ||
            t == DJ_TYPE_Q4_K || t == DJ_TYPE_Q6_K)
            continue;
        n_512++;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (shapes[i].k % 256) continue;
            check_case(k512, t, shapes[i], false, &r);
            check_case(k512, t, shapes[i], true, &r);
        }
        /* past 64 super-blocks a row (TQ1_0's sum(a) made per block instead of once) */
        check_case(k512, t, (struct shape){256 * 65, 3, 3, 0, 3}, false, &r);
        int bad = 0;
        for (int rep = 0; rep < 64; rep++) {
            const int64_t k = 256 * (1 + rep % 9);
            size_t ws = 0;
            CHECK(dj_row_bytes(t, k, &ws));
            const size_t as = dj_kernels_act_row_bytes(avx2->w[t].act_type, k);
            uint8_t *w = malloc(ws), *a = malloc(as);
            float *x = malloc(sizeof(float) * (size_t)k);
            CHECK(trng_raw_row(&r, t, w, k));
            for (int64_t i = 0; i < k; i++) x[i] = rep % 2 ? (trng_next(&r) & 1 ? 1.0f : -1.0f) : trng_gauss(&r);
            avx2->quantize_act[avx2->w[t].act_type](x, a, k);
            const float d0 = avx2->w[t].dot(k, w, a), d1 = k512->w[t].dot(k, w, a);
            bad += memcmp(&d0, &d1, 4) != 0;
            free(w);
            free(a);
            free(x);
        }
        CHECKF(bad == 0, "%s: avx512 dot differs from the avx2 dot in %d of 64 rows", dj_type_name(t), bad);
    }
    printf("avx512: %d super-block types with their own kernels checked\n", n_512);
    if (k512) CHECK(n_512 >= 10); /* TQ1_0, IQ4_XS, Q5_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S */
    /* The amx table's AMX-INT8 matmul of the super-block types (batches of more than 16
     * tokens): the avx2 table's dot, bitwise, over 16-row groups cut by the row range. */
    const struct dj_kernels *amx = dj_kernels_for_isa(DJ_ISA_AMX);
    static const struct shape amx_shapes[] = {
        {768, 37, 33, 3, 35}, {256, 16, 17, 0, 16}, {2048, 20, 48, 5, 20}, {512, 3, 21, 1, 2},
    };
    int n_amx = 0;
    for (uint32_t t = 0; amx && t < DJ_TYPE_COUNT; t++) {
        /* (Q4_K and Q6_K: kernels_avx512.c's own, with their own dots: test_kernels) */
        if (!amx->w[t].matmul || amx->w[t].matmul == avx2->w[t].matmul || t == DJ_TYPE_Q4_K || t == DJ_TYPE_Q6_K ||
            dj_type_info(t)->blck != 256)
            continue;
        n_amx++;
        for (size_t i = 0; i < sizeof amx_shapes / sizeof amx_shapes[0]; i++) {
            check_case(amx, t, amx_shapes[i], false, &r);
            check_case(amx, t, amx_shapes[i], true, &r);
        }
    }
    printf("amx: %d super-block types with their own matmul checked\n", n_amx);
    if (amx && amx->w[DJ_TYPE_Q4_0].matmul_packed != dj_kernels_for_isa(DJ_ISA_AVX512)->w[DJ_TYPE_Q4_0].matmul_packed)
        CHECK(n_amx == 13); /* AMX-INT8: Q2_K, Q3_K, Q5_K, IQ4_XS, the IQ1/IQ2/IQ3 family, TQ1_0, TQ2_0 */
    TEST_END();
}

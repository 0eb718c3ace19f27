/*
 * test_kernels_large.c — matmul == dot, bitwise, at the sizes the model
 * really uses and test_kernels.c does not reach: rows of 2048..8192 elements
 * (the F16 prefill path changes its loop order above k = 4096 and keeps
 * ~512 KiB weight blocks in L2 below it), 151 rows split into uneven thread
 * ranges, 3/9/40 tokens — for every weight type and every ISA table.
 */
#include "core/ggml_type.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kernels_testutil.h"
#include "test.h"

static void check(const struct dj_kernels *kt, uint32_t type, int64_t k, int64_t n_rows, int64_t n_tok) {
    const struct dj_wtype_kernels *wk = &kt->w[type];
    size_t w_row = 0;
    if (!wk->matmul || !dj_row_bytes(type, k, &w_row)) return;
    const size_t a_row = dj_kernels_act_row_bytes(wk->act_type, k);
    uint8_t *w = malloc(w_row * (size_t)n_rows), *a = malloc(a_row * (size_t)n_tok);
    float *x = malloc((size_t)k * sizeof(float)), *c = malloc((size_t)(n_rows * n_tok) * sizeof(float));
    struct trng r = {(uint64_t)(k * 131 + n_tok + type)};
    for (int64_t i = 0; i < n_rows; i++) {
        trng_row(&r, x, k, (int)(i % 3), 0.05f);
        dj_ref_quantize_row(type, x, w + (size_t)i * w_row, k);
    }
    for (int64_t t = 0; t < n_tok; t++) {
        trng_row(&r, x, k, 0, 1.0f);
        kt->quantize_act[wk->act_type](x, a + (size_t)t * a_row, k);
    }
    const int64_t cuts[] = {0, 7, 80, n_rows};
    for (int s = 0; s < 3; s++) wk->matmul(k, w, w_row, a, a_row, c, n_rows, cuts[s], cuts[s + 1], n_tok);
    int64_t bad = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n_rows; i++) {
            const float d = wk->dot(k, w + (size_t)i * w_row, a + (size_t)t * a_row);
            bad += memcmp(&d, &c[t * n_rows + i], sizeof d) != 0;
        }
    CHECKF(bad == 0, "%s %s k %lld tokens %lld: %lld of %lld elements differ from dot", kt->name, dj_type_name(type),
           (long long)k, (long long)n_tok, (long long)bad, (long long)(n_rows * n_tok));
    free(w);
    free(a);
    free(x);
    free(c);
}

int main(void) {
    const uint32_t types[] = {DJ_TYPE_F32, DJ_TYPE_F16, DJ_TYPE_BF16, DJ_TYPE_Q8_0, DJ_TYPE_Q4_0, DJ_TYPE_Q4_K, DJ_TYPE_Q6_K};
    const int64_t ks[] = {2048, 4096, 5120, 8192};
    const int64_t toks[] = {3, 9, 40};
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *kt = dj_kernels_for_isa((enum dj_isa)isa);
        if (!kt || isa == DJ_ISA_GENERIC) continue; /* the generic table is one loop; test_kernels covers it */
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                for (size_t n = 0; n < sizeof toks / sizeof toks[0]; n++) check(kt, types[ti], ks[ki], 151, toks[n]);
        /* f16 at k not a multiple of 16 past 4096 (masked tail after the loop-order switch) */
        check(kt, DJ_TYPE_F16, 4097, 151, 9);
        check(kt, DJ_TYPE_F16, 5000, 151, 40);
        printf("large-shape matmul == dot: %s checked\n", kt->name);
    }
    TEST_END();
}

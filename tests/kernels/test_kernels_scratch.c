/*
 * test_kernels_scratch.c — running out of kernel scratch memory costs speed,
 * never the process or a bit of the result.
 *
 * The kernels that repack an operand (AVX-512: f16 with k > 4096 in prefill,
 * q4_0/q8_0/q4_K in decode and prefill, q6_K in prefill) take a per-thread
 * buffer from dj_kernel_scratch, which returns NULL when memory is out.  With
 * dj_kernel_scratch_fail_for_test(1) every allocation fails; every matmul of
 * every table this CPU can run must then give bitwise the result it gives with
 * scratch (and the dot of each pair), for decode (1, 2 tokens) and prefill
 * batches, row ranges of fewer than 16 rows and ranges that end mid-group, and
 * an f16 k over 4096 (the k-blocked path).  On a CPU without AVX-512 the other
 * tables use no scratch and the check is cheap but still run; the test says
 * which tables it covered.
 */
#include <stdint.h>
#include <string.h>

#include "core/ggml_type.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kernels_testutil.h"
#include "test.h"

struct shape {
    int64_t k, n_rows, n_tok, r0, r1;
};

static int check_case(const struct dj_kernels *kt, uint32_t wtype, struct shape s, struct trng *r) {
    const struct dj_wtype_kernels *wk = &kt->w[wtype];
    const int at = wk->act_type;
    size_t wrb = 0;
    if (!dj_row_bytes(wtype, s.k, &wrb)) return 0; /* k not a multiple of the block */
    const size_t arb = dj_kernels_act_row_bytes(at, s.k);
    const int64_t ldc = s.n_rows + 3;
    uint8_t *w = malloc(wrb * (size_t)s.n_rows), *a = malloc(arb * (size_t)s.n_tok);
    float *x = malloc(sizeof(float) * (size_t)s.k);
    float *c0 = malloc(sizeof(float) * (size_t)(s.n_tok * ldc)), *c1 = malloc(sizeof(float) * (size_t)(s.n_tok * ldc));
    if (!w || !a || !x || !c0 || !c1) abort();
    for (int64_t i = 0; i < s.n_rows; i++) {
        trng_row(r, x, s.k, (int)(i % TROW_MODES), 0.5f);
        CHECK(dj_ref_quantize_row(wtype, x, w + (size_t)i * wrb, s.k));
    }
    for (int64_t t = 0; t < s.n_tok; t++) {
        trng_row(r, x, s.k, 0, 1.0f);
        kt->quantize_act[at](x, a + (size_t)t * arb, s.k);
    }
    for (int64_t i = 0; i < s.n_tok * ldc; i++) c0[i] = c1[i] = -1234.5f;
    wk->matmul(s.k, w, wrb, a, arb, c0, ldc, s.r0, s.r1, s.n_tok);
    dj_kernel_scratch_fail_for_test(1);
    wk->matmul(s.k, w, wrb, a, arb, c1, ldc, s.r0, s.r1, s.n_tok);
    int bad = 0;
    for (int64_t t = 0; t < s.n_tok; t++)
        for (int64_t i = 0; i < s.n_rows; i++) {
            const float d = wk->dot(s.k, w + (size_t)i * wrb, a + (size_t)t * arb); /* also without scratch */
            const float e0 = c0[t * ldc + i], e1 = c1[t * ldc + i];
            const bool in = i >= s.r0 && i < s.r1;
            if (memcmp(&e0, &e1, sizeof e0) != 0 || (in && memcmp(&e0, &d, sizeof d) != 0) ||
                (!in && e1 != -1234.5f))
                bad++;
        }
    dj_kernel_scratch_fail_for_test(0);
    CHECKF(bad == 0, "%s %s k=%lld rows %lld [%lld, %lld) tokens %lld: %d elements differ without scratch", kt->name,
           dj_type_name(wtype), (long long)s.k, (long long)s.n_rows, (long long)s.r0, (long long)s.r1,
           (long long)s.n_tok, bad);
    free(w);
    free(a);
    free(x);
    free(c0);
    free(c1);
    return 1;
}

int main(void) {
    /* the hook itself */
    CHECK(dj_kernel_scratch(1000) != NULL);
    dj_kernel_scratch_fail_for_test(1);
    CHECK(dj_kernel_scratch(1000) == NULL);
    dj_kernel_scratch_fail_for_test(0);
    CHECK(dj_kernel_scratch(1000) != NULL);
    CHECK(dj_kernel_scratch(SIZE_MAX - 10) == NULL); /* too large: NULL, not a wrapped size */
    CHECK(dj_kernel_scratch(1000) != NULL);          /* and usable again after */

    static const uint32_t types[] = {DJ_TYPE_F32, DJ_TYPE_F16, DJ_TYPE_BF16, DJ_TYPE_Q8_0,
                                     DJ_TYPE_Q4_0, DJ_TYPE_Q4_K, DJ_TYPE_Q6_K};
    static const struct shape shapes[] = {
        {512, 13, 1, 0, 13},  /* decode, fewer than 16 rows (padded group) */
        {512, 37, 2, 3, 37},  /* decode, two tokens, a range ending in a partial group */
        {512, 37, 9, 0, 29},  /* prefill, one tile and a bit */
        {512, 40, 40, 16, 40},
        {768, 21, 19, 5, 21},
        {4608, 20, 11, 0, 20}, /* f16 k > 4096: the k-blocked prefill */
    };
    struct trng r = {42};
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *kt = dj_kernels_for_isa((enum dj_isa)isa);
        if (!kt) {
            printf("%s: not available on this CPU; its no-scratch paths not run\n", dj_isa_name((enum dj_isa)isa));
            continue;
        }
        int n = 0;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            if (!kt->w[types[ti]].matmul) continue;
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                n += check_case(kt, types[ti], shapes[si], &r);
        }
        printf("%s: %d matmul cases bitwise equal with and without scratch\n", kt->name, n);
    }
    TEST_END();
}

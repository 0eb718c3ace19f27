/*
 * test_kernels.c — every fast kernel against the reference, and the batch
 * invariance of the matrix product, for every kernel table this CPU runs
 * (generic, avx2, avx512, avx512bf16, amx).
 *
 * Per table, for every weight type the table has a matmul for (all 28 of wtypes
 * in every table: the generic reference path at least; a fast kernel wherever an
 * ISA file sets one — the loops are over the table, so new kernels are tested
 * without a change here):
 *  1. quantize_act (F16, Q8_0, Q8_K; BF16 where the table has it) is bitwise equal to dj_ref_quantize_act
 *     on seeded rows of every mode, plus hand-made rows: all zero, two values
 *     of the largest magnitude with opposite signs (q8_K takes the first),
 *     exact .5 ties after scaling, bf16's corner cases (ties, subnormals, infinities, NaNs).
 *  2. dequantize_row is bitwise equal to dj_ref_dequantize_row, on quantizer
 *     output (for the types with a reference quantizer) and on random raw blocks
 *     (trng_raw_row: any bits, sane scales).
 *  3. dot(w, a) is within tolerance of the exact dj_ref_dot on the same bytes:
 *         |dot - ref| <= 2 * (n + 16) * 2^-24 * mag
 *     where mag is the sum of the magnitudes of the terms (dj_ref_dot's *mag)
 *     and n the number of float roundings a kernel's sum may take
 *     (n_roundings: one per block for F32..Q6_K's original seven, elements for
 *     float types; for the other types one per scale group — the smallest run
 *     of elements with a float scale of its own — two where a min or delta is
 *     added apart): a float sum of m terms in any order is off by at most about
 *     m * 2^-24 * mag, and the 16 covers the lane tree, the scale products and
 *     int->float conversions.  The weights are both quantizer output and random
 *     raw blocks (every bit pattern: q8_0 -128, q6_K scale -128, 6-bit q4_K
 *     scales of 63, every grid index and sign...), so no integer path
 *     overflows unseen.  Measured worst |dot - ref| / mag is printed per type
 *     (about 1e-7 for every type and table here, against bounds of 1e-5 ..
 *     1e-4): a wrong bit layout gives errors of order 1.
 *  0. dj_kernels() is the best table the CPU runs (DJ_ISA unset); the generic
 *     one always exists.  (test_kernels_fp16 checks that DJ_ISA caps the choice.)
 *  4. Batch invariance: matmul over W (n_rows x k) and A (n_tok x k) gives,
 *     for every element, exactly the bits of dot(W row r, A row t) —
 *     for the whole batch at once, for the tokens fed in chunks of 1, 2, 3,
 *     5 and 64, and for the rows split at random into up to 4 ranges; the
 *     columns outside [r0, r1) are left untouched.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "kernels/kernels.h"
#include "kernels/kernels_testutil.h"
#include "kernels/ref/ref.h"
#include "test.h"

/* Every weight type the generic table must run (the reference path of the types without
 * a fast kernel); each table is tested on every type it has a matmul for. */
static const uint32_t wtypes[] = {
    DJ_TYPE_F32,   DJ_TYPE_F16,    DJ_TYPE_BF16,    DJ_TYPE_Q8_0,   DJ_TYPE_Q4_0,  DJ_TYPE_Q4_K,   DJ_TYPE_Q6_K,
    DJ_TYPE_Q4_1,  DJ_TYPE_Q5_0,   DJ_TYPE_Q5_1,    DJ_TYPE_Q2_K,   DJ_TYPE_Q3_K,  DJ_TYPE_Q5_K,   DJ_TYPE_IQ1_S,
    DJ_TYPE_IQ1_M, DJ_TYPE_IQ2_XXS, DJ_TYPE_IQ2_XS, DJ_TYPE_IQ2_S,  DJ_TYPE_IQ3_XXS, DJ_TYPE_IQ3_S, DJ_TYPE_IQ4_NL,
    DJ_TYPE_IQ4_XS, DJ_TYPE_MXFP4, DJ_TYPE_TQ1_0,   DJ_TYPE_TQ2_0,  DJ_TYPE_NVFP4, DJ_TYPE_Q1_0,   DJ_TYPE_Q2_0,
};
enum { NW = sizeof wtypes / sizeof wtypes[0] };

static size_t row_bytes(int type, int64_t k) {
    size_t n = 0;
    if (type < 0 || !dj_row_bytes((uint32_t)type, k, &n)) abort();
    return n;
}

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* A weight row: the reference quantizer's output for x when the type has one and raw
 * is false, else random raw blocks (kernels_testutil.h: any bits, sane scales). */
static void weight_row(struct trng *r, uint32_t type, const float *x, uint8_t *row, int64_t k, bool raw) {
    if (raw || !dj_ref_quantize_row(type, x, row, k))
        if (!trng_raw_row(r, type, row, k)) abort();
}

/* The number of float roundings a kernel's sum of one row may take, the n of the dot
 * tolerance: one per block for the seven original types, per element for F32/F16/BF16
 * (kernels_generic.c); for the other types one per scale group (the smallest run of
 * elements with a float scale of its own, or with one activation scale — a kernel may
 * apply each separately), two where a min or delta term is added apart. */
static int64_t n_roundings(uint32_t type, int64_t k) {
    switch (type) {
    case DJ_TYPE_Q4_1: case DJ_TYPE_Q5_1: return 2 * k / 32;
    case DJ_TYPE_Q2_K: return 2 * k / 16;
    case DJ_TYPE_Q5_K: case DJ_TYPE_IQ1_S: return 2 * k / 32;
    case DJ_TYPE_IQ1_M: return 2 * k / 16;
    case DJ_TYPE_Q3_K: case DJ_TYPE_IQ2_XS: case DJ_TYPE_IQ2_S: case DJ_TYPE_NVFP4: return k / 16;
    case DJ_TYPE_Q1_0: case DJ_TYPE_Q2_0: case DJ_TYPE_IQ2_XXS: case DJ_TYPE_IQ3_XXS: case DJ_TYPE_IQ3_S:
    case DJ_TYPE_IQ4_XS: return k / 32;
    default: return k / dj_type_info(type)->blck;
    }
}

/* ---- 1. activation quantizers --------------------------------------------------------- */

static void test_act_quant(const struct dj_kernels *kt) {
    const int acts[] = {DJ_TYPE_F16, DJ_TYPE_Q8_0, DJ_TYPE_Q8_K, DJ_TYPE_BF16};
    const int64_t ks[] = {32, 256, 768, 4096};
    static float x[4096];
    static uint8_t y1[4096 * 2], y2[4096 * 2];
    struct trng r = {11};
    for (int ia = 0; ia < 4; ia++) {
        const int at = acts[ia];
        if (!kt->quantize_act[at]) continue; /* BF16: the avx512bf16 table only */
        int bad = 0, n = 0;
        for (int ik = 0; ik < 4; ik++) {
            const int64_t k = ks[ik];
            if (at == DJ_TYPE_Q8_K && k % 256) continue;
            for (int row = 0; row < 3 * TROW_MODES + 4; row++) {
                trng_row(&r, x, k, row % TROW_MODES, (float)exp((trng_unif(&r) - 0.5) * 10));
                if (row == 3 * TROW_MODES) memset(x, 0, sizeof x);
                if (row == 3 * TROW_MODES + 1) { /* equal magnitudes, opposite signs: first wins */
                    x[5] = -50.0f;
                    x[9] = 50.0f;
                }
                if (row == 3 * TROW_MODES + 2) { /* x * 127/amax lands on .5 exactly */
                    for (int64_t i = 0; i < k; i++) x[i] = (float)((int)(i % 255) - 127) + 0.5f;
                    for (int64_t i = 0; i < k; i += 32) x[i] = 127.0f;
                }
                if (row == 3 * TROW_MODES + 3) {
                    for (int64_t i = 0; i < k; i++) x[i] = (float)((i * 7) % 13) - 6.5f;
                    /* bf16 corner cases (its row only: q8 scales have no meaning for them): ties both ways, a subnormal (rounded, not flushed),
                     * a carry into the exponent, infinities, NaNs (quieted) */
                    const uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x00012345u, 0x807fffffu, 0x3fffffffu,
                                             0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u};
                    if (at == DJ_TYPE_BF16)
                        for (size_t j = 0; j < sizeof bits / sizeof bits[0]; j++) memcpy(&x[3 + j], &bits[j], 4);
                }
                memset(y1, 0x5a, sizeof y1);
                memset(y2, 0xa5, sizeof y2);
                kt->quantize_act[at](x, y1, k);
                CHECK(dj_ref_quantize_act((uint32_t)at, x, y2, k));
                n++;
                if (memcmp(y1, y2, row_bytes(at, k))) bad++;
            }
        }
        CHECKF(bad == 0, "%s: %s activation quantizer differs from the reference in %d of %d rows",
               kt->name, dj_type_name((uint32_t)at), bad, n);
    }
}

/* ---- 2. dequantizers ------------------------------------------------------------------ */

static void test_dequant(const struct dj_kernels *kt) {
    enum { K = 1024 };
    static float x[K], y1[K], y2[K];
    static uint8_t q[K * 4];
    struct trng r = {22};
    for (uint32_t type = 0; type < DJ_TYPE_COUNT; type++) {
        if (!kt->w[type].matmul) continue;
        int bad = 0;
        for (int row = 0; row < 2 * TROW_MODES; row++) {
            trng_row(&r, x, K, row % TROW_MODES, (float)exp((trng_unif(&r) - 0.5) * 10));
            weight_row(&r, type, x, q, K, row >= TROW_MODES);
            kt->w[type].dequantize_row(q, y1, K);
            CHECK(dj_ref_dequantize_row(type, q, y2, K));
            for (int i = 0; i < K; i++) bad += f32_bits(y1[i]) != f32_bits(y2[i]);
        }
        CHECKF(bad == 0, "%s: %s dequantizer differs from the reference in %d values", kt->name,
               dj_type_name(type), bad);
    }
}

/* ---- 3 and 4. dots and the batch-invariant matmul --------------------------------------- */

struct shape {
    int64_t k, n_rows, n_tok;
};

static void test_matmul_case(const struct dj_kernels *kt, uint32_t wtype, struct shape s, struct trng *r,
                             double *worst) {
    const struct dj_wtype_kernels *wk = &kt->w[wtype];
    const int at = wk->act_type;
    const int64_t k = s.k, nr = s.n_rows, nt = s.n_tok, ldc = nr + 5;
    const size_t wrb = row_bytes((int)wtype, k), arb = row_bytes(at, k);
    uint8_t *w = malloc(wrb * (size_t)nr), *a = malloc(arb * (size_t)nt);
    float *x = malloc(sizeof(float) * (size_t)k), *dots = malloc(sizeof(float) * (size_t)(nr * nt));
    float *c = malloc(sizeof(float) * (size_t)(nt * ldc));
    if (!w || !a || !x || !dots || !c) abort();

    for (int64_t i = 0; i < nr; i++) {
        trng_row(r, x, k, (int)(trng_next(r) % TROW_MODES), (float)exp((trng_unif(r) - 0.5) * 6));
        weight_row(r, wtype, x, w + (size_t)i * wrb, k, i % 3 == 2);
    }
    for (int64_t t = 0; t < nt; t++) {
        trng_row(r, x, k, t % 5 == 4 ? 2 : 0, (float)exp((trng_unif(r) - 0.5) * 6));
        kt->quantize_act[at](x, a + (size_t)t * arb, k);
    }

    /* 3. dot vs the exact reference */
    int bad = 0;
    for (int64_t i = 0; i < nr; i++) {
        for (int64_t t = 0; t < nt; t++) {
            const void *wi = w + (size_t)i * wrb, *at_ = a + (size_t)t * arb;
            const float d = wk->dot(k, wi, at_);
            double mag;
            const double ref = dj_ref_dot_act(wtype, (uint32_t)at, k, wi, at_, &mag);
            const double tol = 2.0 * (double)(n_roundings(wtype, k) + 16) * 0x1p-24 * mag + 1e-30;
            const double err = fabs((double)d - ref);
            if (!(err <= tol)) {
                if (bad++ < 3)
                    fprintf(stderr, "%s %s k=%lld row %lld tok %lld: dot %.9g ref %.9g (err %.3g, tol %.3g)\n",
                            kt->name, dj_type_name(wtype), (long long)k, (long long)i, (long long)t, d, ref,
                            err, tol);
            }
            if (mag > 0 && err / mag > *worst) *worst = err / mag;
            dots[i * nt + t] = d;
        }
    }
    CHECKF(bad == 0, "%s %s k=%lld: %d dots out of tolerance", kt->name, dj_type_name(wtype), (long long)k, bad);

    /* 4. matmul == dot, bitwise, whatever the batching and the row split */
    const float sentinel = -1234.5f;
    int mism = 0, touched = 0;
    const int64_t chunks[] = {0 /* whole batch */, 1, 2, 3, 5, 64};
    for (int ic = 0; ic < 6; ic++) {
        for (int64_t i = 0; i < nt * ldc; i++) c[i] = sentinel;
        /* up to 4 row ranges at random cut points */
        int64_t cuts[5] = {0, 0, 0, 0, nr};
        const int ncut = (int)(trng_next(r) % 4);
        for (int j = 1; j <= 3; j++) cuts[j] = j <= ncut ? (int64_t)(trng_next(r) % (uint64_t)(nr + 1)) : nr;
        for (int j = 1; j <= 3; j++) /* sort */
            for (int l = j; l > 0 && cuts[l] < cuts[l - 1]; l--) {
                const int64_t tmp = cuts[l];
                cuts[l] = cuts[l - 1];
                cuts[l - 1] = tmp;
            }
        const int64_t chunk = chunks[ic] ? chunks[ic] : nt;
        for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
            const int64_t n = t0 + chunk <= nt ? chunk : nt - t0;
            for (int j = 0; j < 4; j++)
                if (cuts[j + 1] > cuts[j])
                    wk->matmul(k, w, wrb, a + (size_t)t0 * arb, arb, c + t0 * ldc, ldc, cuts[j], cuts[j + 1], n);
        }
        for (int64_t t = 0; t < nt; t++) {
            for (int64_t i = 0; i < ldc; i++) {
                const float v = c[t * ldc + i];
                if (i >= nr) touched += f32_bits(v) != f32_bits(sentinel);
                else mism += f32_bits(v) != f32_bits(dots[i * nt + t]);
            }
        }
    }
    CHECKF(mism == 0, "%s %s k=%lld rows=%lld toks=%lld: %d matmul outputs differ from dot", kt->name,
           dj_type_name(wtype), (long long)k, (long long)nr, (long long)nt, mism);
    CHECKF(touched == 0, "%s %s: matmul wrote %d values outside its rows", kt->name, dj_type_name(wtype), touched);

    free(w);
    free(a);
    free(x);
    free(dots);
    free(c);
}

static void test_matmul(const struct dj_kernels *kt) {
    static const struct shape shapes[] = {{0, 1, 1}, {0, 3, 2}, {0, 5, 5}, {0, 17, 7}, {0, 37, 67}};
    struct trng r = {33};
    for (uint32_t wtype = 0; wtype < DJ_TYPE_COUNT; wtype++) {
        if (!kt->w[wtype].matmul) continue;
        const int64_t blck = dj_type_info(wtype)->blck;
        int64_t ks[6];
        int nk = 0;
        if (blck == 1) { /* any k: tails of every length, and multiples of 32 (the amx table's tiles) */
            const int64_t f[] = {1, 7, 33, 64, 1000, 1024};
            for (int i = 0; i < 6; i++) ks[nk++] = f[i];
        } else if (blck == 32) { /* odd and even numbers of blocks */
            const int64_t q[] = {32, 64, 96, 256, 800, 4096};
            for (int i = 0; i < 6; i++) ks[nk++] = q[i];
        } else {
            const int64_t q[] = {256, 512, 768, 2048};
            for (int i = 0; i < 4; i++) ks[nk++] = q[i];
        }
        double worst = 0;
        for (int ik = 0; ik < nk; ik++) {
            for (size_t is = 0; is < sizeof shapes / sizeof shapes[0]; is++) {
                struct shape s = shapes[is];
                s.k = ks[ik];
                if (s.k >= 2048 && s.n_tok > 7) s.n_tok = 9; /* keep the test quick */
                test_matmul_case(kt, wtype, s, &r, &worst);
            }
        }
        printf("%-12s %-7s worst |dot - ref| / mag = %.2e\n", kt->name, dj_type_name(wtype), worst);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("default table: %s\n", dj_kernels()->name);
    /* the default is the best table this CPU runs (unless DJ_ISA caps it) */
    int best = DJ_ISA_GENERIC;
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++)
        if (dj_kernels_for_isa((enum dj_isa)isa)) best = isa;
    if (!getenv("DJ_ISA")) CHECK(dj_kernels()->isa == (enum dj_isa)best);
    CHECK(dj_kernels_for_isa(DJ_ISA_GENERIC) != NULL);
    int n_tables = 0;
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *kt = dj_kernels_for_isa((enum dj_isa)isa);
        if (!kt) {
            printf("%s: not supported here, skipped\n", dj_isa_name((enum dj_isa)isa));
            continue;
        }
        n_tables++;
        CHECK(kt->isa == (enum dj_isa)isa);
        /* every table runs every type (the generic kernels at least); whatever has a matmul
         * has the rest of its entries, with the type's block size and activation pairing */
        for (int t = 0; t < NW; t++) CHECKF(kt->w[wtypes[t]].matmul, "%s: no %s kernels", kt->name, dj_type_name(wtypes[t]));
        for (uint32_t t = 0; t < DJ_TYPE_COUNT; t++) {
            const struct dj_wtype_kernels *wk = &kt->w[t];
            if (!wk->matmul) continue;
            /* the pairing: dj_kernels_act_type, or BF16 x BF16 in the avx512bf16 and amx tables */
            const bool pair_ok = wk->act_type == dj_kernels_act_type(t) ||
                                 (t == DJ_TYPE_BF16 && wk->act_type == DJ_TYPE_BF16 && kt->isa >= DJ_ISA_AVX512BF16);
            CHECKF(wk->dot && wk->dequantize_row && pair_ok && wk->act_type >= 0 && kt->quantize_act[wk->act_type],
                   "%s: %s entries incomplete", kt->name, dj_type_name(t));
            const struct dj_type_info *ti = dj_type_info(t);
            const int64_t ab = wk->act_type == DJ_TYPE_Q8_K ? DJ_QK_K : wk->act_type == DJ_TYPE_Q8_0 ? DJ_QK8_0 : 1;
            CHECKF(ti && ti->blck % ab == 0 && (ti->blck == 1) == (ab == 1),
                   "%s: %s blocks of %u, activation blocks of %lld", kt->name, dj_type_name(t), ti ? ti->blck : 0,
                   (long long)ab);
        }
        test_act_quant(kt);
        test_dequant(kt);
        test_matmul(kt);
    }
    CHECK(n_tables >= 1);
    TEST_END();
}

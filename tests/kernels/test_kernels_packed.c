/*
 * test_kernels_packed.c — repacked weights (kernels.h: pack, matmul_packed) for
 * every table and weight type that has them.
 *
 * Per (table, type, shape), on quantizer output and random raw blocks (any bits
 * in the values):
 *  1. pack of the whole matrix equals pack of its groups in two calls (the
 *     loader splits the work between threads);
 *  2. matmul_packed gives, for every element, exactly the bits of dot(W row r,
 *     A row t) and of matmul on the file's layout — the whole batch at once and
 *     the tokens in chunks of 1, 2, 3, 5 and 16, the rows split at random into up
 *     to 4 ranges (not on group boundaries); nothing outside [r0, r1) is written;
 *  3. the same with every kernel scratch allocation failing (the no-scratch path).
 * The shapes cover an odd number of blocks (q4_0/q8_0 pair their blocks), fewer
 * than 16 rows, a partial last group and 1..33 tokens (decode, small batches and
 * the prefill path), and rows past two prefill slabs.  On a CPU with AVX-512 the
 * avx512 and avx2 tables must pack q4_0, q8_0 and q4_K, every table from avx2 up q4_1,
 * q5_0, q5_1, iq4_nl and mxfp4, and the amx table bf16 (k = 32 and 320: its tiles; 3 and
 * 67: the vdpbf16ps path) (so the test cannot pass by finding nothing to test); the amx
 * table's q4_0 / q8_0 and 32-block types' batches of more than 16 tokens (AMX-INT8) must
 * equal the dot it keeps from the avx512 / avx2 table;
 * where both tables run, their q4_0, q8_0 and q4_K dots must agree bitwise (the same
 * scheme in 8 and 16 lanes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "kernels/kernels.h"
#include "kernels/kernels_testutil.h"
#include "kernels/ref/ref.h"
#include "test.h"

static const uint32_t wtypes[] = {DJ_TYPE_F32,  DJ_TYPE_F16,  DJ_TYPE_BF16, DJ_TYPE_Q8_0,   DJ_TYPE_Q4_0, DJ_TYPE_Q4_K,
                                  DJ_TYPE_Q6_K, DJ_TYPE_Q4_1, DJ_TYPE_Q5_0, DJ_TYPE_Q5_1, DJ_TYPE_IQ4_NL, DJ_TYPE_MXFP4};
enum { NW = sizeof wtypes / sizeof wtypes[0] };

static size_t row_bytes(int type, int64_t k) {
    size_t n = 0;
    if (type < 0 || !dj_row_bytes((uint32_t)type, k, &n)) abort();
    return n;
}
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Random bytes with sane f16 scales (values: any bits). */
static void random_raw_row(struct trng *r, uint32_t type, uint8_t *row, int64_t k) {
    const size_t n = row_bytes((int)type, k);
    for (size_t i = 0; i < n; i++) row[i] = (uint8_t)trng_next(r);
    const size_t bs = dj_type_info(type)->bytes;
    for (size_t o = 0; o < n; o += bs) {
        const float v = ldexpf(1.0f + (float)trng_unif(r), -4 - (int)(trng_next(r) % 9));
        uint16_t d = dj_f32_to_fp16(trng_next(r) & 1 ? -v : v), dmin = dj_f32_to_fp16(v);
        if (type == DJ_TYPE_Q4_K) { /* d, dmin first, positive as the quantizer makes them */
            d &= 0x7fff;
            memcpy(row + o, &d, 2);
            memcpy(row + o + 2, &dmin, 2);
        } else if (type == DJ_TYPE_Q6_K) {
            memcpy(row + o + bs - 2, &d, 2);
        } else if (type == DJ_TYPE_MXFP4) { /* E8M0 2^(e-127): 2^-12 .. 2^3, and the subnormal codes 0, 1 */
            row[o] = (uint8_t)(trng_next(r) % 8 == 0 ? trng_next(r) % 2 : 115 + trng_next(r) % 16);
        } else if (type == DJ_TYPE_Q4_1 || type == DJ_TYPE_Q5_1) { /* d, m */
            memcpy(row + o, &d, 2);
            memcpy(row + o + 2, &dmin, 2);
        } else {
            memcpy(row + o, &d, 2);
        }
    }
}

static void *aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) abort();
    return p;
}

static int case_packed(const struct dj_kernels *kt, uint32_t wtype, int64_t k, int64_t nr, int64_t nt,
                       struct trng *r) {
    const struct dj_wtype_kernels *wk = &kt->w[wtype];
    const int at = wk->act_type;
    const int64_t ldc = nr + 3, ng = (nr + 15) / 16;
    const size_t wrb = row_bytes((int)wtype, k), arb = row_bytes(at, k), pb = dj_packed_bytes(nr, wrb);
    uint8_t *w = malloc(wrb * (size_t)nr), *a = malloc(arb * (size_t)nt);
    uint8_t *p1 = aligned(pb), *p2 = aligned(pb);
    float *x = malloc(sizeof(float) * (size_t)k), *ref = malloc(sizeof(float) * (size_t)(nt * ldc));
    float *c = malloc(sizeof(float) * (size_t)(nt * ldc));
    if (!w || !a || !x || !ref || !c) abort();
    for (int64_t i = 0; i < nr; i++) {
        if (i % 3 == 2) {
            random_raw_row(r, wtype, w + (size_t)i * wrb, k);
        } else {
            trng_row(r, x, k, (int)(trng_next(r) % TROW_MODES), (float)exp((trng_unif(r) - 0.5) * 6));
            CHECK(dj_ref_quantize_row(wtype, x, w + (size_t)i * wrb, k));
        }
    }
    for (int64_t t = 0; t < nt; t++) {
        trng_row(r, x, k, t % 5 == 4 ? 2 : 0, (float)exp((trng_unif(r) - 0.5) * 6));
        kt->quantize_act[at](x, a + (size_t)t * arb, k);
    }
    /* 1. one call or two */
    memset(p1, 0xA5, pb);
    memset(p2, 0x5A, pb);
    wk->pack(k, w, wrb, nr, 0, ng, p1);
    const int64_t gs = (int64_t)(trng_next(r) % (uint64_t)(ng + 1));
    wk->pack(k, w, wrb, nr, gs, ng, p2);
    wk->pack(k, w, wrb, nr, 0, gs, p2);
    CHECKF(memcmp(p1, p2, pb) == 0, "%s %s k=%lld rows=%lld: pack in two calls differs", kt->name,
           dj_type_name(wtype), (long long)k, (long long)nr);

    /* the reference: dot per element, and matmul on the file's layout agrees with it */
    int mism_raw = 0;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t i = 0; i < nr; i++) ref[t * ldc + i] = wk->dot(k, w + (size_t)i * wrb, a + (size_t)t * arb);
    for (int64_t i = 0; i < nt * ldc; i++) c[i] = 0;
    wk->matmul(k, w, wrb, a, arb, c, ldc, 0, nr, nt);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t i = 0; i < nr; i++) mism_raw += f32_bits(c[t * ldc + i]) != f32_bits(ref[t * ldc + i]);
    CHECKF(mism_raw == 0, "%s %s: matmul differs from dot in %d outputs", kt->name, dj_type_name(wtype), mism_raw);
    /* q4_0 / q8_0 / q4_K: the AVX2 and AVX-512 tables run the same float operations on the
     * same exact block dots (kernels_avx2.c), so they agree bitwise */
    const struct dj_kernels *k512 = dj_kernels_for_isa(DJ_ISA_AVX512);
    if (kt->isa == DJ_ISA_AVX2 && k512 && (wtype == DJ_TYPE_Q8_0 || wtype == DJ_TYPE_Q4_0 || wtype == DJ_TYPE_Q4_K)) {
        int mism_isa = 0;
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < nr; i++)
                mism_isa += f32_bits(k512->w[wtype].dot(k, w + (size_t)i * wrb, a + (size_t)t * arb)) !=
                            f32_bits(ref[t * ldc + i]);
        CHECKF(mism_isa == 0, "%s: avx2 and avx512 differ in %d outputs", dj_type_name(wtype), mism_isa);
    }

    /* 2 and 3 */
    const float sentinel = -1234.5f;
    const int64_t chunks[] = {0 /* whole batch */, 1, 2, 3, 5, 16};
    int mism = 0, touched = 0;
    for (int fail = 0; fail < 2; fail++) {
        dj_kernel_scratch_fail_for_test(fail);
        for (int ic = 0; ic < 6; ic++) {
            for (int64_t i = 0; i < nt * ldc; i++) c[i] = sentinel;
            int64_t cuts[5] = {0, 0, 0, 0, nr};
            const int ncut = (int)(trng_next(r) % 4);
            for (int j = 1; j <= 3; j++) cuts[j] = j <= ncut ? (int64_t)(trng_next(r) % (uint64_t)(nr + 1)) : nr;
            for (int j = 1; j <= 3; j++)
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
                        wk->matmul_packed(k, p1, wrb, a + (size_t)t0 * arb, arb, c + t0 * ldc, ldc, cuts[j],
                                          cuts[j + 1], n);
            }
            for (int64_t t = 0; t < nt; t++)
                for (int64_t i = 0; i < ldc; i++) {
                    const float v = c[t * ldc + i];
                    if (i >= nr) touched += f32_bits(v) != f32_bits(sentinel);
                    else mism += f32_bits(v) != f32_bits(ref[t * ldc + i]);
                }
        }
    }
    dj_kernel_scratch_fail_for_test(0);
    CHECKF(mism == 0, "%s %s k=%lld rows=%lld toks=%lld: %d matmul_packed outputs differ from dot", kt->name,
           dj_type_name(wtype), (long long)k, (long long)nr, (long long)nt, mism);
    CHECKF(touched == 0, "%s %s: matmul_packed wrote %d values outside its rows", kt->name, dj_type_name(wtype),
           touched);
    free(w);
    free(a);
    free(p1);
    free(p2);
    free(x);
    free(ref);
    free(c);
    return 1;
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    struct trng r = {77};
    int n_cases = 0;
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *kt = dj_kernels_for_isa((enum dj_isa)isa);
        if (!kt) continue;
        if (isa == DJ_ISA_AMX) CHECK(kt->w[DJ_TYPE_BF16].pack != NULL);
        /* amx (with AMX-INT8): q4_0 / q8_0 prefill by TDPBSSD, on the avx512 table's packed layout and
         * with its dot: matmul_packed == dot above covers it for the 17 and 33 token cases */
        if (isa == DJ_ISA_AVX512)
            CHECK(kt->w[DJ_TYPE_Q8_0].pack && kt->w[DJ_TYPE_Q4_0].pack && kt->w[DJ_TYPE_Q4_K].pack);
        if (isa == DJ_ISA_AVX2)
            CHECK(kt->w[DJ_TYPE_Q8_0].pack && kt->w[DJ_TYPE_Q4_0].pack && kt->w[DJ_TYPE_Q4_K].pack);
        /* the 32-block types (quants32_avx2.c), which the tables above avx2 inherit */
        if (isa >= DJ_ISA_AVX2)
            CHECK(kt->w[DJ_TYPE_Q4_1].pack && kt->w[DJ_TYPE_Q5_0].pack && kt->w[DJ_TYPE_Q5_1].pack &&
                  kt->w[DJ_TYPE_IQ4_NL].pack && kt->w[DJ_TYPE_MXFP4].pack);
        /* amx with AMX-INT8 (its q4_0 kernel is not the avx512 table's): the 32-block types'
         * batches of more than 16 tokens by TDPBSSD too, checked below against the dot */
        const struct dj_kernels *k512t = dj_kernels_for_isa(DJ_ISA_AVX512);
        if (isa == DJ_ISA_AMX && k512t && kt->w[DJ_TYPE_Q4_0].matmul_packed != k512t->w[DJ_TYPE_Q4_0].matmul_packed) {
            const uint32_t t32[] = {DJ_TYPE_Q4_1, DJ_TYPE_Q5_0, DJ_TYPE_Q5_1, DJ_TYPE_IQ4_NL, DJ_TYPE_MXFP4};
            for (int i = 0; i < 5; i++)
                CHECKF(kt->w[t32[i]].matmul_packed != k512t->w[t32[i]].matmul_packed, "amx: %s has no AMX-INT8 kernel",
                       dj_type_name(t32[i]));
        }
        for (int t = 0; t < NW; t++) {
            const struct dj_wtype_kernels *wk = &kt->w[wtypes[t]];
            CHECK(!wk->pack == !wk->matmul_packed);
            if (!wk->pack) continue;
            /* the same pair of functions as a table below (inherited): tested there */
            int same = 0;
            for (int lo = 0; lo < isa; lo++) {
                const struct dj_kernels *kl = dj_kernels_for_isa((enum dj_isa)lo);
                same |= kl && kl->w[wtypes[t]].pack == wk->pack && kl->w[wtypes[t]].matmul_packed == wk->matmul_packed;
            }
            if (same) continue;
            const int64_t blck = dj_type_info(wtypes[t])->blck;
            /* blocks a row: 1, 3 (odd), 8, 67 (odd, past two prefill slabs of 32); for the
             * k-quants 1, 2, 3, 4 super-blocks */
            const int64_t nbs[] = {1, 3, 8, 67}, rows[] = {1, 5, 16, 17, 37, 64}, toks[] = {1, 2, 3, 8, 17, 33};
            /* float types (blocks of 1): also whole tiles of 32 and 64 (the amx table's BF16) */
            const int64_t fks[] = {3, 67, 32, 320};
            for (int ib = 0; ib < 4; ib++)
                for (int ir = 0; ir < 6; ir++)
                    for (int it = 0; it < 6; it++) {
                        const int64_t k = blck == 1 ? fks[ib] : blck * (blck == 256 ? ib + 1 : nbs[ib]);
                        n_cases += case_packed(kt, wtypes[t], k, rows[ir], toks[it], &r);
                    }
        }
    }
    printf("%d packed cases\n", n_cases);
    TEST_END();
}

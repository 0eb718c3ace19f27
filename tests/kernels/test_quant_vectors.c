/*
 * test_quant_vectors.c — deja's dequantizers against committed test vectors from two
 * independent implementations (tests/kernels/vectors/README.md): llama.cpp's own
 * ggml_get_type_traits(type)->to_float and, for every type it has, the gguf Python
 * package's numpy dequantizers; gen_vectors.py wrote a file only where they agree bit for
 * bit.  For every weight type with a block layout (F32/F16/BF16 aside):
 *
 *  1. the vector file exists, its block size and bytes equal deja's type table, and it
 *     names llama.cpp as a source — and gguf too, except for the four types gguf 0.17.1
 *     lacks (MXFP4, NVFP4, Q1_0, Q2_0);
 *  2. dj_ref_dequantize_row gives the file's floats bitwise;
 *  3. so does dequantize_row of every kernel table this CPU runs (generic, avx2, avx512);
 *  4. dj_ref_dot of the blocks with a seeded activation row equals the dot product of the
 *     file's floats with the dequantized activations, computed here in double: within
 *     2^-40 * mag where the weights are exact floats, and within 2^-24 * mag (+2^-40 * mag)
 *     for the types whose dequantizer rounds d*q - m (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K: the
 *     reference dot takes the unrounded value; each weight is off by at most half an
 *     ulp of |d*q| + |m|, and mag sums exactly those magnitudes times |a|).
 *
 * argv[1] (the shared folder) is not used: the vectors live in this repository
 * (DJ_SOURCE_DIR, set by CMakeLists.txt).
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

#ifndef DJ_SOURCE_DIR
#error "DJ_SOURCE_DIR must be defined (CMakeLists.txt)"
#endif

static const uint32_t types[] = {
    DJ_TYPE_Q4_0,  DJ_TYPE_Q4_1,   DJ_TYPE_Q5_0,   DJ_TYPE_Q5_1,    DJ_TYPE_Q8_0,   DJ_TYPE_Q2_K,  DJ_TYPE_Q3_K,
    DJ_TYPE_Q4_K,  DJ_TYPE_Q5_K,   DJ_TYPE_Q6_K,   DJ_TYPE_IQ2_XXS, DJ_TYPE_IQ2_XS, DJ_TYPE_IQ2_S, DJ_TYPE_IQ3_XXS,
    DJ_TYPE_IQ3_S, DJ_TYPE_IQ1_S,  DJ_TYPE_IQ1_M,  DJ_TYPE_IQ4_NL,  DJ_TYPE_IQ4_XS, DJ_TYPE_TQ1_0, DJ_TYPE_TQ2_0,
    DJ_TYPE_MXFP4, DJ_TYPE_NVFP4,  DJ_TYPE_Q1_0,   DJ_TYPE_Q2_0,
};

static uint32_t u32_at(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

struct vec {
    uint32_t n_blocks, sources;
    int64_t n;        /* elements */
    uint8_t *blocks;  /* n_blocks blocks */
    float *values;    /* n floats */
};

static bool load(uint32_t type, struct vec *v) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/kernels/vectors/%s.djqv", DJ_SOURCE_DIR, dj_type_name(type));
    size_t len = 0;
    uint8_t *f = (uint8_t *)test_read_file(path, &len);
    CHECKF(f != NULL, "%s: cannot read", path);
    if (!f) return false;
    const struct dj_type_info *ti = dj_type_info(type);
    bool ok = len >= 32 && memcmp(f, "DJQV", 4) == 0 && u32_at(f + 4) == 1 && u32_at(f + 8) == type;
    CHECKF(ok, "%s: not a version-1 vector file of type %u", path, type);
    if (ok) {
        v->n_blocks = u32_at(f + 12);
        v->sources = u32_at(f + 24);
        v->n = (int64_t)v->n_blocks * ti->blck;
        CHECKF(u32_at(f + 16) == ti->bytes && u32_at(f + 20) == ti->blck, "%s: block %u bytes / %u elements, deja: %u / %u",
               path, u32_at(f + 16), u32_at(f + 20), ti->bytes, ti->blck);
        const size_t nbytes = (size_t)v->n_blocks * ti->bytes;
        ok = u32_at(f + 16) == ti->bytes && u32_at(f + 20) == ti->blck && v->n_blocks > 0 &&
             len == 32 + nbytes + (size_t)v->n * sizeof(float);
        CHECKF(ok, "%s: %zu bytes, not the header's", path, len);
        if (ok) {
            v->blocks = malloc(nbytes);
            v->values = malloc((size_t)v->n * sizeof(float));
            if (!v->blocks || !v->values) abort();
            memcpy(v->blocks, f + 32, nbytes);
            memcpy(v->values, f + 32 + nbytes, (size_t)v->n * sizeof(float));
        }
    }
    free(f);
    return ok;
}

static int count_diff(const float *a, const float *b, int64_t n, int64_t *first) {
    int bad = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (f32_bits(a[i]) != f32_bits(b[i])) {
            if (*first < 0) *first = i;
            bad++;
        }
    return bad;
}

/* The weight types whose dequantizer rounds d*q - m (see the top). */
static bool rounds_min(uint32_t t) {
    return t == DJ_TYPE_Q4_1 || t == DJ_TYPE_Q5_1 || t == DJ_TYPE_Q2_K || t == DJ_TYPE_Q4_K || t == DJ_TYPE_Q5_K;
}

static void check_type(uint32_t type) {
    struct vec v = {0};
    if (!load(type, &v)) return;
    const char *name = dj_type_name(type);
    const bool gguf_has = !(type == DJ_TYPE_MXFP4 || type == DJ_TYPE_NVFP4 || type == DJ_TYPE_Q1_0 || type == DJ_TYPE_Q2_0);
    CHECKF((v.sources & 1) && (!gguf_has || (v.sources & 2)), "%s: sources 0x%x (1: llama.cpp, 2: gguf)", name, v.sources);

    float *y = malloc((size_t)v.n * sizeof(float));
    if (!y) abort();
    int64_t first;
    memset(y, 0xff, (size_t)v.n * sizeof(float));
    CHECKF(dj_ref_dequantize_row(type, v.blocks, y, v.n), "%s: no reference dequantizer", name);
    int bad = count_diff(y, v.values, v.n, &first);
    CHECKF(bad == 0, "%s: reference dequantizer differs in %d of %lld values (first #%lld: %.9g, expected %.9g)", name,
           bad, (long long)v.n, (long long)first, first >= 0 ? y[first] : 0.0, first >= 0 ? v.values[first] : 0.0);

    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *kt = dj_kernels_for_isa((enum dj_isa)isa);
        if (!kt) continue;
        CHECKF(kt->w[type].dequantize_row != NULL, "%s: %s has no dequantize_row", kt->name, name);
        if (!kt->w[type].dequantize_row) continue;
        memset(y, 0xff, (size_t)v.n * sizeof(float));
        kt->w[type].dequantize_row(v.blocks, y, v.n);
        bad = count_diff(y, v.values, v.n, &first);
        CHECKF(bad == 0, "%s: %s dequantize_row differs in %d of %lld values (first #%lld)", kt->name, name, bad,
               (long long)v.n, (long long)first);
    }

    /* 4. the reference dot against the vectors' floats */
    const int at = dj_kernels_act_type(type);
    const int64_t ab = at == DJ_TYPE_Q8_K ? DJ_QK_K : DJ_QK8_0;
    size_t arb = 0;
    CHECK(dj_row_bytes((uint32_t)at, v.n, &arb));
    uint8_t *a = malloc(arb);
    float *x = malloc((size_t)v.n * sizeof(float));
    if (!a || !x) abort();
    struct trng r = {777 + type};
    for (int rep = 0; rep < 4; rep++) {
        trng_row(&r, x, v.n, rep == 3 ? 2 : 0, 1.0f);
        CHECK(dj_ref_quantize_act((uint32_t)at, x, a, v.n));
        double want = 0;
        for (int64_t b = 0; b < v.n / ab; b++) {
            const int8_t *q;
            double d;
            if (at == DJ_TYPE_Q8_K) {
                const struct dj_block_q8_K *k8 = (const struct dj_block_q8_K *)a + b;
                q = k8->qs, d = k8->d;
            } else {
                const struct dj_block_q8_0 *k0 = (const struct dj_block_q8_0 *)a + b;
                q = k0->qs, d = dj_fp16_to_f32(k0->d);
            }
            for (int64_t j = 0; j < ab; j++) want += (double)v.values[b * ab + j] * (d * q[j]);
        }
        double mag = 0;
        const double got = dj_ref_dot(type, v.n, v.blocks, a, &mag);
        const double tol = ((rounds_min(type) ? 0x1p-24 : 0) + 0x1p-40) * mag;
        CHECKF(fabs(got - want) <= tol, "%s: dj_ref_dot %.17g, dot of the vectors' floats %.17g (tol %.3g)", name, got,
               want, tol);
    }
    printf("%-8s %4lld values: reference and kernel dequantizers equal llama.cpp%s\n", name, (long long)v.n,
           gguf_has ? " and gguf" : "");
    free(a);
    free(x);
    free(y);
    free(v.blocks);
    free(v.values);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) check_type(types[i]);
    TEST_END();
}

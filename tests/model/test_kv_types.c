/*
 * test_kv_types.c — K/V cache types other than f32 (-ctk/-ctv: f16, bf16, q8_0,
 * q4_0; kv/pool.h, forward.c).  The invariant tests (determinism, batched
 * sequences, scheduler, persistent store) run once per type under DJ_KV_TYPE
 * (CMakeLists.txt); this one checks what is particular to the types:
 *  - the type is in effect: codelm's logits with each type are not bitwise the
 *    f32 cache's, stay close to them (mean KL divergence and top-1 agreement over a
 *    prompt, bounds well above what was measured), and a K/V row of the cache holds
 *    the bytes of ggml's reference conversion of the f32 row;
 *  - K and V may differ (q8_0 K with f16 V) and still be exact run to run;
 *  - every kernel table's kv_rows_to_f32 (attention's tile conversion) is bitwise the
 *    reference dequantizer for every type;
 *  - the block size in memory is the type's (q8_0: 34 bytes per 32 elements);
 *  - a quantized type on a model whose head size is not a multiple of 32
 *    (stories260K: 8) and a type the cache cannot hold (q4_K) are refused with a
 *    message, by contexts and engines;
 *  - the persistent store's key covers the types: blocks written by an f16 engine
 *    are not restored by a q8_0 engine on the same directory (a miss, bitwise
 *    the cold q8_0 run), and are restored by another f16 engine.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "core/hash.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "model/context.h"
#include "test.h"
#include "test_engine.h"
#include "test_run.h"

static const char *prompt =
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n\n{\"name\": \"bash\", \"arguments\": {\"command\": "
    "\"ls -la /tmp\"}}\nclass Stack:\n    def __init__(self):\n        self.items = []\n";

static float *eval(const struct dj_model *m, const dj_token *t, size_t n, uint32_t tk, uint32_t tv,
                   struct dj_context **keep) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n;
    cp.n_threads = 2;
    cp.block_size = 16;
    cp.type_k = tk;
    cp.type_v = tv;
    struct dj_context *c = NULL;
    CHECKF(ctx_create(m, cp, &c) == DJ_OK, "%s", dj_last_error());
    if (!c) return NULL;
    float *out = malloc(n * m->hp.n_vocab * sizeof(float));
    CHECK(out && ctx_decode(c, t, n, out, true) == DJ_OK);
    if (keep) *keep = c;
    else ctx_free(c);
    return out;
}

/* mean over positions of KL(p_ref || p), and the fraction of positions with the same argmax */
static void compare(const float *ref, const float *x, size_t n, size_t V, double *kl, double *top1) {
    double sum = 0;
    size_t agree = 0;
    for (size_t i = 0; i < n; i++) {
        const float *a = ref + i * V, *b = x + i * V;
        double ma = -INFINITY, mb = -INFINITY;
        size_t ia = 0, ib = 0;
        for (size_t j = 0; j < V; j++) {
            if (a[j] > ma) ma = a[j], ia = j;
            if (b[j] > mb) mb = b[j], ib = j;
        }
        double za = 0, zb = 0;
        for (size_t j = 0; j < V; j++) za += exp(a[j] - ma), zb += exp(b[j] - mb);
        double k = 0;
        for (size_t j = 0; j < V; j++) {
            const double la = a[j] - ma - log(za), lb = b[j] - mb - log(zb);
            k += exp(la) * (la - lb);
        }
        sum += k;
        agree += ia == ib;
    }
    *kl = sum / (double)n;
    *top1 = (double)agree / (double)n;
}

static void test_types_in_effect(const struct dj_model *m) {
    dj_token *t = NULL;
    size_t n = 0;
    CHECK(vocab_tokenize(m->vocab, prompt, strlen(prompt), true, false, &t, &n) == DJ_OK && n > 64);
    const size_t V = m->hp.n_vocab, KV = (size_t)m->hp.n_head_kv * m->hp.head_dim;
    struct dj_context *c32 = NULL;
    float *ref = eval(m, t, n, DJ_TYPE_F32, DJ_TYPE_F32, &c32);
    /* the bounds: about 10x the KL measured on this prompt (printed below; f16 3.3e-8,
     * bf16 2.4e-6, q8_0 2.0e-5, q4_0 5.8e-3, q8_0/f16 1.5e-5; top-1 1.0 but q4_0's 0.97) */
    const struct { uint32_t k, v; double kl_max, top1_min; } ty[] = {
        {DJ_TYPE_F16, DJ_TYPE_F16, 5e-7, 0.99},   {DJ_TYPE_BF16, DJ_TYPE_BF16, 3e-5, 0.99},
        {DJ_TYPE_Q8_0, DJ_TYPE_Q8_0, 2e-4, 0.99}, {DJ_TYPE_Q4_0, DJ_TYPE_Q4_0, 6e-2, 0.9},
        {DJ_TYPE_Q8_0, DJ_TYPE_F16, 2e-4, 0.99},
    };
    for (size_t i = 0; i < sizeof ty / sizeof ty[0] && ref; i++) {
        const char *nk = dj_type_info(ty[i].k)->name, *nv = dj_type_info(ty[i].v)->name;
        struct dj_context *c = NULL;
        float *x = eval(m, t, n, ty[i].k, ty[i].v, &c);
        float *x2 = eval(m, t, n, ty[i].k, ty[i].v, NULL);
        if (!x || !x2 || !c) {
            free(x);
            free(x2);
            ctx_free(c);
            continue;
        }
        const size_t bytes = n * V * sizeof(float);
        CHECKF(memcmp(x, ref, bytes) != 0, "K %s V %s: logits bitwise the f32 cache's: the type is not used", nk, nv);
        CHECKF(memcmp(x, x2, bytes) == 0, "K %s V %s: two runs differ", nk, nv);
        double kl, top1;
        compare(ref, x, n, V, &kl, &top1);
        printf("K %-4s V %-4s: mean KL vs f32 cache %.3g, top-1 agreement %.3f over %zu positions\n", nk, nv, kl, top1,
               n);
        CHECKF(kl < ty[i].kl_max && top1 >= ty[i].top1_min, "K %s V %s: KL %.3g top-1 %.3f", nk, nv, kl, top1);
        /* a cached row is ggml's reference conversion of the f32 cache's row: layer 0's
         * K and V (computed from the same inputs in both) at a few positions */
        uint8_t want[4096];
        CHECK(kv_row_bytes(ty[i].k, KV) <= sizeof want && kv_row_bytes(ty[i].v, KV) <= sizeof want);
        for (size_t p = 0; p < n; p += 37) {
            CHECK(dj_ref_quantize_row(ty[i].k, kv_seq_k(c32->seq, 0, p, 16), want, (int64_t)KV));
            CHECKF(memcmp(kv_seq_k(c->seq, 0, p, 16), want, kv_row_bytes(ty[i].k, KV)) == 0, "K %s row %zu", nk, p);
            CHECK(dj_ref_quantize_row(ty[i].v, kv_seq_v(c32->seq, 0, p, 16), want, (int64_t)KV));
            CHECKF(memcmp(kv_seq_v(c->seq, 0, p, 16), want, kv_row_bytes(ty[i].v, KV)) == 0, "V %s row %zu", nv, p);
        }
        free(x);
        free(x2);
        ctx_free(c);
    }
    free(ref);
    ctx_free(c32);
    free(t);
}

static void test_refused(const struct dj_model *stories, const struct dj_model *codelm) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = 64;
    cp.type_k = DJ_TYPE_Q8_0;
    cp.type_v = DJ_TYPE_F16;
    struct dj_context *c = NULL;
    CHECK(ctx_create(stories, cp, &c) == DJ_ERR_UNSUPPORTED && !c);
    CHECKF(strstr(dj_last_error(), "q8_0") && strstr(dj_last_error(), "head"), "%s", dj_last_error());
    cp.type_k = DJ_TYPE_F16;
    cp.type_v = DJ_TYPE_Q4_K;
    CHECK(ctx_create(codelm, cp, &c) == DJ_ERR_UNSUPPORTED && !c);
    CHECKF(strstr(dj_last_error(), "q4_K"), "%s", dj_last_error());
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 64;
    ep.kv_type_k = DJ_TYPE_Q4_0;
    struct dj_engine *e = NULL;
    CHECK(engine_create(stories, &ep, &e) == DJ_ERR_UNSUPPORTED && !e);
    CHECKF(strstr(dj_last_error(), "q4_0") && strstr(dj_last_error(), "head size"), "%s", dj_last_error());
    CHECK(kv_type_parse("q8_0") == DJ_TYPE_Q8_0 && kv_type_parse("BF16") == DJ_TYPE_BF16);
    CHECK(kv_type_parse("q4_K") == -1 && kv_type_parse("") == -1 && kv_type_parse("f64") == -1);
}

/* Every kernel table's kv_rows_to_f32 is bitwise the reference dequantizer, row by row,
 * for every cache type, with rows strided as a block's head slices are. */
static void test_row_conversion(void) {
    enum { N = 64, ROWS = 5, STRIDE = 4 * N * 2 };
    static float x[ROWS][N], got[ROWS][N], want[ROWS][N];
    static uint8_t rows[ROWS][STRIDE];
    uint64_t r = 12345;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < N; j++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            x[i][j] = (float)((int64_t)(r >> 33) % 20001 - 10000) * (i == 3 ? 1e-6f : 3e-3f);
        }
    const uint32_t types[] = {DJ_TYPE_F32, DJ_TYPE_F16, DJ_TYPE_BF16, DJ_TYPE_Q8_0, DJ_TYPE_Q4_0};
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *k = dj_kernels_for_isa((enum dj_isa)isa);
        if (!k) continue;
        CHECKF(k->kv_rows_to_f32 != NULL, "%s: no kv_rows_to_f32", k->name);
        if (!k->kv_rows_to_f32) continue;
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            memset(rows, 0xA5, sizeof rows);
            for (int i = 0; i < ROWS; i++) {
                kv_row_from_f32(types[t], x[i], rows[i], N);
                CHECK(dj_ref_dequantize_row(types[t], rows[i], want[i], N));
            }
            k->kv_rows_to_f32(types[t], rows, STRIDE, ROWS, N, &got[0][0]);
            CHECKF(memcmp(got, want, sizeof got) == 0, "%s: %s rows differ from the reference", k->name,
                   dj_type_info(types[t])->name);
        }
    }
}

static dj_token T(size_t i) { return (dj_token)(3 + (i * 7919 + i / 5) % 500); }

/* One turn of 70 made-up tokens + 4 generated on a fresh engine of types (tk, tv),
 * persistent in dir if not NULL; returns the logits hash, *disk the positions
 * restored from disk. */
static uint64_t engine_run(const struct dj_model *m, uint32_t tk, uint32_t tv, const char *dir, size_t *disk,
                           size_t *block_bytes) {
    struct dj_engine_params p = engine_default_params();
    p.n_ctx = 256;
    p.n_threads = 2;
    p.opt.block_size = 16;
    p.kv_type_k = tk;
    p.kv_type_v = tv;
    p.opt.persist_enabled = dir != NULL;
    snprintf(p.opt.persist_dir, sizeof p.opt.persist_dir, "%s", dir ? dir : "");
    struct dj_engine *e = NULL;
    CHECKF(engine_create(m, &p, &e) == DJ_OK, "%s", dj_last_error());
    if (!e) return 0;
    struct kv_pool_stats ps;
    engine_pool_stats(e, &ps);
    if (block_bytes) *block_bytes = ps.block_bytes;
    struct dj_session *s;
    CHECK(engine_session_create(e, &s) == DJ_OK);
    dj_token pr[70];
    for (size_t i = 0; i < 70; i++) pr[i] = T(i);
    uint64_t h = DJ_FNV_OFFSET;
    struct dj_turn_result r = test_turn(e, s, pr, 70, 4, &h, NULL);
    *disk = r.n_reused_disk;
    engine_destroy(e); /* flushes the store's writes */
    return h;
}

static void test_store_key(const struct dj_model *m) {
    char dir[] = "/tmp/deja_test_kvtypes_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    size_t disk, bb;
    const uint64_t cold16 = engine_run(m, DJ_TYPE_F16, DJ_TYPE_F16, NULL, &disk, &bb);
    const uint64_t cold8 = engine_run(m, DJ_TYPE_Q8_0, DJ_TYPE_Q8_0, NULL, &disk, &bb);
    const size_t KV = (size_t)m->hp.n_head_kv * m->hp.head_dim;
    CHECKF(bb == 2 * (size_t)m->hp.n_layer * 16 * (KV / 32 * 34), "q8_0 block of %zu bytes", bb);
    CHECK(cold16 != cold8);
    CHECK(engine_run(m, DJ_TYPE_F16, DJ_TYPE_F16, dir, &disk, NULL) == cold16 && disk == 0);
    CHECK(engine_run(m, DJ_TYPE_Q8_0, DJ_TYPE_Q8_0, dir, &disk, NULL) == cold8);
    CHECKF(disk == 0, "a q8_0 engine restored %zu positions written by an f16 engine", disk);
    CHECK(engine_run(m, DJ_TYPE_F16, DJ_TYPE_F16, dir, &disk, NULL) == cold16);
    CHECKF(disk == 64, "an f16 engine restored %zu positions (64 expected)", disk);
    CHECK(engine_run(m, DJ_TYPE_Q8_0, DJ_TYPE_Q8_0, dir, &disk, NULL) == cold8 && disk == 64);
    char *out = NULL;
    run((char *const[]){"/bin/rm", "-rf", dir, NULL}, &out);
    free(out);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    struct dj_model *codelm = NULL, *stories = NULL;
    CHECKF(model_load(test_shared_path(argv[1], "models/codelm-15m-f16.gguf"), &codelm) == DJ_OK, "%s",
           dj_last_error());
    CHECKF(model_load(test_shared_path(argv[1], "models/stories260K.gguf"), &stories) == DJ_OK, "%s",
           dj_last_error());
    if (!codelm || !stories) return 1;
    test_row_conversion();
    test_types_in_effect(codelm);
    test_refused(stories, codelm);
    test_store_key(codelm);
    model_free(codelm);
    model_free(stories);
    TEST_END();
}

/*
 * test_rope_shift.c — RoPE position correction (model_rope_shift), the
 * building block of Tier-2 reuse after an edit: layer-0 K of a token computed
 * at position p and rotated by delta equals layer-0 K of the same token
 * computed at position p + delta, within 1e-5 (the bound), for normal
 * (llama: stories260K, codelm) and NeoX (a qwen2 synth model) RoPE, for
 * positive and negative shifts.  Layer 0's K depends only on the token and
 * its position, so the two sequences below give it for the same tokens at
 * shifted positions.
 */
#include <math.h>

#include "model/context.h"
#include "test.h"
#include "test_run.h"

static void check_model(const char *path, int64_t delta) {
    struct dj_model *m = NULL;
    CHECKF(model_load(path, &m) == DJ_OK, "%s", dj_last_error());
    if (!m) return;
    const char *text = "The quick brown fox jumps over the lazy dog while the cat sleeps";
    dj_token *toks = NULL;
    size_t n = 0;
    CHECK(vocab_tokenize(m->vocab, text, strlen(text), false, false, &toks, &n) == DJ_OK && n >= 8);
    /* A: the tokens at positions 0..n-1; B: delta filler tokens first, then the same tokens */
    dj_token *b = malloc((n + (size_t)delta) * sizeof *b);
    for (int64_t i = 0; i < delta; i++) b[i] = toks[(size_t)i % n];
    memcpy(b + delta, toks, n * sizeof *toks);
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)(n + (size_t)delta);
    struct dj_context *ca = NULL, *cb = NULL;
    CHECK(ctx_create(m, cp, &ca) == DJ_OK && ctx_create(m, cp, &cb) == DJ_OK);
    float *lg = malloc(m->hp.n_vocab * sizeof(float));
    CHECK(ctx_decode(ca, toks, n, lg, false) == DJ_OK);
    CHECK(ctx_decode(cb, b, n + (size_t)delta, lg, false) == DJ_OK);
    const int n_kv = (int)m->hp.n_head_kv;
    const size_t w = (size_t)n_kv * m->hp.head_dim;
    float *k = malloc(w * sizeof(float));
    double worst_fwd = 0, worst_back = 0, kmax = 0;
    for (size_t p = 0; p < n; p++) {
        const float *ka = kv_seq_k(ca->seq, 0, p, ca->block_size), *kb = kv_seq_k(cb->seq, 0, p + (size_t)delta, cb->block_size);
        memcpy(k, ka, w * sizeof(float));
        model_rope_shift(m, k, n_kv, delta); /* p -> p + delta */
        for (size_t i = 0; i < w; i++) {
            worst_fwd = fmax(worst_fwd, fabs((double)k[i] - kb[i]));
            kmax = fmax(kmax, fabs((double)kb[i]));
        }
        memcpy(k, kb, w * sizeof(float));
        model_rope_shift(m, k, n_kv, -delta); /* p + delta -> p */
        for (size_t i = 0; i < w; i++) worst_back = fmax(worst_back, fabs((double)k[i] - ka[i]));
    }
    CHECKF(worst_fwd <= 1e-5 && worst_back <= 1e-5, "%s delta %lld: max |diff| %.3g / %.3g (max |K| %.3g)", path,
           (long long)delta, worst_fwd, worst_back, kmax);
    printf("%s: shift by %+lld: max |K(p)->p+d - K(p+d)| = %.3g, back %.3g (max |K| %.3g)\n", path, (long long)delta,
           worst_fwd, worst_back, kmax);
    free(k);
    free(lg);
    free(b);
    free(toks);
    ctx_free(ca);
    ctx_free(cb);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    char dir[] = "/tmp/deja_test_rope_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    char qwen[512], *out = NULL;
    snprintf(qwen, sizeof qwen, "%s/qwen2-tiny.gguf", dir);
    CHECK(RUN(&out, "synth", "--arch", "qwen2", "--preset", "tiny", "--vocab-from",
              (char *)test_shared_path(argv[1], "vocab/ggml-vocab-deepseek-coder.gguf"), "-o", qwen) == 0);
    free(out);
    const int64_t deltas[] = {1, 3, 17, 64};
    for (size_t d = 0; d < sizeof deltas / sizeof deltas[0]; d++) {
        check_model(test_shared_path(argv[1], "models/stories260K.gguf"), deltas[d]);
        check_model(test_shared_path(argv[1], "models/codelm-15m-f16.gguf"), deltas[d]);
        check_model(qwen, deltas[d]);
    }
    run((char *const[]){"/bin/rm", "-rf", dir, NULL}, &out);
    free(out);
    TEST_END();
}

/*
 * test_determinism.c — DESIGN.md §3: the logits of every position of a prompt
 * are bitwise identical whether it is evaluated in one batch, token by token,
 * or in ubatches of 3, 7 and 64 tokens, with 1 or 2 threads — on every model
 * in ../shared/models.
 */
#include "model/context.h"
#include "test.h"

static float *eval(const struct dj_model *m, const dj_token *toks, size_t n, uint32_t ubatch, int threads) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n;
    cp.n_ubatch = ubatch;
    cp.n_threads = threads;
    struct dj_context *c = NULL;
    if (ctx_create(m, cp, &c) != DJ_OK) return NULL;
    float *out = malloc(n * m->hp.n_vocab * sizeof(float));
    if (ubatch == 1) { /* token by token through the decode path */
        for (size_t i = 0; i < n; i++)
            if (ctx_decode(c, toks + i, 1, out + i * m->hp.n_vocab, false) != DJ_OK) { free(out); out = NULL; break; }
    } else if (ctx_decode(c, toks, n, out, true) != DJ_OK) {
        free(out);
        out = NULL;
    }
    ctx_free(c);
    return out;
}

static const char *prompt =
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n\nOnce upon a time, there was a little dog named Max. "
    "{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la /tmp\"}}";

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *models[] = {"models/stories260K.gguf", "models/aidreams260K.gguf", "models/codelm-15m-f16.gguf"};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        struct dj_model *m = NULL;
        CHECKF(model_load(test_shared_path(argv[1], models[mi]), &m) == DJ_OK, "%s", dj_last_error());
        if (!m) continue;
        dj_token *toks = NULL;
        size_t n = 0;
        CHECK(vocab_tokenize(m->vocab, prompt, strlen(prompt), true, false, &toks, &n) == DJ_OK);
        CHECK(n > 64);
        const size_t bytes = n * m->hp.n_vocab * sizeof(float);
        float *base = eval(m, toks, n, (uint32_t)n, 1);
        CHECK(base != NULL);
        struct { uint32_t ub; int th; } cfg[] = {{1, 1}, {3, 1}, {7, 2}, {64, 1}, {64, 2}, {(uint32_t)n, 2}};
        for (size_t k = 0; k < sizeof cfg / sizeof cfg[0] && base; k++) {
            float *o = eval(m, toks, n, cfg[k].ub, cfg[k].th);
            CHECKF(o && !memcmp(o, base, bytes), "%s: ubatch %u threads %d differs from one batch", models[mi],
                   cfg[k].ub, cfg[k].th);
            free(o);
        }
        printf("%s: %zu tokens, 6 batch/thread configurations bitwise equal to one batch\n", models[mi], n);
        free(base);
        free(toks);
        model_free(m);
    }
    TEST_END();
}

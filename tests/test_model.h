/*
 * test_model.h — running a model for the invariant tests: every logits row of a
 * token sequence evaluated in one fresh context with a given ubatch, thread
 * count and KV block size (ubatch 1: token by token through the decode path).
 */
#ifndef DJ_TEST_MODEL_H
#define DJ_TEST_MODEL_H

#include <stdlib.h>

#include "model/context.h"

/* The device the contexts made here (and by test_moe.h's check_model) run on: 0 the CPU, N
 * Vulkan device N - 1 (a test's GPU mode sets it from DJ_TEST_GPU, test_gpu.h). */
static uint32_t test_ctx_gpu;

/* n * n_vocab floats (malloc'd), or NULL on failure.  block_size 0: the default.  K and V
 * cache type kv_type (enum dj_ggml_type). */
static inline float *test_eval_logits_kv(const struct dj_model *m, const dj_token *toks, size_t n, uint32_t ubatch,
                                         int threads, uint32_t block_size, uint32_t kv_type) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.type_k = cp.type_v = kv_type;
    cp.n_ctx = (uint32_t)n;
    cp.n_ubatch = ubatch;
    cp.n_threads = threads;
    cp.gpu = test_ctx_gpu;
    if (block_size) cp.block_size = block_size;
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

/* The same in the default K/V type (kv_type_default: DJ_KV_TYPE). */
static inline float *test_eval_logits(const struct dj_model *m, const dj_token *toks, size_t n, uint32_t ubatch,
                                      int threads, uint32_t block_size) {
    return test_eval_logits_kv(m, toks, n, ubatch, threads, block_size, kv_type_default());
}

#endif

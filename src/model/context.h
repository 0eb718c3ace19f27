/*
 * context.h — an inference context over a loaded model: KV cache, scratch
 * buffers, thread pool, and ctx_decode, the forward pass over a batch.
 *
 * KV cache (this issue: contiguous per sequence; the paged cache replaces it
 * behind kv_k_row/kv_v_row):
 *
 *   k: [n_layer][n_ctx][n_kv_head * head_dim]  float32
 *   v: [n_layer][n_ctx][n_kv_head * head_dim]  float32
 *   positions 0 .. n_pos-1 are filled; decode appends at n_pos.
 *
 * Determinism (DESIGN.md §3): a token's logits depend only on the tokens and
 * their positions, never on how they were split into ubatches or threads:
 * matrix products give each output element one fixed reduction order,
 * threads split output rows, attention visits keys in position order.
 */
#ifndef DJ_MODEL_CONTEXT_H
#define DJ_MODEL_CONTEXT_H

#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "model/model.h"

struct dj_ctx_params {
    uint32_t n_ctx;    /* 0 = the model's training context */
    uint32_t n_ubatch; /* tokens per forward step; 0 = 512 */
    int n_threads;     /* 0 = 1 */
};

struct dj_ctx_params ctx_default_params(void);

struct dj_kv_cache {
    uint32_t n_layer, n_ctx, n_embd_kv;
    uint32_t n_pos;  /* filled positions */
    float *k, *v;    /* see the picture above */
};

static inline float *kv_k_row(const struct dj_kv_cache *kv, uint32_t il, uint32_t pos) {
    return kv->k + ((size_t)il * kv->n_ctx + pos) * kv->n_embd_kv;
}
static inline float *kv_v_row(const struct dj_kv_cache *kv, uint32_t il, uint32_t pos) {
    return kv->v + ((size_t)il * kv->n_ctx + pos) * kv->n_embd_kv;
}

struct dj_context {
    const struct dj_model *model;
    struct dj_ctx_params p;
    struct dj_kv_cache kv;
    struct dj_threadpool *pool;
    /* scratch for one ubatch of up to n_ubatch tokens */
    float *x;      /* (ub, n_embd) residual stream */
    float *xn;     /* (ub, max(n_embd, n_head*hd)) normed input / attention output */
    float *q;      /* (ub, n_head*hd) */
    float *k;      /* (ub, n_kv*hd) */
    float *v;      /* (ub, n_kv*hd) */
    float *att;    /* (ub, n_head*hd) */
    float *ff_g;   /* (ub, n_ff) */
    float *ff_u;   /* (ub, n_ff) */
    float *scores; /* (n_threads, n_ctx) attention scores per thread */
    void *act;     /* (ub, act row bytes) activations converted for the kernels */
    size_t wrow_stride; /* the largest K (row length) of any weight */
    const struct dj_kernels *kern; /* the CPU's kernel table, chosen once */
};

enum dj_status ctx_create(const struct dj_model *m, struct dj_ctx_params p, struct dj_context **out);
void ctx_free(struct dj_context *c); /* accepts NULL */
void ctx_reset(struct dj_context *c); /* forget the KV cache */
/* Truncates the cache to its first n_pos positions (n_pos <= current). */
void ctx_truncate(struct dj_context *c, uint32_t n_pos);

/* Evaluates n tokens at positions kv.n_pos .. kv.n_pos+n-1, in ubatches.
 * logits: NULL, or room for n_vocab floats (all_logits false: the last token's
 * logits) or n * n_vocab floats (all_logits true: every token's, in order).
 * Fails (DJ_ERR_INVALID) if the cache would overflow or a token is out of range. */
enum dj_status ctx_decode(struct dj_context *c, const dj_token *toks, size_t n, float *logits, bool all_logits);

/* One matrix product y = W x for n_tok activation rows, on the context's pool:
 * y[t][r] = dot(W row r, x row t).  Exposed for tests. */
void ctx_matmul(struct dj_context *c, const struct dj_weight *w, const float *x, int64_t n_tok, float *y);

#endif

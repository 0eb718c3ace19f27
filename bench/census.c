/*
 * census.c — the Phase-5 census (spec §5.1 activation dedup, §5.2 no-op elision,
 * §5.3 algebraic rewriting; issue 33 item 6): what an exact implementation could
 * skip on a real model and a real agent prompt, counted, not assumed.
 *
 * usage: bench_census MODEL TRACE [N_TOKENS=2048] [UBATCH=512] [THREADS=2]
 *
 * The prompt is the trace's last turn (its first N_TOKENS tokens), run through the
 * model once in ubatches with ctx.census set (model/context.h): the forward pass
 * counts, bitwise,
 *   - layer inputs equal to an earlier row of the same ubatch (the only activation
 *     duplicates a batch-invariant engine could reuse; across turns deja reuses K/V);
 *   - attention and FFN branch outputs that are all zero (an add of 0), activated FFN
 *     gate elements that are exactly 0 (a column of the down projection to skip),
 *     softmax rows with a weight of exactly 1 (a one-hot attention row);
 * and from the weights (no forward pass):
 *   - norm vectors that are all exactly 1 (a multiply by 1), bias vectors all 0;
 *   - matrix rows all exactly zero, rows equal to another row of the matrix (raw bytes);
 *   - attention heads whose q / k / v slices equal another head's of the same layer.
 * Prints one JSON object.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/status.h"
#include "engine/trace.h"
#include "model/context.h"
#include "tokenizer/tokenizer.h"

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Units of `bytes` bytes (rows or head slices) at p, n of them: how many are equal to another
 * unit (hash, then bytes compared); *zero: how many are all zero bytes... of f32/f16/bf16 rows
 * only (a quantized row of zeros has scale 0, which is also all-zero bytes there). */
static uint64_t dup_units(const uint8_t *p, size_t n, size_t bytes, uint64_t *zero) {
    uint64_t *h = malloc(n * 2 * sizeof *h);
    if (!h) return 0;
    uint64_t z = 0;
    for (size_t i = 0; i < n; i++) {
        h[2 * i] = dj_fnv1a(DJ_FNV_OFFSET, p + i * bytes, bytes);
        h[2 * i + 1] = i;
        size_t k = 0;
        while (k < bytes && p[i * bytes + k] == 0) k++;
        z += k == bytes;
    }
    qsort(h, n, 2 * sizeof *h, cmp_u64); /* by hash (pairs compare by their first word) */
    uint64_t d = 0;
    for (size_t i = 1; i < n; i++)
        if (h[2 * i] == h[2 * (i - 1)] &&
            memcmp(p + h[2 * i + 1] * bytes, p + h[2 * (i - 1) + 1] * bytes, bytes) == 0)
            d++;
    free(h);
    if (zero) *zero += z;
    return d;
}

struct wcensus {
    uint64_t mats, rows, zero_rows, dup_rows;
    uint64_t heads, dup_heads;
    uint64_t norms, norms_one, biases, biases_zero;
};

static void matrix(struct wcensus *w, const struct dj_weight *x) {
    if (!x->data || x->ne1 < 1) return;
    w->mats++;
    w->rows += (uint64_t)x->ne1;
    w->dup_rows += dup_units(x->data, (size_t)x->ne1, x->row_bytes, &w->zero_rows);
}

static void heads(struct wcensus *w, const struct dj_weight *x, int64_t hd) {
    if (!x->data || hd < 1 || x->ne1 % hd) return;
    const size_t n = (size_t)(x->ne1 / hd);
    w->heads += n;
    w->dup_heads += dup_units(x->data, n, x->row_bytes * (size_t)hd, NULL);
}

static void vec(uint64_t *n, uint64_t *hit, const struct dj_weight *x, float want) {
    if (!x->data || x->type != DJ_TYPE_F32) return;
    const float *f = x->data;
    int64_t i = 0;
    while (i < x->ne0 * (x->ne1 ? x->ne1 : 1) && f[i] == want) i++;
    (*n)++;
    *hit += i == x->ne0 * (x->ne1 ? x->ne1 : 1);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL TRACE [N_TOKENS=2048] [UBATCH=512] [THREADS=2]\n", argv[0]);
        return 2;
    }
    const size_t want = argc > 3 ? (size_t)atol(argv[3]) : 2048;
    const uint32_t ub = argc > 4 ? (uint32_t)atoi(argv[4]) : 512;
    const int threads = argc > 5 ? atoi(argv[5]) : 2;
    struct dj_model *m = NULL;
    struct trace *tr = NULL;
    if (model_load(argv[1], &m) != DJ_OK || trace_open(argv[2], &tr) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    bool done = false;
    char *last = NULL;
    size_t last_len = 0;
    while (trace_next(tr, &done) == DJ_OK && !done) {
        free(last);
        last = malloc(tr->prompt_len + 1);
        if (!last) return 1;
        memcpy(last, tr->prompt, tr->prompt_len + 1);
        last_len = tr->prompt_len;
    }
    dj_token *tok = NULL;
    size_t n = 0;
    if (!last || vocab_tokenize(m->vocab, last, last_len, true, true, &tok, &n) != DJ_OK) {
        fprintf(stderr, "no prompt: %s\n", dj_last_error());
        return 1;
    }
    if (n > want) n = want;
    const struct dj_hparams *hp = &m->hp;

    /* weights */
    struct wcensus w = {0};
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct dj_layer *L = &m->layers[il];
        const struct dj_weight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) matrix(&w, mats[i]);
        heads(&w, &L->wq, hp->head_dim);
        heads(&w, &L->wk, hp->head_dim);
        heads(&w, &L->wv, hp->head_dim);
        const struct dj_weight *norms[] = {&L->attn_norm, &L->ffn_norm, &L->q_norm, &L->k_norm, &L->attn_post_norm,
                                           &L->ffn_post_norm};
        for (size_t i = 0; i < sizeof norms / sizeof *norms; i++) vec(&w.norms, &w.norms_one, norms[i], 1.0f);
        const struct dj_weight *bias[] = {&L->bq, &L->bk, &L->bv, &L->bo};
        for (size_t i = 0; i < sizeof bias / sizeof *bias; i++) vec(&w.biases, &w.biases_zero, bias[i], 0.0f);
    }
    matrix(&w, &m->output);

    /* activations */
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n + 16;
    cp.n_ubatch = ub;
    cp.n_threads = threads;
    struct dj_context *c = NULL;
    if (ctx_create(m, cp, &c) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    struct ctx_census cs;
    memset(&cs, 0, sizeof cs);
    c->census = &cs;
    if (ctx_decode(c, tok, n, NULL, false) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    uint64_t tok_dup = 0; /* the same token earlier in its ubatch: layer 0's duplicates */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i - i % ub; j < i; j++)
            if (tok[j] == tok[i]) {
                tok_dup++;
                break;
            }
    printf("{\"model\": \"%s\", \"arch\": \"%s\", \"trace\": \"%s\", \"tokens\": %zu, \"ubatch\": %u, "
           "\"layer0_rows\": %" PRIu64 ", \"layer0_dup_rows\": %" PRIu64 ", \"layer0_dup_tokens\": %" PRIu64
           ", \"deeper_rows\": %" PRIu64 ", \"deeper_dup_rows\": %" PRIu64 ", \"attn_rows\": %" PRIu64
           ", \"attn_zero_rows\": %" PRIu64 ", \"ffn_rows\": %" PRIu64 ", \"ffn_zero_rows\": %" PRIu64
           ", \"ffn_act_elems\": %" PRIu64 ", \"ffn_act_zero\": %" PRIu64 ", \"softmax_rows\": %" PRIu64
           ", \"softmax_onehot\": %" PRIu64 ", \"matrices\": %" PRIu64 ", \"matrix_rows\": %" PRIu64
           ", \"zero_rows\": %" PRIu64 ", \"dup_rows\": %" PRIu64 ", \"qkv_heads\": %" PRIu64
           ", \"dup_heads\": %" PRIu64 ", \"norms\": %" PRIu64 ", \"norms_all_one\": %" PRIu64 ", \"biases\": %" PRIu64
           ", \"biases_all_zero\": %" PRIu64 "}\n",
           argv[1], m->arch_name, argv[2], n, ub, cs.rows[0], cs.dup_rows[0], tok_dup, cs.rows[1], cs.dup_rows[1],
           cs.attn_rows, cs.attn_zero_rows, cs.ffn_rows, cs.ffn_zero_rows, cs.act_elems, cs.act_zero,
           (uint64_t)cs.sm_rows, (uint64_t)cs.sm_onehot, w.mats, w.rows, w.zero_rows, w.dup_rows, w.heads,
           w.dup_heads, w.norms, w.norms_one, w.biases, w.biases_zero);
    c->census = NULL;
    ctx_free(c);
    free(tok);
    free(last);
    trace_close(tr);
    model_free(m);
    return 0;
}

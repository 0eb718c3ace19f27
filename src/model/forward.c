/*
 * forward.c — the decoder forward pass shared by llama, qwen2, qwen3 and qwen3moe, and
 * the inference context (KV cache, scratch, thread pool).
 *
 * Per ubatch of n tokens at positions p0 .. p0+n-1:
 *
 *   x = tok_embd[tok]                                   (n, n_embd)
 *   for each layer:
 *     xn = rmsnorm(x) * attn_norm
 *     q, k, v = Wq xn (+bq), Wk xn (+bk), Wv xn (+bv)    qwen3: per-head rmsnorm of q, k
 *     rope(q, k) at their positions; k, v → KV cache
 *     att = softmax(q K^T / sqrt(hd)) V over positions 0..p (causal, GQA)
 *     x += Wo att
 *     xn = rmsnorm(x) * ffn_norm
 *     x += W_down (silu(W_gate xn) * W_up xn)          MoE: the weighted sum of the
 *                                                   chosen experts' (moe_ffn)
 *   logits = W_out (rmsnorm(x) * output_norm)           (only the rows asked for)
 *
 * gemma2/3 (model/gemma.c has their equations) add, each as a model or layer field: the
 * embedding scale, post-norms of the attention and FFN outputs, pre-scaled queries and
 * soft-capped scores and logits, a GELU gate (ggml's f16 table), and per layer a sliding
 * window (dj_layer.n_swa: attn_task reads only the blocks the window touches) and a
 * second rope setting (dj_layer.rope_local).
 *
 * Every per-token computation reads only that token's row and the KV cache,
 * with a fixed order of operations, so results are independent of how the
 * prompt is split into ubatches and of the thread count (DESIGN.md §3). *
 * Early exit and resume (self-speculative drafts sharing the K/V): a pass may
 * stop after layer n_exit (ctx_forward_exit: the norm and output matrix then
 * read that layer's residual stream), and a token may start at a later layer
 * from a saved residual stream (dj_batch.start_layer/hidden).  The ubatch's
 * rows are then sorted by start layer, so each layer runs the same code on a
 * prefix of rows; by the same per-row independence the bits do not change.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kv/attn_prune.h"
#include "model/context.h"
#include "model/forward_gpu.h"
#include "model/route.h"
#include "opt/opt.h"

struct dj_ctx_params ctx_default_params(void) {
    const struct llama_opt_config opt = llama_opt_config_default(); /* the build's precompute default */
    struct dj_ctx_params p = {.n_ctx = 0, .n_ubatch = 512, .n_threads = 1, .block_size = 64, .pool = NULL,
                              .type_k = kv_type_default(), .type_v = kv_type_default(),
                              .rope_table_max = opt.precompute_enabled ? opt.precompute_rope_max : 0};
    return p;
}

/* ---- scalar building blocks ---------------------------------------------- */

/* RMS norm as ggml computes it: sum of squares in double, scale in float. */
static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

/* ---- matrix product ------------------------------------------------------
 * y = W x through the kernel table (src/kernels): the activation rows are
 * first converted to the weight type's activation type (per row, so a token's
 * activations never depend on the rest of the batch), then the threads take
 * chunks of output rows from the pool's share counter (threadpool.h).  The
 * kernels guarantee every element equals the single dot product of its
 * (row, token) pair, whatever the tile, range or thread.
 */

struct act_job {
    dj_quantize_fn q;
    const float *x;
    int64_t K, n_tok;
    size_t a_row;
    uint8_t *out; /* n_tok rows of a_row bytes */
};

static void act_task(void *arg, int ith, int nth) {
    const struct act_job *j = arg;
    long t0, t1;
    threadpool_split((long)j->n_tok, 1, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) j->q(j->x + t * j->K, j->out + (size_t)t * j->a_row, j->K);
}

/* Converts n rows of K floats at x to activation type `act_type` into `out` (rows of
 * *a_row bytes); F32 is used in place (returns x). */
static const void *ctx_act(struct dj_context *c, int act_type, const float *x, int64_t K, int64_t n, void *out,
                           size_t *a_row) {
    if (act_type == DJ_TYPE_F32) {
        *a_row = (size_t)K * sizeof(float);
        return x;
    }
    *a_row = dj_kernels_act_row_bytes(act_type, K);
    struct act_job aj = {c->kern->quantize_act[act_type], x, K, n, *a_row, out};
    if (n == 1) act_task(&aj, 0, 1); /* one row: not worth waking the pool */
    else threadpool_run(c->tpool, act_task, &aj);
    return out;
}

struct mm_job {
    const struct dj_kernels *kern;
    const struct dj_weight *const *w; /* n_w weights with the same K and activation type */
    float *const *y;
    int n_w;
    const void *a;
    size_t a_row;
    int64_t n_tok;
    long chunk_rows; /* rows a share, a multiple of 16 */
    int chunks[3];   /* shares of each weight (n_w <= 3) */
};

/* Share i of the job: the i-th chunk of chunk_rows output rows, counting the
 * weights' chunks one after the other.  Chunks are multiples of 16 rows (of the
 * 4-row tiles; 6-row tiles end each chunk with a shorter one — results do not
 * depend on the tiling or on which thread takes a chunk). */
static void mm_task(void *arg, int ith, int nth) {
    const struct mm_job *j = arg;
    int i = 0;
    while (ith >= j->chunks[i]) ith -= j->chunks[i++];
    const struct dj_weight *w = j->w[i];
    const long r0 = ith * j->chunk_rows, r1 = r0 + j->chunk_rows < (long)w->ne1 ? r0 + j->chunk_rows : (long)w->ne1;
    if (w->packed)
        j->kern->w[w->type].matmul_packed(w->ne0, w->packed, w->row_bytes, j->a, j->a_row, j->y[i], w->ne1, r0, r1,
                                          j->n_tok);
    else
        j->kern->w[w->type].matmul(w->ne0, w->data, w->row_bytes, j->a, j->a_row, j->y[i], w->ne1, r0, r1, j->n_tok);
    (void)nth;
}

/* Chunks a thread, on average, of a matmul.  Decode: 8, so that a thread the
 * scheduler put aside leaves its part to the others in small pieces (codelm -t 2
 * under one busy process: see docs/BENCHMARKS.md).  Prefill: 1, the calls of the
 * old fixed split — the AVX-512 kernels convert the tokens' activations again in
 * every call — and a prefill job is long next to a scheduler slice anyway (codelm
 * pp512 under one busy process: 1,437-1,930 t/s with 2 chunks a thread, base
 * 1,504-1,810). */
enum { MM_CHUNKS_DECODE = 8, MM_CHUNKS_PREFILL = 1 };
/* ... but no chunk under 64 KiB of weights (a few us of GEMV) unless that leaves
 * a thread without one: each chunk costs a claim on a contended cache line. */
#define MM_CHUNK_MIN_BYTES ((size_t)64 << 10)

/* Products of several weights with the same input (Q/K/V, gate/up): when they
 * share K and the activation type, the input is converted once and one pool
 * run computes them all (fewer synchronizations per layer). */
static void ctx_matmul_n(struct dj_context *c, const struct dj_weight *const *ws, float *const *ys, int n_w,
                         const float *x, int64_t n_tok) {
    const int act_type = c->kern->w[ws[0]->type].act_type;
    for (int i = 1; i < n_w; i++)
        if (c->kern->w[ws[i]->type].act_type != act_type || ws[i]->ne0 != ws[0]->ne0) {
            for (int k = 0; k < n_w; k++) ctx_matmul(c, ws[k], x, n_tok, ys[k]);
            return;
        }
    for (int i = 0; i < n_w; i++)
        DJ_ASSERT(ws[i]->packed ? c->kern->w[ws[i]->type].matmul_packed != NULL : c->kern->w[ws[i]->type].matmul != NULL);
    DJ_ASSERT(n_tok <= (int64_t)c->p.n_ubatch);
    const int64_t K = ws[0]->ne0;
    size_t a_row;
    const void *a = ctx_act(c, act_type, x, K, n_tok, c->act, &a_row);
    struct mm_job j = {c->kern, ws, ys, n_w, a, a_row, n_tok, 0, {0}};
    DJ_ASSERT(n_w <= 3);
    const int nth = threadpool_n_threads(c->tpool);
    long blocks = 0; /* of 16 rows */
    for (int i = 0; i < n_w; i++) blocks += (long)(ws[i]->ne1 + 15) / 16;
    const long target = (long)nth * (n_tok <= 2 /* the kernels' GEMV path */ ? MM_CHUNKS_DECODE : MM_CHUNKS_PREFILL);
    long per = nth == 1 ? blocks : (blocks + target - 1) / target;
    const long min_blocks = (long)(MM_CHUNK_MIN_BYTES / (16 * ws[0]->row_bytes)); /* the others have as many elements a row */
    if (per < min_blocks) per = min_blocks < (blocks + nth - 1) / nth ? min_blocks : (blocks + nth - 1) / nth;
    j.chunk_rows = 16 * per;
    int n_chunks = 0;
    for (int i = 0; i < n_w; i++) n_chunks += j.chunks[i] = (int)((ws[i]->ne1 + j.chunk_rows - 1) / j.chunk_rows);
    threadpool_run_n(c->tpool, mm_task, &j, n_chunks);
}

void ctx_matmul(struct dj_context *c, const struct dj_weight *w, const float *x, int64_t n_tok, float *y) {
    ctx_matmul_n(c, &w, &y, 1, x, n_tok);
}

/* Several products with their own inputs in one pool run (an MoE layer's experts,
 * each over the tokens that chose it): weight i times the n_tok[i] activation rows
 * at a[i] (already converted to its activation type, a_row bytes apart) into y[i].
 * Chunks of output rows never straddle two weights; as in ctx_matmul_n, every
 * element is the one dot product of its (row, token) pair. */
struct mmg_job {
    const struct dj_kernels *kern;
    const struct dj_weight *w;
    float *const *y;
    const void *const *a;
    const int64_t *n_tok;
    const int *first; /* first[i]: the share index of weight i's first chunk; first[n_w]: the total */
    int n_w;
    size_t a_row;
    long chunk_rows;
};

static void mmg_task(void *arg, int ith, int nth) {
    const struct mmg_job *j = arg;
    int lo = 0, hi = j->n_w - 1; /* the weight whose chunks hold share ith */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (j->first[mid] <= ith) lo = mid;
        else hi = mid - 1;
    }
    const struct dj_weight *w = &j->w[lo];
    const long r0 = (ith - j->first[lo]) * j->chunk_rows,
               r1 = r0 + j->chunk_rows < (long)w->ne1 ? r0 + j->chunk_rows : (long)w->ne1;
    if (w->packed)
        j->kern->w[w->type].matmul_packed(w->ne0, w->packed, w->row_bytes, j->a[lo], j->a_row, j->y[lo], w->ne1, r0, r1,
                                          j->n_tok[lo]);
    else
        j->kern->w[w->type].matmul(w->ne0, w->data, w->row_bytes, j->a[lo], j->a_row, j->y[lo], w->ne1, r0, r1,
                                   j->n_tok[lo]);
    (void)nth;
}

static void ctx_matmul_grouped(struct dj_context *c, int n_w, const struct dj_weight *ws, const void *const *a,
                               size_t a_row, const int64_t *n_tok, float *const *ys, int *first) {
    const int nth = threadpool_n_threads(c->tpool);
    long blocks = 0, max_tok = 0; /* of 16 rows */
    for (int i = 0; i < n_w; i++) {
        blocks += (long)(ws[i].ne1 + 15) / 16;
        if (n_tok[i] > max_tok) max_tok = (long)n_tok[i];
        DJ_ASSERT(ws[i].packed ? c->kern->w[ws[i].type].matmul_packed != NULL : c->kern->w[ws[i].type].matmul != NULL);
    }
    const long target = (long)nth * (max_tok <= 2 ? MM_CHUNKS_DECODE : MM_CHUNKS_PREFILL);
    long per = nth == 1 ? blocks : (blocks + target - 1) / target;
    const long min_blocks = (long)(MM_CHUNK_MIN_BYTES / (16 * ws[0].row_bytes));
    if (per < min_blocks) per = min_blocks < (blocks + nth - 1) / nth ? min_blocks : (blocks + nth - 1) / nth;
    if (per < 1) per = 1;
    struct mmg_job j = {c->kern, ws, ys, a, n_tok, first, n_w, a_row, 16 * per};
    first[0] = 0;
    for (int i = 0; i < n_w; i++) first[i + 1] = first[i] + (int)((ws[i].ne1 + j.chunk_rows - 1) / j.chunk_rows);
    threadpool_run_n(c->tpool, mmg_task, &j, first[n_w]);
}

/* ---- RoPE ------------------------------------------------------------------ */

/* cos and sin of the n_rot/2 rotation angles at `pos`, as ggml computes them:
 * theta_i = pos * base^(-2i/n_rot) (by repeated multiplication in float),
 * divided by a per-pair frequency factor if the model has rope_freqs, times
 * the linear scale.  The one place this arithmetic lives: the precomputed
 * table (rope_row) and the on-the-fly path both call it, so a table entry is
 * bitwise the value the on-the-fly path computes (tests/model/test_precompute.c).
 * local: the second setting (dj_layer.rope_local); mag: YaRN's magnitude on cos and sin. */
static void rope_cos_sin_mag(const struct dj_model *m, float pos, bool local, float *cs, float *sn, bool mag) {
    const struct dj_hparams *hp = &m->hp;
    const int n_rot = (int)hp->n_rot;
    if (local) { /* the second setting (dj_layer.rope_local): its base and linear scale, nothing else */
        const float theta_scale = powf(hp->rope_base_local, -2.0f / (float)n_rot);
        float theta = pos;
        for (int i = 0; i < n_rot / 2; i++) {
            const float t = hp->rope_scale_local * theta;
            cs[i] = cosf(t);
            sn[i] = sinf(t);
            theta *= theta_scale;
        }
        return;
    }
    const float theta_scale = powf(hp->rope_freq_base, -2.0f / (float)n_rot);
    const float *ff = (const float *)m->rope_freqs.data;
    float theta = pos;
    if (hp->rope_yarn) { /* ggml rope_yarn, ext_factor 1; cos/sin times yarn_mscale (1 for deepseek2) */
        const float inv = 1.0f / hp->rope_factor;
        for (int i = 0; i < n_rot / 2; i++) {
            const float y = ((float)i - hp->yarn_low) / fmaxf(0.001f, hp->yarn_high - hp->yarn_low);
            const float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            const float extrap = ff ? theta / ff[i] : theta, interp = inv * extrap;
            const float t = interp * (1.0f - ramp) + extrap * ramp;
            cs[i] = cosf(t);
            sn[i] = sinf(t);
            if (mag && hp->yarn_mscale != 1.0f) { /* ggml: cos and sin times mscale */
                cs[i] *= hp->yarn_mscale;
                sn[i] *= hp->yarn_mscale;
            }
            theta *= theta_scale;
        }
        return;
    }
    for (int i = 0; i < n_rot / 2; i++) {
        float t = hp->rope_linear_scale * (ff ? theta / ff[i] : theta);
        cs[i] = cosf(t);
        sn[i] = sinf(t);
        theta *= theta_scale;
    }
}

/* The rope of the forward pass: with YaRN's magnitude (rope_cos_sin_mag without it is a
 * pure rotation: model_rope_shift_layer's, which moves a row already scaled once). */
static void rope_cos_sin(const struct dj_model *m, float pos, bool local, float *cs, float *sn) {
    rope_cos_sin_mag(m, pos, local, cs, sn, true);
}

/* Rotates the first n_rot dims of each of n_heads heads of one token by the
 * angles whose cos and sin are cs[0 .. n_rot/2) and cs[n_rot/2 .. n_rot). */
static void rope_rotate(const struct dj_model *m, float *x, int n_heads, const float *cs) {
    const struct dj_hparams *hp = &m->hp;
    const int n_rot = (int)hp->n_rot, hd = (int)hp->head_dim;
    const float *sn = cs + n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int i = 0; i < n_rot / 2; i++) {
            int a = hp->rope_type == DJ_ROPE_NEOX ? i : 2 * i;
            int b = hp->rope_type == DJ_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * cs[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

/* RoPE of one token at `pos`, computed on the fly (local: the second setting). */
static void rope(const struct dj_model *m, float *x, int n_heads, float pos, bool local) {
    float cs[512]; /* n_rot/2 <= 256, checked at context creation */
    rope_cos_sin(m, pos, local, cs, cs + m->hp.n_rot / 2);
    rope_rotate(m, x, n_heads, cs);
}

/* The cos/sin row of position pos (rope_rotate's cs; local: of the second rope setting,
 * hp.rope_local) from the context's table
 * (spec §2.2 precomputation), filling the table up to pos first if needed;
 * NULL when pos is not below the table's capacity (rope_cap; 0 when
 * precomputation is off) or growing the table failed: the caller then
 * computes on the fly.  The table only grows (doubling, up to rope_cap
 * positions) and is never invalidated: its values depend on the model alone.
 * Called by the forward pass's thread only. */
static const float *rope_row(struct dj_context *c, uint32_t pos, bool local) {
    const struct dj_model *m = c->model;
    const size_t n_rot = m->hp.n_rot, w = m->hp.rope_local ? 2 * n_rot : n_rot; /* a row: [main | local] */
    if (pos >= c->rope_cap) return NULL;
    if (pos >= c->rope_n) {
        if (pos >= c->rope_n_alloc) {
            uint64_t n_alloc = c->rope_n_alloc ? 2 * (uint64_t)c->rope_n_alloc : 1024;
            if (n_alloc < (uint64_t)pos + 1) n_alloc = (uint64_t)pos + 1;
            if (n_alloc > c->rope_cap) n_alloc = c->rope_cap;
            /* n_alloc < 2^32 rows of n_rot <= 512 floats: no overflow in size_t */
            float *tab = realloc(c->rope_tab, (size_t)n_alloc * w * sizeof(float));
            if (!tab) return NULL;
            c->rope_tab = tab;
            c->rope_n_alloc = (uint32_t)n_alloc;
        }
        for (uint32_t p = c->rope_n; p <= pos; p++) {
            float *row = c->rope_tab + (size_t)p * w;
            rope_cos_sin(m, (float)p, false, row, row + n_rot / 2);
            if (m->hp.rope_local) rope_cos_sin(m, (float)p, true, row + n_rot, row + n_rot + n_rot / 2);
        }
        c->rope_n = pos + 1;
    }
    DJ_ASSERT(!local || m->hp.rope_local);
    return c->rope_tab + (size_t)pos * w + (local ? n_rot : 0);
}

void model_rope_shift_layer(const struct dj_model *m, uint32_t il, float *k, int n_heads, int64_t delta) {
    /* R(p + delta) = R(delta) R(p): rotating by delta moves a K row from p to p + delta;
     * delta may be negative or past any table: always on the fly.  MLA: the rope part is the
     * row's tail [kv_lora, kv_lora + rope) of its one head.  A layer with the second rope
     * setting (gemma's sliding layers) rotates with its base. */
    DJ_ASSERT(il < m->hp.n_layer);
    const bool local = m->layers[il].rope_local && !m->hp.mla;
    float cs[512];
    rope_cos_sin_mag(m, (float)delta, local, cs, cs + m->hp.n_rot / 2, false); /* a rotation: no YaRN magnitude */
    if (m->hp.mla) rope_rotate(m, k + m->hp.kv_lora, 1, cs);
    else rope_rotate(m, k, n_heads, cs);
}

void model_rope_shift(const struct dj_model *m, float *k, int n_heads, int64_t delta) {
    model_rope_shift_layer(m, 0, k, n_heads, delta);
}

/* ---- K/V rows in the cache's type ------------------------------------------------ */

void kv_row_from_f32(uint32_t type, const float *x, void *y, size_t n) {
    if (type == DJ_TYPE_F32) memcpy(y, x, n * sizeof(float));
    else dj_ref_quantize_row(type, x, y, (int64_t)n);
}

void kv_row_to_f32(uint32_t type, const void *x, float *y, size_t n) {
    if (type == DJ_TYPE_F32) memcpy(y, x, n * sizeof(float));
    else dj_ref_dequantize_row(type, x, y, (int64_t)n);
}

/* Rows [0, n) of head hk of one block's K (or V) of a type other than f32, as floats
 * in dst ([n][hd]): the table's converter, bitwise the reference one. */
static void kv_tile_to_f32(const struct dj_context *c, uint32_t type, const uint8_t *rows, size_t row_bytes,
                           size_t head_bytes, int hk, int64_t n, float *dst) {
    c->kern->kv_rows_to_f32(type, rows + (size_t)hk * head_bytes, row_bytes, n, c->model->hp.head_dim, dst);
}

/* ---- attention --------------------------------------------------------------- */

struct attn_job {
    struct dj_context *c;
    uint32_t il;                     /* the model layer (its window, sinks) */
    uint32_t kv_il;                  /* its pool layer (dj_layer.kv_il) */
    const uint32_t *pos;             /* position of each token of the ubatch */
    struct kv_seq *const *seq;       /* sequence of each token */
    const struct ctx_att_tile *tiles; /* runs of tokens of one sequence, positions increasing */
    int64_t n_tiles;
};

enum { ATT_TILE_MAX = 8, ATT_ROWS = 64 }; /* tokens per item; rows per attn_values_n call */

/* One (tile of up to att_tile consecutive tokens of the ubatch of one sequence, with
 * increasing positions; ubatch_tiles cuts them; KV head) per work item: the tile's queries of the GQA group are scored and summed together block by
 * block, so each block of K and V rows is read from memory once for the tile and then
 * served from L1 to its other queries (codelm at 4,096 positions streamed every K/V
 * row from L3 once per token before).  Items are dealt to threads in turn (i, i + nth,
 * ...), which balances the causal triangle.  Per query head the arithmetic is the
 * same whoever runs it and whatever else is in the batch or the tile: scores block by
 * block in position order (a score depends on its key alone), the kernel table's
 * softmax over the row, values block by block in position order (DESIGN.md §3). */
/* Score row of query head g of the item's i-th token: sc holds (tile, group) rows of n_ctx. */
static inline float *att_scores_row(float *sc, int64_t i, int g, int group, size_t n_ctx) {
    return sc + ((size_t)i * (size_t)group + (size_t)g) * n_ctx;
}

/* The value rows of one K/V block: rows of the tile's queries that end at the same
 * place in the block go in one attn_values_n call (n_keys grows with t, so they are
 * consecutive), up to ATT_ROWS; shared by the GQA and MLA paths. */
struct vrows {
    const struct dj_kernels *kern;
    int64_t dim;
    const float *vb;
    size_t vstride;
    bool acc; /* add to the output rows (not the first block) */
    const float *wr[ATT_ROWS];
    float *orow[ATT_ROWS];
    int nr;
    int64_t nb;
};

static void vrows_flush(struct vrows *v) {
    if (v->nr) v->kern->attn_values_n(v->dim, v->nr, v->wr, v->vb, v->vstride, v->nb, v->orow, v->acc);
    v->nr = 0;
}

static void vrows_add(struct vrows *v, int64_t nb, const float *w, float *o) {
    if (v->nr && (nb != v->nb || v->nr == ATT_ROWS)) vrows_flush(v);
    v->nb = nb;
    v->wr[v->nr] = w;
    v->orow[v->nr++] = o;
}

/* vrows_add for a row whose keys start inside the block (a sliding window's first block:
 * V rows from vb, acc per row): rows join a call only with the same start and acc. */
static void vrows_add_at(struct vrows *v, const float *vb, bool acc, int64_t nb, const float *w, float *o) {
    if (v->nr && (vb != v->vb || acc != v->acc)) vrows_flush(v);
    v->vb = vb;
    v->acc = acc;
    vrows_add(v, nb, w, o);
}

/* The first key position a query at pos sees through a window of n_swa keys (0: none):
 * llama.cpp's standard SWA masks key p0 when pos - p0 >= n_swa (llama_hparams::is_masked_swa),
 * so the keys are (pos - n_swa, pos]. */
static inline int64_t swa_first_key(uint32_t pos, uint32_t n_swa) {
    return n_swa && (int64_t)pos + 1 > (int64_t)n_swa ? (int64_t)pos + 1 - (int64_t)n_swa : 0;
}

/* Soft-capping of n scores (gemma2's attention): s = cap tanh(s / cap), as llama.cpp's
 * graph (scale by 1/cap, tanh, scale by cap). */
static void softcap_row(float *s, int64_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) s[i] = tanhf(s[i] * inv) * cap;
}

/* Attention statistics (kv/attn_prune.h): each block's share of the softmax row w added
 * to acc[block][h] in fixed point.  With skip, w holds the attention set only (the
 * skipped blocks' weights are not in the row: see attn_task); n: the row's length.
 * A block's sum runs in 8 lanes, combined in a fixed order. */
static void attn_mass_add(_Atomic uint64_t *acc, const struct kv_attn *a, bool skip, const float *w, int64_t n,
                          size_t h) {
    const int64_t bs = (int64_t)a->block_size;
    for (int64_t o = 0, b = 0; o < n; b++) {
        if (skip && kv_attn_skipped(a, (size_t)b)) continue;
        const int64_t e = o + bs < n ? o + bs : n;
        float l[8] = {0};
        int64_t p = o;
        for (; p + 8 <= e; p += 8)
            for (int k = 0; k < 8; k++) l[k] += w[p + k];
        for (int k = 0; p < e; p++, k++) l[k] += w[p];
        const float m = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
        if (m > 0.0f) /* not NaN either (a NaN key row: statistics skip it) */
            atomic_fetch_add_explicit(&acc[(size_t)b * a->n_head + h], (uint64_t)((double)m * KV_ATTN_ONE + 0.5),
                                      memory_order_relaxed);
        o = e;
    }
}

static void attn_task(void *arg, int ith, int nth) {
    const struct attn_job *j = arg;
    struct dj_context *c = j->c;
    const struct dj_hparams *hp = &c->model->hp;
    const int hd = (int)hp->head_dim, n_head = (int)hp->n_head, n_kv = (int)hp->n_head_kv, group = n_head / n_kv;
    /* gemma: the queries were scaled before (llama.cpp's f_attention_scale), the scores are not */
    const float scale = hp->attn_q_scale != 0 ? 1.0f : 1.0f / sqrtf((float)hd), cap = hp->attn_softcap;
    const uint32_t n_swa = c->model->layers[j->il].n_swa; /* 0: every key up to the query */
    const size_t stride = c->n_embd_kv, bs = c->block_size, n_ctx = c->p.n_ctx;
    const int64_t tile = c->att_tile;
    const float *sinks = c->model->layers[j->il].attn_sinks.data; /* gpt-oss: (n_head), else NULL */
    float *sc = c->scores + (size_t)ith * (size_t)tile * (size_t)group * n_ctx; /* (tile, group) rows of n_ctx */
    float *kt = c->kvt ? c->kvt + (size_t)ith * 2 * bs * (size_t)hd : NULL, *vt = kt ? kt + bs * (size_t)hd : NULL;
    float *pr = c->att_probe + (size_t)ith * (size_t)group * n_ctx; /* (group) rows: the probe's every score */
    const long n_items = (long)j->n_tiles * n_kv;
    for (long item = ith; item < n_items; item += nth) {
        const int64_t t0 = j->tiles[item / n_kv].t0, t1 = j->tiles[item / n_kv].t1;
        const uint32_t *table = j->seq[t0]->table; /* every token of a tile is of one sequence */
        const int hk = (int)(item % n_kv);
        const int64_t max_keys = (int64_t)j->pos[t1 - 1] + 1; /* positions increase */
        /* a sliding window: blocks before the first one the tile's earliest window touches
         * are not read; each query's keys start at its own first key (lo) */
        const int64_t p_first = swa_first_key(j->pos[t0], n_swa) / (int64_t)bs * (int64_t)bs;
        /* Tier 2 (kv/attn_prune.h), layers without a window: statistics and the skip set.  A
         * skipped block is a full one before every query of the sequence; score rows hold the
         * attention set only (block p0's scores at p0 - bs * (skipped blocks before it)), so
         * the softmax and the values never see the skipped keys.  The probe query also scores
         * every block into pr (full positions) for its statistics. */
        struct kv_attn *A = n_swa == 0 ? j->seq[t0]->attn : NULL;
        const bool any_skip = A && A->n_skip;
        const size_t probe = A ? A->probe_pos : KV_ATTN_NO_PROBE;
        int64_t t_probe = -1;
        for (int64_t t = t0; A && t < t1; t++)
            if (j->pos[t] == probe) t_probe = t;
        int64_t first_kept = p_first; /* the first block values are read from */
        while (any_skip && first_kept < max_keys && kv_attn_skipped(A, (size_t)(first_kept / (int64_t)bs)))
            first_kept += (int64_t)bs;
        int64_t gap = 0; /* positions skipped before p0 */
        for (int64_t p0 = p_first; p0 < max_keys; p0 += (int64_t)bs) { /* block by block, in position order */
            const bool bskip = any_skip && kv_attn_skipped(A, (size_t)(p0 / (int64_t)bs));
            if (bskip && t_probe < 0) {
                gap += (int64_t)bs;
                continue;
            }
            const uint8_t *kraw = kv_pool_k(c->pool, table[p0 / (int64_t)bs], j->kv_il);
            const float *kb = (const float *)kraw + (size_t)hk * hd;
            size_t kstride = stride;
            if (c->p.type_k != DJ_TYPE_F32) { /* the block's rows of this head as floats, then as f32 */
                const int64_t nr = max_keys - p0 < (int64_t)bs ? max_keys - p0 : (int64_t)bs;
                kv_tile_to_f32(c, c->p.type_k, kraw, kv_pool_k_row_bytes(c->pool), c->k_head, hk, nr, kt);
                kb = kt;
                kstride = (size_t)hd;
            }
            for (int64_t t = bskip ? t_probe : t0; t < (bskip ? t_probe + 1 : t1); t++) {
                const int64_t n_keys = (int64_t)j->pos[t] + 1, lo = swa_first_key(j->pos[t], n_swa);
                if (p0 >= n_keys || p0 + (int64_t)bs <= lo) continue;
                const int64_t nb = n_keys - p0 < (int64_t)bs ? n_keys - p0 : (int64_t)bs;
                const int64_t off = lo > p0 ? lo - p0 : 0; /* keys of the block before the window */
                const float *q = c->q + (size_t)t * n_head * hd + (size_t)hk * group * hd; /* the group's first head */
                for (int g = 0; g < group; g++) {
                    float *row = bskip ? pr + (size_t)g * n_ctx + p0 : att_scores_row(sc, t - t0, g, group, n_ctx) + p0 - gap + off;
                    c->kern->attn_scores(hd, q + (size_t)g * hd, kb + (size_t)off * kstride, kstride, nb - off, scale,
                                         row);
                    if (cap != 0) softcap_row(row, nb - off, cap);
                    if (t == t_probe && !bskip) memcpy(pr + (size_t)g * n_ctx + p0, row, (size_t)nb * sizeof *row);
                }
            }
            if (bskip) gap += (int64_t)bs;
        }
        const int64_t n_gap = gap; /* every query's: the skipped blocks are before all of them */
        for (int64_t t = t0; t < t1; t++) {
            const int64_t lo = swa_first_key(j->pos[t], n_swa), n = (int64_t)j->pos[t] + 1 - lo;
            for (int g = 0; g < group; g++) {
                float *row = att_scores_row(sc, t - t0, g, group, n_ctx) + lo;
                const float sink = sinks ? sinks[hk * group + g] : -INFINITY;
                const size_t h = (size_t)hk * group + (size_t)g;
                if (t == t_probe) { /* every block's share of the probe's attention */
                    c->kern->attn_softmax(pr + (size_t)g * n_ctx, n, sink);
                    attn_mass_add(A->probe, A, false, pr + (size_t)g * n_ctx, n, h);
                }
                c->kern->attn_softmax(row, n - n_gap, sink);
                if (A) attn_mass_add(A->mass, A, any_skip, row, n - n_gap, h);
                if (c->census) {
                    bool one = false;
                    for (int64_t i = 0; i < n - n_gap && !one; i++) one = row[i] == 1.0f;
                    atomic_fetch_add_explicit(&c->census->sm_rows, 1, memory_order_relaxed);
                    atomic_fetch_add_explicit(&c->census->sm_onehot, one, memory_order_relaxed);
                }
            }
        }
        gap = 0;
        for (int64_t p0 = p_first; p0 < max_keys; p0 += (int64_t)bs) {
            if (any_skip && kv_attn_skipped(A, (size_t)(p0 / (int64_t)bs))) {
                gap += (int64_t)bs;
                continue;
            }
            const uint8_t *vraw = kv_pool_v(c->pool, table[p0 / (int64_t)bs], j->kv_il);
            const float *vb = (const float *)vraw + (size_t)hk * hd;
            size_t vstride = stride;
            if (c->p.type_v != DJ_TYPE_F32) {
                const int64_t n_rows = max_keys - p0 < (int64_t)bs ? max_keys - p0 : (int64_t)bs;
                kv_tile_to_f32(c, c->p.type_v, vraw, kv_pool_v_row_bytes(c->pool), c->v_head, hk, n_rows, vt);
                vb = vt;
                vstride = (size_t)hd;
            }
            struct vrows vr = {c->kern, hd, vb, vstride, p0 > 0, {0}, {0}, 0, 0};
            for (int64_t t = t0; t < t1; t++) {
                const int64_t n_keys = (int64_t)j->pos[t] + 1, lo = swa_first_key(j->pos[t], n_swa);
                if (p0 >= n_keys || p0 + (int64_t)bs <= lo) continue;
                const int64_t nb = n_keys - p0 < (int64_t)bs ? n_keys - p0 : (int64_t)bs;
                const int64_t off = lo > p0 ? lo - p0 : 0;
                /* without a window: off 0 and acc p0 > 0, the calls of full attention */
                for (int g = 0; g < group; g++)
                    vrows_add_at(&vr, vb + (size_t)off * vstride, p0 > lo && p0 > first_kept, nb - off,
                                 att_scores_row(sc, t - t0, g, group, n_ctx) + p0 - gap + off,
                                 c->att + (size_t)t * n_head * hd + ((size_t)hk * group + (size_t)g) * hd);
            }
            vrows_flush(&vr);
        }
    }
}

/* ---- the decoder ------------------------------------------------------------- */

static void add_bias(float *y, const struct dj_weight *b, int64_t n_tok, int64_t n) {
    if (!b->data) return;
    const float *bv = b->data;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n; i++) y[t * n + i] += bv[i];
}

/* gemma's post-norms: each of n rows of E floats -> rms(row) * w, in place; none without w. */
static void post_norm(float *x, const struct dj_weight *w, int64_t n, int64_t E, float eps) {
    if (!w->data) return;
    for (int64_t t = 0; t < n; t++) rmsnorm(x + t * E, x + t * E, w->data, E, eps);
}

/* mistral3's llama4-style temperature scaling of one token's query row (model.h,
 * mistral3.c): llama.cpp's llm_graph_input_attn_temp, the floor in float, the log in
 * double, one float scale multiplied in. */
float ctx_attn_temp(const struct dj_hparams *hp, uint32_t pos) {
    const float fl = floorf((float)pos / (float)hp->attn_temp_floor);
    return (float)(log((double)fl + 1.0) * (double)hp->attn_temp_scale + 1.0);
}

static void attn_temp(const struct dj_hparams *hp, float *q, int64_t n, uint32_t pos) {
    const float s = ctx_attn_temp(hp, pos);
    for (int64_t i = 0; i < n; i++) q[i] *= s;
}

static void head_norm(float *x, const struct dj_weight *w, int64_t n_tok, int n_heads, int hd, float eps) {
    if (!w->data) return;
    for (int64_t t = 0; t < n_tok; t++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * hd;
            rmsnorm(v, v, w->data, hd, eps);
        }
}

static void embed_row(const struct dj_context *c, const struct dj_weight *w, dj_token tok, float *dst) {
    c->kern->w[w->type].dequantize_row((const uint8_t *)w->data + (size_t)tok * w->row_bytes, dst, w->ne0);
    if (c->model->hp.embd_scale) { /* gemma: times sqrt(n_embd) (llama.cpp: ggml_scale by sqrtf(n_embd)) */
        const float s = sqrtf((float)c->model->hp.n_embd);
        for (int64_t i = 0; i < w->ne0; i++) dst[i] *= s;
    }
}

void gpu_embed_row(const struct dj_context *c, dj_token tok, float *dst) { embed_row(c, &c->model->tok_embd, tok, dst); }
void gpu_rope_cs(struct dj_context *c, uint32_t pos, bool local, float *dst) {
    const size_t n_rot = c->model->hp.n_rot;
    const float *cs = rope_row(c, pos, local);
    if (cs) memcpy(dst, cs, n_rot * sizeof(float));
    else rope_cos_sin(c->model, (float)pos, local, dst, dst + n_rot / 2);
}

/* ---- Mixture of Experts --------------------------------------------------------
 *
 * As llama.cpp's build_moe_ffn for qwen3moe and Mixtral (golden/moe/README.md):
 *
 *   z = ffn_gate_inp h                          (n_expert router logits)
 *   p = softmax(z)                              (ggml: max subtracted, sum in double)
 *   S = the n_expert_used largest p, descending, the lowest id on a tie
 *       (llama.cpp's argsort order; its routing files list S in this order)
 *   w_s = p_S[s] / sum_S p                      (sum in double, rounded once, as ggml_sum_rows)
 *   (deepseek2 adds sigmoid gating, a selection bias, expert groups, a clamped
 *   normalization and a scale.)  These steps are one fused routine per token,
 *   moe_route (route.c): one pass over the router row selects the top k.
 *   out = w_0 o_0 + w_1 o_1 + ...               (k-1 adds in selection order, as llama.cpp's
 *                                                explicit ggml_add chain), o_s = swiglu_{S[s]}(h)
 *
 * Batch invariance (DESIGN.md §3): the routing of a token reads its own row
 * only.  Each expert runs over the tokens that chose it (their rows gathered into
 * one block per expert; all experts' blocks in one grouped pool run), through the
 * kernels whose every element is the one dot product of its (row, token) pair
 * whatever the batch (kernels.h), so o_s of a token does not depend on who else
 * chose the expert;
 * each token's sum then runs in its own selection order.  A single token reads
 * only its n_expert_used experts' weights.
 */

/* g = silu(g) * u over n floats (SwiGLU's elementwise half). */
static void swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

/* gpt-oss's clamped SwiGLU (ggml swiglu_oai, alpha 1.702, limit 7):
 * g = min(g, 7) / (1 + exp(-1.702 min(g, 7))) * (clamp(u, -7, 7) + 1). */
static void swiglu_oai(float *g, const float *u, int64_t n) {
    const float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; i++) {
        const float x = limit < g[i] ? limit : g[i]; /* std::min(g, limit): a NaN g stays g */
        const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
    }
}

/* g = gelu(g) * u over n floats, as ggml's CPU geglu: through the f16 table tab
 * (dj_model.gelu_tab), 0 below -10, the identity from 10 (gemma.c). */
static void geglu(const float *tab, float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        if (x <= -10.0f) g[i] = 0.0f;
        else if (x >= 10.0f) g[i] = x * u[i];
        else g[i] = tab[dj_f32_to_fp16(x)] * u[i];
    }
}

/* y = down(act(gate xn) * up xn) for the n rows of c->xn (a dense FFN, deepseek2's
 * shared experts); act is SiLU, or GELU where the model's FFN has it (hp.ffn_gelu);
 * c->ff_g and c->ff_u are its scratch. */
static void ffn_swiglu(struct dj_context *c, const struct dj_weight *gate, const struct dj_weight *up,
                       const struct dj_weight *down, int64_t n, float *y) {
    const struct dj_weight *gate_up[2] = {gate, up};
    float *const gate_up_out[2] = {c->ff_g, c->ff_u};
    ctx_matmul_n(c, gate_up, gate_up_out, 2, c->xn, n);
    if (c->model->hp.ffn_gelu) geglu(c->model->gelu_tab, c->ff_g, c->ff_u, n * up->ne1);
    else swiglu(c->ff_g, c->ff_u, n * up->ne1);
    if (c->census) {
        c->census->act_elems += (uint64_t)(n * up->ne1);
        for (int64_t i = 0; i < n * up->ne1; i++) c->census->act_zero += c->ff_g[i] == 0.0f;
    }
    ctx_matmul(c, down, c->ff_g, n, y);
}

/* The census (ctx_census): rows of x (n rows of E) equal to an earlier row, bitwise. */
static uint64_t census_dups(const float *x, int64_t n, int64_t E) {
    uint64_t d = 0;
    for (int64_t t = 1; t < n; t++)
        for (int64_t u = 0; u < t; u++)
            if (memcmp(x + t * E, x + u * E, (size_t)E * sizeof *x) == 0) {
                d++;
                break;
            }
    return d;
}

static uint64_t census_zero_rows(const float *x, int64_t n, int64_t E) {
    uint64_t z = 0;
    for (int64_t t = 0; t < n; t++) {
        int64_t i = 0;
        while (i < E && x[t * E + i] == 0.0f) i++;
        z += i == E;
    }
    return z;
}

/* Slots [at, at + n_used) of a grouped run: tensor w's slab of each used expert
 * (c->moe_ids) over its block of the activations at a (rows of a_row bytes, the
 * expert's first at row moe_off) into its block of y (rows of `width` floats). */
static void experts_slots(struct dj_context *c, int at, int n_used, const struct dj_weight *w, const void *a,
                          size_t a_row, float *y, int64_t width) {
    const uint32_t NE = c->model->hp.n_expert;
    for (int u = 0; u < n_used; u++) {
        c->grp_w[at + u] = model_expert(w, NE, c->moe_ids[u]);
        c->grp_a[at + u] = (const uint8_t *)a + (size_t)c->moe_off[u] * a_row;
        c->grp_nt[at + u] = c->moe_cnt[u];
        c->grp_y[at + u] = y + c->moe_off[u] * width;
    }
}

/* Adds each used expert's bias row (b: (width, n_expert) f32, row moe_ids[u]) to its
 * block of y (c->moe_off / moe_cnt rows of `width` floats): gpt-oss's ggml_add_id. */
static void experts_bias(struct dj_context *c, int n_used, const struct dj_weight *b, float *y, int64_t width) {
    for (int u = 0; u < n_used; u++) {
        const float *bv = (const float *)b->data + (size_t)c->moe_ids[u] * (size_t)width;
        float *yr = y + c->moe_off[u] * width;
        for (int64_t r = 0; r < c->moe_cnt[u]; r++, yr += width)
            for (int64_t i = 0; i < width; i++) yr[i] += bv[i];
    }
}

void ctx_moe_route(struct dj_context *c, uint32_t il, const struct dj_layer *L, int64_t n) {
    const struct dj_hparams *hp = &c->model->hp;
    const int64_t NE = hp->n_expert, K = hp->n_expert_used;
    /* deepseek2 and glm4moe (its keys, no groups: n_group 0); qwen3moe, Mixtral: softmax, normalized, no clamp */
    const bool ds = hp->arch == DJ_ARCH_DEEPSEEK2 || hp->arch == DJ_ARCH_GLM4MOE;
    const bool oss = hp->arch == DJ_ARCH_GPT_OSS; /* softmax over the top-k logits, biased experts */
    const struct moe_router rt = {.n_expert = (uint32_t)NE, .n_used = (uint32_t)K, .sigmoid = ds && hp->gating == 2,
                                  .softmax_weight = oss, .z_bias = oss ? L->ffn_gate_inp_b.data : NULL,
                                  .bias = ds ? (const float *)L->exp_probs_b.data : NULL,
                                  .n_group = ds ? hp->n_group : 0, .n_group_used = hp->n_group_used,
                                  .norm = !oss && (!ds || hp->exp_norm), .norm_min = ds ? 6.103515625e-5f : 0.0f,
                                  .scale = ds || oss || hp->rs_floats ? hp->exp_scale : 0.0f};
    for (int64_t t = 0; t < n; t++) moe_route(&rt, c->moe_z + t * NE, c->moe_sel + t * K, c->moe_w + t * K);
    if (c->moe_trace && il < hp->n_layer) /* not the MTP block's */
        memcpy(c->moe_trace + (size_t)il * c->p.n_ubatch * K, c->moe_sel, (size_t)(n * K) * sizeof(int32_t));
}

int ctx_moe_group(struct dj_context *c, int64_t n, int64_t *n_rows) {
    const int64_t NE = c->model->hp.n_expert, K = c->model->hp.n_expert_used;
    int n_used = 0;
    int64_t off = 0;
    for (uint32_t e = 0; e < (uint32_t)NE; e++) {
        const int64_t off_e = off;
        for (int64_t t = 0; t < n; t++)
            for (int64_t s = 0; s < K; s++)
                if (c->moe_sel[t * K + s] == (int32_t)e) c->moe_pos[t * K + s] = (uint32_t)off++;
        if (off == off_e) continue; /* its weights are not read */
        c->moe_ids[n_used] = e;
        c->moe_off[n_used] = off_e;
        c->moe_cnt[n_used] = off - off_e;
        n_used++;
    }
    *n_rows = off;
    return n_used;
}

/* x += MoE(xn) for the layer's n rows (c->xn: the ffn-normed rows; clobbered). */
static void moe_ffn(struct dj_context *c, uint32_t il, const struct dj_layer *L, int64_t n) {
    const struct dj_hparams *hp = &c->model->hp;
    const int64_t E = hp->n_embd, K = hp->n_expert_used, F = hp->n_ff_exp;
    const bool oss = hp->arch == DJ_ARCH_GPT_OSS;
    ctx_matmul(c, &L->ffn_gate_inp, c->xn, n, c->moe_z);
    ctx_moe_route(c, il, L, n);
    /* Group the (token, slot) pairs by expert: expert e's tokens, in ubatch order, are
     * rows [off_e, off_e + n_e) of moe_xin; moe_pos[t * K + s] is the row of token t's
     * slot s.  Then one pool run for every used expert's gate and up, one for the downs. */
    int64_t off = 0;
    const int n_used = ctx_moe_group(c, n, &off);
    for (int64_t t = 0; t < n; t++)
        for (int64_t s = 0; s < K; s++)
            memcpy(c->moe_xin + (size_t)c->moe_pos[t * K + s] * E, c->xn + t * E, (size_t)E * sizeof(float));
    const bool gated = L->ffn_gate_exps.data != NULL; /* llama without ffn_gate_exps: down(silu(up x)) */
    const struct dj_weight *gexp = gated ? &L->ffn_gate_exps : &L->ffn_up_exps;
    const int act_gu = c->kern->w[gexp->type].act_type, act_up = c->kern->w[L->ffn_up_exps.type].act_type;
    size_t a_row, a_row_up;
    const void *xa = ctx_act(c, act_gu, c->moe_xin, E, off, c->moe_act, &a_row), *xa_up = xa;
    a_row_up = a_row;
    if (act_up != act_gu) /* moe_o: free until the downs */
        xa_up = ctx_act(c, act_up, c->moe_xin, E, off, c->moe_o, &a_row_up);
    experts_slots(c, 0, n_used, gexp, xa, a_row, gated ? c->ff_g : c->ff_u, F);
    if (!gated) {
        ctx_matmul_grouped(c, n_used, c->grp_w, c->grp_a, a_row, c->grp_nt, c->grp_y, c->grp_first);
        for (int64_t i = 0; i < off * F; i++) {
            const float u = c->ff_u[i];
            c->ff_g[i] = u / (1.0f + expf(-u));
        }
    } else {
        experts_slots(c, n_used, n_used, &L->ffn_up_exps, xa_up, a_row_up, c->ff_u, F);
        if (a_row_up == a_row) { /* gate and up in one run when the activations are alike */
            ctx_matmul_grouped(c, 2 * n_used, c->grp_w, c->grp_a, a_row, c->grp_nt, c->grp_y, c->grp_first);
        } else {
            ctx_matmul_grouped(c, n_used, c->grp_w, c->grp_a, a_row, c->grp_nt, c->grp_y, c->grp_first);
            ctx_matmul_grouped(c, n_used, c->grp_w + n_used, c->grp_a + n_used, a_row_up, c->grp_nt + n_used,
                               c->grp_y + n_used, c->grp_first);
        }
        if (oss) {
            experts_bias(c, n_used, &L->ffn_gate_exps_b, c->ff_g, F);
            experts_bias(c, n_used, &L->ffn_up_exps_b, c->ff_u, F);
            swiglu_oai(c->ff_g, c->ff_u, off * F);
        } else {
            swiglu(c->ff_g, c->ff_u, off * F);
        }
    }
    const int act_dn = c->kern->w[L->ffn_down_exps.type].act_type;
    const void *ga = ctx_act(c, act_dn, c->ff_g, F, off, c->moe_act, &a_row);
    experts_slots(c, 0, n_used, &L->ffn_down_exps, ga, a_row, c->moe_o, E);
    ctx_matmul_grouped(c, n_used, c->grp_w, c->grp_a, a_row, c->grp_nt, c->grp_y, c->grp_first);
    if (oss) experts_bias(c, n_used, &L->ffn_down_exps_b, c->moe_o, E);
    /* deepseek2's shared experts: one plain SwiGLU of n_ff_exp * n_shared, added to the
     * experts' sum before the residual (llama.cpp: ggml_add(moe_out, ffn_shexp)) */
    const bool shexp = L->ffn_up_shexp.data != NULL;
    if (shexp) ffn_swiglu(c, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp, n, c->moe_y);
    if (L->ffn_gate_inp_shexp.data) { /* hybrids: the shared expert times sigmoid(gate . xn) (moe_z is free) */
        ctx_matmul(c, &L->ffn_gate_inp_shexp, c->xn, n, c->moe_z);
        for (int64_t t = 0; t < n; t++) {
            const float gs = 1.0f / (1.0f + expf(-c->moe_z[t]));
            for (int64_t i = 0; i < E; i++) c->moe_y[t * E + i] *= gs;
        }
    }
    for (int64_t t = 0; t < n; t++) {
        const float *w = c->moe_w + t * K;
        const float **o = c->moe_orow;
        for (int64_t s = 0; s < K; s++) o[s] = c->moe_o + (size_t)c->moe_pos[t * K + s] * E;
        float *x = c->x + t * E;
        for (int64_t i = 0; i < E; i++) {
            float acc = w[0] * o[0][i];
            for (int64_t s = 1; s < K; s++) {
                const float ws = w[s] * o[s][i];
                acc = acc + ws;
            }
            x[i] += shexp ? acc + c->moe_y[t * E + i] : acc;
        }
    }
}

/* What a probe pass (ctx_probe_k) does at its last layer. */
struct probe {
    uint32_t il;  /* layers < il run whole; layer il only computes K and V */
    double *dev;  /* per token: squared L2 distance of the fresh K row to the stored one */
};

/* ---- Multi-head Latent Attention (deepseek2) -------------------------------------
 *
 * Absorbed, as llama.cpp runs the split layout (golden/moe/README.md):
 *
 *   q = Wq xn  or  Wq_b rms(Wq_a xn)            (n_head x [q_nope (nope) | q_pe (rope)])
 *   [c_raw | k_pe] = Wkv_a xn;  c = rms(c_raw)  (kv_lora + rope: the one K row cached)
 *   NORM rope (YaRN) on each q_pe and on k_pe
 *   q~_h = K_b[h]^T q_nope_h                    (kv_lora; wk_b's slab h, model_expert)
 *   s_h(t, s) = kq_scale * [q~_h | q_pe_h] . [c(s) | k_pe(s)]
 *   o~_h = sum_s softmax(s_h) c(s);  o_h = V_b[h] o~_h;  out = Wo concat_h(o_h)
 *
 * KV cache: the pool's K row of a token and layer is [c | k_pe], n_embd_kv =
 * kv_lora + rope elements (DeepSeek-V2/V3: 512 + 64 = 576), one row shared by all
 * heads, and the pool is K-only (kv_pool_params.k_only): the value of a key is the
 * first kv_lora elements of its K row, so no V row is allocated.  Bytes per token and
 * layer, V3 shape (engine_kv_bytes_per_token; tests/model/test_mla_golden.c prints
 * them): f32 2,304, f16/bf16 1,152, q8_0 612, q4_0 324; uncompressed MHA would keep
 * n_head (nope + rope) + n_head v_head = 128 x 192 + 128 x 128 = 40,960 floats
 * (163,840 bytes f32, 81,920 f16).  The row is stored in the K cache type (-ctk: f32,
 * f16, bf16, q8_0, q4_0; quantized types need kv_lora + rope to be a multiple of 32,
 * else the context or engine is refused, as a dense head size); -ctv does not apply
 * (model_kv_types makes it equal to -ctk, with a note when it differed).
 *
 * Scores and values go through the same kernels as GQA (attn_scores over the
 * kv_lora + rope row, attn_values_n over its first kv_lora elements), block by block
 * in position order.  A work item is (tile, group of up to MLA_HEADS heads): a block
 * of K rows in another type than f32 is converted to floats once per item and pass
 * (kernels' kv_rows_to_f32, bitwise the reference dequantizer: a row's floats do
 * not depend on the item) and serves the group's heads.  Per head the arithmetic is
 * the same whoever runs it and whatever else is in the item or the batch: a token's
 * bits do not depend on the batch, the ubatch split or the thread count. */
enum { MLA_HEADS = 8 }; /* heads of one attention work item */

static void mla_attn_task(void *arg, int ith, int nth) {
    const struct attn_job *j = arg;
    struct dj_context *c = j->c;
    const struct dj_hparams *hp = &c->model->hp;
    const int H = (int)hp->n_head, D = (int)hp->head_dim, R = (int)hp->kv_lora;
    const int HG = H < MLA_HEADS ? H : MLA_HEADS, n_hg = (H + HG - 1) / HG;
    const size_t bs = c->block_size, n_ctx = c->p.n_ctx, k_row = kv_pool_k_row_bytes(c->pool);
    const bool conv = c->p.type_k != DJ_TYPE_F32;
    /* (tile, HG) score rows of n_ctx: within the thread's att_tile * H rows */
    float *sc = c->scores + (size_t)ith * (size_t)c->att_tile * (size_t)H * n_ctx;
    float *kt = conv ? c->kvt + (size_t)ith * 2 * bs * (size_t)D : NULL; /* [bs][D] floats */
    const long n_items = (long)j->n_tiles * n_hg;
    for (long item = ith; item < n_items; item += nth) {
        const int64_t t0 = j->tiles[item / n_hg].t0, t1 = j->tiles[item / n_hg].t1;
        const uint32_t *table = j->seq[t0]->table;
        const int h0 = (int)(item % n_hg) * HG, h1 = h0 + HG < H ? h0 + HG : H;
        const int64_t max_keys = (int64_t)j->pos[t1 - 1] + 1;
#define MLA_ROW(t, h) (sc + ((size_t)((t) - t0) * (size_t)HG + (size_t)((h) - h0)) * n_ctx)
        for (int pass = 0; pass < 2; pass++) { /* 0: scores, then softmax; 1: values */
            for (int64_t p0 = 0; p0 < max_keys; p0 += (int64_t)bs) {
                const uint8_t *kraw = kv_pool_k(c->pool, table[p0 / (int64_t)bs], j->kv_il);
                const float *kb = (const float *)kraw;
                if (conv) { /* the block's rows [c | k_pe] as floats */
                    const int64_t n_rows = max_keys - p0 < (int64_t)bs ? max_keys - p0 : (int64_t)bs;
                    c->kern->kv_rows_to_f32(c->p.type_k, kraw, k_row, n_rows, D, kt);
                    kb = kt;
                }
                struct vrows vr = {c->kern, R, kb, (size_t)D, p0 > 0, {0}, {0}, 0, 0}; /* values: c, K's head */
                for (int64_t t = t0; t < t1; t++) {
                    const int64_t n_keys = (int64_t)j->pos[t] + 1;
                    if (p0 >= n_keys) continue;
                    const int64_t nb = n_keys - p0 < (int64_t)bs ? n_keys - p0 : (int64_t)bs;
                    for (int h = h0; h < h1; h++) {
                        if (pass == 0)
                            c->kern->attn_scores(D, c->q + ((size_t)t * H + h) * D, kb, (size_t)D, nb, hp->kq_scale,
                                                 MLA_ROW(t, h) + p0);
                        else
                            vrows_add(&vr, nb, MLA_ROW(t, h) + p0, c->att + ((size_t)t * H + h) * R);
                    }
                }
                vrows_flush(&vr);
            }
            if (pass == 0)
                for (int64_t t = t0; t < t1; t++)
                    for (int h = h0; h < h1; h++) c->kern->attn_softmax(MLA_ROW(t, h), (int64_t)j->pos[t] + 1, -INFINITY);
        }
#undef MLA_ROW
    }
}

/* The per-head products of MLA (K_b's absorption into the query, V_b's decompression):
 * y[h][t] = W[h] x[t][h] for every head h and token t, where x[t][h] is the first K
 * floats of src + (t * H + h) * stride and W[h] is slab h of the 3-D weight w (rows of
 * K, OUT rows a head), into c->mla_y as (H, n, OUT).  The heads' inputs are gathered and
 * converted together and the products run as one grouped pool run per group of heads
 * (all of them unless H n passes the scratch's rows): a decode step is one run, not H.
 * Bits as head by head (ctx_matmul_grouped). */
static void mla_heads(struct dj_context *c, const struct dj_weight *w, const float *src, int64_t stride, int64_t K,
                      int64_t OUT, int64_t n) {
    const int64_t H = c->model->hp.n_head;
    int64_t per = (int64_t)c->mla_rows / n; /* heads a run */
    if (per < 1) per = 1;
    if (per > H) per = H;
    const int act_type = c->kern->w[w->type].act_type;
    for (int64_t h0 = 0; h0 < H; h0 += per) {
        const int64_t nh = H - h0 < per ? H - h0 : per;
        for (int64_t h = 0; h < nh; h++)
            for (int64_t t = 0; t < n; t++)
                memcpy(c->mla_g + ((size_t)h * n + t) * K, src + (t * H + h0 + h) * stride, (size_t)K * sizeof(float));
        size_t a_row;
        const void *a = ctx_act(c, act_type, c->mla_g, K, nh * n, c->mla_act, &a_row);
        for (int64_t h = 0; h < nh; h++) {
            c->grp_w[h] = model_expert(w, (uint32_t)H, (uint32_t)(h0 + h));
            c->grp_a[h] = (const uint8_t *)a + (size_t)h * n * a_row;
            c->grp_nt[h] = n;
            c->grp_y[h] = c->mla_y + ((size_t)(h0 + h) * n) * OUT;
        }
        ctx_matmul_grouped(c, (int)nh, c->grp_w, c->grp_a, a_row, c->grp_nt, c->grp_y, c->grp_first);
    }
}

/* The attention half of an MLA layer on c->xn (attn-normed rows): stores the K rows,
 * adds Wo's output to c->x.  Returns false when a probe (pr) stops here. */
static bool mla_layer(struct dj_context *c, uint32_t il, const struct dj_layer *L, const uint32_t *pos,
                      struct kv_seq *const *seq, int64_t n, int64_t n_tiles, const struct probe *pr) {
    const struct dj_model *m = c->model;
    const struct dj_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->kv_lora, N = hp->qk_nope, P = hp->n_rot, VH = hp->v_head,
                  D = R + P, QW = N + P, QL = hp->q_lora;
    float *qraw = c->att; /* (n, H, QW); free until the attention writes it */
    if (L->wq.data) {
        ctx_matmul(c, &L->wq, c->xn, n, qraw);
    } else {
        ctx_matmul(c, &L->wq_a, c->xn, n, c->mla_a);
        for (int64_t t = 0; t < n; t++) rmsnorm(c->mla_a + t * QL, c->mla_a + t * QL, L->q_a_norm.data, QL, hp->rms_eps);
        ctx_matmul(c, &L->wq_b, c->mla_a, n, qraw);
    }
    ctx_matmul(c, &L->wkv_a, c->xn, n, c->k);
    for (int64_t t = 0; t < n; t++) {
        float *k = c->k + t * D;
        rmsnorm(k, k, L->kv_a_norm.data, R, hp->rms_eps);
        float csb[512];
        const float *cs = rope_row(c, pos[t], false);
        if (cs) {
            c->rope_hits += 2;
        } else {
            rope_cos_sin(m, (float)pos[t], false, csb, csb + P / 2);
            cs = csb;
        }
        rope_rotate(m, k + R, 1, cs);
        for (int64_t h = 0; h < H; h++) rope_rotate(m, qraw + (t * H + h) * QW + N, 1, cs);
        void *krow = kv_seq_k(seq[t], L->kv_il, pos[t], c->block_size);
        if (pr && il == pr->il) {
            kv_row_to_f32(c->p.type_k, krow, c->krow, (size_t)D);
            double d2 = 0.0;
            for (int64_t i = 0; i < D; i++) {
                const double d = (double)k[i] - (double)c->krow[i];
                d2 += d * d;
            }
            pr->dev[t] = d2;
        }
        kv_row_from_f32(c->p.type_k, k, krow, (size_t)D); /* the pool is K-only: no V row */
    }
    if (pr && il == pr->il) return false;
    /* q~_h = K_b[h]^T q_nope_h; [q~ | q_pe] rows into c->q */
    mla_heads(c, &L->wk_b, qraw, QW, N, R, n);
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) {
            float *q = c->q + (t * H + h) * D;
            memcpy(q, c->mla_y + ((size_t)h * n + t) * R, (size_t)R * sizeof(float));
            memcpy(q + R, qraw + (t * H + h) * QW + N, (size_t)P * sizeof(float));
        }
    struct attn_job aj = {c, il, L->kv_il, pos, seq, c->tiles, n_tiles};
    threadpool_run(c->tpool, mla_attn_task, &aj);
    /* o_h = V_b[h] o~_h into c->q as (n, H * VH), then Wo */
    mla_heads(c, &L->wv_b, c->att, R, R, VH, n);
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(c->q + t * H * VH + h * VH, c->mla_y + ((size_t)h * n + t) * VH, (size_t)VH * sizeof(float));
    ctx_matmul(c, &L->wo, c->q, n, c->xn);
    for (int64_t i = 0; i < n * E; i++) c->x[i] += c->xn[i];
    return true;
}

/* ---- Gated DeltaNet (the hybrids' recurrent layers: qwen35.c has the equations) -----------
 *
 * The canonical form (DESIGN.md §3): a token's state update and output depend on the
 * sequence's state before it, so the recurrence runs token by token in position order
 * within each sequence — never chunked — with one fixed sequence of operations per
 * (sequence, head) and token; threads take whole (sequence, head) pairs (and, for the
 * conv, (sequence, channel block) pairs).  The projections before it and the norm and
 * projection after it are per-row, as every other layer's.  So a token's bits do not
 * depend on the batch, the ubatch split, the prefill chunking or the thread count: the
 * state it starts from holds the same bits however the earlier tokens were cut.
 * Cost: per token and v head, 4 S^2 multiply-adds over the S x S state (two matrix-vector
 * products through the kernel table's attn_scores, a rank-1 update and the decay) —
 * llama.cpp's chunked prefill does the same work as S x 64 blocks of matrix products. */

struct dn_job {
    struct dj_context *c;
    const struct dj_layer *L;
    float *const *snap; /* (n) or NULL: rs_snap of the ubatch's rows */
    int n_seq;
    int n_cblk;         /* conv channel blocks */
};

enum { DN_CBLK = 256, DN_ROWS = 16 }; /* conv channels of one work item; state rows visited together */

/* Work item i = (sequence i / n_cblk, channel block i % n_cblk): the causal conv over
 * [state | the sequence's tokens] for the block's channels, token by token, then SiLU;
 * the state shifts along (llama.cpp's conv state: per channel its last d_conv - 1 inputs). */
static void dn_conv_task(void *arg, int i, int n) {
    const struct dn_job *j = arg;
    struct dj_context *c = j->c;
    const struct dj_hparams *hp = &c->model->hp;
    const int64_t S = hp->ssm_d_state, CD = (2 * (int64_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads) * S;
    const int64_t dc = hp->ssm_d_conv, ns = dc - 1;
    const int js = i / j->n_cblk;
    const int64_t c0 = (int64_t)(i % j->n_cblk) * DN_CBLK, c1 = c0 + DN_CBLK < CD ? c0 + DN_CBLK : CD;
    float *st = j->c->dn_seq[js]->rs + j->L->rs_off; /* (CD, ns) */
    const float *w = j->L->ssm_conv1d.data;          /* (CD, dc) */
    for (uint32_t r = c->dn_off[js]; r < c->dn_off[js + 1]; r++) {
        const uint32_t t = c->dn_tok[r];
        const float *x = c->dn_qkv + (size_t)t * CD;
        float *y = c->dn_conv + (size_t)t * CD;
        for (int64_t ch = c0; ch < c1; ch++) {
            float *sc = st + ch * ns;
            const float *wc = w + ch * dc;
            float sum = 0.0f; /* ggml_ssm_conv: a float sum over the taps in order */
            for (int64_t k = 0; k < ns; k++) sum += sc[k] * wc[k];
            sum += x[ch] * wc[ns];
            y[ch] = sum / (1.0f + expf(-sum)); /* SiLU */
            if (ns > 0) {
                memmove(sc, sc + 1, (size_t)(ns - 1) * sizeof(float));
                sc[ns - 1] = x[ch];
            }
        }
        if (j->snap && j->snap[t])
            memcpy(j->snap[t] + j->L->rs_off + c0 * ns, st + c0 * ns, (size_t)((c1 - c0) * ns) * sizeof(float));
    }
    (void)n;
}

/* y *= a and y += x a over n floats: one rounding per operation, in blocks of 8 the compiler
 * turns into vector instructions (forward.c is built without -ffast-math: the results are
 * those of the scalar loop). */
static inline void dn_scale(float *restrict y, int64_t n, float a) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) y[i + l] *= a;
    for (; i < n; i++) y[i] *= a;
}
static inline void dn_axpy(float *restrict y, const float *restrict x, int64_t n, float a) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) y[i + l] += x[i + l] * a;
    for (; i < n; i++) y[i] += x[i] * a;
}

/* Work item i = (sequence i / nv, v head i % nv): the gated delta rule over the sequence's
 * tokens of the ubatch, in position order, on the head's state M (M[j][i] = S[i][j], as
 * ggml's gated_delta_net), writing the head's output rows. */
static void dn_delta_task(void *arg, int i, int n) {
    const struct dn_job *j = arg;
    struct dj_context *c = j->c;
    const struct dj_hparams *hp = &c->model->hp;
    const int64_t S = hp->ssm_d_state, NK = hp->ssm_n_k_heads, NV = hp->ssm_n_v_heads, KD = NK * S,
                  CD = (2 * NK + NV) * S, conv_floats = (hp->ssm_d_conv - 1) * CD;
    const int js = i / (int)NV;
    const int64_t h = i % NV, kh = hp->ssm_kv_interleave ? h / (NV / NK) : h % NK;
    float *M = c->dn_seq[js]->rs + j->L->rs_off + conv_floats + h * S * S;
    const float scale = 1.0f / sqrtf((float)S);
    for (uint32_t r = c->dn_off[js]; r < c->dn_off[js + 1]; r++) {
        const uint32_t t = c->dn_tok[r];
        const float *row = c->dn_conv + (size_t)t * CD;
        const float *q = row + kh * S, *k = row + KD + kh * S, *v = row + 2 * KD + h * S;
        const float beta = c->dn_bg[(size_t)t * 2 * NV + h], g = c->dn_bg[(size_t)t * 2 * NV + NV + h];
        const float eg = expf(g);
        float *o = c->dn_o + (size_t)t * NV * S + h * S;
        /* Row j of M needs nothing of the other rows: decay, d_j = (v_j - M_j . k) beta, M_j += k d_j,
         * o_j = M_j . q / sqrt(S), each element's operations in ggml's order, DN_ROWS rows at a time
         * while they are in L1 (attn_scores gives each row the bits it gets in any call).  Measured
         * at Qwen3.5-35B-A3B's shapes (S 128, 32 v heads; 3 DeltaNet layers), one thread: the
         * recurrences of a 512-token prefill took 1.64 s as four passes over the whole state, 0.98 s
         * row by row, 0.53 s 16 rows at a time (test_hybrid_forward with DJ_HYBRID_TIMING). */
        for (int64_t j0 = 0; j0 < S; j0 += DN_ROWS) {
            const int64_t nr = S - j0 < DN_ROWS ? S - j0 : DN_ROWS;
            float *mb = M + j0 * S, d[DN_ROWS];
            dn_scale(mb, nr * S, eg);
            c->kern->attn_scores(S, k, mb, (size_t)S, nr, 1.0f, d);
            for (int64_t jj = 0; jj < nr; jj++) dn_axpy(mb + jj * S, k, S, (v[j0 + jj] - d[jj]) * beta);
            c->kern->attn_scores(S, q, mb, (size_t)S, nr, scale, o + j0);
        }
        if (j->snap && j->snap[t])
            memcpy(j->snap[t] + j->L->rs_off + conv_floats + h * S * S, M, (size_t)(S * S) * sizeof(float));
    }
    (void)n;
}

/* ggml_l2_norm of one row of n: the sum of squares in double, x / max(sqrt(sum), eps). */
static void l2norm(float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; i++) x[i] *= scale;
}

/* Groups the ubatch's rows by sequence (c->dn_seq / dn_off / dn_tok), each sequence's rows
 * in ubatch order (= position order); returns how many sequences. */
static int dn_group(struct dj_context *c, struct kv_seq *const *seq, int64_t n) {
    int n_seq = 0;
    for (int64_t t = 0; t < n; t++) {
        int js = 0;
        while (js < n_seq && c->dn_seq[js] != seq[t]) js++;
        if (js == n_seq) c->dn_seq[n_seq++] = seq[t];
    }
    uint32_t r = 0;
    for (int js = 0; js < n_seq; js++) {
        c->dn_off[js] = r;
        for (int64_t t = 0; t < n; t++)
            if (seq[t] == c->dn_seq[js]) c->dn_tok[r++] = (uint32_t)t;
    }
    c->dn_off[n_seq] = r;
    return n_seq;
}

/* The projections of a recurrent layer's n rows of c->xn into the host buffers, in the layout
 * each weight set gives: ssm_in -> dn_in; ssm_qkv, ssm_z -> dn_qkv, dn_z; ssm_ba -> dn_bg;
 * ssm_beta, ssm_alpha -> dn_o (n beta rows, then n alpha rows).  The GPU path fills the same
 * buffers from its own products (forward_vk.c), then both run ctx_dn_recur. */
static void dn_project(struct dj_context *c, const struct dj_layer *L, int64_t n) {
    const struct dj_hparams *hp = &c->model->hp;
    const int64_t NV = hp->ssm_n_v_heads;
    if (L->ssm_in.data) { /* qwen3next's older layout */
        const struct dj_weight *ws[2] = {&L->ssm_in, &L->ssm_ba};
        float *const ys[2] = {c->dn_in, c->dn_bg};
        ctx_matmul_n(c, ws, ys, 2, c->xn, n);
    } else if (L->ssm_ba.data) {
        const struct dj_weight *ws[3] = {&L->ssm_qkv, &L->ssm_z, &L->ssm_ba};
        float *const ys[3] = {c->dn_qkv, c->dn_z, c->dn_bg};
        ctx_matmul_n(c, ws, ys, 3, c->xn, n);
    } else {
        const struct dj_weight *ws[2] = {&L->ssm_qkv, &L->ssm_z};
        float *const ys[2] = {c->dn_qkv, c->dn_z};
        ctx_matmul_n(c, ws, ys, 2, c->xn, n);
        const struct dj_weight *wb[2] = {&L->ssm_beta, &L->ssm_alpha};
        float *const yb[2] = {c->dn_o, c->dn_o + (size_t)n * NV}; /* dn_o: free until the recurrence */
        ctx_matmul_n(c, wb, yb, 2, c->xn, n);
    }
}

void ctx_dn_recur(struct dj_context *c, const struct dj_layer *L, struct kv_seq *const *seq, int64_t n,
                  float *const *snap) {
    const struct dj_hparams *hp = &c->model->hp;
    const int64_t S = hp->ssm_d_state, NK = hp->ssm_n_k_heads, NV = hp->ssm_n_v_heads, KD = NK * S, VD = NV * S,
                  CD = 2 * KD + VD, R = NV / NK;
    if (L->ssm_in.data) { /* per k head [q | k | v (R S) | z (R S)] -> dn_qkv, dn_z */
        const int64_t G = 2 * S + 2 * R * S;
        for (int64_t t = 0; t < n; t++)
            for (int64_t g = 0; g < NK; g++) {
                const float *src = c->dn_in + (size_t)t * (2 * KD + 2 * VD) + g * G;
                float *qkv = c->dn_qkv + (size_t)t * CD;
                memcpy(qkv + g * S, src, (size_t)S * sizeof(float));
                memcpy(qkv + KD + g * S, src + S, (size_t)S * sizeof(float));
                memcpy(qkv + 2 * KD + g * R * S, src + 2 * S, (size_t)(R * S) * sizeof(float));
                memcpy(c->dn_z + (size_t)t * VD + g * R * S, src + 2 * S + R * S, (size_t)(R * S) * sizeof(float));
            }
    } else if (!L->ssm_ba.data) { /* beta, alpha rows from dn_o into dn_bg */
        for (int64_t t = 0; t < n; t++) {
            memcpy(c->dn_bg + (size_t)t * 2 * NV, c->dn_o + (size_t)t * NV, (size_t)NV * sizeof(float));
            memcpy(c->dn_bg + (size_t)t * 2 * NV + NV, c->dn_o + (size_t)(n + t) * NV, (size_t)NV * sizeof(float));
        }
    }
    /* dn_bg rows: [beta (NV) | g (NV)] */
    const float *dt = L->ssm_dt.data, *A = L->ssm_a.data;
    for (int64_t t = 0; t < n; t++) {
        float *bg = c->dn_bg + (size_t)t * 2 * NV, raw[2 * DJ_SSM_HEADS_MAX];
        if (L->ssm_ba.data) { /* qwen3next: per k head [beta (R) | alpha (R)] -> [beta (NV) | alpha (NV)] */
            memcpy(raw, bg, (size_t)(2 * NV) * sizeof(float));
            for (int64_t g = 0; g < NK; g++)
                for (int64_t jj = 0; jj < R; jj++) {
                    bg[g * R + jj] = raw[g * 2 * R + jj];
                    bg[NV + g * R + jj] = raw[g * 2 * R + R + jj];
                }
        }
        for (int64_t h = 0; h < NV; h++) {
            bg[h] = 1.0f / (1.0f + expf(-bg[h])); /* beta = sigmoid */
            const float a = bg[NV + h] + dt[h];
            const float sp = a > 20.0f ? a : logf(1.0f + expf(a)); /* ggml's softplus */
            bg[NV + h] = sp * A[h];
        }
    }
    const int64_t t_rec = dj_time_us();
    const int n_seq = dn_group(c, seq, n);
    const int n_cblk = (int)((CD + DN_CBLK - 1) / DN_CBLK);
    struct dn_job j = {c, L, snap, n_seq, n_cblk};
    threadpool_run_n(c->tpool, dn_conv_task, &j, n_seq * n_cblk);
    for (int64_t t = 0; t < n; t++) {
        float *row = c->dn_conv + (size_t)t * CD;
        for (int64_t g = 0; g < 2 * NK; g++) l2norm(row + g * S, S, hp->rms_eps); /* q heads, then k heads */
    }
    threadpool_run_n(c->tpool, dn_delta_task, &j, n_seq * (int)NV);
    c->dn_us[0] += dj_time_us() - t_rec;
    /* o = rmsnorm(o) * ssm_norm * silu(z) per head (ssm_out follows) */
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < NV; h++) {
            float *o = c->dn_o + (size_t)t * VD + h * S;
            const float *z = c->dn_z + (size_t)t * VD + h * S;
            rmsnorm(o, o, L->ssm_norm.data, S, hp->rms_eps);
            for (int64_t e = 0; e < S; e++) o[e] *= z[e] / (1.0f + expf(-z[e]));
        }
}

/* The recurrent half of a hybrid layer on c->xn (attn-normed rows): advances each
 * sequence's state in kv_seq.rs (rs_off) over its tokens and adds ssm_out's output to
 * c->x.  snap: NULL, or per row the state to copy after that token (dj_batch.rs_snap). */
static void deltanet_layer(struct dj_context *c, const struct dj_layer *L, struct kv_seq *const *seq, int64_t n,
                           float *const *snap) {
    const int64_t E = c->model->hp.n_embd;
    const int64_t t_layer = dj_time_us();
    dn_project(c, L, n);
    ctx_dn_recur(c, L, seq, n, snap);
    ctx_matmul(c, &L->ssm_out, c->dn_o, n, c->xn);
    for (int64_t i = 0; i < n * E; i++) c->x[i] += c->xn[i];
    c->dn_us[1] += dj_time_us() - t_layer;
}

/* Cuts the ubatch into attention tiles: runs of at most att_tile consecutive
 * tokens of one sequence with increasing positions.  Returns how many. */
static int64_t ubatch_tiles(struct dj_context *c, const uint32_t *pos, struct kv_seq *const *seq, int64_t n) {
    int64_t nt = 0;
    for (int64_t t = 0; t < n; t++) {
        if (nt > 0) {
            struct ctx_att_tile *last = &c->tiles[nt - 1];
            if (last->t1 == t && seq[t] == seq[t - 1] && pos[t] > pos[t - 1] && t - last->t0 < c->att_tile) {
                last->t1 = t + 1;
                continue;
            }
        }
        c->tiles[nt++] = (struct ctx_att_tile){t, t + 1};
    }
    return nt;
}

/* Which layers a ubatch runs (ctx_forward_exit, and ctx_forward's resume):
 * NULL in forward_ubatch means every token runs every layer from the embedding. */
struct ub_span {
    const uint32_t *start; /* (n) first layer of each token, or NULL: all 0 */
    const float *hidden;   /* (n, n_embd) the residual stream entering layer start[t]; rows with start 0 unread */
    uint32_t n_run;        /* layers [0, n_run) run (tokens starting later run from their start) */
    float *hidden_out;     /* (n, n_embd) or NULL: each token's residual stream after layer n_run-1 */
};

/* Orders the ubatch's tokens for a span with start layers: c->perm[j] is the
 * token in slot j, the tokens sorted by start layer, stably (insertion sort:
 * n <= n_ubatch, and the starts are nearly always sorted already).  Then the
 * tokens that run layer il are the slots [0, m(il)): a layer runs on a prefix
 * of rows, with the code of the plain pass, and a layer no token runs reads no
 * weights.  A sequence's tokens may come out of position order (a token that
 * starts at 0 after tokens that resume at L); nothing needs that order but the
 * attention tiles, which ubatch_tiles then cuts apart.  Returns whether the
 * order is the identity (the usual case: every token starts at the same layer),
 * when the caller's arrays are used as they are; else fills c->ppos, c->pseq
 * and c->inv (token -> slot). */
static bool ubatch_order(struct dj_context *c, const uint32_t *start, const uint32_t *pos,
                         struct kv_seq *const *seq, int64_t n) {
    bool ident = true;
    for (int64_t t = 0; t < n; t++) {
        int64_t j = t;
        while (j > 0 && start[c->perm[j - 1]] > start[t]) {
            c->perm[j] = c->perm[j - 1];
            j--;
        }
        c->perm[j] = (uint32_t)t;
        if (j != t) ident = false;
    }
    if (ident) return true;
    for (int64_t j = 0; j < n; j++) {
        c->ppos[j] = pos[c->perm[j]];
        c->pseq[j] = seq[c->perm[j]];
        c->inv[c->perm[j]] = (uint32_t)j;
    }
    return false;
}

/* One layer il (a NextN block too: il >= n_layer) over the rows [0, n) of c->x,
 * token t at pos[t] of seq[t], in the n_tiles attention tiles of c->tiles: its
 * input norm, attention (or the recurrent / MLA variant), FFN and residuals.
 * false: a probe (pr) stopped at this layer, nothing after it is to run. */
static bool layer_run(struct dj_context *c, uint32_t il, const uint32_t *pos, struct kv_seq *const *seq, int64_t n,
                      int64_t n_tiles, const struct probe *pr, float *const *snap) {
    const struct dj_model *m = c->model;
    const struct dj_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim, Q = (int64_t)hp->n_head * hd, KV = (int64_t)hp->n_head_kv * hd;
    const struct dj_layer *L = &m->layers[il];
    if (c->census) {
        c->census->rows[il > 0] += (uint64_t)n;
        c->census->dup_rows[il > 0] += census_dups(c->x, n, E);
    }
    for (int64_t t = 0; t < n; t++) rmsnorm(c->xn + t * E, c->x + t * E, L->attn_norm.data, E, hp->rms_eps);
    if (L->recurrent) { /* hybrids: no start layers, probes or early exits (refused before) */
        deltanet_layer(c, L, seq, n, snap);
    } else if (hp->mla) {
        if (!mla_layer(c, il, L, pos, seq, n, n_tiles, pr)) return false;
    } else {
        const struct dj_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *const qkv_out[3] = {hp->attn_gated ? c->qg : c->q, c->k, c->v};
        ctx_matmul_n(c, qkv, qkv_out, 3, c->xn, n);
        if (hp->attn_gated) /* per head [q | gate] (llama.cpp's views of Qcur_full) */
            for (int64_t t = 0; t < n; t++)
                for (int64_t h = 0; h < (int64_t)hp->n_head; h++) {
                    const float *src = c->qg + (size_t)(t * hp->n_head + h) * 2 * hd;
                    memcpy(c->q + t * Q + h * hd, src, (size_t)hd * sizeof(float));
                    memcpy(c->gate + t * Q + h * hd, src + hd, (size_t)hd * sizeof(float));
                }
        add_bias(c->q, &L->bq, n, Q);
        add_bias(c->k, &L->bk, n, KV);
        add_bias(c->v, &L->bv, n, KV);
        head_norm(c->q, &L->q_norm, n, (int)hp->n_head, (int)hd, hp->rms_eps);
        head_norm(c->k, &L->k_norm, n, (int)hp->n_head_kv, (int)hd, hp->rms_eps);
        for (int64_t t = 0; t < n; t++) {
            const float *cs = rope_row(c, pos[t], L->rope_local); /* one precomputed cos/sin row for q and k */
            if (cs) {
                rope_rotate(m, c->q + t * Q, (int)hp->n_head, cs);
                rope_rotate(m, c->k + t * KV, (int)hp->n_head_kv, cs);
                c->rope_hits += 2;
            } else {
                rope(m, c->q + t * Q, (int)hp->n_head, (float)pos[t], L->rope_local);
                rope(m, c->k + t * KV, (int)hp->n_head_kv, (float)pos[t], L->rope_local);
            }
            if (hp->attn_q_scale != 0) /* gemma: after rope, as llama.cpp's ggml_scale of Qcur */
                for (int64_t i = 0; i < Q; i++) c->q[t * Q + i] *= hp->attn_q_scale;
            if (hp->attn_temp_scale != 0.0f) attn_temp(hp, c->q + t * Q, Q, pos[t]);
            void *krow = kv_seq_k(seq[t], L->kv_il, pos[t], c->block_size);
            if (pr && il == pr->il) {
                kv_row_to_f32(c->p.type_k, krow, c->krow, (size_t)KV);
                double d2 = 0.0;
                for (int64_t i = 0; i < KV; i++) {
                    const double d = (double)c->k[t * KV + i] - (double)c->krow[i];
                    d2 += d * d;
                }
                pr->dev[t] = d2;
            }
            kv_row_from_f32(c->p.type_k, c->k + t * KV, krow, (size_t)KV);
            kv_row_from_f32(c->p.type_v, c->v + t * KV, kv_seq_v(seq[t], L->kv_il, pos[t], c->block_size), (size_t)KV);
        }
        if (pr && il == pr->il) return false;
        struct attn_job aj = {c, il, L->kv_il, pos, seq, c->tiles, n_tiles};
        threadpool_run(c->tpool, attn_task, &aj);
        if (hp->attn_gated) /* times sigmoid(gate) before attn_output */
            for (int64_t i = 0; i < n * Q; i++) c->att[i] *= 1.0f / (1.0f + expf(-c->gate[i]));
        ctx_matmul(c, &L->wo, c->att, n, c->xn);
        add_bias(c->xn, &L->bo, n, E);
        post_norm(c->xn, &L->attn_post_norm, n, E, hp->rms_eps);
        if (c->census) {
            c->census->attn_rows += (uint64_t)n;
            c->census->attn_zero_rows += census_zero_rows(c->xn, n, E);
        }
        for (int64_t i = 0; i < n * E; i++) c->x[i] += c->xn[i];
    }
    for (int64_t t = 0; t < n; t++) rmsnorm(c->xn + t * E, c->x + t * E, L->ffn_norm.data, E, hp->rms_eps);
    if (L->ffn_gate_inp.data) {
        moe_ffn(c, il, L, n);
        return true;
    }
    ffn_swiglu(c, &L->w_gate, &L->w_up, &L->w_down, n, c->xn);
    post_norm(c->xn, &L->ffn_post_norm, n, E, hp->rms_eps);
    if (c->census) {
        c->census->ffn_rows += (uint64_t)n;
        c->census->ffn_zero_rows += census_zero_rows(c->xn, n, E);
    }
    for (int64_t i = 0; i < n * E; i++) c->x[i] += c->xn[i];
    return true;
}

/* ---- the MTP block (ctx_params.mtp; llama.cpp's qwen35 graph_mtp) ---------------- */

/* Row t of eh_proj's input: [enorm(embedding of tok) | hnorm(h)], h the final-normed
 * hidden row of the position before (zeros at position 0). */
static void mtp_cat_row(struct dj_context *c, int64_t t, dj_token tok, const float *h) {
    const struct dj_hparams *hp = &c->model->hp;
    const struct dj_layer *L = &c->model->layers[c->mtp_il];
    const int64_t E = hp->n_embd;
    float *cat = c->mtp_cat + (size_t)t * 2 * E;
    embed_row(c, L->nextn_embed.data ? &L->nextn_embed : &c->model->tok_embd, tok, cat + E); /* scratch */
    rmsnorm(cat, cat + E, L->nextn_enorm.data, E, hp->rms_eps);
    rmsnorm(cat + E, h, L->nextn_hnorm.data, E, hp->rms_eps);
}

/* After a ubatch's main layers (c->mtp_h holds its final-normed rows): the MTP block's K
 * and V rows at every position it computed, token t pairing its embedding with the hidden
 * row of pos[t] - 1 (the previous row of its sequence here, or the one its state keeps)
 * — what llama.cpp's MTP context is fed after each target batch; only K and V are needed,
 * the block's attention output is not.  Then each sequence's state (and each snapshot)
 * keeps the hidden row of its last token. */
static void mtp_catch_up(struct dj_context *c, const dj_token *toks, const uint32_t *pos, struct kv_seq *const *seq,
                         int64_t n, float *const *snap) {
    const struct dj_hparams *hp = &c->model->hp;
    const struct dj_layer *L = &c->model->layers[c->mtp_il];
    const int64_t E = hp->n_embd, hd = hp->head_dim, KV = (int64_t)hp->n_head_kv * hd;
    for (int64_t t = 0; t < n; t++) {
        int64_t k = t;
        while (k-- > 0 && seq[k] != seq[t]) {}
        mtp_cat_row(c, t, toks[t], k >= 0 ? c->mtp_h + k * E : seq[t]->rs + c->rs_h); /* consecutive positions */
    }
    ctx_matmul(c, &L->nextn_eh_proj, c->mtp_cat, n, c->x);
    for (int64_t t = 0; t < n; t++) rmsnorm(c->xn + t * E, c->x + t * E, L->attn_norm.data, E, hp->rms_eps);
    const struct dj_weight *kv[2] = {&L->wk, &L->wv};
    float *const kv_out[2] = {c->k, c->v};
    ctx_matmul_n(c, kv, kv_out, 2, c->xn, n);
    head_norm(c->k, &L->k_norm, n, (int)hp->n_head_kv, (int)hd, hp->rms_eps);
    for (int64_t t = 0; t < n; t++) {
        const float *cs = rope_row(c, pos[t], L->rope_local);
        if (cs) rope_rotate(c->model, c->k + t * KV, (int)hp->n_head_kv, cs);
        else rope(c->model, c->k + t * KV, (int)hp->n_head_kv, (float)pos[t], L->rope_local);
        kv_row_from_f32(c->p.type_k, c->k + t * KV, kv_seq_k(seq[t], L->kv_il, pos[t], c->block_size), (size_t)KV);
        kv_row_from_f32(c->p.type_v, c->v + t * KV, kv_seq_v(seq[t], L->kv_il, pos[t], c->block_size), (size_t)KV);
    }
    for (int64_t t = 0; t < n; t++) {
        const float *h = c->mtp_h + t * E;
        if (snap && snap[t]) memcpy(snap[t] + c->rs_h, h, (size_t)E * sizeof(float));
        if (t + 1 < n && seq[t + 1] == seq[t]) continue;
        int64_t k = n;
        while (--k > t && seq[k] != seq[t]) {}
        if (k == t) memcpy(seq[t]->rs + c->rs_h, h, (size_t)E * sizeof(float)); /* its last row */
    }
}

/* Forward pass of one ubatch of n tokens, token t at position pos[t] of
 * sequence seq[t] (their KV rows exist; a sequence's tokens in increasing
 * positions).  logits (if not NULL) get the n_out rows out[0..n_out)
 * (increasing ubatch indices), in order: the output matrix on the final norm
 * of the residual stream after the last layer run.  With pr: stops at layer
 * pr->il after measuring and storing its K/V rows.  With sp: runs the layers
 * sp says, tokens with start layer s > 0 from sp->hidden (their K/V rows of
 * layers < s untouched); every token's rows are computed with the arithmetic
 * of the plain pass, so a resumed token gets the bits it gets unresumed. */
static void forward_ubatch(struct dj_context *c, const dj_token *toks, const uint32_t *pos,
                           struct kv_seq *const *seq, int64_t n_ub, const uint32_t *out, int64_t n_out, float *logits,
                           const struct probe *pr, const struct ub_span *sp, float *const *snap) {
    const struct dj_model *m = c->model;
    const struct dj_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    const uint32_t n_run = sp ? sp->n_run : hp->n_layer;
    const uint32_t *start = sp ? sp->start : NULL;
    const uint32_t *inv = NULL; /* token -> row of c->x, when the rows are not in batch order */
    int64_t n_act = n_ub;       /* rows [0, n_act) run the current layer */
    if (start) {
        if (!ubatch_order(c, start, pos, seq, n_ub)) {
            pos = c->ppos;
            seq = c->pseq;
            inv = c->inv;
        }
        for (int64_t j = 0; j < n_ub; j++) {
            const uint32_t t = inv ? c->perm[j] : (uint32_t)j;
            if (start[t] == 0) embed_row(c, &m->tok_embd, toks[t], c->x + j * E);
            else memcpy(c->x + j * E, sp->hidden + (size_t)t * E, (size_t)E * sizeof(float));
        }
        n_act = 0;
    } else {
        for (int64_t t = 0; t < n_ub; t++) embed_row(c, &m->tok_embd, toks[t], c->x + t * E);
    }
    int64_t n_tiles = start ? 0 : ubatch_tiles(c, pos, seq, n_ub);

    for (uint32_t il = 0; il < n_run; il++) {
        if (start && n_act < n_ub) { /* tokens that start at this layer join */
            const int64_t n0 = n_act;
            while (n_act < n_ub && start[inv ? c->perm[n_act] : (uint32_t)n_act] <= il) n_act++;
            if (n_act == 0) continue;
            if (n_act != n0) n_tiles = ubatch_tiles(c, pos, seq, n_act);
        }
        if (!layer_run(c, il, pos, seq, n_act, n_tiles, pr, snap)) return;
    }

    if (sp && sp->hidden_out) {
        if (inv)
            for (int64_t t = 0; t < n_ub; t++)
                memcpy(sp->hidden_out + t * E, c->x + (int64_t)inv[t] * E, (size_t)E * sizeof(float));
        else
            memcpy(sp->hidden_out, c->x, (size_t)(n_ub * E) * sizeof(float));
    }
    if (c->p.mtp && !sp) { /* every row's final-normed hidden row, the logits' rows among them */
        for (int64_t t = 0; t < n_ub; t++) rmsnorm(c->mtp_h + t * E, c->x + t * E, m->output_norm.data, E, hp->rms_eps);
        if (logits && n_out) {
            for (int64_t r = 0; r < n_out; r++)
                memcpy(c->xn + r * E, c->mtp_h + (int64_t)out[r] * E, (size_t)E * sizeof(float));
            ctx_matmul(c, &m->output, c->xn, n_out, logits);
        }
        mtp_catch_up(c, toks, pos, seq, n_ub, snap);
        return;
    }
    if (!logits || n_out == 0) return;
    for (int64_t r = 0; r < n_out; r++)
        rmsnorm(c->xn + r * E, c->x + (int64_t)(inv ? inv[out[r]] : out[r]) * E, m->output_norm.data, E, hp->rms_eps);
    ctx_matmul(c, &m->output, c->xn, n_out, logits);
    if (hp->final_softcap != 0) softcap_row(logits, n_out * (int64_t)hp->n_vocab, hp->final_softcap);
}

/* The positions of one sequence in a batch: kv rows must exist. */
static enum dj_status check_batch(const struct dj_context *c, const struct dj_batch *b, bool rs_rules) {
    const struct dj_hparams *hp = &c->model->hp;
    if (b->n_tok == 0) return dj_fail(DJ_ERR_INVALID, "forward: no tokens");
    for (size_t i = 0; i < b->n_tok; i++) {
        const struct kv_seq *sq = b->seq[i];
        if (!sq || sq->pool != c->pool) return dj_fail(DJ_ERR_INVALID, "forward: token %zu has no sequence of this pool", i);
        if (b->tok[i] < 0 || (uint32_t)b->tok[i] >= hp->n_vocab)
            return dj_fail(DJ_ERR_INVALID, "forward: token %d at index %zu is outside the vocabulary (%u)", b->tok[i],
                           i, hp->n_vocab);
        if (b->pos[i] >= c->p.n_ctx || b->pos[i] / c->block_size >= sq->n_blocks)
            return dj_fail(DJ_ERR_INVALID, "forward: position %u at index %zu has no KV row (context %u)", b->pos[i],
                           i, c->p.n_ctx);
        for (size_t k = i; k-- > 0;)
            if (b->seq[k] == sq) {
                if (b->pos[k] >= b->pos[i])
                    return dj_fail(DJ_ERR_INVALID, "forward: positions of a sequence do not increase at index %zu", i);
                break;
            }
    }
    for (size_t r = 0; r < b->n_out; r++)
        if (b->out[r] >= b->n_tok || (r > 0 && b->out[r] <= b->out[r - 1]))
            return dj_fail(DJ_ERR_INVALID, "forward: output row %zu (%u) is not an increasing batch index", r, b->out[r]);
    if (hp->rs_floats && rs_rules) /* a recurrent layer continues each sequence's state: from rs_pos, no gaps */
        for (size_t i = 0; i < b->n_tok; i++) {
            const struct kv_seq *sq = b->seq[i];
            size_t k = i;
            while (k-- > 0 && b->seq[k] != sq) {}
            if (k != SIZE_MAX ? b->pos[i] != b->pos[k] + 1 : !sq->rs || sq->rs_pos == KV_RS_NONE)
                return dj_fail(DJ_ERR_INVALID, "forward: token %zu at position %u: %s", i, b->pos[i],
                               k != SIZE_MAX ? "a hybrid model's sequence takes consecutive positions (its recurrent "
                                               "state advances token by token)"
                                             : "the recurrent state of its sequence is unknown (truncated inside or a "
                                               "block appended): restore one (kv_seq_rs_set) or truncate to 0");
            if (k == SIZE_MAX && sq->rs_pos != b->pos[i])
                return dj_fail(DJ_ERR_INVALID, "forward: token %zu at position %u: the recurrent state of its sequence "
                               "is at position %zu; a hybrid model's sequence continues from there", i, b->pos[i],
                               sq->rs_pos);
        }
    return DJ_OK;
}

/* The hybrids' recurrent layers keep one state per sequence, not rows per position: a pass
 * that recomputes positions already held, stops early or resumes from a later layer would
 * need the state at a point it does not keep. */
static enum dj_status refuse_recurrent(const struct dj_context *c, const char *what) {
    if (!c->model->hp.rs_floats) return DJ_OK;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s is not supported for %s (a hybrid model: its recurrent layers keep one state "
                   "per sequence, not rows per position); the engine does not use it for such models", what,
                   model_arch_name(c->model->hp.arch));
}

/* After a ubatch: each of its sequences' recurrent state is after its last token there. */
static void rs_advance(const struct dj_context *c, const uint32_t *pos, struct kv_seq *const *seq, size_t n) {
    if (!c->model->hp.rs_floats) return;
    for (size_t t = 0; t < n; t++) seq[t]->rs_pos = (size_t)pos[t] + 1;
}

/* Start layers of a batch (ctx_forward's resume): each below n_run, and the
 * hidden rows there when any token starts past layer 0. */
static enum dj_status check_start(const struct dj_batch *b, uint32_t n_run, const char *what) {
    if (!b->start_layer) return DJ_OK;
    for (size_t i = 0; i < b->n_tok; i++) {
        if (b->start_layer[i] >= n_run)
            return dj_fail(DJ_ERR_INVALID, "%s: token %zu starts at layer %u, past the last layer run (%u)", what, i,
                           b->start_layer[i], n_run - 1);
        if (b->start_layer[i] > 0 && !b->hidden)
            return dj_fail(DJ_ERR_INVALID, "%s: token %zu starts at layer %u but the batch has no hidden rows", what, i,
                           b->start_layer[i]);
    }
    return DJ_OK;
}

/* One ubatch on the context's device: the GPU runs plain ubatches (every layer from the
 * embeddings); probes, resumed or early-exited layers and state snapshots are CPU-only. */
static enum dj_status run_ubatch(struct dj_context *c, const dj_token *toks, const uint32_t *pos,
                                 struct kv_seq *const *seq, int64_t n_ub, const uint32_t *out, int64_t n_out,
                                 float *logits, const struct probe *pr, const struct ub_span *sp, float *const *snap) {
    if (!c->gpu) {
        forward_ubatch(c, toks, pos, seq, n_ub, out, n_out, logits, pr, sp, snap);
        return DJ_OK;
    }
    if (pr) return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: a K probe does not run on the GPU yet");
    struct gpu_span gs = {NULL, NULL, NULL, NULL, c->model->hp.n_layer, NULL};
    if (sp) { /* the rows ordered by start layer, as forward_ubatch orders them */
        gs.start = sp->start;
        gs.hidden = sp->hidden;
        gs.n_run = sp->n_run;
        gs.hidden_out = sp->hidden_out;
        if (sp->start && !ubatch_order(c, sp->start, pos, seq, n_ub)) {
            pos = c->ppos;
            seq = c->pseq;
            gs.perm = c->perm;
            gs.inv = c->inv;
        }
    }
    const enum dj_status st = gpu_forward_ubatch(c, toks, pos, seq, n_ub, out, n_out, logits, snap, sp ? &gs : NULL);
    const float cap = c->model->hp.final_softcap;
    if (st == DJ_OK && logits && n_out && cap != 0) /* on the host, as the CPU path */
        softcap_row(logits, n_out * (int64_t)c->model->hp.n_vocab, cap);
    return st;
}

/* The batch in ubatches of n_ubatch tokens, in batch order; n_run layers. */
static enum dj_status forward_batch(struct dj_context *c, const struct dj_batch *b, uint32_t n_run, float *hidden, float *logits) {
    const size_t V = c->model->hp.n_vocab, E = c->model->hp.n_embd;
    const bool plain = !b->start_layer && !hidden && n_run == c->model->hp.n_layer;
    size_t r = 0; /* next output row */
    for (size_t done = 0; done < b->n_tok;) {
        const size_t nb = b->n_tok - done < c->p.n_ubatch ? b->n_tok - done : c->p.n_ubatch;
        size_t r1 = r;
        while (r1 < b->n_out && b->out[r1] < done + nb) {
            c->out[r1 - r] = b->out[r1] - (uint32_t)done;
            r1++;
        }
        const struct ub_span sp = {b->start_layer ? b->start_layer + done : NULL,
                                   b->hidden ? b->hidden + done * E : NULL, n_run, hidden ? hidden + done * E : NULL};
        const enum dj_status st =
            run_ubatch(c, b->tok + done, b->pos + done, b->seq + done, (int64_t)nb, c->out, (int64_t)(r1 - r),
                       logits ? logits + r * V : NULL, NULL, plain ? NULL : &sp, b->rs_snap ? b->rs_snap + done : NULL);
        if (st) return st;
        rs_advance(c, b->pos + done, b->seq + done, nb);
        r = r1;
        done += nb;
    }
    return DJ_OK;
}

enum dj_status ctx_forward(struct dj_context *c, const struct dj_batch *b, float *logits) {
    if (b->start_layer && c->model->hp.rs_floats)
        for (size_t i = 0; i < b->n_tok; i++)
            if (b->start_layer[i] > 0) return refuse_recurrent(c, "forward: resuming a token at a later layer");
    enum dj_status st = check_batch(c, b, true);
    if (!st) st = check_start(b, c->model->hp.n_layer, "forward");
    if (st) return st;
    return forward_batch(c, b, c->model->hp.n_layer, NULL, logits);
}

enum dj_status ctx_forward_exit(struct dj_context *c, const struct dj_batch *b, uint32_t n_exit, float *hidden,
                                float *logits) {
    const uint32_t n_layer = c->model->hp.n_layer;
    enum dj_status rst = refuse_recurrent(c, "forward_exit (early exit)");
    if (rst) return rst;
    if (n_exit < 1 || n_exit > n_layer)
        return dj_fail(DJ_ERR_INVALID, "forward_exit: exit after %u layers of a model of %u (1 .. %u)", n_exit,
                       n_layer, n_layer);
    enum dj_status st = check_batch(c, b, true);
    if (!st) st = check_start(b, n_exit, "forward_exit");
    if (st) return st;
    return forward_batch(c, b, n_exit, hidden, logits);
}

enum dj_status ctx_forward_mtp(struct dj_context *c, const struct dj_batch *b, const float *h_in, float *h_out,
                               float *logits) {
    const struct dj_model *m = c->model;
    const struct dj_hparams *hp = &m->hp;
    if (!c->p.mtp)
        return dj_fail(DJ_ERR_UNSUPPORTED, "forward_mtp: the context was not made for MTP drafts (ctx_params.mtp)");
    if (c->gpu) return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: MTP drafts do not run on the GPU yet");
    if (b->start_layer || b->rs_snap)
        return dj_fail(DJ_ERR_INVALID, "forward_mtp: start layers and state snapshots do not apply to the MTP block");
    enum dj_status st = check_batch(c, b, false);
    if (st) return st;
    const int64_t E = hp->n_embd;
    const size_t V = hp->n_vocab;
    const struct dj_layer *L = &m->layers[c->mtp_il];
    const struct dj_weight *norm = L->nextn_head_norm.data ? &L->nextn_head_norm : &m->output_norm;
    const struct dj_weight *head = L->nextn_head.data ? &L->nextn_head : &m->output;
    size_t r = 0; /* next output row */
    for (size_t done = 0; done < b->n_tok;) {
        const size_t nb = b->n_tok - done < c->p.n_ubatch ? b->n_tok - done : c->p.n_ubatch;
        const uint32_t *pos = b->pos + done;
        struct kv_seq *const *seq = b->seq + done;
        for (size_t t = 0; t < nb; t++) mtp_cat_row(c, (int64_t)t, b->tok[done + t], h_in + (done + t) * E);
        ctx_matmul(c, &L->nextn_eh_proj, c->mtp_cat, (int64_t)nb, c->x);
        const int64_t n_tiles = ubatch_tiles(c, pos, seq, (int64_t)nb);
        layer_run(c, c->mtp_il, pos, seq, (int64_t)nb, n_tiles, NULL, NULL);
        for (size_t t = 0; t < nb; t++) rmsnorm(c->mtp_h + t * E, c->x + t * E, norm->data, E, hp->rms_eps);
        if (h_out) memcpy(h_out + done * E, c->mtp_h, nb * (size_t)E * sizeof(float));
        size_t r1 = r;
        while (r1 < b->n_out && b->out[r1] < done + nb) {
            memcpy(c->xn + (r1 - r) * E, c->mtp_h + (size_t)(b->out[r1] - done) * E, (size_t)E * sizeof(float));
            r1++;
        }
        if (logits && r1 > r) ctx_matmul(c, head, c->xn, (int64_t)(r1 - r), logits + r * V);
        r = r1;
        done += nb;
    }
    return DJ_OK;
}

enum dj_status model_mtp_check(const struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    const char *arch = model_arch_name(hp->arch);
    if (hp->arch != DJ_ARCH_QWEN35 && hp->arch != DJ_ARCH_QWEN35MOE)
        return dj_fail(DJ_ERR_UNSUPPORTED, "MTP drafts are implemented for qwen35 and qwen35moe only, not %s", arch);
    if (hp->n_layer_nextn != 1)
        return dj_fail(DJ_ERR_UNSUPPORTED, "MTP drafts need one NextN block; %s has %u (nextn_predict_layers)",
                       gguf_name(m->gguf), hp->n_layer_nextn);
    return DJ_OK;
}

void model_pool_shape(const struct dj_model *m, bool mtp, uint32_t *n_layer_kv, size_t *rs_floats) {
    *n_layer_kv = m->hp.n_layer_kv + (mtp ? 1u : 0u);
    *rs_floats = m->hp.rs_floats + (mtp ? (size_t)m->hp.n_embd : 0);
}

enum dj_status ctx_decode(struct dj_context *c, const dj_token *toks, size_t n, float *logits, bool all_logits) {
    const struct dj_hparams *hp = &c->model->hp;
    if (n == 0) return dj_fail(DJ_ERR_INVALID, "decode: no tokens");
    if (n > (size_t)c->p.n_ctx - c->seq->n_pos)
        return dj_fail(DJ_ERR_INVALID, "decode: %zu tokens at position %zu exceed the context size %u", n,
                       c->seq->n_pos, c->p.n_ctx);
    for (size_t i = 0; i < n; i++)
        if (toks[i] < 0 || (uint32_t)toks[i] >= hp->n_vocab)
            return dj_fail(DJ_ERR_INVALID, "decode: token %d at index %zu is outside the vocabulary (%u)", toks[i], i,
                           hp->n_vocab);
    for (size_t done = 0; done < n;) {
        size_t nb = n - done < c->p.n_ubatch ? n - done : c->p.n_ubatch;
        bool last = done + nb == n;
        float *out = NULL;
        int64_t n_out = 0;
        if (logits && all_logits) {
            out = logits + done * hp->n_vocab;
            n_out = (int64_t)nb;
            for (size_t t = 0; t < nb; t++) c->out[t] = (uint32_t)t;
        } else if (logits && last) {
            out = logits;
            n_out = 1;
            c->out[0] = (uint32_t)(nb - 1);
        }
        enum dj_status st = kv_seq_prepare(c->seq, nb);
        if (st) return st;
        if (hp->rs_floats && (!c->seq->rs || c->seq->rs_pos != c->seq->n_pos))
            return dj_fail(DJ_ERR_INVALID, "decode: the sequence's recurrent state is not at its end (position %zu); "
                           "restore it (kv_seq_rs_set) or truncate the sequence to 0", c->seq->n_pos);
        for (size_t t = 0; t < nb; t++) {
            c->pos[t] = (uint32_t)(c->seq->n_pos + t);
            c->tseq[t] = c->seq;
        }
        if ((st = run_ubatch(c, toks + done, c->pos, c->tseq, (int64_t)nb, c->out, n_out, out, NULL, NULL, NULL)))
            return st;
        rs_advance(c, c->pos, c->tseq, nb);
        kv_seq_advance(c->seq, nb);
        done += nb;
    }
    return DJ_OK;
}

/* Checks the arguments of ctx_decode_at / ctx_probe_k: tokens in range,
 * positions increasing, inside the sequence, in blocks this sequence alone
 * holds and may write (not sealed, not shared). */
static enum dj_status check_at(const struct dj_context *c, const char *what, const dj_token *toks,
                               const uint32_t *pos, size_t n) {
    const struct dj_hparams *hp = &c->model->hp;
    if (n == 0) return dj_fail(DJ_ERR_INVALID, "%s: no tokens", what);
    for (size_t i = 0; i < n; i++) {
        if (toks[i] < 0 || (uint32_t)toks[i] >= hp->n_vocab)
            return dj_fail(DJ_ERR_INVALID, "%s: token %d at index %zu is outside the vocabulary (%u)", what, toks[i], i,
                           hp->n_vocab);
        if (pos[i] >= c->seq->n_pos || (i > 0 && pos[i] <= pos[i - 1]))
            return dj_fail(DJ_ERR_INVALID, "%s: position %u at index %zu is not increasing inside the sequence (%zu)",
                           what, pos[i], i, c->seq->n_pos);
        const uint32_t id = c->seq->table[pos[i] / c->block_size];
        if (kv_pool_is_sealed(c->pool, id) || kv_pool_refcount(c->pool, id) != 1)
            return dj_fail(DJ_ERR_INVALID, "%s: position %u lies in a sealed or shared KV block", what, pos[i]);
    }
    return DJ_OK;
}

/* Runs tokens at positions the sequence holds, n_ubatch at a time; dev NULL:
 * every layer (logits: the last token's), else the probe up to layer il. */
static enum dj_status forward_at(struct dj_context *c, const char *what, const dj_token *toks, const uint32_t *pos,
                                 size_t n, float *logits, uint32_t il, double *dev) {
    enum dj_status st = refuse_recurrent(c, what);
    if (!st) st = check_at(c, what, toks, pos, n);
    if (st) return st;
    for (size_t done = 0; done < n;) {
        size_t nb = n - done < c->p.n_ubatch ? n - done : c->p.n_ubatch;
        struct probe pr = {il, dev ? dev + done : NULL};
        const bool last = done + nb == n && logits;
        for (size_t t = 0; t < nb; t++) c->tseq[t] = c->seq;
        c->out[0] = (uint32_t)(nb - 1);
        if ((st = run_ubatch(c, toks + done, pos + done, c->tseq, (int64_t)nb, c->out, last ? 1 : 0,
                             last ? logits : NULL, dev ? &pr : NULL, NULL, NULL)))
            return st;
        done += nb;
    }
    return DJ_OK;
}

enum dj_status ctx_decode_at(struct dj_context *c, const dj_token *toks, const uint32_t *pos, size_t n,
                             float *logits) {
    return forward_at(c, "decode_at", toks, pos, n, logits, 0, NULL);
}

enum dj_status ctx_probe_k(struct dj_context *c, const dj_token *toks, const uint32_t *pos, size_t n, uint32_t il,
                           double *dev) {
    if (il >= c->model->hp.n_layer)
        return dj_fail(DJ_ERR_INVALID, "probe: layer %u of a model of %u layers", il, c->model->hp.n_layer);
    return forward_at(c, "probe", toks, pos, n, NULL, il, dev);
}

/* ---- context lifetime ---------------------------------------------------------- */

void model_kv_types(const struct dj_model *m, uint32_t *type_k, uint32_t *type_v) {
    if (!m->hp.mla || *type_v == *type_k) return;
    dj_log(DJ_LOG_INFO, "%s: Multi-head Latent Attention keeps one K row per token (its values are the row's first "
           "%u elements): the cache type is K's, %s; the V type %s does not apply", model_arch_name(m->hp.arch),
           m->hp.kv_lora, dj_type_name(*type_k), dj_type_name(*type_v));
    *type_v = *type_k;
}

bool model_kv_k_only(const struct dj_model *m) { return m->hp.mla; }

enum dj_status model_kv_check(const struct dj_model *m, uint32_t type_k, uint32_t type_v) {
    const struct dj_hparams *hp = &m->hp;
    if (!hp->mla) return kv_type_check(type_k, type_v, hp->head_dim);
    /* one K row of kv_lora + rope elements; no V rows (type_v unused) */
    const struct dj_type_info *ti = dj_type_info(type_k);
    if (!kv_type_supported(type_k))
        return dj_fail(DJ_ERR_UNSUPPORTED, "K cache type %s is not one of f32, f16, bf16, q8_0, q4_0",
                       ti && ti->name ? ti->name : "(unknown)");
    if (hp->head_dim % ti->blck)
        return dj_fail(DJ_ERR_UNSUPPORTED, "K cache type %s needs a K row width that is a multiple of %u; this %s model's "
                       "Multi-head Latent Attention row is kv_lora %u + rope %u = %u elements (use f32, f16 or bf16)",
                       ti->name, ti->blck, model_arch_name(hp->arch), hp->kv_lora, hp->n_rot, hp->head_dim);
    return DJ_OK;
}

enum dj_status ctx_create(const struct dj_model *m, struct dj_ctx_params p, struct dj_context **out) {
    const struct dj_hparams *hp = &m->hp;
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train;
    if (p.n_ubatch == 0) p.n_ubatch = 512;
    if (p.n_threads <= 0) p.n_threads = 1;
    if (p.block_size == 0) p.block_size = 64;
    if (p.pool) p.block_size = kv_pool_params(p.pool)->block_size;
    if (hp->n_rot / 2 > 256) return dj_fail(DJ_ERR_UNSUPPORTED, "rope dimension %u is too large", hp->n_rot);
    if (p.n_ubatch > p.n_ctx) p.n_ubatch = p.n_ctx;
    struct dj_context *c = calloc(1, sizeof *c);
    if (!c) return dj_fail(DJ_ERR_NOMEM, "out of memory creating a context");
    c->model = m;
    c->p = p;
    const size_t E = hp->n_embd, hd = hp->head_dim, Q = hp->n_head * hd, KV = hp->n_head_kv * hd, F = hp->n_ff,
                 ub = p.n_ubatch;
    c->block_size = p.block_size;
    c->n_embd_kv = (uint32_t)KV;
    if (p.pool) {
        p.type_k = kv_pool_params(p.pool)->type_k;
        p.type_v = kv_pool_params(p.pool)->type_v;
        c->p = p;
    } else {
        model_kv_types(m, &p.type_k, &p.type_v);
        c->p = p;
    }
    enum dj_status tst = model_kv_check(m, p.type_k, p.type_v);
    if (tst) {
        free(c);
        return tst;
    }
    c->k_head = kv_row_bytes(p.type_k, hd);
    c->v_head = kv_row_bytes(p.type_v, hd);
    if (p.mtp && (tst = model_mtp_check(m))) {
        free(c);
        return tst;
    }
    uint32_t n_layer_kv;
    size_t rs_floats;
    model_pool_shape(m, p.mtp, &n_layer_kv, &rs_floats);
    c->mtp_il = hp->n_layer;
    c->rs_h = hp->rs_floats;
    if (p.pool) {
        const struct kv_pool_params *pp = kv_pool_params(p.pool);
        if (pp->n_layer != n_layer_kv || pp->n_embd_kv != KV || pp->k_only != model_kv_k_only(m) ||
            pp->rs_floats != rs_floats) {
            free(c);
            return dj_fail(DJ_ERR_INVALID, "context: the KV pool's shape (%u layers x %u, %s, %zu state floats) does "
                           "not fit the model (%u x %zu, %s, %zu)", pp->n_layer, pp->n_embd_kv,
                           pp->k_only ? "K only" : "K and V", pp->rs_floats, n_layer_kv, KV,
                           model_kv_k_only(m) ? "K only" : "K and V", rs_floats);
        }
        c->pool = p.pool;
    } else {
        /* one spare block for a copy on write of a partly filled last block */
        struct kv_pool_params pp = {n_layer_kv, (uint32_t)KV, p.block_size,
                                    (p.n_ctx + p.block_size - 1) / p.block_size + 1, p.type_k, p.type_v,
                                    model_kv_k_only(m), rs_floats};
        enum dj_status st = kv_pool_create(&pp, &c->own_pool);
        if (st) {
            free(c);
            return st;
        }
        c->pool = c->own_pool;
    }
    kv_seq_init(&c->own_seq, c->pool);
    c->seq = &c->own_seq;
    size_t wide = E > Q ? E : Q;
    size_t FF = F > hp->n_ff_exp ? F : hp->n_ff_exp;
    const size_t NE = hp->n_expert, NK = hp->n_expert_used, FS = (size_t)hp->n_ff_exp * hp->n_expert_shared;
    if (FS > FF) FF = FS;
    if (hp->n_ff_shexp > FF) FF = hp->n_ff_shexp; /* hybrids' shared expert */
    const size_t FF_ffn = FF; /* the widest row a dense FFN's matmuls take */
    if (NK * hp->n_ff_exp > FF) FF = NK * hp->n_ff_exp; /* ff_g/ff_u: a token's NK experts' rows */
    c->wrow_stride = E > FF_ffn ? E : FF_ffn;
    if (Q > c->wrow_stride) c->wrow_stride = Q;
    /* hybrids: the DeltaNet's widths (S, heads, conv_dim; ssm_out reads rows of VD) */
    const size_t SS = hp->ssm_d_state, DNK = hp->ssm_n_k_heads, DNV = hp->ssm_n_v_heads, DKD = DNK * SS,
                 DVD = DNV * SS, DCD = 2 * DKD + DVD;
    if (hp->rs_floats && DVD > c->wrow_stride) c->wrow_stride = DVD;
    if (p.mtp && 2 * E > c->wrow_stride) c->wrow_stride = 2 * E; /* eh_proj's rows */
    c->x = malloc(ub * E * sizeof(float));
    c->xn = malloc(ub * wide * sizeof(float));
    c->q = malloc(ub * Q * sizeof(float));
    c->k = malloc(ub * KV * sizeof(float));
    c->v = malloc(ub * KV * sizeof(float));
    c->att = malloc(ub * Q * sizeof(float));
    c->ff_g = malloc(ub * FF * sizeof(float));
    c->ff_u = malloc(ub * FF * sizeof(float));
    if (hp->mla) {
        size_t w = hp->q_lora;
        if (hp->kv_lora > w) w = hp->kv_lora;
        if (hp->v_head > w) w = hp->v_head;
        if (hp->qk_nope > w) w = hp->qk_nope;
        c->mla_a = malloc(ub * w * sizeof(float));
        /* mla_heads' scratch: rows of heads x tokens, all heads of a ubatch up to 4096 rows */
        const size_t R = hp->kv_lora, kw = hp->qk_nope > R ? hp->qk_nope : R, ow = hp->v_head > R ? hp->v_head : R;
        c->mla_rows = hp->n_head * ub;
        if (c->mla_rows > 4096) c->mla_rows = 4096 > ub ? 4096 : ub;
        c->mla_g = malloc(c->mla_rows * kw * sizeof(float));
        c->mla_act = malloc(c->mla_rows * kw * sizeof(float)); /* activation rows: <= 4 bytes an element */
        c->mla_y = malloc(ub * hp->n_head * ow * sizeof(float));
    }
    const bool moe = NE > 0;
    const size_t n_grp = 2 * NE > (hp->mla ? hp->n_head : 0) ? 2 * NE : hp->n_head; /* grouped-run slots */
    if (moe || hp->mla) {
        c->grp_w = malloc(n_grp * sizeof *c->grp_w);
        c->grp_a = malloc(n_grp * sizeof *c->grp_a);
        c->grp_nt = malloc(n_grp * sizeof *c->grp_nt);
        c->grp_y = malloc(n_grp * sizeof *c->grp_y);
        c->grp_first = malloc((n_grp + 1) * sizeof *c->grp_first);
    }
    if (moe) {
        c->moe_z = malloc(ub * NE * sizeof(float));
        c->moe_sel = malloc(ub * NK * sizeof(int32_t));
        c->moe_w = malloc(ub * NK * sizeof(float));
        const size_t FE = hp->n_ff_exp, wide_e = E > FE ? E : FE;
        c->moe_pos = malloc(ub * NK * sizeof(uint32_t));
        c->moe_xin = malloc(ub * NK * E * sizeof(float));
        c->moe_y = malloc(ub * E * sizeof(float));
        c->moe_o = malloc(ub * NK * wide_e * sizeof(float)); /* also the up activations: rows of <= E floats */
        c->moe_act = malloc(ub * NK * wide_e * sizeof(float)); /* activation rows of E or FE: <= 4 bytes an element */
        c->moe_orow = malloc(NK * sizeof *c->moe_orow);
        c->moe_ids = malloc(NE * sizeof *c->moe_ids);
        c->moe_off = malloc(NE * sizeof *c->moe_off);
        c->moe_cnt = malloc(NE * sizeof *c->moe_cnt);
    }
    /* attention tiles of up to 8 tokens, fewer where a thread's score rows would pass 8 MiB */
    const size_t row_bytes = (size_t)(hp->n_head / hp->n_head_kv) * p.n_ctx * sizeof(float);
    c->att_tile = (int64_t)((8u << 20) / row_bytes);
    if (c->att_tile > ATT_TILE_MAX) c->att_tile = ATT_TILE_MAX;
    if (c->att_tile < 1) c->att_tile = 1;
    c->scores = malloc((size_t)p.n_threads * (size_t)c->att_tile * row_bytes);
    c->att_probe = malloc((size_t)p.n_threads * row_bytes);
    const bool f32_kv = p.type_k == DJ_TYPE_F32 && p.type_v == DJ_TYPE_F32;
    if (!f32_kv)
        c->kvt = malloc((size_t)p.n_threads * 2 * p.block_size * hd * sizeof(float));
    c->krow = malloc(KV * sizeof(float));
    c->act = malloc(ub * c->wrow_stride * sizeof(float)); /* the widest activation row is F32 */
    c->pos = malloc(ub * sizeof *c->pos);
    c->out = malloc(ub * sizeof *c->out);
    c->tseq = malloc(ub * sizeof *c->tseq);
    c->tiles = malloc(ub * sizeof *c->tiles);
    c->perm = malloc(ub * sizeof *c->perm);
    c->inv = malloc(ub * sizeof *c->inv);
    c->ppos = malloc(ub * sizeof *c->ppos);
    c->pseq = malloc(ub * sizeof *c->pseq);
    bool hyb_ok = true;
    if (hp->attn_gated) {
        c->qg = malloc(ub * 2 * Q * sizeof(float));
        c->gate = malloc(ub * Q * sizeof(float));
        hyb_ok = c->qg && c->gate;
    }
    if (hp->rs_floats) {
        const size_t ow = DVD > 2 * DNV ? DVD : 2 * DNV; /* dn_o also holds beta / alpha before the recurrence */
        c->dn_qkv = malloc(ub * DCD * sizeof(float));
        c->dn_conv = malloc(ub * DCD * sizeof(float));
        c->dn_z = malloc(ub * DVD * sizeof(float));
        c->dn_bg = malloc(ub * 2 * DNV * sizeof(float));
        c->dn_o = malloc(ub * ow * sizeof(float));
        c->dn_tok = malloc(ub * sizeof *c->dn_tok);
        c->dn_off = malloc((ub + 1) * sizeof *c->dn_off);
        c->dn_seq = malloc(ub * sizeof *c->dn_seq);
        bool legacy = false;
        for (uint32_t il = 0; il < hp->n_layer; il++) legacy |= m->layers[il].ssm_in.data != NULL;
        if (legacy) c->dn_in = malloc(ub * (2 * DKD + 2 * DVD) * sizeof(float));
        hyb_ok = hyb_ok && c->dn_qkv && c->dn_conv && c->dn_z && c->dn_bg && c->dn_o && c->dn_tok && c->dn_off &&
                 c->dn_seq && (!legacy || c->dn_in);
    }
    if (p.mtp) {
        c->mtp_h = malloc(ub * E * sizeof(float));
        c->mtp_cat = malloc(ub * 2 * E * sizeof(float));
        hyb_ok = hyb_ok && c->mtp_h && c->mtp_cat;
    }
    c->kern = dj_kernels();
    c->rope_cap = p.rope_table_max < p.n_ctx ? p.rope_table_max : p.n_ctx; /* the table itself grows in rope_row */
    c->tpool = threadpool_create(p.n_threads);
    if (!c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->ff_g || !c->ff_u ||
        !c->scores || !c->att_probe || (!c->kvt && !f32_kv) || !c->krow || !c->act || !c->pos || !c->out || !c->tseq || !c->tiles || !c->perm ||
        !c->inv || !c->ppos || !c->pseq || !c->tpool || !hyb_ok ||
        (hp->mla && (!c->mla_a || !c->mla_g || !c->mla_act || !c->mla_y)) ||
        ((moe || hp->mla) && (!c->grp_w || !c->grp_a || !c->grp_nt || !c->grp_y || !c->grp_first)) || (moe && (!c->moe_z || !c->moe_sel || !c->moe_w || !c->moe_pos || !c->moe_xin || !c->moe_y || !c->moe_o ||
                 !c->moe_act || !c->moe_orow || !c->moe_ids || !c->moe_off || !c->moe_cnt))) {
        ctx_free(c);
        return dj_fail(DJ_ERR_NOMEM, "out of memory creating a context of %u tokens", p.n_ctx);
    }
    if (p.gpu) {
        const enum dj_status st = gpu_ctx_create(c, (int)(p.gpu - 1));
        if (st != DJ_OK) {
            ctx_free(c);
            return st;
        }
    }
    *out = c;
    return DJ_OK;
}

void ctx_free(struct dj_context *c) {
    if (!c) return;
    gpu_ctx_free(c);
    threadpool_destroy(c->tpool);
    kv_seq_free(&c->own_seq);
    kv_pool_destroy(c->own_pool);
    free(c->x);
    free(c->xn);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->ff_g);
    free(c->ff_u);
    free(c->mla_a);
    free(c->mla_g);
    free(c->mla_act);
    free(c->mla_y);
    free(c->moe_z);
    free(c->moe_sel);
    free(c->moe_w);
    free(c->moe_pos);
    free(c->moe_act);
    free(c->moe_orow);
    free(c->moe_ids);
    free(c->moe_off);
    free(c->moe_cnt);
    free(c->grp_w);
    free(c->grp_a);
    free(c->grp_nt);
    free(c->grp_y);
    free(c->grp_first);
    free(c->moe_xin);
    free(c->moe_y);
    free(c->moe_o);
    free(c->scores);
    free(c->att_probe);
    free(c->kvt);
    free(c->krow);
    free(c->act);
    free(c->pos);
    free(c->out);
    free(c->tseq);
    free(c->tiles);
    free(c->perm);
    free(c->inv);
    free(c->ppos);
    free(c->pseq);
    free(c->rope_tab);
    free(c->qg);
    free(c->mtp_h);
    free(c->mtp_cat);
    free(c->gate);
    free(c->dn_qkv);
    free(c->dn_conv);
    free(c->dn_z);
    free(c->dn_bg);
    free(c->dn_o);
    free(c->dn_in);
    free(c->dn_tok);
    free(c->dn_off);
    free(c->dn_seq);
    free(c);
}

void ctx_reset(struct dj_context *c) { kv_seq_truncate(c->seq, 0); }

void ctx_truncate(struct dj_context *c, uint32_t n_pos) { kv_seq_truncate(c->seq, n_pos); }

void ctx_set_seq(struct dj_context *c, struct kv_seq *seq) {
    DJ_ASSERT(!seq || seq->pool == c->pool);
    c->seq = seq ? seq : &c->own_seq;
}

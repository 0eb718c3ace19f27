/*
 * forward_vk.c — a context's forward pass on a Vulkan device (ctx_params.gpu; the backend
 * is src/kernels/vulkan/vk.h).  Issue 32: every architecture deja loads (what model_gpu_check
 * accepts: llama, Mixtral, qwen2/3, qwen3moe, Gemma 2/3, gpt-oss, glm4moe, mistral3, deepseek2's
 * MLA, the qwen35/qwen3next hybrids), every weight type, an f32 or f16 K/V cache; plain
 * ubatches, early exit and resumed tokens (struct gpu_span).
 *
 * Per ubatch: the embedding rows are dequantized on the host and uploaded; every layer
 * runs on the device (RMSNorm, the q/k/v products, RoPE from host-computed cos/sin rows,
 * attention over the paged cache, the output product and residual add, the FFN or the
 * experts: moe_ffn below), except what the host does with the CPU's own code — MoE routing
 * (the router's logits read back) and the hybrids' conv and delta rule (deltanet below);
 * the final norm and the output product give the wanted rows' logits, read back.
 *
 * The K/V cache.  The pool (src/kv) stays the source of truth and device-agnostic: its
 * blocks keep their host bytes, which the persistent store, copy on write and the dedup
 * index use as before.  The device holds a mirror of every block, in the pool's own block
 * layout (K[layer][row][n_embd_kv] | V[...], f32 or f16), addressed by block id:
 *   - a layer's new K/V rows are stored by the device into the mirror in the pool's format
 *     (kv_store.comp: f16 rounded in integers as kv_row_from_f32 rounds), right after its
 *     projections, and packed for the host, which copies them into the pool's blocks once a
 *     ubatch (flush_rows) — so the host and device bytes are the same, with no sync per layer;
 *   - a block whose pool generation differs from the mirror's (allocated since: a copy on
 *     write, a block restored from disk, a recycled id) is uploaded whole before its first
 *     use.  Nothing else writes a block's rows in place while it keeps its generation:
 *     the context refuses the CPU paths that would (probes, resumed layers, MTP).
 * What still syncs inside a ubatch: an MoE layer reads its router's logits back (routing runs
 * on the host).
 *
 * Exactness within the backend: every operation gives each output element one reduction
 * order that depends on its own row, token and position only (vk.h), and the host work
 * (embedding, cos/sin, row conversion) is per token — so a token's logits and K/V rows are
 * the same bits alone or batched, in any ubatch split, and reused rows equal recomputed
 * ones (tests/model/test_gpu.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kernels/vulkan/vk.h"
#include "model/context.h"
#include "model/forward_gpu.h"

#define GPU_PARTS 64 /* buffers a matrix may take (each at most the device's storage buffer range) */

/* A weight on the device: the matrix in its file type, or an f32 vector (norms, in buf).  A
 * matrix larger than one storage buffer can be (lavapipe: 128 MiB; Gemma 3's 262k-row output
 * is 170 MB) is split into parts of part_rows whole rows (whole expert slabs for experts). */
struct gpu_weight {
    struct dj_vk_buf *buf;              /* part 0 */
    struct dj_vk_buf *more[GPU_PARTS - 1]; /* parts 1 .. n_parts - 1 */
    int n_parts;
    int64_t part_rows;
    uint32_t type;
    int64_t k, rows;
    size_t ws;
};

static struct dj_vk_buf *part_buf(const struct gpu_weight *w, int p) { return p ? w->more[p - 1] : w->buf; }

static void weight_free(struct dj_vk *vk, struct gpu_weight *w) {
    for (int p = 0; p < w->n_parts; p++) dj_vk_buf_free(vk, part_buf(w, p));
    if (!w->n_parts) dj_vk_buf_free(vk, w->buf);
}

/* A layer's weights on the device; those the model lacks (q/k norms, biases, the dense FFN of
 * an MoE layer, the experts of a dense one, MLA's) have no buffer. */
struct gpu_layer {
    /* f32 vectors */
    struct gpu_weight attn_norm, ffn_norm, q_norm, k_norm, attn_post_norm, ffn_post_norm, bq, bk, bv, bo;
    struct gpu_weight q_a_norm, kv_a_norm;               /* MLA's */
    struct gpu_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    struct gpu_weight wq_a, wq_b, wkv_a;                 /* MLA: the q LoRA, the latent and k_pe */
    struct gpu_weight wk_b, wv_b;                        /* MLA: per-head slabs (K_b, V_b) */
    struct gpu_weight ffn_gate_inp;                      /* the router */
    struct gpu_weight gate_shexp, up_shexp, down_shexp;  /* shared experts: one dense SwiGLU */
    struct gpu_weight gate_exps_b, up_exps_b, down_exps_b; /* gpt-oss: each expert's bias row, f32, one buffer */
    struct gpu_weight gate_exps, up_exps, down_exps;     /* the experts' slabs, one matrix each */
    struct gpu_weight gate_inp_shexp;                    /* hybrids: the shared expert's gate (one row) */
    /* hybrids' Gated DeltaNet: the projections (one of three layouts) and ssm_out; the conv,
     * the state and the norm stay on the host (ctx_dn_recur) */
    struct gpu_weight ssm_in, ssm_ba, ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_out;
};

/* How a slot is uploaded: a vector; a matrix in parts of any rows; a table in one buffer (the
 * expert biases, read at an expert's row); experts' or heads' slabs kept whole in their parts. */
enum slot_kind { SLOT_VEC, SLOT_MAT, SLOT_ONE, SLOT_EXPERTS, SLOT_HEADS };
struct slot {
    struct gpu_weight *dst;
    const struct dj_weight *src; /* NULL when only dst is wanted (gpu_ctx_free) */
    enum slot_kind kind;
};
#define GPU_LAYER_W 42 /* the weights of a gpu_layer */
/* The device copies of a layer's weights and, with L, the model's weights they copy — the one
 * list gpu_ctx_create uploads and gpu_ctx_free frees. */
static void layer_slots(struct gpu_layer *G, const struct dj_layer *L, struct slot out[GPU_LAYER_W]) {
#define S_(i, f, lf, k) out[i] = (struct slot){&G->f, L ? &L->lf : NULL, k}
    S_(0, attn_norm, attn_norm, SLOT_VEC), S_(1, ffn_norm, ffn_norm, SLOT_VEC), S_(2, q_norm, q_norm, SLOT_VEC);
    S_(3, k_norm, k_norm, SLOT_VEC), S_(4, attn_post_norm, attn_post_norm, SLOT_VEC);
    S_(5, ffn_post_norm, ffn_post_norm, SLOT_VEC), S_(6, bq, bq, SLOT_VEC), S_(7, bk, bk, SLOT_VEC);
    S_(8, bv, bv, SLOT_VEC), S_(9, bo, bo, SLOT_VEC), S_(10, q_a_norm, q_a_norm, SLOT_VEC);
    S_(11, kv_a_norm, kv_a_norm, SLOT_VEC), S_(12, wq, wq, SLOT_MAT), S_(13, wk, wk, SLOT_MAT);
    S_(14, wv, wv, SLOT_MAT), S_(15, wo, wo, SLOT_MAT), S_(16, w_gate, w_gate, SLOT_MAT);
    S_(17, w_up, w_up, SLOT_MAT), S_(18, w_down, w_down, SLOT_MAT), S_(19, wq_a, wq_a, SLOT_MAT);
    S_(20, wq_b, wq_b, SLOT_MAT), S_(21, wkv_a, wkv_a, SLOT_MAT), S_(22, wk_b, wk_b, SLOT_HEADS);
    S_(23, wv_b, wv_b, SLOT_HEADS), S_(24, ffn_gate_inp, ffn_gate_inp, SLOT_MAT);
    S_(25, gate_shexp, ffn_gate_shexp, SLOT_MAT), S_(26, up_shexp, ffn_up_shexp, SLOT_MAT);
    S_(27, down_shexp, ffn_down_shexp, SLOT_MAT), S_(28, gate_exps_b, ffn_gate_exps_b, SLOT_ONE);
    S_(29, up_exps_b, ffn_up_exps_b, SLOT_ONE), S_(30, down_exps_b, ffn_down_exps_b, SLOT_ONE);
    S_(31, gate_exps, ffn_gate_exps, SLOT_EXPERTS), S_(32, up_exps, ffn_up_exps, SLOT_EXPERTS);
    S_(33, down_exps, ffn_down_exps, SLOT_EXPERTS), S_(34, gate_inp_shexp, ffn_gate_inp_shexp, SLOT_MAT);
    S_(35, ssm_in, ssm_in, SLOT_MAT), S_(36, ssm_ba, ssm_ba, SLOT_MAT), S_(37, ssm_qkv, ssm_qkv, SLOT_MAT);
    S_(38, ssm_z, ssm_z, SLOT_MAT), S_(39, ssm_beta, ssm_beta, SLOT_MAT), S_(40, ssm_alpha, ssm_alpha, SLOT_MAT);
    S_(41, ssm_out, ssm_out, SLOT_MAT);
#undef S_
}

struct dj_gpu {
    struct dj_vk *vk;
    struct gpu_layer *layers;
    struct gpu_weight output_norm, output;
    /* the ubatch's activations (n_ubatch rows) */
    struct dj_vk_buf *x, *xn, *q, *k, *v, *att, *g, *u, *cs, *cs_local, *xo, *logits;
    struct dj_vk_buf *gelu;   /* hp.ffn_gelu: the model's GELU table (65536 floats) */
    /* MoE: router logits (n_ubatch, n_expert); per (token, slot) row: the input, gate, up, output */
    struct dj_vk_buf *z, *xin, *ge, *ue, *eo, *sh; /* sh: the shared experts' rows (n_ubatch, n_embd) */
    float *h_temp;            /* (n_ubatch) mistral3's query temperature factors */
    struct dj_vk_buf *qa;     /* MLA: the q LoRA's rows (n_ubatch, q_lora) */
    struct dj_vk_buf *qg, *gate; /* gated attention: per head [q | gate] rows; the gates */
    struct dj_vk_buf *dna, *dnb, *dnc, *dno; /* DeltaNet: the projections' rows; ssm_out's input */
    uint32_t *gidx;           /* (n_ubatch * n_expert_used) the token of each expert row; the wanted rows */
    struct dj_vk_buf *kv;     /* the pool's blocks, max_blocks of block_bytes */
    uint32_t *kv_gen;         /* per block: the pool generation the mirror holds + 1 (0: none) */
    uint32_t max_blocks;
    size_t block_bytes;
    /* the new K/V rows for the host's copy of the pool (store_rows, flush_rows) */
    struct dj_vk_buf *kv_out; /* out_words words: the pending layers' rows, packed */
    uint32_t *h_kvout;        /* its copy on the host */
    size_t out_words, row_w;  /* row_w: words a K (V) row */
    uint32_t *pend_kil, *pend_n, n_pend; /* the pool layers whose rows kv_out holds, in order; their rows */
    size_t *pend_at;          /* where each one's slices start in kv_out, in words */
    uint32_t *row_word;       /* (n_ubatch) where each token's row starts in the mirror, in words */
    float *h_x;               /* (n_ubatch, n_embd) embedding rows; (n_ubatch, n_rot) cos/sin rows */
    float *h_cs, *h_cs_local;
    uint32_t *tab_start, *blocks, *rows_pos; /* the attention's per-token tables; the rope rows */
    size_t blocks_cap;
    struct kv_seq **dseq;     /* (n_ubatch) the ubatch's distinct sequences (tables) */
    uint32_t *dpos, *rows_seq; /* (n_ubatch) their last position, then table start; each token's sequence */
};

/* ---- what runs on the device ------------------------------------------------------ */

enum dj_status model_gpu_check(const struct dj_model *m, uint32_t type_k, uint32_t type_v) {
    const struct dj_hparams *hp = &m->hp;
    const char *why = NULL;
    if (hp->head_dim > 256) why = "heads wider than 256";
    else if (hp->n_rot > hp->head_dim) why = "a rope dimension past the head";
    if (!why)
        for (uint32_t il = 0; il < hp->n_layer && !why; il++) {
            const struct dj_layer *L = &m->layers[il];
            const bool moe = L->ffn_gate_inp.data != NULL;
            if (moe && !L->ffn_gate_exps.data) why = "experts without a gate";
            else if (moe && (L->ffn_gate_exps_b.data != NULL) != (L->ffn_up_exps_b.data != NULL)) why = "one expert bias";
            else if (!moe && !L->w_gate.data) why = "an FFN without a gate";
            else if (L->recurrent && !L->ssm_out.data) why = "a recurrent layer without ssm_out";
            const struct dj_weight *w[27] = {&L->wq,           &L->wk,          &L->wv,          &L->wo,
                                             &L->w_gate,       &L->w_up,        &L->w_down,      &L->ffn_gate_inp,
                                             &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, &L->ffn_gate_shexp,
                                             &L->ffn_up_shexp, &L->ffn_down_shexp, &L->wq_a,     &L->wq_b,
                                             &L->wkv_a,        &L->wk_b,        &L->wv_b,        &L->ffn_gate_inp_shexp,
                                             &L->ssm_in,       &L->ssm_ba,      &L->ssm_qkv,     &L->ssm_z,
                                             &L->ssm_beta,     &L->ssm_alpha,   &L->ssm_out};
            for (int i = 0; i < 27 && !why; i++)
                if (w[i]->data && !dj_vk_matmul_supports(w[i]->type)) why = "a weight type without a Vulkan matmul shader";
        }
    if (!why && !dj_vk_matmul_supports(m->output.type)) why = "a weight type without a Vulkan matmul shader";
    if (why)
        return dj_fail(DJ_ERR_UNSUPPORTED,
                       "vulkan: this model has %s, which the GPU forward pass does not run yet (--device cpu runs it)",
                       why);
    if (type_k != type_v || (type_k != DJ_TYPE_F32 && type_k != DJ_TYPE_F16))
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: K/V cache types %s/%s: the GPU runs f32 or f16, the same for both",
                       dj_type_name(type_k), dj_type_name(type_v));
    return DJ_OK;
}

enum dj_status ctx_gpu_blocks_max(uint32_t gpu, size_t block_bytes, uint64_t *out) {
    struct dj_vk_device_info dev[16];
    size_t n = 0;
    if (dj_vk_devices(dev, 16, &n) != DJ_OK) return DJ_ERR_NOT_FOUND;
    if (gpu == 0 || gpu > n || gpu > 16)
        return dj_fail(DJ_ERR_NOT_FOUND, "vulkan:%u: no such device (%zu reported%s%s; deja inspect --devices)",
                       gpu ? gpu - 1 : 0, n, n ? "" : ": ", n ? "" : dj_vk_why_none());
    const struct dj_vk_device_info *d = &dev[gpu - 1];
    uint64_t cap = d->max_storage_buffer_range / block_bytes;
    if (d->device_local_bytes && d->device_local_bytes / 2 / block_bytes < cap) cap = d->device_local_bytes / 2 / block_bytes;
    *out = cap;
    return DJ_OK;
}

void ctx_device_id(const struct dj_context *c, char *buf, size_t n) {
    if (!c->gpu) {
        snprintf(buf, n, "cpu");
        return;
    }
    const struct dj_vk_device_info *d = dj_vk_info(c->gpu->vk);
    snprintf(buf, n, "vulkan %s %04x:%04x driver %u", d->name, d->vendor_id, d->device_id, d->driver_version);
}

/* ---- set-up -------------------------------------------------------------------------- */

#define GPU_LOGIT_ROWS 16 /* logits rows read back at a time (a big vocabulary's 512 rows would be GiBs) */

/* unit: rows that stay in one part (an expert's slab; 1 for a plain matrix). */
static enum dj_status upload_weight(struct dj_gpu *g, const struct dj_weight *w, bool vector, int64_t unit,
                                    struct gpu_weight *o) {
    if (!w->data) return DJ_OK; /* absent in this layer: no buffer */
    o->type = vector ? DJ_TYPE_F32 : w->type;
    o->k = w->ne0;
    o->rows = vector ? 1 : w->ne1;
    o->ws = vector ? (size_t)w->ne0 * sizeof(float) : w->row_bytes;
    uint64_t range = dj_vk_info(g->vk)->max_storage_buffer_range;
    const char *cap = getenv("DJ_VK_MAX_BUFFER"); /* tests: smaller parts than the device needs */
    if (cap && strtoull(cap, NULL, 10) > 0 && strtoull(cap, NULL, 10) < range) range = strtoull(cap, NULL, 10);
    const int64_t fit = (int64_t)(range / o->ws) / unit * unit; /* rows a part holds */
    if (fit <= 0)
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: %lld rows of %zu bytes do not fit one storage buffer (%llu bytes)",
                       (long long)unit, o->ws, (unsigned long long)range);
    o->part_rows = o->rows < fit ? o->rows : fit;
    const int64_t n_parts = (o->rows + o->part_rows - 1) / o->part_rows;
    if (n_parts > GPU_PARTS)
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: a matrix of %lld x %zu bytes needs more than %d storage buffers",
                       (long long)o->rows, o->ws, GPU_PARTS);
    enum dj_status st = DJ_OK;
    for (int p = 0; p < n_parts && st == DJ_OK; p++) {
        const int64_t r0 = p * o->part_rows, nr = o->rows - r0 < o->part_rows ? o->rows - r0 : o->part_rows;
        struct dj_vk_buf **b = p ? &o->more[p - 1] : &o->buf;
        st = dj_vk_buf_new(g->vk, (size_t)nr * o->ws, false, b);
        if (st == DJ_OK) o->n_parts = p + 1;
        if (st == DJ_OK) st = dj_vk_write(g->vk, *b, 0, (const uint8_t *)w->data + (size_t)r0 * o->ws, (size_t)nr * o->ws);
    }
    return st;
}

static enum dj_status act_buf(struct dj_gpu *g, size_t floats, struct dj_vk_buf **b) {
    return dj_vk_buf_new(g->vk, (floats ? floats : 1) * sizeof(float), true, b);
}

void gpu_ctx_free(struct dj_context *c) {
    struct dj_gpu *g = c->gpu;
    if (!g) return;
    struct dj_vk *vk = g->vk;
    if (vk) {
        if (g->layers)
            for (uint32_t il = 0; il < c->model->hp.n_layer; il++) {
                struct slot sl[GPU_LAYER_W];
                layer_slots(&g->layers[il], NULL, sl);
                for (int i = 0; i < GPU_LAYER_W; i++) weight_free(vk, sl[i].dst);
            }
        weight_free(vk, &g->output_norm);
        weight_free(vk, &g->output);
        struct dj_vk_buf *acts[] = {g->x,      g->xn, g->q, g->k,   g->v,   g->att, g->g,  g->u,
                                    g->cs,     g->xo, g->logits, g->kv, g->z, g->xin, g->ge, g->ue, g->eo,
                                    g->cs_local, g->gelu, g->sh, g->qa, g->kv_out, g->qg, g->gate,
                                    g->dna, g->dnb, g->dnc, g->dno};
        for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) dj_vk_buf_free(vk, acts[i]);
        dj_vk_close(vk);
    }
    free(g->layers);
    free(g->kv_gen);
    free(g->h_kvout);
    free(g->row_word);
    free(g->pend_kil);
    free(g->pend_n);
    free(g->pend_at);
    free(g->h_x);
    free(g->h_cs);
    free(g->h_cs_local);
    free(g->tab_start);
    free(g->blocks);
    free(g->rows_pos);
    free(g->dseq);
    free(g->dpos);
    free(g->rows_seq);
    free(g->gidx);
    free(g->h_temp);
    free(g);
    c->gpu = NULL;
}

enum dj_status gpu_ctx_create(struct dj_context *c, int device) {
    const struct dj_model *m = c->model;
    const struct dj_hparams *hp = &m->hp;
    enum dj_status st = model_gpu_check(m, c->p.type_k, c->p.type_v);
    if (st != DJ_OK) return st;
    if (c->p.mtp) return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: MTP drafts do not run on the GPU yet");
    const struct kv_pool_params *pp = kv_pool_params(c->pool);
    uint32_t n_layer_kv;
    size_t rs_floats;
    model_pool_shape(m, false, &n_layer_kv, &rs_floats);
    if (pp->k_only != hp->mla || pp->n_layer != n_layer_kv)
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: a pool of %u layers (K only: %d) for a model with %u K/V layers",
                       pp->n_layer, (int)pp->k_only, n_layer_kv);
    struct dj_gpu *g = calloc(1, sizeof *g);
    if (!g) return dj_fail(DJ_ERR_NOMEM, "vulkan: out of memory");
    c->gpu = g;
    if ((st = dj_vk_open(device, &g->vk)) != DJ_OK) goto fail;
    const int64_t E = hp->n_embd, hd = hp->head_dim, Q = (int64_t)hp->n_head * hd, KV = (int64_t)hp->n_head_kv * hd;
    const int64_t UB = c->p.n_ubatch, V = hp->n_vocab;
    int64_t F = hp->n_ff; /* g, u: the dense FFN's rows, or the shared experts' where wider */
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if (m->layers[il].ffn_up_shexp.ne1 > F) F = m->layers[il].ffn_up_shexp.ne1;
    g->layers = calloc(hp->n_layer, sizeof *g->layers);
    if (!g->layers) {
        st = dj_fail(DJ_ERR_NOMEM, "vulkan: out of memory");
        goto fail;
    }
    for (uint32_t il = 0; il < hp->n_layer && st == DJ_OK; il++) {
        struct slot sl[GPU_LAYER_W];
        layer_slots(&g->layers[il], &m->layers[il], sl);
        for (int i = 0; i < GPU_LAYER_W && st == DJ_OK; i++) {
            const enum slot_kind kind = sl[i].kind;
            const int64_t unit = kind == SLOT_EXPERTS && hp->n_expert ? sl[i].src->ne1 / hp->n_expert
                                 : kind == SLOT_HEADS                 ? sl[i].src->ne1 / hp->n_head
                                 : kind == SLOT_ONE                   ? sl[i].src->ne1
                                                                      : 1;
            st = upload_weight(g, sl[i].src, kind == SLOT_VEC, unit, sl[i].dst);
        }
    }
    if (st != DJ_OK || (st = upload_weight(g, &m->output_norm, true, 1, &g->output_norm)) != DJ_OK ||
        (st = upload_weight(g, &m->output, false, 1, &g->output)) != DJ_OK)
        goto fail;
    const int64_t W = Q > E ? Q : E;
    if ((st = act_buf(g, (size_t)(UB * E), &g->x)) || (st = act_buf(g, (size_t)(UB * W), &g->xn)) ||
        (st = act_buf(g, (size_t)(UB * Q), &g->q)) || (st = act_buf(g, (size_t)(UB * KV), &g->k)) ||
        (st = act_buf(g, (size_t)(UB * KV), &g->v)) || (st = act_buf(g, (size_t)(UB * Q), &g->att)) ||
        (st = act_buf(g, (size_t)(UB * F), &g->g)) || (st = act_buf(g, (size_t)(UB * F), &g->u)) ||
        (st = act_buf(g, (size_t)(UB * hp->n_rot), &g->cs)) ||
        (hp->rope_local && (st = act_buf(g, (size_t)(UB * hp->n_rot), &g->cs_local))) ||
        (st = act_buf(g, (size_t)((UB < GPU_LOGIT_ROWS ? UB : GPU_LOGIT_ROWS) * E), &g->xo)) ||
        (st = act_buf(g, (size_t)((UB < GPU_LOGIT_ROWS ? UB : GPU_LOGIT_ROWS) * V), &g->logits)))
        goto fail;
    if (hp->ffn_gelu && ((st = dj_vk_buf_new(g->vk, 65536 * sizeof(float), false, &g->gelu)) != DJ_OK ||
                         (st = dj_vk_write(g->vk, g->gelu, 0, m->gelu_tab, 65536 * sizeof(float))) != DJ_OK))
        goto fail;
    const int64_t NE = hp->n_expert, KR = UB * (int64_t)hp->n_expert_used, FE = hp->n_ff_exp;
    if (NE && ((st = act_buf(g, (size_t)(UB * NE), &g->z)) || (st = act_buf(g, (size_t)(KR * E), &g->xin)) ||
               (st = act_buf(g, (size_t)(KR * FE), &g->ge)) || (st = act_buf(g, (size_t)(KR * FE), &g->ue)) ||
               (st = act_buf(g, (size_t)(KR * E), &g->eo)) || (st = act_buf(g, (size_t)(UB * E), &g->sh))))
        goto fail;
    struct kv_pool_stats ps;
    kv_pool_get_stats(c->pool, &ps);
    g->max_blocks = ps.capacity;
    g->block_bytes = ps.block_bytes;
    if ((size_t)g->max_blocks > SIZE_MAX / g->block_bytes) {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: a K/V budget of %u blocks is too large", g->max_blocks);
        goto fail;
    }
    if ((st = dj_vk_buf_new(g->vk, (size_t)g->max_blocks * g->block_bytes, false, &g->kv)) != DJ_OK) {
        dj_error_prefix("vulkan: the K/V cache (%u blocks of %zu bytes; a smaller -c or budget fits)", g->max_blocks,
                        g->block_bytes);
        goto fail;
    }
    g->kv_gen = calloc(g->max_blocks, sizeof *g->kv_gen);
    /* the packed rows of as many layers as one buffer holds (all of them, mostly) */
    g->row_w = kv_row_bytes(c->p.type_k, (size_t)KV) / 4;
    if (kv_row_bytes(c->p.type_k, (size_t)KV) % 4) {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: K/V rows of %lld %s elements are not whole 32-bit words",
                     (long long)KV, dj_type_name(c->p.type_k));
        goto fail;
    }
    const size_t per_layer = (size_t)UB * (hp->mla ? 1 : 2) * g->row_w;
    size_t fit = (size_t)(dj_vk_info(g->vk)->max_storage_buffer_range / 4) / per_layer;
    if (fit > hp->n_layer) fit = hp->n_layer;
    if (!fit) {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: one layer's K/V rows of a %lld-token ubatch exceed a storage buffer",
                     (long long)UB);
        goto fail;
    }
    g->out_words = fit * per_layer;
    if ((st = dj_vk_buf_new(g->vk, g->out_words * 4, true, &g->kv_out)) != DJ_OK) goto fail;
    g->h_kvout = malloc(g->out_words * 4);
    g->row_word = malloc((size_t)UB * sizeof(uint32_t));
    g->pend_kil = malloc((size_t)hp->n_layer * sizeof(uint32_t));
    g->pend_n = malloc((size_t)hp->n_layer * sizeof(uint32_t));
    g->pend_at = malloc((size_t)hp->n_layer * sizeof(size_t));
    g->h_x = malloc((size_t)(UB * E) * sizeof(float));
    g->h_cs = malloc((size_t)(UB * hp->n_rot) * sizeof(float));
    g->h_cs_local = hp->rope_local ? malloc((size_t)(UB * hp->n_rot) * sizeof(float)) : NULL;
    g->tab_start = malloc((size_t)UB * sizeof(uint32_t));
    g->rows_pos = malloc((size_t)UB * sizeof(uint32_t));
    g->dseq = malloc((size_t)UB * sizeof *g->dseq);
    g->dpos = malloc((size_t)UB * sizeof(uint32_t));
    g->rows_seq = malloc((size_t)UB * sizeof(uint32_t));
    g->gidx = malloc((size_t)(KR > UB ? KR : UB) * sizeof(uint32_t));
    g->h_temp = malloc((size_t)UB * sizeof(float));
    if (hp->q_lora && (st = act_buf(g, (size_t)(UB * hp->q_lora), &g->qa)) != DJ_OK) goto fail;
    if (hp->attn_gated && ((st = act_buf(g, (size_t)(2 * UB * Q), &g->qg)) || (st = act_buf(g, (size_t)(UB * Q), &g->gate))))
        goto fail;
    if (hp->rs_floats) {
        const int64_t S = hp->ssm_d_state, KD = (int64_t)hp->ssm_n_k_heads * S, VD = (int64_t)hp->ssm_n_v_heads * S;
        if ((st = act_buf(g, (size_t)(UB * (2 * KD + 2 * VD)), &g->dna)) || (st = act_buf(g, (size_t)(UB * VD), &g->dnb)) ||
            (st = act_buf(g, (size_t)(UB * 2 * hp->ssm_n_v_heads), &g->dnc)) || (st = act_buf(g, (size_t)(UB * VD), &g->dno)))
            goto fail;
    }
    if ((hp->rope_local && !g->h_cs_local) || !g->h_temp || !g->gidx || !g->kv_gen || !g->h_kvout ||
        !g->row_word || !g->pend_kil || !g->pend_n || !g->pend_at || !g->h_x || !g->h_cs || !g->tab_start || !g->rows_pos ||
        !g->dseq || !g->dpos || !g->rows_seq) {
        st = dj_fail(DJ_ERR_NOMEM, "vulkan: out of memory");
        goto fail;
    }
    return DJ_OK;
fail:
    gpu_ctx_free(c);
    return st;
}

size_t gpu_mirror_diff(struct dj_context *c, size_t *n_checked) {
    struct dj_gpu *g = c->gpu;
    size_t bad = 0, n = 0;
    uint8_t *buf = g ? malloc(g->block_bytes) : NULL;
    for (uint32_t id = 0; buf && id < g->max_blocks; id++) {
        if (g->kv_gen[id] != kv_pool_gen(c->pool, id) + 1) continue; /* not mirrored, or stale */
        n++;
        if (dj_vk_read(g->vk, g->kv, (size_t)id * g->block_bytes, buf, g->block_bytes) != DJ_OK ||
            memcmp(buf, kv_pool_data(c->pool, id), g->block_bytes))
            bad++;
    }
    free(buf);
    if (n_checked) *n_checked = n;
    return bad;
}

/* ---- one ubatch ------------------------------------------------------------------------ */

#define TRY(x)                                                                                                     \
    do {                                                                                                           \
        const enum dj_status st_ = (x);                                                                            \
        if (st_ != DJ_OK) return st_;                                                                              \
    } while (0)

/* out (rows of w->rows a token, from float c_off) = W a for n tokens, a part at a time: part p's
 * rows land at columns p * part_rows.  A row's result does not depend on which part holds it. */
static enum dj_status mm_at(struct dj_gpu *g, const struct gpu_weight *w, struct dj_vk_buf *a, struct dj_vk_buf *out,
                            size_t c_off, int64_t n) {
    for (int p = 0; p < w->n_parts; p++) {
        const int64_t r0 = p * w->part_rows, nr = w->rows - r0 < w->part_rows ? w->rows - r0 : w->part_rows;
        TRY(dj_vk_matmul(g->vk, w->type, w->k, part_buf(w, p), 0, w->ws, a, 0, (size_t)w->k, out, c_off + (size_t)r0,
                         (size_t)w->rows, 0, nr, n));
    }
    return DJ_OK;
}

static enum dj_status mm(struct dj_gpu *g, const struct gpu_weight *w, struct dj_vk_buf *a, struct dj_vk_buf *out,
                         int64_t n) {
    return mm_at(g, w, a, out, 0, n);
}

/* The ubatch's block tables: one per distinct sequence, up to the block of its last position in
 * the ubatch (its tokens' positions increase, so every token's keys are in it); a token's
 * tab_start is its sequence's table.  And the mirror brought up to date for every block they
 * name, each checked once. */
static enum dj_status tables(struct dj_context *c, const uint32_t *pos, struct kv_seq *const *seq, int64_t n,
                             size_t *n_blocks) {
    struct dj_gpu *g = c->gpu;
    const uint32_t bs = c->block_size;
    size_t nd = 0, need = 0; /* distinct sequences: g->dseq[i], their last position g->dpos[i] */
    for (int64_t t = 0; t < n; t++) {
        size_t i = 0;
        while (i < nd && g->dseq[i] != seq[t]) i++;
        if (i == nd) {
            g->dseq[nd] = seq[t];
            g->dpos[nd++] = pos[t];
        } else if (pos[t] > g->dpos[i]) {
            g->dpos[i] = pos[t];
        }
        g->rows_seq[t] = (uint32_t)i;
    }
    for (size_t i = 0; i < nd; i++) need += g->dpos[i] / bs + 1;
    if (need > g->blocks_cap) {
        uint32_t *b = realloc(g->blocks, need * sizeof *b);
        if (!b) return dj_fail(DJ_ERR_NOMEM, "vulkan: out of memory");
        g->blocks = b;
        g->blocks_cap = need;
    }
    size_t at = 0;
    for (size_t i = 0; i < nd; i++) {
        const size_t start = at;
        for (uint32_t j = 0; j <= g->dpos[i] / bs; j++) {
            const uint32_t id = g->dseq[i]->table[j];
            g->blocks[at++] = id;
            const uint32_t gen = kv_pool_gen(c->pool, id) + 1;
            if (g->kv_gen[id] != gen) { /* allocated since the mirror last saw it: all of its bytes */
                TRY(dj_vk_write(g->vk, g->kv, (size_t)id * g->block_bytes, kv_pool_data(c->pool, id), g->block_bytes));
                g->kv_gen[id] = gen;
            }
        }
        g->dpos[i] = (uint32_t)start; /* from here on: the table's start */
    }
    for (int64_t t = 0; t < n; t++) g->tab_start[t] = g->dpos[g->rows_seq[t]];
    *n_blocks = at;
    return DJ_OK;
}

/* Slab e (rows `rows` of a matrix stored as slabs: experts, MLA's heads) over n_tok rows of a
 * (from float a_off, as apart) into c (from c_off, ldc apart). */
static enum dj_status mm_slab(struct dj_gpu *g, const struct gpu_weight *w, uint32_t e, int64_t rows,
                              struct dj_vk_buf *a, size_t a_off, size_t as, struct dj_vk_buf *out, size_t c_off, size_t ldc,
                              int64_t n_tok) {
    const int64_t r = (int64_t)e * rows, p = r / w->part_rows; /* parts hold whole slabs */
    return dj_vk_matmul(g->vk, w->type, w->k, part_buf(w, (int)p), (size_t)(r - p * w->part_rows) * w->ws, w->ws, a,
                        a_off, as, out, c_off, ldc, 0, rows, n_tok);
}

/* Expert e's slab of an experts matrix (ne1 = n_expert slabs of `rows` rows) over n_tok rows of
 * a (from row a_row, k floats each) into c (from row c_row, `rows` floats each). */
static enum dj_status mm_expert(struct dj_gpu *g, const struct gpu_weight *w, uint32_t e, int64_t rows,
                                struct dj_vk_buf *a, int64_t a_row, struct dj_vk_buf *out, int64_t c_row, int64_t n_tok) {
    return mm_slab(g, w, e, rows, a, (size_t)(a_row * w->k), (size_t)w->k, out, (size_t)(c_row * rows), (size_t)rows,
                   n_tok);
}

/* The host's copy of the pool: the rows kv_store packed into g->kv_out since the last flush
 * (per pending pool layer g->pend_kil[l]: its K then V slice of the first g->pend_n[l] rows of
 * the ubatch, from word g->pend_at[l]), read back at once and copied into the pool's blocks —
 * the mirror's own bytes. */
static enum dj_status flush_rows(struct dj_context *c, const uint32_t *pos, struct kv_seq *const *seq) {
    struct dj_gpu *g = c->gpu;
    const uint32_t n_lay = g->n_pend, bs = c->block_size;
    if (!n_lay) return DJ_OK;
    const int kinds = c->model->hp.mla ? 1 : 2; /* MLA's pool: one K row, no V */
    const size_t words = g->pend_at[n_lay - 1] + (size_t)kinds * g->pend_n[n_lay - 1] * g->row_w;
    TRY(dj_vk_read(g->vk, g->kv_out, 0, g->h_kvout, words * 4)); /* waits for the work recorded */
    for (uint32_t l = 0; l < n_lay; l++) {
        const uint32_t kil = g->pend_kil[l];
        const size_t nr = g->pend_n[l];
        for (int kv = 0; kv < kinds; kv++)
            for (size_t t = 0; t < nr; t++) {
                void *row = kv ? kv_seq_v(seq[t], kil, pos[t], bs) : kv_seq_k(seq[t], kil, pos[t], bs);
                memcpy(row, g->h_kvout + g->pend_at[l] + ((size_t)kv * nr + t) * g->row_w, g->row_w * 4);
            }
    }
    g->n_pend = 0;
    return DJ_OK;
}

/* Layer il's new K (and V) rows (of the ubatch's first n rows), f32 in g->k / g->v on the
 * device: stored in the pool's format into the mirror where their blocks are (kv_store.comp),
 * no readback before the attention that reads them; and packed into g->kv_out for the host's
 * copy (flush_rows: once a ubatch, or when kv_out is full). */
static enum dj_status store_rows(struct dj_context *c, uint32_t il, const uint32_t *pos, struct kv_seq *const *seq,
                                 int64_t n) {
    struct dj_gpu *g = c->gpu;
    const struct dj_hparams *hp = &c->model->hp;
    const int64_t KV = (int64_t)hp->n_head_kv * hp->head_dim;
    const uint32_t bs = c->block_size, NL = kv_pool_params(c->pool)->n_layer, kil = c->model->layers[il].kv_il;
    const int kinds = hp->mla ? 1 : 2;
    const bool f16 = c->p.type_k == DJ_TYPE_F16;
    const size_t slice = (size_t)n * g->row_w; /* words of this layer's K (or V) rows */
    size_t at = g->n_pend ? g->pend_at[g->n_pend - 1] + (size_t)kinds * g->pend_n[g->n_pend - 1] * g->row_w : 0;
    if (at + (size_t)kinds * slice > g->out_words) {
        TRY(flush_rows(c, pos, seq));
        at = 0;
    }
    for (int kv = 0; kv < kinds; kv++) {
        for (int64_t t = 0; t < n; t++) {
            const uint32_t id = seq[t]->table[pos[t] / bs], r = pos[t] % bs;
            g->row_word[t] = (uint32_t)(((size_t)id * g->block_bytes + ((size_t)(kv ? NL + kil : kil) * bs + r) *
                                         g->row_w * 4) / 4);
        }
        TRY(dj_vk_kv_store(g->vk, g->kv, kv ? g->v : g->k, (size_t)KV, n, KV, f16, g->row_word, g->kv_out,
                           at + (size_t)kv * slice));
    }
    g->pend_kil[g->n_pend] = kil;
    g->pend_n[g->n_pend] = (uint32_t)n;
    g->pend_at[g->n_pend++] = at;
    return DJ_OK;
}

/* The attention half of a deepseek2 layer (Multi-head Latent Attention, absorbed: forward.c
 * mla_layer's equations) on g->xn, its output added to g->x.  Buffers: att holds the raw
 * queries (n, H, nope + rope), then the latent outputs o~ (n, H, kv_lora); q the absorbed
 * queries [q~ | q_pe] (n, H, kv_lora + rope), then V_b's outputs (n, H * v_head); k the K rows
 * [c | k_pe] (n, kv_lora + rope), which are the pool's (K only; the value is c). */
static enum dj_status mla_attn(struct dj_context *c, uint32_t il, const uint32_t *pos, struct kv_seq *const *seq,
                               int64_t n, size_t n_blocks) {
    struct dj_gpu *g = c->gpu;
    struct dj_vk *vk = g->vk;
    const struct dj_hparams *hp = &c->model->hp;
    const struct gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->kv_lora, N = hp->qk_nope, P = hp->n_rot, VH = hp->v_head,
                  D = R + P, QW = N + P;
    const bool neox = hp->rope_type == DJ_ROPE_NEOX;
    if (G->wq.buf) {
        TRY(mm(g, &G->wq, g->xn, g->att, n));
    } else { /* the q LoRA: Wq_b rms(Wq_a xn) */
        TRY(mm(g, &G->wq_a, g->xn, g->qa, n));
        TRY(dj_vk_rmsnorm(vk, g->qa, (size_t)hp->q_lora, G->q_a_norm.buf, g->qa, (size_t)hp->q_lora, hp->q_lora, n,
                          hp->rms_eps));
        TRY(mm(g, &G->wq_b, g->qa, g->att, n));
    }
    TRY(mm(g, &G->wkv_a, g->xn, g->k, n)); /* [c_raw | k_pe]; c = rms(c_raw) in place */
    TRY(dj_vk_rmsnorm(vk, g->k, (size_t)D, G->kv_a_norm.buf, g->k, (size_t)D, R, n, hp->rms_eps));
    TRY(dj_vk_rope(vk, g->k, (size_t)R, (size_t)D, n, 1, (int)P, (int)P, neox, g->cs, (size_t)P, g->rows_pos));
    TRY(dj_vk_rope(vk, g->att, (size_t)N, (size_t)(H * QW), n, (int)H, (int)QW, (int)P, neox, g->cs, (size_t)P,
                   g->rows_pos));
    c->rope_hits += 2 * (uint64_t)n;
    TRY(store_rows(c, il, pos, seq, n));
    for (int64_t h = 0; h < H; h++) /* q~_h = K_b[h]^T q_nope_h into q's first kv_lora of head h */
        TRY(mm_slab(g, &G->wk_b, (uint32_t)h, R, g->att, (size_t)(h * QW), (size_t)(H * QW), g->q, (size_t)(h * D),
                    (size_t)(H * D), n));
    /* q_pe after it: rows (t, h) of P floats, QW apart from N in att, D apart from R in q */
    TRY(dj_vk_gather(vk, g->q, (size_t)R, (size_t)D, g->att, (size_t)N, (size_t)QW, P, NULL, n * H));
    const bool f16 = c->p.type_k == DJ_TYPE_F16;
    const size_t k_off = (size_t)c->model->layers[il].kv_il * c->block_size * (size_t)D;
    const struct dj_vk_attn_shape sh = {(uint32_t)H, 1, (uint32_t)D, c->block_size, g->block_bytes / (f16 ? 2 : 4),
                                        k_off, k_off, (size_t)D, (size_t)(H * D), hp->kq_scale, f16, 0, 0, NULL,
                                        (uint32_t)R, (size_t)(H * R)};
    TRY(dj_vk_attn(vk, &sh, g->q, g->kv, g->att, n, pos, g->tab_start, g->blocks, n_blocks));
    for (int64_t h = 0; h < H; h++) /* o_h = V_b[h] o~_h into q as (n, H * v_head) */
        TRY(mm_slab(g, &G->wv_b, (uint32_t)h, VH, g->att, (size_t)(h * R), (size_t)(H * R), g->q, (size_t)(h * VH),
                    (size_t)(H * VH), n));
    TRY(mm(g, &G->wo, g->q, g->xn, n));
    return dj_vk_add(vk, g->x, 0, g->xn, 0, n * E);
}

/* The dense FFN of the n rows of g->xn into out (rows of n_embd): down(act(gate x) * up x), act
 * SiLU or the model's GELU (forward.c ffn_swiglu). */
static enum dj_status dense_ffn(struct dj_gpu *g, const struct gpu_weight *gate, const struct gpu_weight *up,
                                const struct gpu_weight *down, int64_t n, struct dj_vk_buf *out) {
    TRY(mm(g, gate, g->xn, g->g, n));
    TRY(mm(g, up, g->xn, g->u, n));
    if (g->gelu) TRY(dj_vk_geglu(g->vk, g->g, 0, g->u, 0, n * up->rows, g->gelu));
    else TRY(dj_vk_swiglu(g->vk, g->g, 0, g->u, 0, n * up->rows));
    return mm(g, down, g->g, out, n);
}

/* Each used expert's bias row (b: (width, n_expert) f32, one buffer) added to its block of y. */
static enum dj_status experts_bias(struct dj_context *c, int n_used, const struct gpu_weight *b, struct dj_vk_buf *y,
                                   int64_t width) {
    for (int u = 0; u < n_used; u++)
        TRY(dj_vk_add_bias(c->gpu->vk, y, (size_t)(c->moe_off[u] * width), b->buf, (size_t)c->moe_ids[u] * (size_t)width,
                           width, c->moe_cnt[u]));
    return DJ_OK;
}

/* x += MoE(xn) for the ubatch's n rows (forward.c moe_ffn's equations): the router's logits
 * are read back and routed on the host by forward.c's own code (ctx_moe_route), so a token
 * picks its experts as on the CPU for the same logits; each used expert then runs over the
 * rows of the tokens that chose it (gathered into one block per expert, in ubatch order) and
 * each token sums its experts' outputs in its selection order (moe_sum.comp).  An expert row's
 * result is mm.comp's, whatever other tokens share its block, so a token's bits do not depend
 * on the batch. */
static enum dj_status moe_ffn(struct dj_context *c, uint32_t il, int64_t n) {
    struct dj_gpu *g = c->gpu;
    const struct dj_hparams *hp = &c->model->hp;
    const struct gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, NE = hp->n_expert, K = hp->n_expert_used, FE = hp->n_ff_exp;
    TRY(mm(g, &G->ffn_gate_inp, g->xn, g->z, n));
    TRY(dj_vk_read(g->vk, g->z, 0, c->moe_z, (size_t)(n * NE) * sizeof(float)));
    ctx_moe_route(c, il, &c->model->layers[il], n);
    int64_t rows = 0;
    const int n_used = ctx_moe_group(c, n, &rows);
    for (int64_t t = 0; t < n; t++)
        for (int64_t s = 0; s < K; s++) g->gidx[c->moe_pos[t * K + s]] = (uint32_t)t;
    TRY(dj_vk_gather(g->vk, g->xin, 0, (size_t)E, g->xn, 0, (size_t)E, E, g->gidx, rows));
    for (int u = 0; u < n_used; u++) {
        const uint32_t e = c->moe_ids[u];
        TRY(mm_expert(g, &G->gate_exps, e, FE, g->xin, c->moe_off[u], g->ge, c->moe_off[u], c->moe_cnt[u]));
        TRY(mm_expert(g, &G->up_exps, e, FE, g->xin, c->moe_off[u], g->ue, c->moe_off[u], c->moe_cnt[u]));
    }
    const bool oss = hp->arch == DJ_ARCH_GPT_OSS; /* biased experts, the clamped SwiGLU (forward.c moe_ffn) */
    if (G->gate_exps_b.buf) {
        TRY(experts_bias(c, n_used, &G->gate_exps_b, g->ge, FE));
        TRY(experts_bias(c, n_used, &G->up_exps_b, g->ue, FE));
    }
    if (oss) TRY(dj_vk_swiglu_oai(g->vk, g->ge, 0, g->ue, 0, rows * FE));
    else TRY(dj_vk_swiglu(g->vk, g->ge, 0, g->ue, 0, rows * FE));
    for (int u = 0; u < n_used; u++)
        TRY(mm_expert(g, &G->down_exps, c->moe_ids[u], E, g->ge, c->moe_off[u], g->eo, c->moe_off[u], c->moe_cnt[u]));
    if (G->down_exps_b.buf) TRY(experts_bias(c, n_used, &G->down_exps_b, g->eo, E));
    /* shared experts (deepseek2, glm4moe): a dense SwiGLU of the same rows, joined before the residual */
    const bool shexp = G->up_shexp.buf != NULL;
    if (shexp) TRY(dense_ffn(g, &G->gate_shexp, &G->up_shexp, &G->down_shexp, n, g->sh));
    if (shexp && G->gate_inp_shexp.buf) { /* hybrids: the shared expert times sigmoid(gate . xn), on the host */
        TRY(mm(g, &G->gate_inp_shexp, g->xn, g->z, n));
        TRY(dj_vk_read(g->vk, g->z, 0, c->moe_z, (size_t)n * sizeof(float)));
        for (int64_t t = 0; t < n; t++) c->moe_z[t] = 1.0f / (1.0f + expf(-c->moe_z[t]));
        TRY(dj_vk_scale_rows(g->vk, g->sh, E, n, c->moe_z));
    }
    return dj_vk_moe_sum(g->vk, g->x, g->eo, E, n, (int)K, c->moe_pos, c->moe_w, shexp ? g->sh : NULL);
}

/* A hybrid's recurrent layer (Gated DeltaNet) on g->xn, its output added to g->x: the
 * projections on the device, read back into the host buffers in the layouts forward.c's
 * dn_project leaves (one sync); the conv, the delta rule over each sequence's state and the
 * gated norm on the host with the CPU's own code (ctx_dn_recur; snapshots as on the CPU); the
 * rows uploaded for ssm_out on the device.  The state stays in kv_seq.rs on the host. */
static enum dj_status deltanet(struct dj_context *c, uint32_t il, struct kv_seq *const *seq, int64_t n,
                               float *const *snap) {
    struct dj_gpu *g = c->gpu;
    struct dj_vk *vk = g->vk;
    const struct dj_hparams *hp = &c->model->hp;
    const struct dj_layer *L = &c->model->layers[il];
    const struct gpu_layer *G = &g->layers[il];
    const int64_t S = hp->ssm_d_state, NV = hp->ssm_n_v_heads, KD = (int64_t)hp->ssm_n_k_heads * S, VD = NV * S;
    const size_t fl = sizeof(float);
    if (G->ssm_in.buf) { /* qwen3next's older layout */
        TRY(mm(g, &G->ssm_in, g->xn, g->dna, n));
        TRY(mm(g, &G->ssm_ba, g->xn, g->dnc, n));
        TRY(dj_vk_read(vk, g->dna, 0, c->dn_in, (size_t)(n * (2 * KD + 2 * VD)) * fl));
        TRY(dj_vk_read(vk, g->dnc, 0, c->dn_bg, (size_t)(n * 2 * NV) * fl));
    } else {
        TRY(mm(g, &G->ssm_qkv, g->xn, g->dna, n));
        TRY(mm(g, &G->ssm_z, g->xn, g->dnb, n));
        if (G->ssm_ba.buf) {
            TRY(mm(g, &G->ssm_ba, g->xn, g->dnc, n));
        } else { /* beta rows, then alpha rows (forward.c's dn_o layout) */
            TRY(mm(g, &G->ssm_beta, g->xn, g->dnc, n));
            TRY(mm_at(g, &G->ssm_alpha, g->xn, g->dnc, (size_t)(n * NV), n));
        }
        TRY(dj_vk_read(vk, g->dna, 0, c->dn_qkv, (size_t)(n * (2 * KD + VD)) * fl));
        TRY(dj_vk_read(vk, g->dnb, 0, c->dn_z, (size_t)(n * VD) * fl));
        TRY(dj_vk_read(vk, g->dnc, 0, G->ssm_ba.buf ? c->dn_bg : c->dn_o, (size_t)(n * 2 * NV) * fl));
    }
    ctx_dn_recur(c, L, seq, n, snap);
    TRY(dj_vk_write(vk, g->dno, 0, c->dn_o, (size_t)(n * VD) * fl));
    TRY(mm(g, &G->ssm_out, g->dno, g->xn, n));
    return dj_vk_add(vk, g->x, 0, g->xn, 0, n * hp->n_embd);
}

/* Layer il over rows [0, n) of the ubatch (g->x), row t at pos[t] of seq[t]: its input norm,
 * attention (MLA, recurrent or plain), FFN and residuals, as forward.c's layer_run. */
static enum dj_status layer(struct dj_context *c, uint32_t il, const uint32_t *pos, struct kv_seq *const *seq, int64_t n,
                            size_t n_blocks, float *const *snap) {
    const struct dj_model *m = c->model;
    const struct dj_hparams *hp = &m->hp;
    struct dj_gpu *g = c->gpu;
    struct dj_vk *vk = g->vk;
    const int64_t E = hp->n_embd, hd = hp->head_dim, Q = (int64_t)hp->n_head * hd, KV = (int64_t)hp->n_head_kv * hd;
    const int64_t R = hp->n_rot;
    const uint32_t bs = c->block_size, NLP = kv_pool_params(c->pool)->n_layer; /* the pool's layers */
    const bool f16 = c->p.type_k == DJ_TYPE_F16;
    const size_t esz = f16 ? 2 : 4, row_e = (size_t)KV;
    const struct gpu_layer *G = &g->layers[il];
    TRY(dj_vk_rmsnorm(vk, g->x, (size_t)E, G->attn_norm.buf, g->xn, (size_t)E, E, n, hp->rms_eps));
    if (hp->mla) {
        TRY(mla_attn(c, il, pos, seq, n, n_blocks));
        goto ffn;
    }
    if (m->layers[il].recurrent) {
        TRY(deltanet(c, il, seq, n, snap));
        goto ffn;
    }
    if (hp->attn_gated) { /* per head [q | gate] (forward.c): split into q and the gates */
        TRY(mm(g, &G->wq, g->xn, g->qg, n));
        TRY(dj_vk_gather(vk, g->q, 0, (size_t)hd, g->qg, 0, 2 * (size_t)hd, hd, NULL, n * hp->n_head));
        TRY(dj_vk_gather(vk, g->gate, 0, (size_t)hd, g->qg, (size_t)hd, 2 * (size_t)hd, hd, NULL, n * hp->n_head));
    } else {
        TRY(mm(g, &G->wq, g->xn, g->q, n));
    }
    TRY(mm(g, &G->wk, g->xn, g->k, n));
    TRY(mm(g, &G->wv, g->xn, g->v, n));
    if (G->bq.buf) TRY(dj_vk_add_bias(vk, g->q, 0, G->bq.buf, 0, Q, n)); /* qwen2, gpt-oss, glm4moe */
    if (G->bk.buf) TRY(dj_vk_add_bias(vk, g->k, 0, G->bk.buf, 0, KV, n));
    if (G->bv.buf) TRY(dj_vk_add_bias(vk, g->v, 0, G->bv.buf, 0, KV, n));
    if (G->q_norm.buf) /* qwen3: each head's RMSNorm before rope, in place (one head a "token") */
        TRY(dj_vk_rmsnorm(vk, g->q, (size_t)hd, G->q_norm.buf, g->q, (size_t)hd, hd, n * hp->n_head, hp->rms_eps));
    if (G->k_norm.buf)
        TRY(dj_vk_rmsnorm(vk, g->k, (size_t)hd, G->k_norm.buf, g->k, (size_t)hd, hd, n * hp->n_head_kv, hp->rms_eps));
    const struct dj_vk_buf *cs = m->layers[il].rope_local ? g->cs_local : g->cs;
    TRY(dj_vk_rope(vk, g->q, 0, (size_t)Q, n, (int)hp->n_head, (int)hd, (int)R, hp->rope_type == DJ_ROPE_NEOX,
                   cs, (size_t)R, g->rows_pos));
    TRY(dj_vk_rope(vk, g->k, 0, (size_t)KV, n, (int)hp->n_head_kv, (int)hd, (int)R,
                   hp->rope_type == DJ_ROPE_NEOX, cs, (size_t)R, g->rows_pos));
    c->rope_hits += 2 * (uint64_t)n; /* rotations from the host's table, q and k, as the CPU counts them */
    if (hp->attn_temp_scale != 0) { /* mistral3: each query row times its position's factor */
        for (int64_t t = 0; t < n; t++) g->h_temp[t] = ctx_attn_temp(hp, pos[t]);
        TRY(dj_vk_scale_rows(vk, g->q, Q, n, g->h_temp));
    }
    TRY(store_rows(c, il, pos, seq, n)); /* to the pool as the CPU path stores them, and the mirror */
    const size_t kil = m->layers[il].kv_il;
    const struct dj_vk_attn_shape sh = {hp->n_head, hp->n_head_kv, (uint32_t)hd,
                                        bs, g->block_bytes / esz, kil * bs * row_e,
                                        (NLP + kil) * bs * row_e, row_e, (size_t)Q,
                                        /* gemma scales the query after rope by attn_q_scale and the
                                           scores by 1: here the scores, by the same factor */
                                        hp->attn_q_scale != 0 ? hp->attn_q_scale : 1.0f / sqrtf((float)hd),
                                        f16, m->layers[il].n_swa, hp->attn_softcap,
                                        (const float *)m->layers[il].attn_sinks.data};
    TRY(dj_vk_attn(vk, &sh, g->q, g->kv, g->att, n, pos, g->tab_start, g->blocks, n_blocks));
    if (hp->attn_gated) TRY(dj_vk_sigmoid_mul(vk, g->att, 0, g->gate, 0, n * Q)); /* times sigmoid(gate) */
    TRY(mm(g, &G->wo, g->att, g->xn, n));
    if (G->bo.buf) TRY(dj_vk_add_bias(vk, g->xn, 0, G->bo.buf, 0, E, n));
    if (G->attn_post_norm.buf) /* gemma: the attention output's own RMSNorm before the residual */
        TRY(dj_vk_rmsnorm(vk, g->xn, (size_t)E, G->attn_post_norm.buf, g->xn, (size_t)E, E, n, hp->rms_eps));
    TRY(dj_vk_add(vk, g->x, 0, g->xn, 0, n * E));
ffn:
    TRY(dj_vk_rmsnorm(vk, g->x, (size_t)E, G->ffn_norm.buf, g->xn, (size_t)E, E, n, hp->rms_eps));
    if (G->ffn_gate_inp.buf) return moe_ffn(c, il, n);
    TRY(dense_ffn(g, &G->w_gate, &G->w_up, &G->w_down, n, g->xn));
    if (G->ffn_post_norm.buf)
        TRY(dj_vk_rmsnorm(vk, g->xn, (size_t)E, G->ffn_post_norm.buf, g->xn, (size_t)E, E, n, hp->rms_eps));
    TRY(dj_vk_add(vk, g->x, 0, g->xn, 0, n * E));
    return DJ_OK;
}

enum dj_status gpu_forward_ubatch(struct dj_context *c, const dj_token *toks, const uint32_t *pos,
                                  struct kv_seq *const *seq, int64_t n, const uint32_t *out, int64_t n_out,
                                  float *logits, float *const *snap, const struct gpu_span *sp) {
    const struct dj_model *m = c->model;
    const struct dj_hparams *hp = &m->hp;
    struct dj_gpu *g = c->gpu;
    struct dj_vk *vk = g->vk;
    const int64_t E = hp->n_embd, V = hp->n_vocab, R = hp->n_rot;
    const uint32_t *perm = sp ? sp->perm : NULL, *inv = sp ? sp->inv : NULL, *start = sp ? sp->start : NULL;
    const uint32_t n_run = sp ? sp->n_run : hp->n_layer;
    for (int64_t j = 0; j < n; j++) { /* row j: token perm[j]; a token starting later enters with its hidden row */
        const uint32_t t = perm ? perm[j] : (uint32_t)j;
        if (start && start[t] > 0) memcpy(g->h_x + j * E, sp->hidden + (size_t)t * E, (size_t)E * sizeof(float));
        else gpu_embed_row(c, toks[t], g->h_x + j * E);
        gpu_rope_cs(c, pos[j], false, g->h_cs + j * R);
        if (hp->rope_local) gpu_rope_cs(c, pos[j], true, g->h_cs_local + j * R);
        g->rows_pos[j] = (uint32_t)j;
    }
    TRY(dj_vk_write(vk, g->x, 0, g->h_x, (size_t)(n * E) * sizeof(float)));
    TRY(dj_vk_write(vk, g->cs, 0, g->h_cs, (size_t)(n * R) * sizeof(float)));
    if (hp->rope_local) TRY(dj_vk_write(vk, g->cs_local, 0, g->h_cs_local, (size_t)(n * R) * sizeof(float)));
    size_t n_blocks = 0;
    TRY(tables(c, pos, seq, n, &n_blocks));
    g->n_pend = 0; /* no rows pending for the host */
    int64_t n_act = start ? 0 : n; /* rows [0, n_act) run the layer: the rows are sorted by start layer */
    for (uint32_t il = 0; il < n_run; il++) {
        while (n_act < n && start[perm ? perm[n_act] : (uint32_t)n_act] <= il) n_act++;
        if (n_act) TRY(layer(c, il, pos, seq, n_act, n_blocks, snap));
    }
    TRY(flush_rows(c, pos, seq)); /* the pool's host copy, as the CPU path leaves it */
    if (sp && sp->hidden_out) { /* each token's residual stream after layer n_run - 1 */
        TRY(dj_vk_read(vk, g->x, 0, g->h_x, (size_t)(n * E) * sizeof(float)));
        for (int64_t t = 0; t < n; t++)
            memcpy(sp->hidden_out + t * E, g->h_x + (inv ? inv[t] : (uint32_t)t) * E, (size_t)E * sizeof(float));
    }
    if (!logits || !n_out) return DJ_OK;
    for (int64_t r0 = 0; r0 < n_out; r0 += GPU_LOGIT_ROWS) { /* the wanted rows, gathered, normed: one product */
        const int64_t nr = n_out - r0 < GPU_LOGIT_ROWS ? n_out - r0 : GPU_LOGIT_ROWS;
        for (int64_t r = 0; r < nr; r++) g->gidx[r] = inv ? inv[out[r0 + r]] : out[r0 + r];
        TRY(dj_vk_gather(vk, g->xo, 0, (size_t)E, g->x, 0, (size_t)E, E, g->gidx, nr));
        TRY(dj_vk_rmsnorm(vk, g->xo, (size_t)E, g->output_norm.buf, g->xo, (size_t)E, E, nr, hp->rms_eps));
        TRY(mm(g, &g->output, g->xo, g->logits, nr));
        TRY(dj_vk_read(vk, g->logits, 0, logits + r0 * V, (size_t)(nr * V) * sizeof(float)));
    }
    return DJ_OK;
}

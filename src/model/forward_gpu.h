/*
 * forward_gpu.h — the GPU forward pass of a context (forward_vk.c, over
 * src/kernels/vulkan/vk.h), and what forward.c lends it.  Internal to src/model.
 */
#ifndef DJ_MODEL_FORWARD_GPU_H
#define DJ_MODEL_FORWARD_GPU_H

#include "model/context.h"

/* Whether the GPU forward pass runs this model with these K/V types: DJ_OK, or
 * DJ_ERR_UNSUPPORTED naming what it lacks. */
enum dj_status model_gpu_check(const struct dj_model *m, uint32_t type_k, uint32_t type_v);
/* Opens Vulkan device `device`, uploads the weights, makes the K/V mirror of the context's
 * pool and the activation buffers (c->gpu); on failure c->gpu stays NULL. */
enum dj_status gpu_ctx_create(struct dj_context *c, int device);
void gpu_ctx_free(struct dj_context *c); /* accepts c->gpu NULL */
/* A ubatch that does not run every layer from the embeddings (early exit, resumed tokens:
 * forward.c's ub_span), its rows ordered by start layer as forward.c's ubatch_order leaves them. */
struct gpu_span {
    const uint32_t *perm;  /* row -> token (rows sorted by start layer), or NULL: the identity */
    const uint32_t *inv;   /* token -> row, or NULL */
    const uint32_t *start; /* (n) per token: its first layer, or NULL: all 0 */
    const float *hidden;   /* (n, n_embd) per token: the residual stream entering its start layer */
    uint32_t n_run;        /* layers [0, n_run) run */
    float *hidden_out;     /* (n, n_embd) per token, or NULL: the residual stream after layer n_run - 1 */
};

/* One ubatch as forward.c's forward_ubatch, on the device: every layer from the embeddings, or
 * sp's layers (pos and seq then in row order); snap: NULL, or per row the recurrent state to
 * copy after that token (dj_batch.rs_snap). */
enum dj_status gpu_forward_ubatch(struct dj_context *c, const dj_token *toks, const uint32_t *pos,
                                  struct kv_seq *const *seq, int64_t n, const uint32_t *out, int64_t n_out,
                                  float *logits, float *const *snap, const struct gpu_span *sp);

/* Tests: the blocks whose device mirror (of the generation it holds) differs from the pool's
 * host bytes; *n_checked: how many were compared.  0 when every mirrored block is the pool's. */
size_t gpu_mirror_diff(struct dj_context *c, size_t *n_checked);

/* forward.c: the embedding row of tok (n_embd floats, gemma's scale applied); the [cos | sin]
 * row of position pos (n_rot floats) of the main rope setting or, local, of the second
 * (hp.rope_local: gemma's sliding layers) — the CPU path's values. */
void gpu_embed_row(const struct dj_context *c, dj_token tok, float *dst);
void gpu_rope_cs(struct dj_context *c, uint32_t pos, bool local, float *dst);
/* forward.c's MoE routing, shared by both paths so a GPU token picks its experts with the
 * CPU's code: the n router rows in c->moe_z (clobbered) → c->moe_sel / c->moe_w (and
 * c->moe_trace when set); then the (token, slot) pairs grouped by expert (c->moe_pos,
 * moe_ids / moe_off / moe_cnt): the experts used, *n_rows the pairs. */
void ctx_moe_route(struct dj_context *c, uint32_t il, const struct dj_layer *L, int64_t n);
int ctx_moe_group(struct dj_context *c, int64_t n, int64_t *n_rows);
/* forward.c: a hybrid's recurrent layer after its projections (in c->dn_in / dn_qkv / dn_z /
 * dn_bg / dn_o as forward.c's dn_project leaves them): the conv and the delta rule over each
 * sequence's state (kv_seq.rs; snap as dj_batch.rs_snap), the gated norm — the rows for
 * ssm_out in c->dn_o.  The CPU's own code, so the GPU path's states are the CPU's given the
 * same projections. */
void ctx_dn_recur(struct dj_context *c, const struct dj_layer *L, struct kv_seq *const *seq, int64_t n,
                  float *const *snap);
/* forward.c: mistral3's query temperature factor at position pos (hp.attn_temp_scale set). */
float ctx_attn_temp(const struct dj_hparams *hp, uint32_t pos);

#endif

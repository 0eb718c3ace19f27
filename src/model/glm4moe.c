/*
 * glm4moe.c — the glm4moe architecture (GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7), as
 * llama.cpp's src/models/glm4-moe.cpp runs it:
 *
 *   attention: q, k, v with optional biases (attn_{q,k,v}.bias: GLM-4.5 has them),
 *       optional per-head RMS norms of q and k (attn_{q,k}_norm: the 355B model), NeoX
 *       rope on the first rope.dimension_count dims of each head only (partial rotary:
 *       64 of 128), scale 1/sqrt(head_dim);
 *   the FFN's input norm is blk.N.post_attention_norm (bound as ffn_norm);
 *   leading_dense_block_count dense SwiGLU layers, then MoE layers: sigmoid gating
 *       (expert_gating_func, default sigmoid), the selection bias exp_probs_b (required),
 *       the top expert_used_count, expert_weights_norm, expert_weights_scale, plus
 *       expert_shared_count shared experts — deepseek2's routing (route.c, forward.c's
 *       moe_ffn) and MoE keys (model_load_moe_keys), without expert groups.
 *
 * NextN / MTP: block_count counts nextn_predict_layers extra blocks at the end (GLM-4.5:
 * 92 + 1, Air: 46 + 1).  hp.n_layer is the blocks the forward pass runs; the NextN
 * blocks are bound into layers[n_layer ..] with their shapes and types checked (the block
 * tensors and nextn.eh_proj / enorm / hnorm required; nextn.embed_tokens,
 * shared_head_head and shared_head_norm optional, as llama.cpp), and never run: deja
 * does not use them as a draft source (docs/SPECULATIVE.md).  Their weights stay in the
 * file mapping untouched (no copy, no page read).
 *
 * Not supported: M-RoPE (rope.dimension_sections, GLM-4.xV vision models: refused) and
 * a fused attn_qkv (refused by its missing attn_q).
 */
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "model/model.h"

enum dj_status glm4moe_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_GLM4MOE;
    m->hp.rope_type = DJ_ROPE_NEOX;
    return DJ_OK;
}

enum dj_status glm4moe_load_moe(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    const char *path = gguf_name(m->gguf);
    enum dj_status st;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch_name);
    struct gguf_arr a; /* llama.cpp's use_mrope(): sections 0 and 1 both > 0 */
    if (gguf_get_arr(m->gguf, key, &a) == DJ_OK && a.type == GGUF_TYPE_INT32 && a.n >= 2) {
        int32_t s[2];
        memcpy(s, a.data, sizeof s);
        if (s[0] > 0 && s[1] > 0)
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s: hyperparameter '%s' asks for multi-section rope (M-RoPE, GLM-4.xV), "
                           "which deja does not support", path, key);
    }
    /* the NextN blocks: at least one block must remain to run */
    if ((st = model_hp_u32(m, "nextn_predict_layers", &hp->n_layer_nextn, true, 0)) ||
        (st = model_hp_range(m, "nextn_predict_layers", hp->n_layer_nextn, 0, hp->n_layer - 1)))
        return st;
    hp->n_layer -= hp->n_layer_nextn;
    if ((st = model_load_moe_keys(m, 2, false))) return st;
    if (hp->n_expert == 0)
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.expert_count' is 0; glm4moe needs experts", path,
                       m->arch_name);
    if (hp->n_layer_dense >= hp->n_layer + hp->n_layer_nextn)
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.leading_dense_block_count' is %u: every block would be "
                       "dense", path, m->arch_name, hp->n_layer_dense);
    return DJ_OK;
}

/* One block's tensors: attention, post-attention norm, dense or MoE FFN (NextN blocks too). */
static enum dj_status bind_block(struct dj_model *m, uint32_t il) {
    const struct dj_hparams *hp = &m->hp;
    struct dj_layer *L = &m->layers[il];
    enum dj_status st;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim,
                  NE = hp->n_expert, FE = hp->n_ff_exp, FS = (int64_t)hp->n_ff_exp * hp->n_expert_shared;
    char n[96];
#define BIND(field, suffix, ne0, ne1, req)                                                 \
    snprintf(n, sizeof n, "blk.%u.%s", il, suffix);                                        \
    if ((st = model_bind(m, &L->field, n, ne0, ne1, req))) return st;
    BIND(attn_norm, "attn_norm.weight", E, 1, true);
    BIND(wq, "attn_q.weight", E, Q, true);
    BIND(wk, "attn_k.weight", E, KV, true);
    BIND(wv, "attn_v.weight", E, KV, true);
    BIND(bq, "attn_q.bias", Q, 1, false);
    BIND(bk, "attn_k.bias", KV, 1, false);
    BIND(bv, "attn_v.bias", KV, 1, false);
    BIND(wo, "attn_output.weight", Q, E, true);
    BIND(q_norm, "attn_q_norm.weight", hp->head_dim, 1, false);
    BIND(k_norm, "attn_k_norm.weight", hp->head_dim, 1, false);
    BIND(ffn_norm, "post_attention_norm.weight", E, 1, true);
    if (il < hp->n_layer_dense) {
        BIND(w_gate, "ffn_gate.weight", E, hp->n_ff, true);
        BIND(w_up, "ffn_up.weight", E, hp->n_ff, true);
        BIND(w_down, "ffn_down.weight", hp->n_ff, E, true);
    } else {
        BIND(ffn_gate_inp, "ffn_gate_inp.weight", E, NE, true);
        BIND(exp_probs_b, "exp_probs_b.bias", NE, 1, true);
        if ((st = model_bind_experts(m, L, il, FE, FS, true))) return st;
    }
    if (il >= hp->n_layer && (st = model_bind_nextn(m, L, il))) return st; /* NextN */
#undef BIND
    return DJ_OK;
}

enum dj_status glm4moe_bind_layers(struct dj_model *m) {
    enum dj_status st;
    for (uint32_t il = 0; il < m->hp.n_layer + m->hp.n_layer_nextn; il++)
        if ((st = bind_block(m, il))) return st;
    return DJ_OK;
}

/*
 * deepseek2.c — the deepseek2 architecture (DeepSeek-V2-Lite, V2, V3): Multi-head
 * Latent Attention, YaRN rope, leading dense layers and an MoE FFN with shared
 * experts, softmax or sigmoid gating, a selection bias and expert groups
 * (forward.c: mla_attention, moe_ffn; the equations: golden/moe/README.md).
 *
 * Hyperparameters: q_lora_rank (0 or absent = no q LoRA: decided by which
 * tensors exist, as llama.cpp), kv_lora_rank, rope.dimension_count = qk_rope,
 * key_length_mla / value_length_mla (split layout: attn_k_b / attn_v_b) or, when
 * both are absent, key_length = qk_nope + qk_rope and value_length = v_head
 * (legacy layout: one attn_kv_b, split here at load into f32 copies the model
 * owns, so the forward pass sees one layout).
 *
 * The model is run absorbed: hp.head_dim is set to kv_lora + qk_rope and
 * hp.n_head_kv to 1, so the K/V pool holds one K row of [c | k_pe] per token and
 * layer (forward.c: MLA section).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ggml_type.h"
#include "core/status.h"
#include "kernels/kernels.h"
#include "model/model.h"

enum dj_status deepseek2_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_DEEPSEEK2;
    m->hp.rope_type = DJ_ROPE_NORM;
    m->hp.mla = true;
    return DJ_OK;
}

enum dj_status deepseek2_load_mla(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    const char *path = gguf_name(m->gguf);
    uint32_t key_len = hp->head_dim, val_len = 0, k_mla = 0, v_mla = 0;
    if ((st = model_hp_u32(m, "attention.value_length", &val_len, true, key_len)) ||
        (st = model_hp_u32(m, "attention.q_lora_rank", &hp->q_lora, true, 0)) ||
        (st = model_hp_u32(m, "attention.kv_lora_rank", &hp->kv_lora, false, 0)) ||
        (st = model_hp_range(m, "attention.kv_lora_rank", hp->kv_lora, 1, 1u << 16)))
        return st;
    const bool split = model_hp_has(m, "attention.key_length_mla");
    if (split != model_hp_has(m, "attention.value_length_mla"))
        return dj_fail(DJ_ERR_FORMAT, "%s: deepseek2 needs both attention.key_length_mla and value_length_mla, or "
                       "neither", path);
    if (split) {
        if ((st = model_hp_u32(m, "attention.key_length_mla", &k_mla, false, 0)) ||
            (st = model_hp_u32(m, "attention.value_length_mla", &v_mla, false, 0)))
            return st;
        if (key_len != hp->kv_lora + hp->n_rot || val_len != hp->kv_lora)
            return dj_fail(DJ_ERR_FORMAT, "%s: deepseek2 split MLA layout: attention.key_length %u / value_length %u, "
                           "expected kv_lora_rank + rope (%u) / kv_lora_rank (%u)", path, key_len, val_len,
                           hp->kv_lora + hp->n_rot, hp->kv_lora);
    } else {
        k_mla = key_len;
        v_mla = val_len;
    }
    if (k_mla <= hp->n_rot || k_mla - hp->n_rot > (1u << 16))
        return dj_fail(DJ_ERR_FORMAT, "%s: deepseek2 key length %u must exceed rope.dimension_count %u", path, k_mla,
                       hp->n_rot);
    if ((st = model_hp_range(m, "attention.value_length_mla", v_mla, 1, 1u << 16))) return st;
    hp->qk_nope = k_mla - hp->n_rot;
    hp->v_head = v_mla;
    /* absorbed: one K row of [c | k_pe]; query rows of n_head x that width hold q, [q~ | q_pe] and
     * the attention output; the heads' values (n_head x v_head) and the raw q fit in it */
    hp->head_dim = hp->kv_lora + hp->n_rot;
    hp->n_head_kv = 1;
    if (hp->v_head > hp->head_dim || hp->qk_nope + hp->n_rot > hp->head_dim || hp->q_lora > hp->n_head * hp->head_dim)
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: deepseek2 with v_head %u, qk_nope %u, q_lora %u wider than kv_lora + "
                       "rope (%u) per head is not supported", path, hp->v_head, hp->qk_nope, hp->q_lora, hp->head_dim);
    float mscale = 1.0f;
    if (hp->rope_yarn) mscale = 1.0f + hp->yarn_log_mul * logf(hp->rope_factor); /* 0.1 mscale_all_dim ln(factor) */
    hp->kq_scale = mscale * mscale / sqrtf((float)(hp->qk_nope + hp->n_rot));
    return model_load_moe_keys(m, 1, true);
}

/* The MoE keys of deepseek2 and glm4moe (model.h).  gating_default: expert_gating_func
 * when absent (deepseek2 softmax 1, glm4moe sigmoid 2); groups: read expert_group_count /
 * _used_count (glm4moe: llama.cpp does not, so neither does deja). */
enum dj_status model_load_moe_keys(struct dj_model *m, uint32_t gating_default, bool groups) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    const char *path = gguf_name(m->gguf);
    uint32_t gating = gating_default;
    bool norm = false;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", m->arch_name);
    st = gguf_get_bool(m->gguf, key, &norm);
    if (st && st != DJ_ERR_NOT_FOUND) return st;
    if ((st = model_hp_u32(m, "leading_dense_block_count", &hp->n_layer_dense, true, 0)) ||
        (st = model_hp_range(m, "leading_dense_block_count", hp->n_layer_dense, 0, hp->n_layer)) ||
        (st = model_hp_u32(m, "expert_count", &hp->n_expert, hp->n_layer_dense == hp->n_layer, 0)))
        return st;
    hp->exp_norm = norm;
    if (hp->n_layer_dense == hp->n_layer && hp->n_expert == 0) return DJ_OK;
    if ((st = model_hp_range(m, "expert_count", hp->n_expert, 1, 512)) ||
        (st = model_hp_u32(m, "expert_used_count", &hp->n_expert_used, false, 0)) ||
        (st = model_hp_range(m, "expert_used_count", hp->n_expert_used, 1, hp->n_expert)) ||
        (st = model_hp_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, false, 0)) ||
        (st = model_hp_range(m, "expert_feed_forward_length", hp->n_ff_exp, 1, 1u << 24)) ||
        (st = model_hp_u32(m, "expert_shared_count", &hp->n_expert_shared, false, 0)) ||
        (st = model_hp_range(m, "expert_shared_count", hp->n_expert_shared, 0, 64)) ||
        (st = model_hp_f32(m, "expert_weights_scale", &hp->exp_scale, 0.0f)) ||
        (st = model_hp_u32(m, "expert_gating_func", &gating, true, gating_default)) ||
        (st = model_hp_range(m, "expert_gating_func", gating, 1, 2)) ||
        (groups && (st = model_hp_u32(m, "expert_group_count", &hp->n_group, true, 0))) ||
        (groups && (st = model_hp_u32(m, "expert_group_used_count", &hp->n_group_used, true, 0))))
        return st;
    hp->gating = gating;
    if (!isfinite(hp->exp_scale))
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.expert_weights_scale' is not finite", path,
                       m->arch_name);
    if (hp->n_group > 1) {
        if (hp->n_expert % hp->n_group || hp->n_expert / hp->n_group < 2)
            return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.expert_group_count' is %u: it must divide "
                           "expert_count (%u) into groups of at least 2", path, m->arch_name, hp->n_group, hp->n_expert);
        if ((st = model_hp_range(m, "expert_group_used_count", hp->n_group_used, 1, hp->n_group))) return st;
        if ((uint64_t)hp->n_group_used * (hp->n_expert / hp->n_group) < hp->n_expert_used)
            return dj_fail(DJ_ERR_FORMAT, "%s: %u expert groups of %u used leave fewer experts than expert_used_count "
                           "(%u)", path, hp->n_group_used, hp->n_expert / hp->n_group, hp->n_expert_used);
    }
    return DJ_OK;
}

/* The legacy attn_kv_b [kv_lora, n_head*(nope+v_head)] of layer L (rows of head h:
 * nope rows of K_b[h], then v_head rows of V_b[h]) as the split layout, f32, in dst:
 * wk_b then wv_b (n_head*kv_lora*nope + n_head*v_head*kv_lora floats). */
static void split_kv_b(const struct dj_model *m, const struct dj_weight *kvb, float *dst, struct dj_layer *L) {
    const struct dj_hparams *hp = &m->hp;
    const int64_t H = hp->n_head, R = hp->kv_lora, N = hp->qk_nope, VH = hp->v_head;
    float *kb = dst, *vb = dst + H * R * N, *row = vb + H * VH * R; /* row: scratch of R */
    const struct dj_kernels *kt = dj_kernels();
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < N + VH; i++) {
            kt->w[kvb->type].dequantize_row((const uint8_t *)kvb->data + (size_t)(h * (N + VH) + i) * kvb->row_bytes,
                                            row, R);
            if (i < N) /* K_b[h] transposed: slab h is R rows of N */
                for (int64_t l = 0; l < R; l++) kb[(h * R + l) * N + i] = row[l];
            else
                memcpy(vb + (h * VH + (i - N)) * R, row, (size_t)R * sizeof(float));
        }
    L->wk_b = (struct dj_weight){.data = kb, .type = DJ_TYPE_F32, .ne0 = N, .ne1 = H * R, .row_bytes = (size_t)N * 4};
    L->wv_b = (struct dj_weight){.data = vb, .type = DJ_TYPE_F32, .ne0 = R, .ne1 = H * VH, .row_bytes = (size_t)R * 4};
}

enum dj_status deepseek2_bind_layers(struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->kv_lora, N = hp->qk_nope, P = hp->n_rot, VH = hp->v_head,
                  NE = hp->n_expert, FE = hp->n_ff_exp, FS = (int64_t)hp->n_ff_exp * hp->n_expert_shared;
    char n[96];
    snprintf(n, sizeof n, "blk.0.attn_kv_b.weight");
    const bool legacy = gguf_find_tensor(m->gguf, n) != NULL;
    const size_t per_layer = (size_t)(H * R * N + H * VH * R + R);
    if (legacy) {
        m->mla_buf = malloc(per_layer * hp->n_layer * sizeof(float));
        if (!m->mla_buf) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for attn_kv_b's split copy", gguf_name(m->gguf));
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct dj_layer *L = &m->layers[il];
#define BIND(field, suffix, ne0, ne1, req)                                                 \
    snprintf(n, sizeof n, "blk.%u.%s", il, suffix);                                        \
    if ((st = model_bind(m, &L->field, n, ne0, ne1, req))) return st;
#define BIND3(field, suffix, ne0, ne1, ne2, req)                                           \
    snprintf(n, sizeof n, "blk.%u.%s", il, suffix);                                        \
    if ((st = model_bind_3d(m, &L->field, n, ne0, ne1, ne2, req))) return st;
        BIND(attn_norm, "attn_norm.weight", E, 1, true);
        snprintf(n, sizeof n, "blk.%u.attn_q.weight", il);
        const bool lora = gguf_find_tensor(m->gguf, n) == NULL; /* llama.cpp decides by the tensor */
        if (lora && hp->q_lora == 0)
            return dj_fail(DJ_ERR_NOT_FOUND, "%s: tensor 'blk.%u.attn_q.weight' is missing and q_lora_rank is 0",
                           gguf_name(m->gguf), il);
        if (lora) {
            BIND(wq_a, "attn_q_a.weight", E, hp->q_lora, true);
            BIND(q_a_norm, "attn_q_a_norm.weight", hp->q_lora, 1, true);
            BIND(wq_b, "attn_q_b.weight", hp->q_lora, H * (N + P), true);
        } else {
            BIND(wq, "attn_q.weight", E, H * (N + P), true);
        }
        BIND(wkv_a, "attn_kv_a_mqa.weight", E, R + P, true);
        BIND(kv_a_norm, "attn_kv_a_norm.weight", R, 1, true);
        if (legacy) {
            struct dj_weight kvb;
            BIND(wo, "attn_kv_b.weight", R, H * (N + VH), true); /* wo: a placeholder, bound again below */
            kvb = L->wo;
            split_kv_b(m, &kvb, m->mla_buf + per_layer * il, L);
        } else {
            BIND3(wk_b, "attn_k_b.weight", N, R, H, true);
            BIND3(wv_b, "attn_v_b.weight", R, VH, H, true);
        }
        BIND(wo, "attn_output.weight", H * VH, E, true);
        BIND(ffn_norm, "ffn_norm.weight", E, 1, true);
        if (il < hp->n_layer_dense) {
            BIND(w_gate, "ffn_gate.weight", E, hp->n_ff, true);
            BIND(w_up, "ffn_up.weight", E, hp->n_ff, true);
            BIND(w_down, "ffn_down.weight", hp->n_ff, E, true);
            continue;
        }
        snprintf(n, sizeof n, "blk.%u.ffn_gate_up_exps.weight", il);
        if (gguf_find_tensor(m->gguf, n))
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' (fused gate/up experts) is not supported yet",
                           gguf_name(m->gguf), n);
        BIND(ffn_gate_inp, "ffn_gate_inp.weight", E, NE, true);
        BIND(exp_probs_b, "exp_probs_b.bias", NE, 1, false);
        if ((st = model_bind_experts(m, L, il, FE, FS, true))) return st;
#undef BIND
#undef BIND3
    }
    return DJ_OK;
}

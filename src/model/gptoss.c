/*
 * gptoss.c — the gpt-oss architecture (gpt-oss-20b, gpt-oss-120b; llama.cpp's
 * `gpt-oss`, its openai-moe graph):
 *
 *   attention: q/k/v with biases, NeoX RoPE with YaRN (rope.scaling.*), scale
 *              1/sqrt(head_dim), a learned per-head sink logit joining each softmax
 *              (forward.c: attn_task), output projection with a bias; layers alternate
 *              sliding-window and full attention (attention.sliding_window,
 *              attention.sliding_window_pattern, default 2: even layers windowed)
 *   FFN input: post_attention_norm (bound as ffn_norm: it is the RMS norm of the
 *              residual stream entering the FFN, the same place as llama's ffn_norm)
 *   MoE:       router logits z = W x + b; the expert_used_count largest z (lowest id on
 *              a tie), their weights softmax(z_S); expert e: down_e(swiglu_oai(gate_e x +
 *              bg_e, up_e x + bu_e)) + bd_e with swiglu_oai(g, u) = min(g, 7) sigmoid(1.702
 *              min(g, 7)) (clamp(u, -7, 7) + 1) (llama.cpp LLM_FFN_SWIGLU_OAI_MOE); no
 *              shared expert, no normalization of the weights
 *   output:    output_norm, output.weight (not tied)
 */
#include <math.h>
#include <stdio.h>

#include "core/ggml_type.h"
#include "core/status.h"
#include "model/model.h"
#include "model/route.h"

enum dj_status gptoss_load_hparams(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    hp->arch = DJ_ARCH_GPT_OSS;
    hp->rope_type = DJ_ROPE_NEOX;
    enum dj_status st;
    if ((st = model_hp_u32(m, "expert_count", &hp->n_expert, false, 0)) ||
        (st = model_hp_range(m, "expert_count", hp->n_expert, 1, MOE_ROUTE_MAX)) ||
        (st = model_hp_u32(m, "expert_used_count", &hp->n_expert_used, false, 0)) ||
        (st = model_hp_range(m, "expert_used_count", hp->n_expert_used, 1, hp->n_expert)) ||
        (st = model_hp_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, false, 0)) ||
        (st = model_hp_range(m, "expert_feed_forward_length", hp->n_ff_exp, 1, 1u << 20)) ||
        (st = model_hp_f32(m, "expert_weights_scale", &hp->exp_scale, 0.0f)) ||
        (st = model_hp_u32(m, "attention.sliding_window", &hp->n_swa, false, 0)) ||
        (st = model_hp_range(m, "attention.sliding_window", hp->n_swa, 1, 1u << 24)) ||
        (st = model_hp_u32(m, "attention.sliding_window_pattern", &hp->swa_period, true, 2)) ||
        (st = model_hp_range(m, "attention.sliding_window_pattern", hp->swa_period, 0, 1u << 16)))
        return st;
    if (!isfinite(hp->exp_scale))
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter 'gpt-oss.expert_weights_scale' is not finite",
                       gguf_name(m->gguf));
    hp->gating = 3; /* softmax over the selected logits (llama.cpp SOFTMAX_WEIGHT) */
    return DJ_OK;
}

enum dj_status gptoss_bind_layers(struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim,
                  FE = hp->n_ff_exp, NE = hp->n_expert;
    enum dj_status st;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct dj_layer *L = &m->layers[il];
        const uint32_t P = hp->swa_period; /* llama.cpp's set_swa_pattern: 2 windows the even layers */
        L->n_swa = P == 0 || il % P < P - 1 ? hp->n_swa : 0;
        char n[96];
#define BIND(field, suffix, ne0, ne1)                                                      \
    snprintf(n, sizeof n, "blk.%u.%s", il, suffix);                                        \
    if ((st = model_bind(m, &L->field, n, ne0, ne1, true))) return st;
        BIND(attn_norm, "attn_norm.weight", E, 1);
        BIND(wq, "attn_q.weight", E, Q);
        BIND(wk, "attn_k.weight", E, KV);
        BIND(wv, "attn_v.weight", E, KV);
        BIND(bq, "attn_q.bias", Q, 1);
        BIND(bk, "attn_k.bias", KV, 1);
        BIND(bv, "attn_v.bias", KV, 1);
        BIND(wo, "attn_output.weight", Q, E);
        BIND(bo, "attn_output.bias", E, 1);
        BIND(attn_sinks, "attn_sinks.weight", hp->n_head, 1);
        BIND(ffn_norm, "post_attention_norm.weight", E, 1);
        BIND(ffn_gate_inp, "ffn_gate_inp.weight", E, NE);
        BIND(ffn_gate_inp_b, "ffn_gate_inp.bias", NE, 1);
        if ((st = model_bind_experts(m, L, il, FE, 0, true))) return st;
        BIND(ffn_gate_exps_b, "ffn_gate_exps.bias", FE, NE);
        BIND(ffn_up_exps_b, "ffn_up_exps.bias", FE, NE);
        BIND(ffn_down_exps_b, "ffn_down_exps.bias", E, NE);
#undef BIND
        const struct dj_weight *eb[3] = {&L->ffn_gate_exps_b, &L->ffn_up_exps_b, &L->ffn_down_exps_b};
        static const char *const eb_name[3] = {"ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"};
        for (int i = 0; i < 3; i++) /* the forward pass adds them as floats */
            if (eb[i]->type != DJ_TYPE_F32)
                return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor 'blk.%u.%s' has type %s; deja reads expert biases as "
                               "f32 only", gguf_name(m->gguf), il, eb_name[i], dj_type_name(eb[i]->type));
    }
    return DJ_OK;
}

/*
 * qwen35.c — the hybrid linear-attention architectures: qwen35 (Qwen3.5 / 3.6 dense),
 * qwen35moe (Qwen3.5 / 3.6 MoE: 35B-A3B, 122B-A10B, 397B-A17B) and qwen3next
 * (Qwen3-Next-80B-A3B), as llama.cpp's src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp
 * and delta-net-base.cpp run them (snapshot d32676d7).
 *
 * Layers: every full_attention_interval-th layer (default 4: layers 3, 7, ...) is gated
 * full attention, the others Gated DeltaNet (attention.recurrent_layers, a per-block array,
 * overrides the interval).  NextN / MTP blocks (nextn_predict_layers, counted in
 * block_count) follow the n_layer run ones: bound into layers[n_layer ..] with their shapes
 * checked; the first runs as a draft model when a context asks for it (forward.c
 * ctx_forward_mtp, llama.cpp's graph_mtp), never in the main pass.
 *
 *   attention (hp.attn_gated): attn_q gives per head [q (hd) | gate (hd)]; per-head RMS norms
 *       of q and k; rope over the first rope.dimension_count dims, NeoX pairs: qwen3next
 *       plain NeoX, qwen35/qwen35moe llama.cpp's interleaved M-RoPE (IMROPE) with
 *       rope.dimension_sections.  With text positions llama.cpp gives sections t, h, w the
 *       token's position and e position 0; every pair whose IMROPE sector is t, h or w then
 *       rotates by pos * base^(-2i/n_rot) — theta_t, theta_h and theta_w start at pos and
 *       step together (ggml-cpu ops.cpp ggml_mrope_cache_init) —, which is exactly NeoX rope
 *       over n_rot dims.  A pair whose sector would be e (position 0: no rotation) exists
 *       only when the sections do not cover the rotated dims; such a file is refused
 *       (check_sections).  Scores times 1/sqrt(hd); output times sigmoid(gate), then attn_output.
 *   Gated DeltaNet (forward.c deltanet_layer): qkv = attn_qkv x, z = attn_gate x
 *       (qwen3next's older files: one ssm_in, regrouped); beta = sigmoid(ssm_beta x),
 *       g = softplus(ssm_alpha x + ssm_dt) * ssm_a (qwen3next: ssm_ba, per k head [beta | alpha]);
 *       causal conv1d of qkv over [state | tokens] (ssm_conv1d, d_conv taps) then SiLU; q, k
 *       L2-normed per head (ggml_l2_norm with eps = the RMS eps); per v head h with k head
 *       h % nk (qwen35: the converter reorders v heads to ggml's tiling) or h / (nv/nk)
 *       (qwen3next: repeat-interleave), token by token:
 *           S *= exp(g);  d = (v - S^T k) * beta;  S += k d^T;  o = S^T q / sqrt(S)
 *       (ggml_compute_forward_gated_delta_net's layout: row j of the state is column j of S);
 *       o = rmsnorm(o) * ssm_norm * silu(z) per head; out = ssm_out o.
 *   FFN input norm: blk.N.post_attention_norm (llama.cpp's attn_post_norm; bound as ffn_norm).
 *   FFN: dense SwiGLU (qwen35); routed experts (softmax, top k, renormalized, times
 *       expert_weights_scale when set) plus a shared expert of width
 *       expert_shared_feed_forward_length times sigmoid(ffn_gate_inp_shexp . x)
 *       (qwen35moe, qwen3next).
 *
 * Pool shape: n_layer_kv = the attention layers (kv_il their index among them); each
 * recurrent layer's state is rs_off floats into kv_seq.rs: conv (conv_dim rows of d_conv - 1:
 * llama.cpp's conv-state layout) then (nv, S, S).
 *
 * Not supported (refused with a message): a fused attn_qkv in a full-attention layer, fused
 * ffn_gate_up_exps, M-RoPE sections that leave rotated dims on the fourth section, a model
 * without a full-attention layer.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ggml_type.h"
#include "core/status.h"
#include "model/model.h"
#include "model/route.h"

#define SSM_STATE_MAX DJ_SSM_STATE_MAX
#define SSM_HEADS_MAX DJ_SSM_HEADS_MAX
#define SSM_CONV_MAX 64u
#define SSM_LAYER_FLOATS_MAX ((uint64_t)1 << 30) /* one layer's state: 4 GiB of f32 */
#define BLOCKS_MAX 4096u /* loader.c's block_count limit */
#define SECTION_MAX 256  /* pairs in one M-RoPE section (n_rot / 2 <= 256) */

enum dj_status qwen35_load_hparams(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    hp->arch = !strcmp(m->arch_name, "qwen35")      ? DJ_ARCH_QWEN35
               : !strcmp(m->arch_name, "qwen35moe") ? DJ_ARCH_QWEN35MOE
                                                    : DJ_ARCH_QWEN3NEXT;
    hp->rope_type = DJ_ROPE_NEOX;
    hp->attn_gated = true;
    hp->ssm_kv_interleave = hp->arch == DJ_ARCH_QWEN3NEXT;
    return DJ_OK;
}

static enum dj_status bad(const struct dj_model *m, const char *key, const char *what) {
    return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.%s' %s", gguf_name(m->gguf), m->arch_name, key, what);
}

/* rope.dimension_sections (qwen35, qwen35moe: required, as llama.cpp): with text positions
 * IMROPE is NeoX rope iff every rotated pair's sector takes section t, h or w (see the top). */
static enum dj_status check_sections(struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch_name);
    struct gguf_arr a;
    enum dj_status st = gguf_get_arr(m->gguf, key, &a);
    if (st == DJ_ERR_NOT_FOUND)
        return dj_fail(DJ_ERR_NOT_FOUND, "%s: hyperparameter '%s' is missing", gguf_name(m->gguf), key);
    if (st) return st;
    if ((a.type != GGUF_TYPE_INT32 && a.type != GGUF_TYPE_UINT32) || a.n < 1 || a.n > 4)
        return bad(m, "rope.dimension_sections", "must be an array of 1 to 4 integers");
    int64_t sec[4] = {0, 0, 0, 0}, total = 0;
    for (size_t i = 0; i < a.n; i++) {
        int32_t v;
        memcpy(&v, (const uint8_t *)a.data + 4 * i, 4);
        if (v < 0 || v > SECTION_MAX)
            return bad(m, "rope.dimension_sections", "has a section below 0 or above 256 pairs");
        sec[i] = v;
        total += v;
    }
    if (total < 1) return bad(m, "rope.dimension_sections", "has no pair in any section");
    for (int64_t i = 0; i < (int64_t)hp->n_rot / 2; i++) {
        const int64_t s = i % total; /* ggml_mrope_cache_init's sector, interleaved (is_imrope) */
        const bool thw = (s % 3 == 0 && s < 3 * sec[0]) || (s % 3 == 1 && s < 3 * sec[1]) ||
                         (s % 3 == 2 && s < 3 * sec[2]);
        if (!thw)
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s: hyperparameter '%s' leaves rotated pair %lld (of %u) on the fourth "
                           "M-RoPE section (position 0 for text); deja runs text positions only where every rotated "
                           "pair takes sections t, h or w", gguf_name(m->gguf), key, (long long)i, hp->n_rot / 2);
    }
    return DJ_OK;
}

/* After the common hparams: experts, the DeltaNet sizes, NextN, the layer pattern. */
enum dj_status qwen35_load_ssm(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    const bool moe = hp->arch != DJ_ARCH_QWEN35;
    if (hp->arch != DJ_ARCH_QWEN3NEXT && (st = check_sections(m))) return st;
    if (moe) {
        if ((st = model_hp_u32(m, "expert_count", &hp->n_expert, false, 0)) ||
            (st = model_hp_range(m, "expert_count", hp->n_expert, 1, MOE_ROUTE_MAX)) ||
            (st = model_hp_u32(m, "expert_used_count", &hp->n_expert_used, false, 0)) ||
            (st = model_hp_range(m, "expert_used_count", hp->n_expert_used, 1, hp->n_expert)) ||
            (st = model_hp_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, true, hp->n_ff / hp->n_expert_used)) ||
            (st = model_hp_range(m, "expert_feed_forward_length", hp->n_ff_exp, 1, 1u << 24)) ||
            (st = model_hp_u32(m, "expert_shared_feed_forward_length", &hp->n_ff_shexp, true, hp->n_ff)) ||
            (st = model_hp_range(m, "expert_shared_feed_forward_length", hp->n_ff_shexp, 1, 1u << 24)) ||
            (st = model_hp_f32(m, "expert_weights_scale", &hp->exp_scale, 0.0f)))
            return st;
        if (!isfinite(hp->exp_scale) || hp->exp_scale < 0)
            return bad(m, "expert_weights_scale", "must be a finite number >= 0");
    }
    if ((st = model_hp_u32(m, "ssm.conv_kernel", &hp->ssm_d_conv, false, 0)) ||
        (st = model_hp_range(m, "ssm.conv_kernel", hp->ssm_d_conv, 1, SSM_CONV_MAX)) ||
        (st = model_hp_u32(m, "ssm.state_size", &hp->ssm_d_state, false, 0)) ||
        (st = model_hp_range(m, "ssm.state_size", hp->ssm_d_state, 1, SSM_STATE_MAX)) ||
        (st = model_hp_u32(m, "ssm.group_count", &hp->ssm_n_k_heads, false, 0)) ||
        (st = model_hp_range(m, "ssm.group_count", hp->ssm_n_k_heads, 1, SSM_HEADS_MAX)) ||
        (st = model_hp_u32(m, "ssm.time_step_rank", &hp->ssm_n_v_heads, false, 0)) ||
        (st = model_hp_range(m, "ssm.time_step_rank", hp->ssm_n_v_heads, 1, SSM_HEADS_MAX)))
        return st;
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return bad(m, "ssm.time_step_rank", "(v heads) is not a multiple of ssm.group_count (k heads)");
    uint32_t inner;
    if ((st = model_hp_u32(m, "ssm.inner_size", &inner, false, 0))) return st;
    if ((uint64_t)inner != (uint64_t)hp->ssm_d_state * hp->ssm_n_v_heads) {
        char what[160];
        snprintf(what, sizeof what, "is %u; it must be ssm.state_size x ssm.time_step_rank = %u x %u (the v head size "
                 "equals the k head size)", inner, hp->ssm_d_state, hp->ssm_n_v_heads);
        return bad(m, "ssm.inner_size", what);
    }
    const uint64_t S = hp->ssm_d_state, conv_dim = (2 * (uint64_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads) * S;
    if ((uint64_t)(hp->ssm_d_conv - 1) * conv_dim + hp->ssm_n_v_heads * S * S > SSM_LAYER_FLOATS_MAX ||
        conv_dim + S * hp->ssm_n_v_heads > (1u << 24))
        return bad(m, "ssm.time_step_rank", "with ssm.state_size and ssm.group_count gives a state too large");
    /* NextN blocks: at least one block must remain to run */
    if ((st = model_hp_u32(m, "nextn_predict_layers", &hp->n_layer_nextn, true, 0)) ||
        (st = model_hp_range(m, "nextn_predict_layers", hp->n_layer_nextn, 0, hp->n_layer - 1)))
        return st;
    hp->n_layer -= hp->n_layer_nextn;
    return DJ_OK;
}

/* Which blocks are recurrent (recr, n_all entries): attention.recurrent_layers when present,
 * else every block but each full_attention_interval-th (NextN blocks: attention). */
static enum dj_status layer_pattern(struct dj_model *m, bool *recr, uint32_t n_all) {
    const struct dj_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch_name);
    struct gguf_arr a;
    enum dj_status st = gguf_get_arr(m->gguf, key, &a);
    if (st == DJ_OK) {
        const size_t w = a.type == GGUF_TYPE_BOOL || a.type == GGUF_TYPE_UINT8 || a.type == GGUF_TYPE_INT8 ? 1
                         : a.type == GGUF_TYPE_INT32 || a.type == GGUF_TYPE_UINT32                        ? 4
                                                                                                           : 0;
        if (!w || a.n != n_all) {
            char what[160];
            snprintf(what, sizeof what, "must be an array of block_count (%u) booleans or integers", n_all);
            return bad(m, "attention.recurrent_layers", what);
        }
        for (uint32_t i = 0; i < n_all; i++) {
            uint32_t v = 0;
            memcpy(&v, (const uint8_t *)a.data + w * i, w); /* little-endian: the low bytes */
            recr[i] = v != 0;
            if (recr[i] && i >= hp->n_layer)
                return bad(m, "attention.recurrent_layers", "marks a NextN block recurrent (they are attention blocks)");
        }
        return DJ_OK;
    }
    if (st != DJ_ERR_NOT_FOUND) return st;
    uint32_t interval;
    if ((st = model_hp_u32(m, "full_attention_interval", &interval, true, 4)) ||
        (st = model_hp_range(m, "full_attention_interval", interval, 1, 1u << 16)))
        return st;
    for (uint32_t i = 0; i < n_all; i++) recr[i] = i < hp->n_layer && (i + 1) % interval != 0;
    return DJ_OK;
}

static enum dj_status need_f32(const struct dj_model *m, const struct dj_weight *w, const char *name) {
    if (!w->data || w->type == DJ_TYPE_F32) return DJ_OK;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s; deja reads it as f32 only", gguf_name(m->gguf),
                   name, dj_type_name(w->type));
}

/* One block's tensors (NextN blocks too). */
static enum dj_status bind_block(struct dj_model *m, uint32_t il) {
    const struct dj_hparams *hp = &m->hp;
    struct dj_layer *L = &m->layers[il];
    enum dj_status st;
    const int64_t E = hp->n_embd, hd = hp->head_dim, Q = (int64_t)hp->n_head * hd, KV = (int64_t)hp->n_head_kv * hd,
                  NE = hp->n_expert, FE = hp->n_ff_exp, FS = hp->n_ff_shexp, S = hp->ssm_d_state,
                  NK = hp->ssm_n_k_heads, NV = hp->ssm_n_v_heads, KD = NK * S, VD = NV * S, CD = 2 * KD + VD;
    const char *path = gguf_name(m->gguf);
    char n[96];
#define NAME(suffix) snprintf(n, sizeof n, "blk.%u.%s", il, suffix)
#define BIND(field, suffix, ne0, ne1, req)                                                 \
    NAME(suffix);                                                                          \
    if ((st = model_bind(m, &L->field, n, ne0, ne1, req))) return st;
#define F32ONLY(field, suffix)                                                             \
    NAME(suffix);                                                                          \
    if ((st = need_f32(m, &L->field, n))) return st;
    BIND(attn_norm, "attn_norm.weight", E, 1, true);
    BIND(ffn_norm, "post_attention_norm.weight", E, 1, true); /* the FFN's input norm */
    if (!L->recurrent) {
        NAME("attn_qkv.weight");
        if (gguf_find_tensor(m->gguf, n))
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' (a fused q/k/v of a full-attention layer) is not "
                           "supported; deja reads attn_q, attn_k and attn_v", path, n);
        BIND(wq, "attn_q.weight", E, 2 * Q, true); /* per head [q | gate] */
        BIND(wk, "attn_k.weight", E, KV, true);
        BIND(wv, "attn_v.weight", E, KV, true);
        BIND(wo, "attn_output.weight", Q, E, true);
        BIND(q_norm, "attn_q_norm.weight", hd, 1, true);
        BIND(k_norm, "attn_k_norm.weight", hd, 1, true);
    } else {
        NAME("attn_qkv.weight");
        const bool legacy = hp->arch == DJ_ARCH_QWEN3NEXT && !gguf_find_tensor(m->gguf, n);
        if (legacy) {
            BIND(ssm_in, "ssm_in.weight", E, 2 * KD + 2 * VD, true);
        } else {
            BIND(ssm_qkv, "attn_qkv.weight", E, CD, true);
            BIND(ssm_z, "attn_gate.weight", E, VD, true);
        }
        if (hp->arch == DJ_ARCH_QWEN3NEXT) {
            BIND(ssm_ba, "ssm_ba.weight", E, 2 * NV, true);
        } else {
            BIND(ssm_beta, "ssm_beta.weight", E, NV, true);
            BIND(ssm_alpha, "ssm_alpha.weight", E, NV, true);
        }
        BIND(ssm_conv1d, "ssm_conv1d.weight", hp->ssm_d_conv, CD, true);
        F32ONLY(ssm_conv1d, "ssm_conv1d.weight");
        BIND(ssm_dt, "ssm_dt.bias", NV, 1, true);
        BIND(ssm_a, "ssm_a", NV, 1, true);
        BIND(ssm_norm, "ssm_norm.weight", S, 1, true);
        BIND(ssm_out, "ssm_out.weight", VD, E, true);
    }
    if (hp->arch == DJ_ARCH_QWEN35) {
        BIND(w_gate, "ffn_gate.weight", E, hp->n_ff, true);
        BIND(w_up, "ffn_up.weight", E, hp->n_ff, true);
        BIND(w_down, "ffn_down.weight", hp->n_ff, E, true);
    } else {
        NAME("ffn_gate_up_exps.weight");
        if (gguf_find_tensor(m->gguf, n))
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' (fused expert gate and up) is not supported; deja reads "
                           "ffn_gate_exps and ffn_up_exps", path, n);
        BIND(ffn_gate_inp, "ffn_gate_inp.weight", E, NE, true);
        /* the shared expert always (FS >= 1: range-checked with the hparams), its gate first */
        BIND(ffn_gate_inp_shexp, "ffn_gate_inp_shexp.weight", E, 1, true);
        if ((st = model_bind_experts(m, L, il, FE, FS, true))) return st;
    }
    if (il >= hp->n_layer && (st = model_bind_nextn(m, L, il))) return st; /* NextN: a draft model */
#undef F32ONLY
#undef BIND
#undef NAME
    return DJ_OK;
}

enum dj_status qwen35_bind_layers(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    const uint32_t n_all = hp->n_layer + hp->n_layer_nextn;
    bool recr[BLOCKS_MAX];
    enum dj_status st;
    if (n_all > BLOCKS_MAX)
        return dj_fail(DJ_ERR_FORMAT, "%s: %u blocks; deja reads at most %u", gguf_name(m->gguf), n_all,
                       BLOCKS_MAX);
    if ((st = layer_pattern(m, recr, n_all))) return st;
    const size_t S = hp->ssm_d_state, conv_dim = (2 * (size_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads) * S;
    const size_t per_layer = (size_t)(hp->ssm_d_conv - 1) * conv_dim + (size_t)hp->ssm_n_v_heads * S * S;
    uint32_t n_kv = 0;
    size_t rs = 0;
    for (uint32_t il = 0; il < n_all; il++) {
        struct dj_layer *L = &m->layers[il];
        L->recurrent = recr[il];
        if (L->recurrent) {
            L->rs_off = rs;
            rs += per_layer;
        } else {
            /* NextN blocks (after every run one): the pool layers after the main ones, present only
             * in a pool made for drafting from them (model_pool_shape) */
            L->kv_il = il < hp->n_layer ? n_kv++ : n_kv + (il - hp->n_layer);
        }
        if ((st = bind_block(m, il))) return st;
    }
    if (n_kv == 0)
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: no full-attention layer among the %u run blocks; deja needs at least one",
                       gguf_name(m->gguf), hp->n_layer);
    hp->n_layer_kv = n_kv;
    hp->rs_floats = rs;
    return DJ_OK;
}

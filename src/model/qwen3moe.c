/*
 * qwen3moe.c — the qwen3moe architecture (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B):
 * qwen3's attention (per-head q/k RMS norm before NeoX RoPE, head_dim from
 * attention.key_length) with a Mixture-of-Experts FFN in every layer:
 * expert_count experts of width expert_feed_forward_length (absent:
 * feed_forward_length / expert_used_count), softmax routing, the top
 * expert_used_count renormalized, no shared expert (forward.c: moe_ffn).
 * The expert keys and tensors are read by loader.c, shared with Mixtral.
 */
#include "model/model.h"

enum dj_status qwen3moe_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_QWEN3MOE;
    m->hp.rope_type = DJ_ROPE_NEOX;
    return DJ_OK;
}

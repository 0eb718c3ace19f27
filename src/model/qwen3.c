/*
 * qwen3.c — the qwen3 architecture: the llama decoder with an RMS norm over
 * each head of Q and K (attn_q_norm / attn_k_norm, before RoPE), NeoX RoPE,
 * and head_dim given by attention.key_length (not n_embd / n_head).
 */
#include "model/model.h"

enum dj_status qwen3_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_QWEN3;
    m->hp.rope_type = DJ_ROPE_NEOX;
    return DJ_OK;
}

/*
 * qwen2.c — the qwen2 architecture: the llama decoder with biases on Q, K, V
 * and NeoX (split-half) RoPE.
 */
#include "model/model.h"

enum dj_status qwen2_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_QWEN2;
    m->hp.rope_type = DJ_ROPE_NEOX;
    return DJ_OK;
}

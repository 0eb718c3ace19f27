/*
 * llama.c — the llama architecture (Llama 2/3, TinyStories, SmolLM, codelm):
 * pre-norm decoder, GQA attention with normal (adjacent-pair) RoPE, SwiGLU FFN,
 * no biases.  Its forward pass is the shared decoder in forward.c.
 */
#include "model/model.h"

enum dj_status llama_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_LLAMA;
    m->hp.rope_type = DJ_ROPE_NORM;
    return DJ_OK;
}

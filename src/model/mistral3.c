/*
 * mistral3.c — the mistral3 architecture (Ministral 3, Devstral Small 2, Mistral Small
 * 3.x converted as Mistral3ForConditionalGeneration), as llama.cpp's
 * src/models/mistral3.cpp runs it: the llama decoder (normal rope, GQA, SwiGLU, tied or
 * untied output) with
 *   - YaRN rope (rope.scaling.type "yarn": factor, original_context_length,
 *     yarn_beta_fast / yarn_beta_slow, yarn_log_multiplier = mscale_all_dim; loader.c's
 *     load_rope_scaling, shared with deepseek2);
 *   - llama4-style attention temperature scaling (attention.temperature_scale, the
 *     converter's llama_4_scaling_beta): after rope, each query row of a token at
 *     position p is multiplied by
 *         s(p) = 1 + beta * ln(floor(p / n_floor) + 1)
 *     with n_floor the YaRN original context (rope.scaling.original_context_length,
 *     default context_length), llama.cpp's llm_graph_input_attn_temp (the floor in
 *     float, the log and the products in double, rounded to float once).  Keys are
 *     not scaled, so the K/V cache holds what it holds without scaling;
 *   - an optional attn_output.bias.
 * Not supported (refused): MoE mistral3 files (expert_count > 0) and the optional FFN
 * biases (ffn_{gate,up,down}.bias), which no released mistral3 file has.  The scale of
 * the scores is 1/sqrt(head_dim): llama.cpp's mistral3 does not read attention.scale.
 */
#include <math.h>
#include <stdio.h>

#include "core/status.h"
#include "model/model.h"

enum dj_status mistral3_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_MISTRAL3;
    m->hp.rope_type = DJ_ROPE_NORM;
    return DJ_OK;
}

enum dj_status mistral3_load_temp(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    const char *path = gguf_name(m->gguf);
    enum dj_status st;
    uint32_t n_expert = 0;
    if ((st = model_hp_u32(m, "expert_count", &n_expert, true, 0))) return st;
    if (n_expert > 0)
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: hyperparameter '%s.expert_count' is %u: mistral3 with experts is not "
                       "supported", path, m->arch_name, n_expert);
    if (hp->n_rot != hp->head_dim)
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.rope.dimension_count' is %u; mistral3 rotates the whole "
                       "head (attention.key_length %u)", path, m->arch_name, hp->n_rot, hp->head_dim);
    if ((st = model_hp_f32(m, "attention.temperature_scale", &hp->attn_temp_scale, 0.0f))) return st;
    if (!isfinite(hp->attn_temp_scale) || hp->attn_temp_scale < 0 || hp->attn_temp_scale > 16)
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.attention.temperature_scale' is %g; it must be between 0 "
                       "and 16", path, m->arch_name, (double)hp->attn_temp_scale);
    if (hp->attn_temp_scale != 0.0f) {
        /* llama.cpp: hparams.n_ctx_orig_yarn, the original context (default context_length) */
        uint32_t orig = hp->n_ctx_train;
        if ((st = model_hp_u32(m, "rope.scaling.original_context_length", &orig, true, hp->n_ctx_train)) ||
            (st = model_hp_range(m, "rope.scaling.original_context_length", orig, 1, UINT32_MAX)))
            return st;
        hp->attn_temp_floor = orig;
    }
    return DJ_OK;
}

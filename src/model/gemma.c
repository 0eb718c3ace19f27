/*
 * gemma.c — the gemma2 and gemma3 architectures (Gemma 2, Gemma 3 text models),
 * as llama.cpp's src/models/gemma2.cpp and gemma3.cpp run them:
 *
 *   x = tok_embd[tok] * sqrt(n_embd)
 *   per layer il:
 *     h = rms(x) * attn_norm
 *     q, k, v = Wq h, Wk h, Wv h;  gemma3: q, k = rms(q) * q_norm, rms(k) * k_norm per head
 *     NeoX rope of q, k: windowed layers with the local base / scale, the others with
 *       rope.freq_base and the linear scale (rope.scaling.factor)
 *     q *= attn_q_scale  (1/sqrt(head_dim); 1/sqrt(n_embd / n_head) for the 27B shapes)
 *     s = q . k  over the layer's keys: (p - n_swa, p] on a windowed layer, else [0, p]
 *     gemma2: s = cap tanh(s / cap)  (attn_logit_softcapping, default 50)
 *     x += rms(Wo softmax(s) V) * attn_post_norm
 *     x += rms(W_down (gelu(W_gate h') * W_up h')) * ffn_post_norm,  h' = rms(x) * ffn_norm
 *   logits = W_out (rms(x) * output_norm);  final_logit_softcapping c: c tanh(logits / c)
 *     (gemma2: always, default 30; gemma3: when the file has the key)
 *
 * Which layers slide (llama.cpp's set_swa_pattern): with period P =
 * attention.sliding_window_pattern (gemma3 default 6, gemma2 default 2) layer il has the
 * window iff il % P < P - 1, so the last of every P layers is global (P = 0: all slide,
 * P = 1: none).  gemma3 slides only when attention.sliding_window is present and > 0;
 * gemma2 always (window default 4096).  The window and the rope choice are per-layer
 * fields of dj_layer (n_swa, rope_local): forward.c knows no gemma rule.
 *
 * The attention scale follows llama.cpp (and gemma_pytorch's config): query_pre_attn_scalar
 * is not in the GGUF; llama.cpp picks n_embd / n_head for the 27B models, recognised by
 * their layer count (gemma3: 62, gemma2: 46), head_dim otherwise.  We do the same.
 *
 * GELU: llama.cpp's CPU backend computes the gate activation through a table of 65536
 * f16 entries: x is rounded to f16, the entry is gelu_tanh of that value rounded to f16;
 * x <= -10 gives 0 and x >= 10 gives x.  gelu_tab is that table (as floats), so the FFN
 * sees the values ggml's does, not the smoother float GELU (which differs by up to an
 * f16 half-ulp, ~5e-4 relative).  Compared with ggml_table_gelu_f16 of the llama.cpp build
 * the goldens came from (linked and read after ggml_cpu_init): 65,535 of 65,536 entries
 * equal; at x = -1.999 ggml's is one f16 ulp (3e-5) lower, its float expression rounding
 * differently there (compiler contraction).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "core/status.h"
#include "model/model.h"

#define GEMMA_CTX_MAX 2147483647u

enum dj_status gemma2_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_GEMMA2;
    m->hp.rope_type = DJ_ROPE_NEOX;
    return DJ_OK;
}

enum dj_status gemma3_load_hparams(struct dj_model *m) {
    m->hp.arch = DJ_ARCH_GEMMA3;
    m->hp.rope_type = DJ_ROPE_NEOX;
    return DJ_OK;
}

/* A soft-capping value: absent → def; present → finite and > 0 (0 only where def is 0:
 * gemma3's final cap, "none"). */
static enum dj_status softcap(struct dj_model *m, const char *key, float def, float *out) {
    enum dj_status st = model_hp_f32(m, key, out, def);
    if (st) return st;
    if (!isfinite(*out) || *out < 0 || (*out == 0 && def != 0))
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.%s' is %g; it must be a finite number > 0",
                       gguf_name(m->gguf), m->arch_name, key, (double)*out);
    return DJ_OK;
}

/* ggml's GELU (tanh form) in float, as ggml_gelu_f32 writes it */
static float gelu_f32(float x) {
    const float a = 0.044715f, s = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + tanhf(s * x * (1.0f + a * x * x)));
}

enum dj_status gemma_load_swa(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    const bool g2 = hp->arch == DJ_ARCH_GEMMA2;
    const char *path = gguf_name(m->gguf);
    if (hp->rope_llama3 || hp->rope_yarn)
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: %s with llama3 or YaRN rope scaling is not supported (linear only)",
                       path, m->arch_name);
    /* the window: gemma2 always (default 4096), gemma3 when the key is there and > 0 */
    hp->n_swa = 0;
    if ((st = model_hp_u32(m, "attention.sliding_window", &hp->n_swa, true, g2 ? 4096 : 0))) return st;
    if (g2 && (st = model_hp_range(m, "attention.sliding_window", hp->n_swa, 1, GEMMA_CTX_MAX))) return st;
    hp->swa_period = g2 ? 2 : 6;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch_name);
    const int64_t ki = gguf_find_key(m->gguf, key);
    if (ki >= 0 && gguf_kv_type(m->gguf, (size_t)ki) == GGUF_TYPE_ARRAY) {
        /* llama.cpp reads this key for gemma2/3 as a scalar only and keeps its default otherwise */
        dj_log(DJ_LOG_WARN, "%s: '%s' is an array; %s uses the period %u, as llama.cpp does", path, key,
               m->arch_name, hp->swa_period);
    } else if (ki >= 0 && (st = model_hp_u32(m, "attention.sliding_window_pattern", &hp->swa_period, true,
                                             hp->swa_period))) {
        return st;
    }
    if (hp->n_swa == 0) hp->swa_period = 1; /* gemma3 without a window: every layer global */
    /* rope of the windowed layers: gemma3 base 10000 and no scaling unless the file says;
     * gemma2 the global layers' setting unless the file says */
    hp->rope_base_local = g2 ? hp->rope_freq_base : 10000.0f;
    hp->rope_scale_local = g2 ? hp->rope_linear_scale : 1.0f;
    if ((st = model_hp_f32(m, "rope.freq_base_swa", &hp->rope_base_local, hp->rope_base_local))) return st;
    if (!isfinite(hp->rope_base_local) || hp->rope_base_local <= 0)
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.rope.freq_base_swa' is %g; it must be a finite number > 0",
                       path, m->arch_name, (double)hp->rope_base_local);
    hp->rope_local = hp->n_swa > 0 && hp->swa_period != 1;
    if ((st = softcap(m, "final_logit_softcapping", g2 ? 30.0f : 0.0f, &hp->final_softcap))) return st;
    if (g2 && (st = softcap(m, "attn_logit_softcapping", 50.0f, &hp->attn_softcap))) return st;
    const bool big = hp->n_layer == (g2 ? 46u : 62u); /* the 27B models: llama.cpp's LLM_TYPE_27B */
    hp->attn_q_scale = big ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head)) : 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = true;
    hp->ffn_gelu = true;
    return DJ_OK;
}

enum dj_status gemma_bind_layers(struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    const bool g3 = hp->arch == DJ_ARCH_GEMMA3;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    if (!g3) { /* llama.cpp's gemma2 always takes the output matrix from token_embd */
        m->output = m->tok_embd;
        m->output_tied = true;
    }
    m->gelu_tab = malloc(65536 * sizeof(float));
    if (!m->gelu_tab) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for the GELU table", gguf_name(m->gguf));
    for (uint32_t h = 0; h < 65536; h++)
        m->gelu_tab[h] = dj_fp16_to_f32(dj_f32_to_fp16(gelu_f32(dj_fp16_to_f32((uint16_t)h))));
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct dj_layer *L = &m->layers[il];
        const uint32_t P = hp->swa_period;
        const bool swa = hp->n_swa > 0 && (P == 0 || il % P < P - 1);
        L->n_swa = swa ? hp->n_swa : 0;
        L->rope_local = swa;
        char n[96];
#define BIND(field, suffix, ne0, ne1, req)                                                 \
    snprintf(n, sizeof n, "blk.%u.%s", il, suffix);                                        \
    if ((st = model_bind(m, &L->field, n, ne0, ne1, req))) return st;
        BIND(attn_norm, "attn_norm.weight", E, 1, true);
        BIND(wq, "attn_q.weight", E, Q, true);
        BIND(wk, "attn_k.weight", E, KV, true);
        BIND(wv, "attn_v.weight", E, KV, true);
        BIND(wo, "attn_output.weight", Q, E, true);
        BIND(q_norm, "attn_q_norm.weight", hp->head_dim, 1, g3);
        BIND(k_norm, "attn_k_norm.weight", hp->head_dim, 1, g3);
        if (!g3) { /* gemma2 has none; a file that has them would be run without them by llama.cpp */
            memset(&L->q_norm, 0, sizeof L->q_norm);
            memset(&L->k_norm, 0, sizeof L->k_norm);
        }
        BIND(attn_post_norm, "post_attention_norm.weight", E, 1, true);
        BIND(ffn_norm, "ffn_norm.weight", E, 1, true);
        BIND(w_gate, "ffn_gate.weight", E, hp->n_ff, true);
        BIND(w_up, "ffn_up.weight", E, hp->n_ff, true);
        BIND(w_down, "ffn_down.weight", hp->n_ff, E, true);
        BIND(ffn_post_norm, "post_ffw_norm.weight", E, 1, true);
#undef BIND
    }
    return DJ_OK;
}

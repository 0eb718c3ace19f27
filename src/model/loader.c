/*
 * loader.c — model_load: GGUF → hyperparameters → tensors bound by name.
 *
 * The common llama-family hyperparameters are read here under the
 * "<arch>." prefix; each architecture file adds what differs (rope type,
 * biases, q/k norms).  Every tensor is checked for shape and type when it is
 * bound, so the forward pass never meets a surprise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ggml_type.h"
#include "core/status.h"
#include "model/model.h"

const char *model_arch_name(enum dj_arch a) {
    switch (a) {
    case DJ_ARCH_LLAMA: return "llama";
    case DJ_ARCH_QWEN2: return "qwen2";
    case DJ_ARCH_QWEN3: return "qwen3";
    }
    return "?";
}

static bool weight_type_supported(uint32_t t) {
    switch (t) {
    case DJ_TYPE_F32: case DJ_TYPE_F16: case DJ_TYPE_BF16: case DJ_TYPE_Q8_0:
    case DJ_TYPE_Q4_0: case DJ_TYPE_Q4_K: case DJ_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

enum dj_status model_bind(struct dj_model *m, struct dj_weight *w, const char *name, int64_t ne0, int64_t ne1,
                          bool required) {
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return DJ_OK;
        return dj_fail(DJ_ERR_NOT_FOUND, "%s: tensor '%s' is missing (architecture %s)", gguf_name(m->gguf), name,
                       m->arch_name);
    }
    int64_t t_ne1 = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) t_ne1 *= t->ne[d];
    if (t->ne[0] != ne0 || t_ne1 != ne1 || t->n_dims > 2)
        return dj_fail(DJ_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                       gguf_name(m->gguf), name, (long long)t->ne[0], (long long)t_ne1, (long long)ne0,
                       (long long)ne1);
    bool vector = ne1 == 1;
    if (vector ? t->type != DJ_TYPE_F32 : !weight_type_supported(t->type))
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which deja does not support for %s",
                       gguf_name(m->gguf), name, dj_type_name(t->type), vector ? "a vector (f32 only)" : "weights");
    w->data = t->data;
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = t->nbytes / (size_t)ne1;
    return DJ_OK;
}

/* "<arch>.<key>" as u32/f32; missing → default (if has_default) or an error. */
static enum dj_status hp_u32(struct dj_model *m, const char *key, uint32_t *out, bool has_default, uint32_t def) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    enum dj_status st = gguf_get_u32(m->gguf, full, out);
    if (st == DJ_ERR_NOT_FOUND && has_default) {
        *out = def;
        return DJ_OK;
    }
    if (st == DJ_ERR_NOT_FOUND) return dj_fail(st, "%s: hyperparameter '%s' is missing", gguf_name(m->gguf), full);
    return st; /* DJ_ERR_TYPE carries the reader's message */
}

static enum dj_status hp_f32(struct dj_model *m, const char *key, float *out, float def) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    enum dj_status st = gguf_get_f32(m->gguf, full, out);
    if (st == DJ_ERR_NOT_FOUND) {
        *out = def;
        return DJ_OK;
    }
    return st;
}

static enum dj_status load_common_hparams(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    if ((st = hp_u32(m, "context_length", &hp->n_ctx_train, true, 2048)) ||
        (st = hp_u32(m, "embedding_length", &hp->n_embd, false, 0)) ||
        (st = hp_u32(m, "block_count", &hp->n_layer, false, 0)) ||
        (st = hp_u32(m, "feed_forward_length", &hp->n_ff, false, 0)) ||
        (st = hp_u32(m, "attention.head_count", &hp->n_head, false, 0)))
        return st;
    if ((st = hp_u32(m, "attention.head_count_kv", &hp->n_head_kv, true, hp->n_head))) return st;
    if (hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv != 0 || hp->n_embd == 0 ||
        hp->n_layer == 0 || hp->n_layer > 4096)
        return dj_fail(DJ_ERR_FORMAT, "%s: inconsistent hyperparameters (n_embd %u, n_layer %u, n_head %u, n_head_kv %u)",
                       gguf_name(m->gguf), hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv);
    if ((st = hp_u32(m, "attention.key_length", &hp->head_dim, true, hp->n_embd / hp->n_head))) return st;
    if ((st = hp_u32(m, "rope.dimension_count", &hp->n_rot, true, hp->head_dim))) return st;
    if (hp->head_dim == 0 || hp->head_dim % 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return dj_fail(DJ_ERR_FORMAT, "%s: bad head/rope dimensions (head_dim %u, rope dims %u)", gguf_name(m->gguf),
                       hp->head_dim, hp->n_rot);
    if ((st = hp_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1e-5f)) ||
        (st = hp_f32(m, "rope.freq_base", &hp->rope_freq_base, 10000.0f)))
        return st;
    hp->rope_linear_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    struct gguf_str stype;
    if (gguf_get_str(m->gguf, key, &stype) == DJ_OK) {
        if (stype.len == 6 && !memcmp(stype.ptr, "linear", 6)) {
            float f = 1.0f;
            if ((st = hp_f32(m, "rope.scaling.factor", &f, 1.0f))) return st;
            if (f > 0) hp->rope_linear_scale = 1.0f / f;
        } else if (!(stype.len == 4 && !memcmp(stype.ptr, "none", 4)) &&
                   !(stype.len == 6 && !memcmp(stype.ptr, "llama3", 6))) {
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s: rope scaling type '%.*s' is not supported", gguf_name(m->gguf),
                           (int)stype.len, stype.ptr);
        }
    }
    return DJ_OK;
}

static enum dj_status bind_tensors(struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    const struct gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb)
        return dj_fail(DJ_ERR_NOT_FOUND, "%s: tensor 'token_embd.weight' is missing", gguf_name(m->gguf));
    hp = &m->hp;
    if (m->hp.n_vocab == 0) m->hp.n_vocab = (uint32_t)(emb->n_dims > 1 ? emb->ne[1] : 0);
    if ((st = model_bind(m, &m->tok_embd, "token_embd.weight", E, hp->n_vocab, true)) ||
        (st = model_bind(m, &m->output_norm, "output_norm.weight", E, 1, true)) ||
        (st = model_bind(m, &m->output, "output.weight", E, hp->n_vocab, false)) ||
        (st = model_bind(m, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 1, false)))
        return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers) return dj_fail(DJ_ERR_NOMEM, "out of memory binding %u layers", hp->n_layer);
    bool bias = hp->arch == DJ_ARCH_QWEN2, qk_norm = hp->arch == DJ_ARCH_QWEN3;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct dj_layer *L = &m->layers[il];
        char n[96];
#define BIND(field, suffix, ne0, ne1, req)                                                 \
    snprintf(n, sizeof n, "blk.%u.%s", il, suffix);                                        \
    if ((st = model_bind(m, &L->field, n, ne0, ne1, req))) return st;
        BIND(attn_norm, "attn_norm.weight", E, 1, true);
        BIND(wq, "attn_q.weight", E, Q, true);
        BIND(wk, "attn_k.weight", E, KV, true);
        BIND(wv, "attn_v.weight", E, KV, true);
        BIND(wo, "attn_output.weight", Q, E, true);
        BIND(bq, "attn_q.bias", Q, 1, bias);
        BIND(bk, "attn_k.bias", KV, 1, bias);
        BIND(bv, "attn_v.bias", KV, 1, bias);
        BIND(q_norm, "attn_q_norm.weight", hp->head_dim, 1, qk_norm);
        BIND(k_norm, "attn_k_norm.weight", hp->head_dim, 1, qk_norm);
        BIND(ffn_norm, "ffn_norm.weight", E, 1, true);
        BIND(w_gate, "ffn_gate.weight", E, hp->n_ff, true);
        BIND(w_up, "ffn_up.weight", E, hp->n_ff, true);
        BIND(w_down, "ffn_down.weight", hp->n_ff, E, true);
#undef BIND
    }
    return DJ_OK;
}

enum dj_status model_load(const char *path, struct dj_model **out) {
    struct dj_model *m = calloc(1, sizeof *m);
    if (!m) return dj_fail(DJ_ERR_NOMEM, "out of memory loading %s", path);
    enum dj_status st = gguf_open(path, &m->gguf);
    if (st) goto fail;
    struct gguf_str arch;
    if ((st = gguf_get_str(m->gguf, "general.architecture", &arch))) {
        if (st == DJ_ERR_NOT_FOUND) dj_fail(st, "%s: no general.architecture key", path);
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    if (!strcmp(m->arch_name, "llama")) st = llama_load_hparams(m);
    else if (!strcmp(m->arch_name, "qwen2")) st = qwen2_load_hparams(m);
    else if (!strcmp(m->arch_name, "qwen3")) st = qwen3_load_hparams(m);
    else {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (deja supports llama, qwen2, qwen3)",
                     path, (int)arch.len, arch.ptr);
        goto fail;
    }
    if (st || (st = load_common_hparams(m))) goto fail;
    uint32_t nv = 0;
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", m->arch_name);
    if (gguf_get_u32(m->gguf, key, &nv) == DJ_OK) m->hp.n_vocab = nv;
    if ((st = bind_tensors(m))) goto fail;
    if ((st = vocab_load_gguf(m->gguf, &m->vocab))) goto fail;
    if (vocab_n_tokens(m->vocab) > m->hp.n_vocab) {
        st = dj_fail(DJ_ERR_FORMAT, "%s: the vocabulary has %zu tokens but the embedding only %u rows", path,
                     vocab_n_tokens(m->vocab), m->hp.n_vocab);
        goto fail;
    }
    *out = m;
    return DJ_OK;
fail:
    model_free(m);
    return st;
}

void model_free(struct dj_model *m) {
    if (!m) return;
    if (m->vocab) dj_vocab_free(m->vocab);
    gguf_close(m->gguf);
    free(m->layers);
    free(m);
}

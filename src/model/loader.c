/*
 * loader.c — model_load: GGUF → hyperparameters → tensors bound by name.
 *
 * The common llama-family hyperparameters are read here under the
 * "<arch>." prefix; each architecture file adds what differs (rope type,
 * biases, q/k norms).  Every hyperparameter the forward pass divides by, sizes
 * a buffer with or loops over is checked here against the range it needs
 * (check_hparams), so a file with a zero head count or a 0 context length is
 * refused with a message naming the key instead of reaching a division by zero
 * in ctx_create or forward.c.  Every tensor is checked for shape (no zero
 * dimension) and type when it is bound, so the forward pass never meets a
 * surprise.
 *
 * RoPE scaling: "linear" sets rope_linear_scale; "llama3" is applied through
 * per-frequency divisors, the rope_freqs.weight tensor when the file has one,
 * else computed here from the metadata (model_llama3_rope_freqs) into an array the
 * model owns, so forward.c's rope() sees the same thing either way.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "model/model.h"

/* Bounds of the checks below.  A dimension is capped at 2^24 so that every
 * product the context sizes buffers with (ubatch x dimension x 4 bytes) and the
 * kernels' row offsets stay far from overflow; real models are below 2^17. */
#define HP_DIM_MAX (1u << 24)
#define HP_LAYER_MAX 4096u
#define HP_CTX_MAX 2147483647u /* positions are uint32; int32 arithmetic on them must not wrap */
#define HP_ROT_MAX 512u        /* rope() keeps n_rot/2 cos/sin pairs on the stack */
#define HP_EXPERT_MAX 512u     /* experts a layer (real models: 8 to 384); moe_ffn's per-token tables */

const char *model_arch_name(enum dj_arch a) {
    switch (a) {
    case DJ_ARCH_LLAMA: return "llama";
    case DJ_ARCH_QWEN2: return "qwen2";
    case DJ_ARCH_QWEN3: return "qwen3";
    case DJ_ARCH_QWEN3MOE: return "qwen3moe";
    case DJ_ARCH_DEEPSEEK2: return "deepseek2";
    case DJ_ARCH_GPT_OSS: return "gpt-oss";
    case DJ_ARCH_QWEN35: return "qwen35";
    case DJ_ARCH_QWEN35MOE: return "qwen35moe";
    case DJ_ARCH_QWEN3NEXT: return "qwen3next";
    case DJ_ARCH_GEMMA2: return "gemma2";
    case DJ_ARCH_GEMMA3: return "gemma3";
    case DJ_ARCH_GLM4MOE: return "glm4moe";
    case DJ_ARCH_MISTRAL3: return "mistral3";
    }
    return "?";
}

/* A weight type deja can run: the kernel table has a matmul, a dot and a dequantizer
 * for it (the generic table has them for every type a released file uses). */
static bool weight_type_supported(uint32_t t) { return dj_kernels_wpath(dj_kernels(), t) != DJ_WPATH_NONE; }

static enum dj_status unsupported_type(const struct dj_model *m, const char *name, uint32_t type) {
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s (id %u), which deja cannot run as weights: %s",
                   gguf_name(m->gguf), name, dj_type_name(type), type, dj_kernels_why_not(type));
}

/* The tensor `name` for binding into *w (cleared): *t = NULL when it is absent and
 * not required (DJ_OK: w stays empty); DJ_ERR_NOT_FOUND when absent and required. */
static enum dj_status bind_find(struct dj_model *m, struct dj_weight *w, const char *name, bool required,
                                const struct gguf_tensor **t) {
    *t = gguf_find_tensor(m->gguf, name);
    memset(w, 0, sizeof *w);
    if (*t || !required) return DJ_OK;
    return dj_fail(DJ_ERR_NOT_FOUND, "%s: tensor '%s' is missing (architecture %s)", gguf_name(m->gguf), name,
                   m->arch_name);
}

enum dj_status model_bind(struct dj_model *m, struct dj_weight *w, const char *name, int64_t ne0, int64_t ne1,
                          bool required) {
    const struct gguf_tensor *t;
    enum dj_status st = bind_find(m, w, name, required, &t);
    if (st || !t) return st;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if (t->ne[d] == 0)
            return dj_fail(DJ_ERR_FORMAT, "%s: tensor '%s' has a zero dimension (shape [%lld, %lld, %lld, %lld])",
                           gguf_name(m->gguf), name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)t->ne[3]);
    int64_t t_ne1 = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) t_ne1 *= t->ne[d]; /* no overflow: the reader checked the product */
    if (t->ne[0] != ne0 || t_ne1 != ne1 || t->n_dims > 2)
        return dj_fail(DJ_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                       gguf_name(m->gguf), name, (long long)t->ne[0], (long long)t_ne1, (long long)ne0,
                       (long long)ne1);
    DJ_ASSERT(ne0 > 0 && ne1 > 0); /* callers pass validated hyperparameters; the tensor matched them */
    bool vector = ne1 == 1;
    if (vector && t->type != DJ_TYPE_F32)
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which deja does not support for a vector (f32 only)",
                       gguf_name(m->gguf), name, dj_type_name(t->type));
    if (!vector && !weight_type_supported(t->type)) return unsupported_type(m, name, t->type);
    w->data = t->data;
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = t->nbytes / (size_t)ne1;
    return DJ_OK;
}

enum dj_status model_bind_3d(struct dj_model *m, struct dj_weight *w, const char *name, int64_t ne0, int64_t ne1,
                             int64_t ne2, bool required) {
    const struct gguf_tensor *t;
    enum dj_status st = bind_find(m, w, name, required, &t);
    if (st || !t) return st;
    if (t->n_dims != 3 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2)
        return dj_fail(DJ_ERR_FORMAT, "%s: tensor '%s' has %u dimensions [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                       gguf_name(m->gguf), name, t->n_dims, (long long)t->ne[0],
                       (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)(t->n_dims > 2 ? t->ne[2] : 1),
                       (long long)ne0, (long long)ne1, (long long)ne2);
    DJ_ASSERT(ne0 > 0 && ne1 > 0 && ne2 > 0);
    if (!weight_type_supported(t->type)) return unsupported_type(m, name, t->type);
    w->data = t->data;
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1 * ne2; /* no overflow: the reader checked the product */
    w->row_bytes = t->nbytes / (size_t)w->ne1;
    return DJ_OK;
}

/* model_bind (ne2 0) or model_bind_3d of tensor blk.<il>.<suffix>. */
static enum dj_status bind_blk(struct dj_model *m, struct dj_weight *w, uint32_t il, const char *suffix, int64_t ne0,
                               int64_t ne1, int64_t ne2, bool required) {
    char n[96];
    snprintf(n, sizeof n, "blk.%u.%s", il, suffix);
    return ne2 ? model_bind_3d(m, w, n, ne0, ne1, ne2, required) : model_bind(m, w, n, ne0, ne1, required);
}

enum dj_status model_bind_experts(struct dj_model *m, struct dj_layer *L, uint32_t il, int64_t FE, int64_t FS,
                                  bool gate_required) {
    const int64_t E = m->hp.n_embd, NE = m->hp.n_expert;
    enum dj_status st;
    if ((st = bind_blk(m, &L->ffn_gate_exps, il, "ffn_gate_exps.weight", E, FE, NE, gate_required)) ||
        (st = bind_blk(m, &L->ffn_up_exps, il, "ffn_up_exps.weight", E, FE, NE, true)) ||
        (st = bind_blk(m, &L->ffn_down_exps, il, "ffn_down_exps.weight", FE, E, NE, true)) || FS == 0)
        return st;
    if ((st = bind_blk(m, &L->ffn_gate_shexp, il, "ffn_gate_shexp.weight", E, FS, 0, true)) ||
        (st = bind_blk(m, &L->ffn_up_shexp, il, "ffn_up_shexp.weight", E, FS, 0, true)))
        return st;
    return bind_blk(m, &L->ffn_down_shexp, il, "ffn_down_shexp.weight", FS, E, 0, true);
}

enum dj_status model_bind_nextn(struct dj_model *m, struct dj_layer *L, uint32_t il) {
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    enum dj_status st;
    if ((st = bind_blk(m, &L->nextn_eh_proj, il, "nextn.eh_proj.weight", 2 * E, E, 0, true)) ||
        (st = bind_blk(m, &L->nextn_enorm, il, "nextn.enorm.weight", E, 1, 0, true)) ||
        (st = bind_blk(m, &L->nextn_hnorm, il, "nextn.hnorm.weight", E, 1, 0, true)) ||
        (st = bind_blk(m, &L->nextn_embed, il, "nextn.embed_tokens.weight", E, V, 0, false)) ||
        (st = bind_blk(m, &L->nextn_head, il, "nextn.shared_head_head.weight", E, V, 0, false)))
        return st;
    return bind_blk(m, &L->nextn_head_norm, il, "nextn.shared_head_norm.weight", E, 1, 0, false);
}

struct dj_weight model_expert(const struct dj_weight *w, uint32_t n_expert, uint32_t e) {
    DJ_ASSERT(w->data && n_expert > 0 && e < n_expert && w->ne1 % n_expert == 0);
    struct dj_weight v = *w;
    v.ne1 = w->ne1 / n_expert;
    const size_t off = (size_t)e * (size_t)v.ne1 * w->row_bytes;
    v.data = (const uint8_t *)w->data + off;
    /* model_repack packs an expert tensor only when a slab is whole 16-row groups:
     * then the packed copy of expert e starts at the same offset */
    DJ_ASSERT(!w->packed || v.ne1 % 16 == 0);
    v.packed = w->packed ? (uint8_t *)w->packed + off : NULL;
    return v;
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

static bool hp_has(const struct dj_model *m, const char *key) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    return gguf_find_key(m->gguf, full) >= 0;
}

/* "<file>: hyperparameter '<arch>.<key>' <what>" as DJ_ERR_FORMAT. */
static enum dj_status hp_bad(const struct dj_model *m, const char *key, const char *fmt, ...) DJ_PRINTF(3, 4);
static enum dj_status hp_bad(const struct dj_model *m, const char *key, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.%s' %s", gguf_name(m->gguf), m->arch_name, key, what);
}

/* A u32 hyperparameter within [lo, hi]. */
static enum dj_status hp_range(const struct dj_model *m, const char *key, uint32_t v, uint32_t lo, uint32_t hi) {
    if (v < lo || v > hi) return hp_bad(m, key, "is %u; it must be between %u and %u", v, lo, hi);
    return DJ_OK;
}

enum dj_status model_hp_u32(struct dj_model *m, const char *key, uint32_t *out, bool has_default, uint32_t def) {
    return hp_u32(m, key, out, has_default, def);
}
enum dj_status model_hp_f32(struct dj_model *m, const char *key, float *out, float def) {
    return hp_f32(m, key, out, def);
}
bool model_hp_has(const struct dj_model *m, const char *key) { return hp_has(m, key); }
enum dj_status model_hp_range(const struct dj_model *m, const char *key, uint32_t v, uint32_t lo, uint32_t hi) {
    return hp_range(m, key, v, lo, hi);
}

/* Every derived quantity the context and the forward pass rely on: nothing
 * below divides by zero, overflows a size or indexes past rope()'s tables. */
static enum dj_status check_hparams(struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    if ((st = hp_range(m, "context_length", hp->n_ctx_train, 1, HP_CTX_MAX)) ||
        (st = hp_range(m, "embedding_length", hp->n_embd, 1, HP_DIM_MAX)) ||
        (st = hp_range(m, "block_count", hp->n_layer, 1, HP_LAYER_MAX)) ||
        (st = hp_range(m, "feed_forward_length", hp->n_ff, 1, HP_DIM_MAX)) ||
        (st = hp_range(m, "attention.head_count", hp->n_head, 1, HP_DIM_MAX)) ||
        (st = hp_range(m, "attention.head_count_kv", hp->n_head_kv, 1, hp->n_head)))
        return st;
    if (hp->n_head % hp->n_head_kv != 0)
        return hp_bad(m, "attention.head_count_kv", "is %u, which does not divide attention.head_count (%u)",
                      hp->n_head_kv, hp->n_head);
    if ((st = hp_range(m, "attention.key_length", hp->head_dim, 1, HP_DIM_MAX))) return st;
    if ((uint64_t)hp->n_head * hp->head_dim > HP_DIM_MAX)
        return hp_bad(m, "attention.key_length", "is %u: with %u heads a query row has %llu elements (at most %u)",
                      hp->head_dim, hp->n_head, (unsigned long long)hp->n_head * hp->head_dim, HP_DIM_MAX);
    if (hp->n_rot == 0 || hp->n_rot % 2 || hp->n_rot > hp->head_dim || hp->n_rot > HP_ROT_MAX)
        return hp_bad(m, "rope.dimension_count",
                      "is %u; it must be even, at least 2 and at most the head size (attention.key_length %u) and %u",
                      hp->n_rot, hp->head_dim, HP_ROT_MAX);
    if (!isfinite(hp->rope_freq_base) || hp->rope_freq_base <= 0)
        return hp_bad(m, "rope.freq_base", "is %g; it must be a finite number > 0", (double)hp->rope_freq_base);
    if (!isfinite(hp->rms_eps) || hp->rms_eps < 0)
        return hp_bad(m, "attention.layer_norm_rms_epsilon", "is %g; it must be a finite number >= 0",
                      (double)hp->rms_eps);
    return DJ_OK;
}

/* rope.scaling.*: "none" (or absent), "linear" (rope.scaling.factor), "llama3"
 * (rope.scaling.factor, .original_context_length and deja's .low_freq_factor /
 * .high_freq_factor, defaulting to what llama.cpp's converter assumes: 8, 8192,
 * 1, 4).  Anything else is refused rather than silently run unscaled. */
static enum dj_status load_rope_scaling(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    hp->rope_linear_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    struct gguf_str stype;
    st = gguf_get_str(m->gguf, key, &stype);
    if (st == DJ_ERR_NOT_FOUND) return DJ_OK;
    if (st) return st; /* not a string: the reader's message names the key */
    if (stype.len == 4 && !memcmp(stype.ptr, "none", 4)) return DJ_OK;
    if (stype.len == 6 && !memcmp(stype.ptr, "linear", 6)) {
        float f = 1.0f;
        if ((st = hp_f32(m, "rope.scaling.factor", &f, 1.0f))) return st;
        if (!isfinite(f) || f <= 0)
            return hp_bad(m, "rope.scaling.factor", "is %g; it must be a finite number > 0", (double)f);
        hp->rope_linear_scale = 1.0f / f;
        return DJ_OK;
    }
    if (stype.len == 6 && !memcmp(stype.ptr, "llama3", 6)) {
        hp->rope_llama3 = true;
        if ((st = hp_f32(m, "rope.scaling.factor", &hp->rope_factor, 8.0f)) ||
            (st = hp_f32(m, "rope.scaling.low_freq_factor", &hp->rope_low_freq_factor, 1.0f)) ||
            (st = hp_f32(m, "rope.scaling.high_freq_factor", &hp->rope_high_freq_factor, 4.0f)) ||
            (st = hp_u32(m, "rope.scaling.original_context_length", &hp->rope_orig_ctx, true, 8192)))
            return st;
        if (!isfinite(hp->rope_factor) || hp->rope_factor <= 0)
            return hp_bad(m, "rope.scaling.factor", "is %g; it must be a finite number > 0", (double)hp->rope_factor);
        if (!isfinite(hp->rope_low_freq_factor) || hp->rope_low_freq_factor <= 0)
            return hp_bad(m, "rope.scaling.low_freq_factor", "is %g; it must be a finite number > 0",
                          (double)hp->rope_low_freq_factor);
        /* high == low would divide by zero in the smoothing step (the converter asserts it) */
        if (!isfinite(hp->rope_high_freq_factor) || hp->rope_high_freq_factor <= hp->rope_low_freq_factor)
            return hp_bad(m, "rope.scaling.high_freq_factor",
                          "is %g; it must be finite and greater than rope.scaling.low_freq_factor (%g)",
                          (double)hp->rope_high_freq_factor, (double)hp->rope_low_freq_factor);
        if (hp->rope_orig_ctx == 0)
            return hp_bad(m, "rope.scaling.original_context_length", "is 0; it must be at least 1");
        return DJ_OK;
    }
    if (stype.len == 4 && !memcmp(stype.ptr, "yarn", 4) &&
        (hp->arch == DJ_ARCH_DEEPSEEK2 || hp->arch == DJ_ARCH_MISTRAL3 || hp->arch == DJ_ARCH_GPT_OSS)) {
        /* llama.cpp's YaRN (ggml rope_yarn with ext_factor 1; llama_context's attn_factor).
         * Only where a golden test checks it: deepseek2, mistral3, gpt-oss */
        float attn = 1.0f;
        hp->rope_yarn = true;
        if ((st = hp_f32(m, "rope.scaling.factor", &hp->rope_factor, 1.0f)) ||
            (st = hp_u32(m, "rope.scaling.original_context_length", &hp->rope_orig_ctx, true, hp->n_ctx_train)) ||
            (st = hp_f32(m, "rope.scaling.yarn_log_multiplier", &hp->yarn_log_mul, 0.0f)) ||
            (st = hp_f32(m, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, 32.0f)) ||
            (st = hp_f32(m, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, 1.0f)) ||
            (st = hp_f32(m, "rope.scaling.attn_factor", &attn, 1.0f)))
            return st;
        if (!isfinite(hp->rope_factor) || hp->rope_factor < 1 || hp->rope_factor > 65536)
            return hp_bad(m, "rope.scaling.factor", "is %g; it must be a finite number between 1 and 65536",
                          (double)hp->rope_factor);
        if (hp->rope_orig_ctx == 0)
            return hp_bad(m, "rope.scaling.original_context_length", "is 0; it must be at least 1");
        if (!isfinite(hp->yarn_log_mul) || hp->yarn_log_mul < 0 || hp->yarn_log_mul > 100)
            return hp_bad(m, "rope.scaling.yarn_log_multiplier", "is %g; it must be a finite number between 0 and 100",
                          (double)hp->yarn_log_mul);
        /* beta: rotations per original context; the corr dims need them > 0 and fast >= slow */
        if (!isfinite(hp->yarn_beta_fast) || hp->yarn_beta_fast <= 0 || hp->yarn_beta_fast > 1e6f)
            return hp_bad(m, "rope.scaling.yarn_beta_fast", "is %g; it must be a finite number in (0, 1e6]",
                          (double)hp->yarn_beta_fast);
        if (!isfinite(hp->yarn_beta_slow) || hp->yarn_beta_slow <= 0 || hp->yarn_beta_slow > hp->yarn_beta_fast)
            return hp_bad(m, "rope.scaling.yarn_beta_slow", "is %g; it must be a finite number in (0, yarn_beta_fast %g]",
                          (double)hp->yarn_beta_slow, (double)hp->yarn_beta_fast);
        if (!isfinite(attn) || attn <= 0 || attn > 100)
            return hp_bad(m, "rope.scaling.attn_factor", "is %g; it must be a finite number in (0, 100]", (double)attn);
        const float nd = (float)hp->n_rot, pi = 3.14159265358979323846f;
        const float lo = floorf(nd * logf((float)hp->rope_orig_ctx / (hp->yarn_beta_fast * 2 * pi)) /
                                (2 * logf(hp->rope_freq_base)));
        const float hi = ceilf(nd * logf((float)hp->rope_orig_ctx / (hp->yarn_beta_slow * 2 * pi)) /
                               (2 * logf(hp->rope_freq_base)));
        hp->yarn_low = lo > 0 ? lo : 0;
        hp->yarn_high = hi < nd - 1 ? hi : nd - 1;
        /* cos/sin magnitude, in llama.cpp's float steps: llama_context's yarn_attn_factor
         * (get_mscale ratio; deepseek2 takes mscale = the log multiplier), divided by the
         * magnitude rope_yarn then multiplies back in, times rope.scaling.attn_factor */
        const float freq_scale = 1.0f / hp->rope_factor, factor = 1.0f / freq_scale;
#define GET_MSCALE(s, ms) ((s) <= 1.0f ? 1.0f : (0.1f * (ms) * logf(s) + 1.0f))
        float yaf;
        if (hp->yarn_log_mul != 0.0f) {
            const float ms = hp->arch == DJ_ARCH_DEEPSEEK2 && hp->yarn_log_mul != 1.0f ? hp->yarn_log_mul : 1.0f;
            yaf = GET_MSCALE(factor, ms) / GET_MSCALE(factor, hp->yarn_log_mul);
        } else {
            yaf = GET_MSCALE(factor, 1.0f);
        }
#undef GET_MSCALE
        yaf *= 1.0f / (1.0f + 0.1f * logf(factor));
        yaf *= attn;
        hp->yarn_mscale = yaf * (1.0f + 0.1f * logf(1.0f / freq_scale));
        return DJ_OK;
    }
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s: rope scaling type '%.*s' (%s) is not supported (deja supports none, "
                   "linear, llama3; yarn for deepseek2, mistral3 and gpt-oss)", gguf_name(m->gguf), (int)(stype.len > 64 ? 64 : stype.len), stype.ptr, key);
}

/* expert_count / expert_used_count and the expert width: qwen3moe's
 * expert_feed_forward_length (absent: feed_forward_length / expert_used_count,
 * as llama.cpp), llama's feed_forward_length (with experts it is the width of
 * one expert).  qwen3moe without experts is refused; the other dense
 * architectures ignore the keys. */
static enum dj_status load_moe_hparams(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    if (hp->arch != DJ_ARCH_LLAMA && hp->arch != DJ_ARCH_QWEN3MOE) return DJ_OK; /* deepseek2: deepseek2.c */
    if ((st = hp_u32(m, "expert_count", &hp->n_expert, hp->arch == DJ_ARCH_LLAMA, 0)) ||
        (st = hp_u32(m, "expert_used_count", &hp->n_expert_used, hp->n_expert == 0, 0)))
        return st;
    if (hp->n_expert == 0 && hp->arch == DJ_ARCH_LLAMA) {
        hp->n_expert_used = 0;
        return DJ_OK;
    }
    if ((st = hp_range(m, "expert_count", hp->n_expert, 1, HP_EXPERT_MAX)) ||
        (st = hp_range(m, "expert_used_count", hp->n_expert_used, 1, hp->n_expert)))
        return st;
    if (hp->arch == DJ_ARCH_QWEN3MOE) {
        if ((st = hp_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, true, hp->n_ff / hp->n_expert_used)) ||
            (st = hp_range(m, "expert_feed_forward_length", hp->n_ff_exp, 1, HP_DIM_MAX)))
            return st;
    } else {
        hp->n_ff_exp = hp->n_ff;
    }
    return DJ_OK;
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
    if (!hp_has(m, "attention.key_length") && hp->n_head && hp->n_embd % hp->n_head)
        return hp_bad(m, "embedding_length",
                      "is %u, not a multiple of attention.head_count (%u), and attention.key_length is absent",
                      hp->n_embd, hp->n_head);
    if ((st = hp_u32(m, "attention.key_length", &hp->head_dim, true, hp->n_head ? hp->n_embd / hp->n_head : 0)) ||
        (st = hp_u32(m, "rope.dimension_count", &hp->n_rot, true, hp->head_dim)) ||
        (st = hp_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1e-5f)) ||
        (st = hp_f32(m, "rope.freq_base", &hp->rope_freq_base, 10000.0f)))
        return st;
    uint32_t v_len;
    if ((st = hp_u32(m, "attention.value_length", &v_len, true, hp->head_dim))) return st;
    if (v_len != hp->head_dim && hp->arch != DJ_ARCH_DEEPSEEK2) /* deepseek2: deepseek2_load_mla */
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: hyperparameter '%s.attention.value_length' is %u but key_length is "
                       "%u; deja needs them equal", gguf_name(m->gguf), m->arch_name, v_len, hp->head_dim);
    if ((st = check_hparams(m)) || (st = load_moe_hparams(m))) return st;
    if ((st = load_rope_scaling(m))) return st;
    if (hp->arch == DJ_ARCH_GEMMA2 || hp->arch == DJ_ARCH_GEMMA3) return gemma_load_swa(m);
    if (hp->arch == DJ_ARCH_GLM4MOE) return glm4moe_load_moe(m);
    if (hp->arch == DJ_ARCH_MISTRAL3) return mistral3_load_temp(m);
    if (hp->arch == DJ_ARCH_QWEN35 || hp->arch == DJ_ARCH_QWEN35MOE || hp->arch == DJ_ARCH_QWEN3NEXT)
        return qwen35_load_ssm(m);
    return hp->arch == DJ_ARCH_DEEPSEEK2 ? deepseek2_load_mla(m) : DJ_OK;
}

/* llama.cpp's convert_hf_to_gguf.py writes these as rope_freqs for Llama 3
 * (per rotated pair i, freq = base^(-2i/n_rot)):
 *     wavelen = 2 pi / freq
 *     wavelen < orig_ctx / high  ->  1
 *     wavelen > orig_ctx / low   ->  factor
 *     otherwise  smooth = (orig_ctx / wavelen - low) / (high - low),  1 / ((1 - smooth) / factor + smooth)
 * Computed in double and rounded once to float (the converter works in torch
 * float32, so a factor in the smooth band may differ from a converted file's
 * in the last bit; files that have the tensor use it). */
void model_llama3_rope_freqs(const struct dj_hparams *hp, float *out) {
    const double base = hp->rope_freq_base, factor = hp->rope_factor, low = hp->rope_low_freq_factor,
                 high = hp->rope_high_freq_factor, orig = hp->rope_orig_ctx;
    const double low_wavelen = orig / low, high_wavelen = orig / high;
    for (uint32_t i = 0; i < hp->n_rot / 2; i++) {
        const double freq = 1.0 / pow(base, (double)(2 * i) / (double)hp->n_rot);
        const double wavelen = 2.0 * 3.14159265358979323846 / freq;
        double f;
        if (wavelen < high_wavelen) {
            f = 1.0;
        } else if (wavelen > low_wavelen) {
            f = factor;
        } else {
            const double smooth = (orig / wavelen - low) / (high - low);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        out[i] = (float)f;
    }
}

static enum dj_status bind_tensors(struct dj_model *m) {
    struct dj_hparams *hp = &m->hp;
    enum dj_status st;
    const char *path = gguf_name(m->gguf);
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    const struct gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) return dj_fail(DJ_ERR_NOT_FOUND, "%s: tensor 'token_embd.weight' is missing", path);
    if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > INT32_MAX)
        return dj_fail(DJ_ERR_FORMAT, "%s: tensor 'token_embd.weight' has %u dimensions and %lld rows; it must be a "
                       "matrix of 1 to %d rows (one per token)", path, emb->n_dims, (long long)emb->ne[1], INT32_MAX);
    if (hp->n_vocab == 0) {
        hp->n_vocab = (uint32_t)emb->ne[1];
    } else if ((int64_t)hp->n_vocab != emb->ne[1]) {
        return dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s.vocab_size' is %u but tensor 'token_embd.weight' has "
                       "%lld rows", path, m->arch_name, hp->n_vocab, (long long)emb->ne[1]);
    }
    if ((st = model_bind(m, &m->tok_embd, "token_embd.weight", E, hp->n_vocab, true)) ||
        (st = model_bind(m, &m->output_norm, "output_norm.weight", E, 1, true)) ||
        (st = model_bind(m, &m->output, "output.weight", E, hp->n_vocab, false)) ||
        (st = model_bind(m, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 1, false)))
        return st;
    if (!m->output.data) { /* tied embeddings */
        m->output = m->tok_embd;
        m->output_tied = true;
    }
    if (m->rope_freqs.data) {
        /* rope() divides by each factor: 0, a negative or a NaN would give NaN logits, not an error */
        for (int64_t i = 0; i < m->rope_freqs.ne0; i++) {
            float f;
            memcpy(&f, (const char *)m->rope_freqs.data + (size_t)i * sizeof f, sizeof f);
            if (!isfinite(f) || f <= 0)
                return dj_fail(DJ_ERR_FORMAT, "%s: tensor 'rope_freqs.weight' element %lld is %g; rope frequency "
                               "factors must be finite and > 0", path, (long long)i, (double)f);
        }
    } else if (hp->rope_llama3) {
        m->rope_freqs_buf = malloc((size_t)(hp->n_rot / 2) * sizeof(float));
        if (!m->rope_freqs_buf) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for the rope factors", path);
        model_llama3_rope_freqs(hp, m->rope_freqs_buf);
        m->rope_freqs = (struct dj_weight){.data = m->rope_freqs_buf, .type = DJ_TYPE_F32, .ne0 = hp->n_rot / 2,
                                           .ne1 = 1, .row_bytes = (size_t)(hp->n_rot / 2) * sizeof(float)};
    }
    m->layers = calloc((size_t)hp->n_layer + hp->n_layer_nextn, sizeof *m->layers);
    if (!m->layers) return dj_fail(DJ_ERR_NOMEM, "out of memory binding %u layers", hp->n_layer);
    hp->n_layer_kv = hp->n_layer; /* every layer attends (a hybrid's bind hook says otherwise) */
    for (uint32_t il = 0; il < hp->n_layer + hp->n_layer_nextn; il++) m->layers[il].kv_il = il;
    if (hp->arch == DJ_ARCH_DEEPSEEK2) return deepseek2_bind_layers(m);
    if (hp->arch == DJ_ARCH_GPT_OSS) return gptoss_bind_layers(m);
    if (hp->arch == DJ_ARCH_GEMMA2 || hp->arch == DJ_ARCH_GEMMA3) return gemma_bind_layers(m);
    if (hp->arch == DJ_ARCH_GLM4MOE) return glm4moe_bind_layers(m);
    if (hp->arch == DJ_ARCH_QWEN35 || hp->arch == DJ_ARCH_QWEN35MOE || hp->arch == DJ_ARCH_QWEN3NEXT)
        return qwen35_bind_layers(m);
    bool bias = hp->arch == DJ_ARCH_QWEN2, qk_norm = hp->arch == DJ_ARCH_QWEN3 || hp->arch == DJ_ARCH_QWEN3MOE;
    const bool moe = hp->n_expert > 0;
    const int64_t FE = hp->n_ff_exp, NE = hp->n_expert;
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
        if (hp->arch == DJ_ARCH_MISTRAL3) {
            BIND(bo, "attn_output.bias", E, 1, false);
            static const char *const fb[] = {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"};
            for (int i = 0; i < 3; i++) {
                snprintf(n, sizeof n, "blk.%u.%s", il, fb[i]);
                if (gguf_find_tensor(m->gguf, n))
                    return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tensor '%s' (an FFN bias) is not supported", path, n);
            }
        }
        BIND(bq, "attn_q.bias", Q, 1, bias);
        BIND(bk, "attn_k.bias", KV, 1, bias);
        BIND(bv, "attn_v.bias", KV, 1, bias);
        BIND(q_norm, "attn_q_norm.weight", hp->head_dim, 1, qk_norm);
        BIND(k_norm, "attn_k_norm.weight", hp->head_dim, 1, qk_norm);
        BIND(ffn_norm, "ffn_norm.weight", E, 1, true);
        if (moe) { /* llama.cpp: ffn_gate_exps is optional for llama (then an expert is down(silu(up x))) */
            BIND(ffn_gate_inp, "ffn_gate_inp.weight", E, NE, true);
            if ((st = model_bind_experts(m, L, il, FE, 0, hp->arch != DJ_ARCH_LLAMA))) return st;
        } else {
            BIND(w_gate, "ffn_gate.weight", E, hp->n_ff, true);
            BIND(w_up, "ffn_up.weight", E, hp->n_ff, true);
            BIND(w_down, "ffn_down.weight", hp->n_ff, E, true);
        }
#undef BIND
    }
    return DJ_OK;
}

/* ---- the weights' copies -----------------------------------------------------
 *
 * At load every matrix the forward pass multiplies by (each layer's seven — MoE:
 * four and the three expert tensors, see repack_list — and the output; not the
 * small router) is copied out of the file mapping into one anonymous mapping with
 * transparent huge pages asked: in the kernel table's repacked layout where it
 * has one for the type (kernels.h: pack — Q8_0, Q4_0, Q4_K on AVX-512 and AVX2, and
 * Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 on AVX2 and the tables above it: decode then streams it
 * without transposing), as it is otherwise.  Huge pages: the
 * file's 4 KiB pages cost a TLB miss (two-level page walk in a VM) every 4 KiB
 * of a weight stream — F16 decode of a 1.1B model read 7-12 GB/s from the
 * mapping, ~25 GB/s from the copy, same kernel, same machine (docs/
 * BENCHMARKS.md).  Results are bitwise the same either way.  The copy costs as
 * much memory as the matrices; their pages of the file mapping are dropped as
 * each one is copied (madvise DONTNEED, whole pages inside the tensor only; the
 * page cache keeps them, reclaimable), so the peak is the model plus one
 * matrix — except a tied output matrix, which the embedding lookup still reads
 * from the file.  DJ_REPACK=0 keeps everything in the file mapping (slower
 * decode, no copy); so does a failed allocation, with a warning. */

struct pack_job {
    const struct dj_kernels *kt;
    const struct dj_weight *w; /* still the file's rows (w->data) */
    void *dst;
    int64_t per;               /* 16-row groups a share */
};
static void pack_task(void *arg, int i, int n) {
    const struct pack_job *j = arg;
    const struct dj_weight *w = j->w;
    const int64_t ng = (w->ne1 + 15) / 16, g0 = (int64_t)i * j->per, g1 = g0 + j->per < ng ? g0 + j->per : ng;
    if (j->kt->w[w->type].pack) {
        j->kt->w[w->type].pack(w->ne0, w->data, w->row_bytes, w->ne1, g0, g1, j->dst);
    } else { /* the rows as they are */
        const int64_t r0 = 16 * g0, r1 = 16 * g1 < w->ne1 ? 16 * g1 : w->ne1;
        if (r1 > r0)
            memcpy((uint8_t *)j->dst + (size_t)r0 * w->row_bytes, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes,
                   (size_t)(r1 - r0) * w->row_bytes);
    }
    (void)n;
}

/* The matrices to copy, in a fixed order: the output, then each layer's.  An
 * expert tensor is copied as one matrix of n_expert slabs when a slab is whole
 * 16-row groups: expert e's packed rows then start e * rows * row_bytes into the
 * copy, as in the file (model_expert); otherwise it stays in the file mapping. */
static size_t repack_list(struct dj_model *m, struct dj_weight **out) {
    size_t n = 0;
    const uint32_t NE = m->hp.n_expert;
    for (uint32_t il = 0; il <= m->hp.n_layer; il++) {
        struct dj_layer *L = il ? &m->layers[il - 1] : NULL;
        struct dj_weight *lw[20] = {&m->output};
        size_t n_lw = L ? 10 : 1;
        if (L) {
            struct dj_weight *x[20] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                       &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps,
                                       /* hybrids: the Gated DeltaNet projections and the shared expert */
                                       &L->ssm_qkv, &L->ssm_z, &L->ssm_in, &L->ssm_out, &L->ssm_beta, &L->ssm_alpha,
                                       &L->ssm_ba, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp};
            memcpy(lw, x, sizeof x);
            if (m->hp.rs_floats) n_lw = 20;
        }
        for (size_t i = 0; i < n_lw; i++)
            if (lw[i]->data && (i < 7 || (i >= 10 ? lw[i]->ne1 % 16 == 0 : (lw[i]->ne1 / NE) % 16 == 0))) {
                if (out) out[n] = lw[i];
                n++;
            }
    }
    return n;
}

static void model_repack(struct dj_model *m) {
    const char *env = getenv("DJ_REPACK");
    if (env && !strcmp(env, "0")) return;
    const struct dj_kernels *kt = dj_kernels();
    const size_t n_w = repack_list(m, NULL);
    struct dj_weight **ws = n_w ? malloc(n_w * sizeof *ws) : NULL;
    if (!ws) return;
    repack_list(m, ws);
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), huge = (size_t)2 << 20;
    size_t total = 0;
    for (size_t i = 0; i < n_w; i++) total += (dj_packed_bytes(ws[i]->ne1, ws[i]->row_bytes) + pg - 1) & ~(pg - 1);
    void *map = mmap(NULL, total + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        dj_log(DJ_LOG_WARN, "%s: no memory for the weights' copy (%zu bytes); they are read from the file mapping "
               "(slower decode)", gguf_name(m->gguf), total);
        free(ws);
        return;
    }
    m->packed_arena = map;
    m->packed_arena_bytes = total + huge;
    uint8_t *p = (uint8_t *)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, total, MADV_HUGEPAGE); /* a hint: without it, 4 KiB pages */
#endif
    const long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    struct dj_threadpool *tp = threadpool_create(nproc < 1 ? 1 : nproc > 8 ? 8 : (int)nproc);
    for (size_t i = 0; i < n_w; i++) {
        struct dj_weight *w = ws[i];
        const void *file = w->data;
        const int64_t ng = (w->ne1 + 15) / 16;
        struct pack_job j = {kt, w, p, 64};
        if (tp) threadpool_run_n(tp, pack_task, &j, (int)((ng + j.per - 1) / j.per));
        else for (int64_t s = 0; s * j.per < ng; s++) pack_task(&j, (int)s, 1);
        if (kt->w[w->type].pack) w->packed = p;
        else w->data = p;
        p += (dj_packed_bytes(w->ne1, w->row_bytes) + pg - 1) & ~(pg - 1);
        if (w == &m->output && m->output_tied) continue; /* the embedding reads the file's rows */
        const uintptr_t a = ((uintptr_t)file + pg - 1) & ~(uintptr_t)(pg - 1);
        const uintptr_t e = ((uintptr_t)file + (size_t)w->ne1 * w->row_bytes) & ~(uintptr_t)(pg - 1);
        if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED);
    }
    threadpool_destroy(tp);
    free(ws);
}

enum dj_status model_load(const char *path, struct dj_model **out) {
    struct dj_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return dj_fail(DJ_ERR_NOMEM, "out of memory loading %s", path);
    }
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
    else if (!strcmp(m->arch_name, "qwen3moe")) st = qwen3moe_load_hparams(m);
    else if (!strcmp(m->arch_name, "deepseek2")) st = deepseek2_load_hparams(m);
    else if (!strcmp(m->arch_name, "gemma2")) st = gemma2_load_hparams(m);
    else if (!strcmp(m->arch_name, "gemma3")) st = gemma3_load_hparams(m);
    else if (!strcmp(m->arch_name, "glm4moe")) st = glm4moe_load_hparams(m);
    else if (!strcmp(m->arch_name, "mistral3")) st = mistral3_load_hparams(m);
    else if (!strcmp(m->arch_name, "gpt-oss")) st = gptoss_load_hparams(m);
    else if (!strcmp(m->arch_name, "qwen35") || !strcmp(m->arch_name, "qwen35moe") ||
             !strcmp(m->arch_name, "qwen3next"))
        st = qwen35_load_hparams(m);
    else {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (deja supports llama, qwen2, qwen3, "
                     "qwen3moe, deepseek2, gemma2, gemma3, glm4moe, mistral3, gpt-oss, qwen35, qwen35moe, qwen3next)",
                     path, (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        goto fail;
    }
    if (st || (st = load_common_hparams(m))) goto fail;
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", m->arch_name);
    st = gguf_get_u32(m->gguf, key, &m->hp.n_vocab);
    if (st == DJ_ERR_NOT_FOUND) m->hp.n_vocab = 0; /* from token_embd.weight */
    else if (st) goto fail;
    else if (m->hp.n_vocab == 0) {
        st = dj_fail(DJ_ERR_FORMAT, "%s: hyperparameter '%s' is 0; it must be at least 1", path, key);
        goto fail;
    }
    if ((st = bind_tensors(m))) goto fail;
    if ((st = vocab_load_gguf(m->gguf, &m->vocab))) goto fail;
    if (vocab_n_tokens(m->vocab) > m->hp.n_vocab) {
        st = dj_fail(DJ_ERR_FORMAT, "%s: the vocabulary has %zu tokens but the embedding only %u rows", path,
                     vocab_n_tokens(m->vocab), m->hp.n_vocab);
        goto fail;
    }
    model_repack(m);
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
    if (m->packed_arena) munmap(m->packed_arena, m->packed_arena_bytes);
    free(m->layers);
    free(m->rope_freqs_buf);
    free(m->mla_buf);
    free(m->gelu_tab);
    free(m->path);
    free(m);
}

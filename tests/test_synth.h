/*
 * test_synth.h — tiny synthesized models for tests: a llama/qwen2/qwen3 GGUF
 * with random F32 weights, every shape taken from struct synth_model, and the
 * tokenizer (every tokenizer.* key) copied from a vocab or model file.
 *
 * The metadata and the tensor shapes both come from the same fields, so a
 * default model loads; a test that wants an inconsistent file changes a field
 * (shapes and metadata together: n_ff = 0 gives zero-sized FFN tensors and
 * feed_forward_length 0) or edits the metadata afterwards in `tweak`, which runs
 * after every key is set (gguf_writer_set_* replaces a key in place,
 * gguf_writer_remove_key drops it).  Weights: uniform in +-0.125 from a
 * generator seeded by `seed` and the tensor's name; norm weights are 1.
 */
#ifndef DJ_TEST_SYNTH_H
#define DJ_TEST_SYNTH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ggml_type.h"
#include "gguf/gguf.h"

struct synth_model {
    const char *arch; /* "llama", "qwen2", "qwen3" */
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_rot, n_ff, n_ctx;
    float rope_base, rms_eps;
    uint64_t seed;
    const float *rope_freqs; /* n_rot/2 factors written as rope_freqs.weight, or NULL */
    bool embd_no_rows;       /* token_embd.weight with 0 rows (and no vocab_size key) */
    bool embd_1d;            /* token_embd.weight as a vector of n_embd */
    /* deepseek2 (Multi-head Latent Attention, every layer dense, no q LoRA): the cached row
     * is kv_lora + n_rot wide; head_dim is not used (key_length = qk_nope + n_rot) */
    uint32_t kv_lora, qk_nope, v_head;
};

/* A small llama that runs in milliseconds: 64-wide, 2 layers, GQA 4/2, head 16. */
static inline struct synth_model synth_default(void) {
    struct synth_model p = {"llama", 64, 2, 4, 2, 16, 16, 96, 256, 10000.0f, 1e-5f, 7, NULL, false, false};
    return p;
}

typedef void (*synth_tweak_fn)(struct gguf_writer *w, void *ud);

static inline void synth_fill(float *x, size_t n, uint64_t seed, const char *name, bool ones) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (const char *c = name; *c; c++) s = (s ^ (uint8_t)*c) * 0x100000001B3ull;
    s |= 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = ones ? 1.0f : ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 0.25f;
    }
}

/* Writes the model to `path`; the tokenizer comes from `vocab_from`.
 * Returns DJ_OK or the first failing writer/reader status. */
static inline enum dj_status synth_write(const char *path, const char *vocab_from, const struct synth_model *p,
                                         synth_tweak_fn tweak, void *ud) {
    struct gguf_ctx *voc = NULL;
    enum dj_status st = gguf_open(vocab_from, &voc);
    if (st) return st;
    struct gguf_arr toks;
    if ((st = gguf_get_arr(voc, "tokenizer.ggml.tokens", &toks))) {
        gguf_close(voc);
        return st;
    }
    struct gguf_writer *w = gguf_writer_create();
    enum { MAX_T = 256 };
    float *bufs[MAX_T];
    size_t n_bufs = 0;
    char key[160];
    const char *a = p->arch;
    const bool mla = !strcmp(a, "deepseek2");
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", a, k), key)
    if (!w) {
        st = DJ_ERR_NOMEM;
        goto done;
    }
    if ((st = gguf_writer_set_str(w, "general.architecture", a, strlen(a))) ||
        (st = gguf_writer_set_u32(w, KEY("context_length"), p->n_ctx)) ||
        (st = gguf_writer_set_u32(w, KEY("embedding_length"), p->n_embd)) ||
        (st = gguf_writer_set_u32(w, KEY("block_count"), p->n_layer)) ||
        (st = gguf_writer_set_u32(w, KEY("feed_forward_length"), p->n_ff)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.head_count"), p->n_head)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.head_count_kv"), p->n_head_kv)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.key_length"), mla ? p->qk_nope + p->n_rot : p->head_dim)) ||
        (st = gguf_writer_set_u32(w, KEY("rope.dimension_count"), p->n_rot)) ||
        (st = gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base)) ||
        (st = gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps)))
        goto done;
    if (!p->embd_no_rows && !p->embd_1d && (st = gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)toks.n)))
        goto done;
    if (mla && ((st = gguf_writer_set_u32(w, KEY("attention.value_length"), p->v_head)) ||
                (st = gguf_writer_set_u32(w, KEY("attention.kv_lora_rank"), p->kv_lora)) ||
                (st = gguf_writer_set_u32(w, KEY("leading_dense_block_count"), p->n_layer))))
        goto done;
    for (size_t i = 0; i < gguf_n_kv(voc); i++) {
        struct gguf_str k = gguf_kv_key(voc, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10) && (st = gguf_writer_copy_kv(w, voc, i))) goto done;
    }
    if (tweak) tweak(w, ud);
#undef KEY
    {
        const int64_t E = p->n_embd, Q = (int64_t)p->n_head * p->head_dim, KV = (int64_t)p->n_head_kv * p->head_dim,
                      F = p->n_ff, V = p->embd_no_rows ? 0 : (int64_t)toks.n;
#define ADD(nm, k, n, one) ADD3(nm, k, n, 1, one)
#define ADD3(nm, k, n, n2, one)                                                                              \
    do {                                                                                                     \
        size_t cnt = (size_t)(k) * (size_t)(n) * (size_t)(n2);                                                \
        float *b = malloc(cnt ? cnt * sizeof(float) : 1);                                                     \
        if (!b || n_bufs == MAX_T) {                                                                          \
            free(b);                                                                                          \
            st = DJ_ERR_NOMEM;                                                                                \
            goto done;                                                                                        \
        }                                                                                                     \
        bufs[n_bufs++] = b;                                                                                   \
        synth_fill(b, cnt, p->seed, nm, one);                                                                 \
        int64_t ne[3] = {(k), (n), (n2)};                                                                     \
        if ((st = gguf_writer_add_tensor(w, nm, DJ_TYPE_F32, (n2) > 1 ? 3 : (n) == 1 ? 1 : 2, ne, b,          \
                                         cnt * sizeof(float))))                                               \
            goto done;                                                                                        \
    } while (0)
        if (p->embd_1d) ADD("token_embd.weight", E, 1, false);
        else ADD("token_embd.weight", E, V, false);
        ADD("output_norm.weight", E, 1, true);
        if (p->rope_freqs) {
            float *b = malloc((p->n_rot / 2 ? p->n_rot / 2 : 1) * sizeof(float));
            if (!b || n_bufs == MAX_T) {
                free(b);
                st = DJ_ERR_NOMEM;
                goto done;
            }
            bufs[n_bufs++] = b;
            memcpy(b, p->rope_freqs, p->n_rot / 2 * sizeof(float));
            int64_t ne[1] = {p->n_rot / 2};
            st = gguf_writer_add_tensor(w, "rope_freqs.weight", DJ_TYPE_F32, 1, ne, b, p->n_rot / 2 * sizeof(float));
            if (st) goto done;
        }
        for (uint32_t il = 0; il < p->n_layer; il++) {
            char n[64];
#define L(suffix, k, nn, one)                                \
    do {                                                     \
        snprintf(n, sizeof n, "blk.%u.%s", il, suffix);      \
        ADD(n, k, nn, one);                                  \
    } while (0)
            L("attn_norm.weight", E, 1, true);
            if (mla) { /* llama.cpp's split layout: attn_k_b (nope, kv_lora, H), attn_v_b (kv_lora, v_head, H) */
                const int64_t H = p->n_head, R = p->kv_lora, N = p->qk_nope, P = p->n_rot, VH = p->v_head;
                L("attn_q.weight", E, H * (N + P), false);
                L("attn_kv_a_mqa.weight", E, R + P, false);
                L("attn_kv_a_norm.weight", R, 1, true);
                snprintf(n, sizeof n, "blk.%u.attn_k_b.weight", il);
                ADD3(n, N, R, H, false);
                snprintf(n, sizeof n, "blk.%u.attn_v_b.weight", il);
                ADD3(n, R, VH, H, false);
                L("attn_output.weight", H * VH, E, false);
            } else {
                L("attn_q.weight", E, Q, false);
                L("attn_k.weight", E, KV, false);
                L("attn_v.weight", E, KV, false);
                if (!strcmp(a, "qwen2")) {
                    L("attn_q.bias", Q, 1, false);
                    L("attn_k.bias", KV, 1, false);
                    L("attn_v.bias", KV, 1, false);
                }
                if (!strcmp(a, "qwen3")) {
                    L("attn_q_norm.weight", p->head_dim, 1, true);
                    L("attn_k_norm.weight", p->head_dim, 1, true);
                }
                L("attn_output.weight", Q, E, false);
            }
            L("ffn_norm.weight", E, 1, true);
            L("ffn_gate.weight", E, F, false);
            L("ffn_up.weight", E, F, false);
            L("ffn_down.weight", F, E, false);
#undef L
        }
#undef ADD
#undef ADD3
    }
    st = gguf_writer_write(w, path);
done:
    for (size_t i = 0; i < n_bufs; i++) free(bufs[i]);
    gguf_writer_destroy(w);
    gguf_close(voc);
    return st;
}

#endif

/*
 * test_model_hardening.c — model_load on files that parse as GGUF but describe
 * an impossible model: every hyperparameter the context and the forward pass
 * divide by, size buffers with or index tables with, at 0 or out of range
 * (context length, embedding size, layers, feed-forward size, head counts, head
 * size, rope dimensions, rope base, RMS epsilon, vocab size vs the embedding's
 * rows, rope scaling parameters), and zero-dimension or malformed tensors.
 *
 * Each variant is one change away from a tiny valid llama (tests/test_synth.h),
 * written to a temp dir.  model_load must fail with a status and a message that
 * names the file and the key or tensor; then `deja run` on the file must exit
 * with a non-zero status of its own (not killed by a signal: these files used to
 * end in SIGFPE in ctx_create's or model_bind's divisions).  A few variants also
 * go through `deja replay`, `deja bench` and `deja perplexity`.  The unchanged
 * model (llama, qwen2, qwen3) must load and run.
 *
 * glm4moe and mistral3 (test_arch_variants): `deja synth --preset tiny` files with one
 * key's value or one tensor's name patched in place: the NextN count, the MoE keys, a
 * missing NextN / selection-bias / post-attention-norm tensor; YaRN's factor, beta_fast,
 * beta_slow, log multiplier, original context, the temperature scale, a partial rope,
 * experts — each refused naming the file and the key or tensor.  The hybrids (qwen35moe,
 * qwen3next): DeltaNet sizes out of range or inconsistent (state, heads, inner size, conv
 * taps against the conv1d tensor), the layer interval, the shared expert, missing ssm
 * tensors, attention.recurrent_layers arrays (test_recurrent_layers).  gpt-oss likewise: the
 * window, the expert keys, YaRN's factor and original context, a missing sink or expert
 * or router bias.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "model/model.h"
#include "test.h"
#include "test_run.h"
#include "test_synth.h"

static const char *shared;
static char dir[64];

/* ---- variants ---------------------------------------------------------------- */

/* One metadata edit: key (after "llama."), type u (u32), f (f32), s (string), x (remove). */
struct edit {
    const char *key;
    char t;
    double v;
    const char *s;
};

struct variant {
    const char *what;
    struct edit e[3];
    void (*shape)(struct synth_model *p);
    void (*extra)(struct gguf_writer *w); /* adds tensors */
    const char *want;                     /* in the message, besides the file name */
    const char *want2;                    /* a second word, or NULL */
};

static void shape_e0(struct synth_model *p) { p->n_embd = 0; }
static void shape_layers0(struct synth_model *p) { p->n_layer = 0; }
static void shape_ff0(struct synth_model *p) { p->n_ff = 0; }
static void shape_no_rows(struct synth_model *p) { p->embd_no_rows = true; }
static void shape_1d(struct synth_model *p) { p->embd_1d = true; }
static const float freqs_zero[8] = {1, 1, 1, 0, 2, 2, 2, 2};
static const float freqs_nan[8] = {1, 1, 1, NAN, 2, 2, 2, 2};
static void shape_freqs_zero(struct synth_model *p) { p->rope_freqs = freqs_zero; }
static void shape_freqs_nan(struct synth_model *p) { p->rope_freqs = freqs_nan; }
static float empty_data[1];
static void extra_output_zero(struct gguf_writer *w) {
    int64_t ne[2] = {64, 0};
    CHECK(gguf_writer_add_tensor(w, "output.weight", DJ_TYPE_F32, 2, ne, empty_data, 0) == DJ_OK);
}

/* An output matrix (64 x 512, the default synth shape) of a type no kernel runs as weights:
 * i32 (an integer tensor type) and q8_1 (ggml's activation-only type). */
static uint8_t typed_data[64 * 512 * 4];
static void extra_output_i32(struct gguf_writer *w) {
    int64_t ne[2] = {64, 512};
    CHECK(gguf_writer_add_tensor(w, "output.weight", DJ_TYPE_I32, 2, ne, typed_data, sizeof typed_data) == DJ_OK);
}
static void extra_output_q8_1(struct gguf_writer *w) {
    int64_t ne[2] = {64, 512};
    CHECK(gguf_writer_add_tensor(w, "output.weight", DJ_TYPE_Q8_1, 2, ne, typed_data, 512 * 2 * 36) == DJ_OK);
}

#define U(k, x) {k, 'u', (double)(x), NULL}
#define FL(k, x) {k, 'f', (double)(x), NULL}
#define S(k, x) {k, 's', 0, x}
#define X(k) {k, 'x', 0, NULL}

static const struct variant variants[] = {
    {"context_length 0", {U("context_length", 0)}, NULL, NULL, "llama.context_length", "is 0"},
    {"context_length 2^31", {U("context_length", 2147483648.0)}, NULL, NULL, "llama.context_length", NULL},
    {"embedding_length 0", {U("embedding_length", 0)}, NULL, NULL, "llama.embedding_length", "is 0"},
    {"embedding_length 0, tensors too", {{0}}, shape_e0, NULL, "llama.embedding_length", "is 0"},
    {"embedding_length 2^24 + 1", {U("embedding_length", 16777217)}, NULL, NULL, "llama.embedding_length", NULL},
    {"embedding_length not a multiple of the heads", {U("embedding_length", 62), X("attention.key_length")}, NULL,
     NULL, "llama.embedding_length", "multiple"},
    {"block_count 0", {U("block_count", 0)}, NULL, NULL, "llama.block_count", "is 0"},
    {"block_count 0, no layers", {{0}}, shape_layers0, NULL, "llama.block_count", "is 0"},
    {"block_count 5000", {U("block_count", 5000)}, NULL, NULL, "llama.block_count", NULL},
    {"feed_forward_length 0", {U("feed_forward_length", 0)}, NULL, NULL, "llama.feed_forward_length", "is 0"},
    {"feed_forward_length 0, zero-size FFN tensors", {{0}}, shape_ff0, NULL, "llama.feed_forward_length", "is 0"},
    {"head_count 0", {U("attention.head_count", 0)}, NULL, NULL, "llama.attention.head_count", "is 0"},
    {"head_count 0, no key_length", {U("attention.head_count", 0), X("attention.key_length")}, NULL, NULL,
     "llama.attention.head_count", "is 0"},
    {"head_count_kv 0", {U("attention.head_count_kv", 0)}, NULL, NULL, "llama.attention.head_count_kv", "is 0"},
    {"head_count_kv 3 (does not divide 4)", {U("attention.head_count_kv", 3)}, NULL, NULL,
     "llama.attention.head_count_kv", "divide"},
    {"head_count_kv 8 > head_count 4", {U("attention.head_count_kv", 8)}, NULL, NULL,
     "llama.attention.head_count_kv", NULL},
    {"key_length 0", {U("attention.key_length", 0)}, NULL, NULL, "llama.attention.key_length", "is 0"},
    {"key_length 15 (odd, rope over all of it)", {U("attention.key_length", 15), X("rope.dimension_count")}, NULL,
     NULL, "llama.rope.dimension_count", "key_length 15"},
    {"key_length 2^22 + 2 x 4 heads", {U("attention.key_length", 4194306)}, NULL, NULL, "llama.attention.key_length",
     NULL},
    {"value_length != key_length", {U("attention.value_length", 8)}, NULL, NULL, "llama.attention.value_length",
     NULL},
    {"rope.dimension_count 0", {U("rope.dimension_count", 0)}, NULL, NULL, "llama.rope.dimension_count", "is 0"},
    {"rope.dimension_count 7 (odd)", {U("rope.dimension_count", 7)}, NULL, NULL, "llama.rope.dimension_count",
     "is 7"},
    {"rope.dimension_count 18 > key_length 16", {U("rope.dimension_count", 18)}, NULL, NULL,
     "llama.rope.dimension_count", "is 18"},
    {"rope.dimension_count 1024 (n_rot/2 > 256)", {U("attention.key_length", 1024), U("rope.dimension_count", 1024)},
     NULL, NULL, "llama.rope.dimension_count", "is 1024"},
    {"rope.freq_base 0", {FL("rope.freq_base", 0)}, NULL, NULL, "llama.rope.freq_base", NULL},
    {"rope.freq_base -1", {FL("rope.freq_base", -1)}, NULL, NULL, "llama.rope.freq_base", NULL},
    {"rope.freq_base nan", {FL("rope.freq_base", NAN)}, NULL, NULL, "llama.rope.freq_base", NULL},
    {"rope.freq_base inf", {FL("rope.freq_base", INFINITY)}, NULL, NULL, "llama.rope.freq_base", NULL},
    {"rms epsilon -1", {FL("attention.layer_norm_rms_epsilon", -1)}, NULL, NULL,
     "llama.attention.layer_norm_rms_epsilon", NULL},
    {"rms epsilon nan", {FL("attention.layer_norm_rms_epsilon", NAN)}, NULL, NULL,
     "llama.attention.layer_norm_rms_epsilon", NULL},
    {"rms epsilon inf", {FL("attention.layer_norm_rms_epsilon", INFINITY)}, NULL, NULL,
     "llama.attention.layer_norm_rms_epsilon", NULL},
    {"vocab_size 0", {U("vocab_size", 0)}, NULL, NULL, "llama.vocab_size", "is 0"},
    {"vocab_size 511 (embedding has 512 rows)", {U("vocab_size", 511)}, NULL, NULL, "llama.vocab_size", "512 rows"},
    {"vocab_size 513 (embedding has 512 rows)", {U("vocab_size", 513)}, NULL, NULL, "llama.vocab_size", "512 rows"},
    {"token_embd.weight with 0 rows", {{0}}, shape_no_rows, NULL, "token_embd.weight", NULL},
    {"token_embd.weight a vector", {{0}}, shape_1d, NULL, "token_embd.weight", NULL},
    {"output.weight [64, 0]", {{0}}, NULL, extra_output_zero, "output.weight", "zero dimension"},
    {"output.weight of type i32", {{0}}, NULL, extra_output_i32, "'output.weight' has type i32", "integer"},
    {"output.weight of type q8_1", {{0}}, NULL, extra_output_q8_1, "'output.weight' has type q8_1", "activation"},
    {"rope_freqs.weight with a 0", {{0}}, shape_freqs_zero, NULL, "rope_freqs.weight", "element 3"},
    {"rope_freqs.weight with a nan", {{0}}, shape_freqs_nan, NULL, "rope_freqs.weight", "element 3"},
    {"rope scaling yarn", {S("rope.scaling.type", "yarn")}, NULL, NULL, "rope scaling type 'yarn'", NULL},
    {"rope scaling type a u32", {U("rope.scaling.type", 1)}, NULL, NULL, "llama.rope.scaling.type", NULL},
    {"linear factor 0", {S("rope.scaling.type", "linear"), FL("rope.scaling.factor", 0)}, NULL, NULL,
     "llama.rope.scaling.factor", NULL},
    {"linear factor -2", {S("rope.scaling.type", "linear"), FL("rope.scaling.factor", -2)}, NULL, NULL,
     "llama.rope.scaling.factor", NULL},
    {"linear factor inf", {S("rope.scaling.type", "linear"), FL("rope.scaling.factor", INFINITY)}, NULL, NULL,
     "llama.rope.scaling.factor", NULL},
    {"llama3 factor 0", {S("rope.scaling.type", "llama3"), FL("rope.scaling.factor", 0)}, NULL, NULL,
     "llama.rope.scaling.factor", NULL},
    {"llama3 factor nan", {S("rope.scaling.type", "llama3"), FL("rope.scaling.factor", NAN)}, NULL, NULL,
     "llama.rope.scaling.factor", NULL},
    {"llama3 low_freq_factor 0", {S("rope.scaling.type", "llama3"), FL("rope.scaling.low_freq_factor", 0)}, NULL,
     NULL, "llama.rope.scaling.low_freq_factor", NULL},
    {"llama3 high == low", {S("rope.scaling.type", "llama3"), FL("rope.scaling.high_freq_factor", 1)}, NULL, NULL,
     "llama.rope.scaling.high_freq_factor", NULL},
    {"llama3 high < low",
     {S("rope.scaling.type", "llama3"), FL("rope.scaling.low_freq_factor", 4), FL("rope.scaling.high_freq_factor", 2)},
     NULL, NULL, "llama.rope.scaling.high_freq_factor", NULL},
    {"llama3 original_context_length 0",
     {S("rope.scaling.type", "llama3"), U("rope.scaling.original_context_length", 0)}, NULL, NULL,
     "llama.rope.scaling.original_context_length", NULL},
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static void apply_edits(struct gguf_writer *w, void *ud) {
    const struct variant *v = ud;
    for (int i = 0; i < 3 && v->e[i].key; i++) {
        const struct edit *e = &v->e[i];
        char key[128];
        snprintf(key, sizeof key, "llama.%s", e->key);
        enum dj_status st = DJ_OK;
        switch (e->t) {
        case 'u': st = gguf_writer_set_u32(w, key, (uint32_t)e->v); break;
        case 'f': st = gguf_writer_set_f32(w, key, (float)e->v); break;
        case 's': st = gguf_writer_set_str(w, key, e->s, strlen(e->s)); break;
        case 'x': st = gguf_writer_remove_key(w, key); break;
        }
        CHECKF(st == DJ_OK, "%s: edit of %s failed", v->what, key);
    }
    if (v->extra) v->extra(w);
}

static bool write_variant(const struct variant *v, const char *path) {
    struct synth_model p = synth_default();
    if (v->shape) v->shape(&p);
    enum dj_status st = synth_write(path, test_shared_path(shared, "models/stories260K.gguf"), &p, apply_edits,
                                    (void *)v);
    CHECKF(st == DJ_OK, "%s: writing %s failed: %s", v->what, path, dj_last_error());
    return st == DJ_OK;
}

/* `deja run` (and the other model commands, with `all`) on a bad file: a non-zero exit
 * of the command's own, not a signal (run() reports a signal as 128 + its number). */
static void check_commands(const struct variant *v, const char *path, bool all) {
    char *out = NULL;
    int rc = RUN(&out, "run", "-m", (char *)path, "-p", "Once upon a time", "-n", "4");
    CHECKF(rc > 0 && rc < 128, "%s: deja run exited %d: %s", v->what, rc, out);
    CHECKF(strstr(out, path) != NULL && strstr(out, v->want) != NULL, "%s: deja run said: %s", v->what, out);
    free(out);
    if (!all) return;
    char trace[4096];
    snprintf(trace, sizeof trace, "%s", test_shared_path(shared, "traces/claude_code__cctrace_f33cdb42.jsonl"));
    rc = RUN(&out, "replay", "-m", (char *)path, "--trace", trace);
    CHECKF(rc > 0 && rc < 128, "%s: deja replay exited %d: %s", v->what, rc, out);
    free(out);
    rc = RUN(&out, "bench", "-m", (char *)path, "-p", "8", "-n", "2", "-r", "1");
    CHECKF(rc > 0 && rc < 128, "%s: deja bench exited %d: %s", v->what, rc, out);
    free(out);
    char text[4096];
    snprintf(text, sizeof text, "%s", test_shared_path(shared, "vocab/ggml-vocab-llama-spm.gguf.inp"));
    rc = RUN(&out, "perplexity", "-m", (char *)path, "-f", text, "-c", "16");
    CHECKF(rc > 0 && rc < 128, "%s: deja perplexity exited %d: %s", v->what, rc, out);
    free(out);
}

static void test_variants(void) {
    for (size_t i = 0; i < N_VARIANTS; i++) {
        const struct variant *v = &variants[i];
        char path[128];
        snprintf(path, sizeof path, "%s/bad%02zu.gguf", dir, i);
        if (!write_variant(v, path)) continue;
        struct dj_model *m = (struct dj_model *)0x1; /* must stay untouched on failure */
        dj_clear_error();
        enum dj_status st = model_load(path, &m);
        const char *msg = dj_last_error();
        CHECKF(st != DJ_OK, "%s: model_load accepted it", v->what);
        CHECKF(m == (struct dj_model *)0x1, "%s: out-param written on failure", v->what);
        if (st == DJ_OK && m != (struct dj_model *)0x1) model_free(m);
        CHECKF(strstr(msg, path) != NULL, "%s: message does not name the file: %s", v->what, msg);
        CHECKF(strstr(msg, v->want) != NULL, "%s: message lacks '%s': %s", v->what, v->want, msg);
        if (v->want2) CHECKF(strstr(msg, v->want2) != NULL, "%s: message lacks '%s': %s", v->what, v->want2, msg);
        check_commands(v, path, i == 0 || v->shape == shape_ff0 || v->shape == shape_no_rows);
        unlink(path);
    }
}

/* The unchanged model loads, and runs, for every architecture. */
static void test_valid(void) {
    static const char *const archs[] = {"llama", "qwen2", "qwen3"};
    for (int a = 0; a < 3; a++) {
        struct synth_model p = synth_default();
        p.arch = archs[a];
        char path[128];
        snprintf(path, sizeof path, "%s/ok_%s.gguf", dir, archs[a]);
        enum dj_status st = synth_write(path, test_shared_path(shared, "models/stories260K.gguf"), &p, NULL, NULL);
        CHECKF(st == DJ_OK, "%s: %s", archs[a], dj_last_error());
        struct dj_model *m = NULL;
        st = model_load(path, &m);
        CHECKF(st == DJ_OK, "%s: %s", archs[a], dj_last_error());
        if (m) {
            CHECK(m->hp.n_vocab == 512 && m->hp.head_dim == 16 && m->hp.n_rot == 16 && m->rope_freqs.data == NULL);
            model_free(m);
        }
        char *out = NULL;
        int rc = RUN(&out, "run", "-m", path, "-p", "Once upon a time", "-n", "4");
        CHECKF(rc == 0, "%s: deja run exited %d: %s", archs[a], rc, out);
        free(out);
        unlink(path);
    }
}

/* ---- glm4moe, mistral3 ------------------------------------------------------------ */

/* A copy of src with the bytes at `at` after the first occurrence of `find` replaced. */
static bool patch_file(const char *src, const char *dst, const char *find, size_t at, const void *repl, size_t n) {
    size_t len = 0;
    char *b = test_read_file(src, &len);
    if (!b) return false;
    char *p = memmem(b, len, find, strlen(find));
    bool ok = p && (size_t)(p - b) + at + n <= len;
    if (ok) {
        memcpy(p + at, repl, n);
        FILE *f = fopen(dst, "wb");
        ok = f && fwrite(b, 1, len, f) == len;
        if (f) ok = (fclose(f) == 0) && ok;
    }
    free(b);
    return ok;
}

struct arch_variant {
    const char *what, *find; /* a key (its value patched) or a tensor name (its last byte) */
    char t;                  /* u: u32 value, f: f32 value, n: rename */
    double v;
    enum dj_status want_st;
    const char *want;
};

static void test_arch_variants(void) {
    static const struct arch_variant glm[] = {
        {"nextn_predict_layers 5 of 5 blocks", "glm4moe.nextn_predict_layers", 'u', 5, DJ_ERR_FORMAT,
         "glm4moe.nextn_predict_layers"},
        {"expert_count 0", "glm4moe.expert_count", 'u', 0, DJ_ERR_FORMAT, "glm4moe.expert_count"},
        {"expert_count 1000", "glm4moe.expert_count", 'u', 1000, DJ_ERR_FORMAT, "glm4moe.expert_count"},
        {"expert_used_count 9 of 8", "glm4moe.expert_used_count", 'u', 9, DJ_ERR_FORMAT, "glm4moe.expert_used_count"},
        {"expert_feed_forward_length 0", "glm4moe.expert_feed_forward_length", 'u', 0, DJ_ERR_FORMAT,
         "glm4moe.expert_feed_forward_length"},
        {"expert_shared_count 100", "glm4moe.expert_shared_count", 'u', 100, DJ_ERR_FORMAT,
         "glm4moe.expert_shared_count"},
        {"expert_gating_func 3", "glm4moe.expert_gating_func", 'u', 3, DJ_ERR_FORMAT, "glm4moe.expert_gating_func"},
        {"expert_weights_scale nan", "glm4moe.expert_weights_scale", 'f', NAN, DJ_ERR_FORMAT,
         "glm4moe.expert_weights_scale"},
        {"leading_dense_block_count 5", "glm4moe.leading_dense_block_count", 'u', 5, DJ_ERR_FORMAT,
         "glm4moe.leading_dense_block_count"},
        {"NextN eh_proj missing", "blk.4.nextn.eh_proj.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.4.nextn.eh_proj.weight"},
        {"NextN enorm missing", "blk.4.nextn.enorm.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.4.nextn.enorm.weight"},
        {"exp_probs_b missing", "blk.2.exp_probs_b.bias", 'n', 0, DJ_ERR_NOT_FOUND, "blk.2.exp_probs_b.bias"},
        {"post_attention_norm missing", "blk.0.post_attention_norm.weight", 'n', 0, DJ_ERR_NOT_FOUND,
         "blk.0.post_attention_norm.weight"},
    };
    static const struct arch_variant mis[] = {
        {"yarn factor 0.5", "mistral3.rope.scaling.factor", 'f', 0.5, DJ_ERR_FORMAT, "mistral3.rope.scaling.factor"},
        {"yarn factor nan", "mistral3.rope.scaling.factor", 'f', NAN, DJ_ERR_FORMAT, "mistral3.rope.scaling.factor"},
        {"yarn original_context_length 0", "mistral3.rope.scaling.original_context_length", 'u', 0, DJ_ERR_FORMAT,
         "mistral3.rope.scaling.original_context_length"},
        {"yarn_beta_fast 0", "mistral3.rope.scaling.yarn_beta_fast", 'f', 0, DJ_ERR_FORMAT,
         "mistral3.rope.scaling.yarn_beta_fast"},
        {"yarn_beta_fast inf", "mistral3.rope.scaling.yarn_beta_fast", 'f', INFINITY, DJ_ERR_FORMAT,
         "mistral3.rope.scaling.yarn_beta_fast"},
        {"yarn_beta_slow 100 > beta_fast 8", "mistral3.rope.scaling.yarn_beta_slow", 'f', 100, DJ_ERR_FORMAT,
         "mistral3.rope.scaling.yarn_beta_slow"},
        {"yarn_beta_slow -1", "mistral3.rope.scaling.yarn_beta_slow", 'f', -1, DJ_ERR_FORMAT,
         "mistral3.rope.scaling.yarn_beta_slow"},
        {"yarn_log_multiplier nan", "mistral3.rope.scaling.yarn_log_multiplier", 'f', NAN, DJ_ERR_FORMAT,
         "mistral3.rope.scaling.yarn_log_multiplier"},
        {"temperature_scale -0.1", "mistral3.attention.temperature_scale", 'f', -0.1, DJ_ERR_FORMAT,
         "mistral3.attention.temperature_scale"},
        {"temperature_scale nan", "mistral3.attention.temperature_scale", 'f', NAN, DJ_ERR_FORMAT,
         "mistral3.attention.temperature_scale"},
        {"rope.dimension_count 16 of a 32 head", "mistral3.rope.dimension_count", 'u', 16, DJ_ERR_FORMAT,
         "mistral3.rope.dimension_count"},
        {"attn_output.bias of 1 layer renamed away", "blk.1.attn_output.bias", 'n', 0, DJ_OK, NULL},
    };
    static const struct arch_variant oss[] = {
        {"sliding_window 0", "gpt-oss.attention.sliding_window", 'u', 0, DJ_ERR_FORMAT,
         "gpt-oss.attention.sliding_window"},
        {"expert_count 0", "gpt-oss.expert_count", 'u', 0, DJ_ERR_FORMAT, "gpt-oss.expert_count"},
        {"expert_count 1000", "gpt-oss.expert_count", 'u', 1000, DJ_ERR_FORMAT, "gpt-oss.expert_count"},
        {"expert_used_count 9 of 8", "gpt-oss.expert_used_count", 'u', 9, DJ_ERR_FORMAT, "gpt-oss.expert_used_count"},
        {"expert_feed_forward_length 0", "gpt-oss.expert_feed_forward_length", 'u', 0, DJ_ERR_FORMAT,
         "gpt-oss.expert_feed_forward_length"},
        {"yarn factor 0.5", "gpt-oss.rope.scaling.factor", 'f', 0.5, DJ_ERR_FORMAT, "gpt-oss.rope.scaling.factor"},
        {"yarn original_context_length 0", "gpt-oss.rope.scaling.original_context_length", 'u', 0, DJ_ERR_FORMAT,
         "gpt-oss.rope.scaling.original_context_length"},
        {"attn_sinks of layer 1 renamed away", "blk.1.attn_sinks.weight", 'n', 0, DJ_ERR_NOT_FOUND,
         "blk.1.attn_sinks.weight"},
        {"ffn_down_exps.bias of layer 0 renamed away", "blk.0.ffn_down_exps.bias", 'n', 0, DJ_ERR_NOT_FOUND,
         "blk.0.ffn_down_exps.bias"},
        {"ffn_gate_inp.bias of layer 2 renamed away", "blk.2.ffn_gate_inp.bias", 'n', 0, DJ_ERR_NOT_FOUND,
         "blk.2.ffn_gate_inp.bias"},
    };
    /* hybrids: the DeltaNet keys, the layer pattern, the shared expert, a shape a key changes */
    static const struct arch_variant q35[] = {
        {"ssm.conv_kernel 0", "qwen35moe.ssm.conv_kernel", 'u', 0, DJ_ERR_FORMAT, "qwen35moe.ssm.conv_kernel"},
        {"ssm.conv_kernel 3 (conv1d has 4 taps)", "qwen35moe.ssm.conv_kernel", 'u', 3, DJ_ERR_FORMAT,
         "blk.0.ssm_conv1d.weight"},
        {"ssm.state_size 0", "qwen35moe.ssm.state_size", 'u', 0, DJ_ERR_FORMAT, "qwen35moe.ssm.state_size"},
        {"ssm.state_size 1024", "qwen35moe.ssm.state_size", 'u', 1024, DJ_ERR_FORMAT, "qwen35moe.ssm.state_size"},
        {"ssm.group_count 0", "qwen35moe.ssm.group_count", 'u', 0, DJ_ERR_FORMAT, "qwen35moe.ssm.group_count"},
        {"ssm.group_count 3 of 4 v heads", "qwen35moe.ssm.group_count", 'u', 3, DJ_ERR_FORMAT,
         "qwen35moe.ssm.time_step_rank"},
        {"ssm.group_count 4 (attn_qkv has 2 k heads)", "qwen35moe.ssm.group_count", 'u', 4, DJ_ERR_FORMAT,
         "blk.0.attn_qkv.weight"},
        {"ssm.time_step_rank 0", "qwen35moe.ssm.time_step_rank", 'u', 0, DJ_ERR_FORMAT, "qwen35moe.ssm.time_step_rank"},
        {"ssm.inner_size 100", "qwen35moe.ssm.inner_size", 'u', 100, DJ_ERR_FORMAT, "qwen35moe.ssm.inner_size"},
        {"full_attention_interval 0", "qwen35moe.full_attention_interval", 'u', 0, DJ_ERR_FORMAT,
         "qwen35moe.full_attention_interval"},
        {"full_attention_interval 3 (layer 1 has no attn_q)", "qwen35moe.full_attention_interval", 'u', 3,
         DJ_ERR_NOT_FOUND, "blk.1.attn_qkv.weight"},
        {"nextn_predict_layers 5 of 5 blocks", "qwen35moe.nextn_predict_layers", 'u', 5, DJ_ERR_FORMAT,
         "qwen35moe.nextn_predict_layers"},
        {"expert_count 0", "qwen35moe.expert_count", 'u', 0, DJ_ERR_FORMAT, "qwen35moe.expert_count"},
        {"expert_used_count 9 of 8", "qwen35moe.expert_used_count", 'u', 9, DJ_ERR_FORMAT,
         "qwen35moe.expert_used_count"},
        {"expert_shared_feed_forward_length 0", "qwen35moe.expert_shared_feed_forward_length", 'u', 0, DJ_ERR_FORMAT,
         "qwen35moe.expert_shared_feed_forward_length"},
        {"expert_shared_feed_forward_length 128 (tensors 256)", "qwen35moe.expert_shared_feed_forward_length", 'u',
         128, DJ_ERR_FORMAT, "blk.0.ffn_gate_shexp.weight"},
        {"ssm_conv1d missing", "blk.2.ssm_conv1d.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.2.ssm_conv1d.weight"},
        {"ssm_dt missing", "blk.0.ssm_dt.bias", 'n', 0, DJ_ERR_NOT_FOUND, "blk.0.ssm_dt.bias"},
        {"ssm_norm missing", "blk.0.ssm_norm.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.0.ssm_norm.weight"},
        {"ssm_out missing", "blk.2.ssm_out.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.2.ssm_out.weight"},
        {"attn_gate missing", "blk.0.attn_gate.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.0.attn_gate.weight"},
        {"ffn_gate_inp_shexp missing", "blk.3.ffn_gate_inp_shexp.weight", 'n', 0, DJ_ERR_NOT_FOUND,
         "blk.3.ffn_gate_inp_shexp.weight"},
        {"attn_q_norm of an attention layer missing", "blk.1.attn_q_norm.weight", 'n', 0, DJ_ERR_NOT_FOUND,
         "blk.1.attn_q_norm.weight"},
        {"NextN eh_proj missing", "blk.4.nextn.eh_proj.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.4.nextn.eh_proj.weight"},
    };
    static const struct arch_variant q3n[] = {
        {"ssm_in missing (and no attn_qkv)", "blk.0.ssm_in.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.0.ssm_in.weight"},
        {"ssm_ba missing", "blk.2.ssm_ba.weight", 'n', 0, DJ_ERR_NOT_FOUND, "blk.2.ssm_ba.weight"},
        {"ssm.time_step_rank 8 (ssm_ba has 4 v heads)", "qwen3next.ssm.time_step_rank", 'u', 8, DJ_ERR_FORMAT,
         "qwen3next.ssm.inner_size"},
    };
    static const struct { const char *arch; const struct arch_variant *v; size_t n; } sets[] = {
        {"glm4moe", glm, sizeof glm / sizeof glm[0]}, {"mistral3", mis, sizeof mis / sizeof mis[0]},
        {"gpt-oss", oss, sizeof oss / sizeof oss[0]}, {"qwen35moe", q35, sizeof q35 / sizeof q35[0]},
        {"qwen3next", q3n, sizeof q3n / sizeof q3n[0]}};
    for (size_t a = 0; a < sizeof sets / sizeof sets[0]; a++) {
        char src[128], out_path[128];
        snprintf(src, sizeof src, "%s/%s.gguf", dir, sets[a].arch);
        char *out = NULL;
        int rc = RUN(&out, "synth", "--arch", (char *)sets[a].arch, "--preset", "tiny", "--vocab-from",
                     (char *)test_shared_path(shared, "models/stories260K.gguf"), "-o", src, "-t", "1");
        CHECKF(rc == 0, "synth %s: exit %d: %s", sets[a].arch, rc, out);
        free(out);
        if (rc) continue;
        struct dj_model *m = NULL;
        CHECKF(model_load(src, &m) == DJ_OK, "%s unpatched: %s", sets[a].arch, dj_last_error());
        if (m && a == 0) CHECK(m->hp.n_layer == 4 && m->hp.n_layer_nextn == 1 && m->layers[4].nextn_eh_proj.data);
        if (m && a == 1) CHECK(m->hp.rope_yarn && m->hp.attn_temp_scale > 0.09f && m->hp.attn_temp_floor == 16);
        if (m && a == 2) /* windows of 16 on the even layers, sinks, YaRN 32 with its magnitude 1 + 0.1 ln 32 */
            CHECK(m->layers[0].n_swa == 16 && m->layers[1].n_swa == 0 && m->layers[2].n_swa == 16 &&
                  m->layers[0].attn_sinks.data && m->hp.rope_yarn && fabsf(m->hp.yarn_mscale - 1.34657f) < 1e-4f);
        if (m && a == 3) /* DeltaNet 0 and 2, attention 1 and 3 (pool layers 0, 1), a NextN block; per recurrent
                          * layer a conv state of 3 x (2 x 2 + 4) x 32 and 4 heads of 32 x 32 */
            CHECK(m->hp.n_layer == 4 && m->hp.n_layer_nextn == 1 && m->hp.n_layer_kv == 2 && m->layers[0].recurrent &&
                  !m->layers[1].recurrent && m->layers[1].kv_il == 0 && m->layers[3].kv_il == 1 &&
                  m->layers[2].rs_off == 4864 && m->hp.rs_floats == 9728 && !m->hp.ssm_kv_interleave &&
                  m->layers[4].nextn_eh_proj.data && m->layers[0].ffn_gate_inp_shexp.data);
        if (m && a == 4) /* the older fused ssm_in, v heads repeat-interleaved */
            CHECK(m->layers[0].ssm_in.data && !m->layers[0].ssm_qkv.data && m->layers[0].ssm_ba.data &&
                  m->hp.ssm_kv_interleave && m->hp.rs_floats == 9728);
        model_free(m);
        for (size_t i = 0; i < sets[a].n; i++) {
            const struct arch_variant *v = &sets[a].v[i];
            snprintf(out_path, sizeof out_path, "%s/%s_bad%02zu.gguf", dir, sets[a].arch, i);
            const uint32_t u = (uint32_t)v->v;
            const float f = (float)v->v;
            const size_t key_len = strlen(v->find);
            bool ok = v->t == 'n' ? patch_file(src, out_path, v->find, key_len - 1, "x", 1)
                                  : patch_file(src, out_path, v->find, key_len + 4, v->t == 'u' ? (const void *)&u
                                                                                                 : (const void *)&f, 4);
            CHECKF(ok, "%s %s: patching failed", sets[a].arch, v->what);
            if (!ok) continue;
            m = (struct dj_model *)0x1;
            dj_clear_error();
            enum dj_status st = model_load(out_path, &m);
            const char *msg = dj_last_error();
            if (v->want_st == DJ_OK) { /* optional tensors: absent is fine */
                CHECKF(st == DJ_OK, "%s %s: %s", sets[a].arch, v->what, msg);
                if (st == DJ_OK) {
                    CHECK(m->layers[1].bo.data == NULL && m->layers[0].bo.data != NULL);
                    model_free(m);
                }
            } else {
                CHECKF(st == v->want_st, "%s %s: status %d, expected %d (%s)", sets[a].arch, v->what, st, v->want_st,
                       msg);
                CHECKF(m == (struct dj_model *)0x1, "%s %s: out-param written on failure", sets[a].arch, v->what);
                if (st == DJ_OK && m != (struct dj_model *)0x1) model_free(m);
                CHECKF(strstr(msg, out_path) && strstr(msg, v->want), "%s %s: message lacks the file or '%s': %s",
                       sets[a].arch, v->what, v->want, msg);
            }
            unlink(out_path);
        }
        unlink(src);
    }
}

/* src rewritten to dst with key `arr` set to a bool array of n (the rest as it was). */
static bool rewrite_with_bools(const char *src, const char *dst, const char *arr, const uint8_t *v, size_t n) {
    struct gguf_ctx *g = NULL;
    if (gguf_open(src, &g) != DJ_OK) return false;
    struct gguf_writer *w = gguf_writer_create();
    bool ok = w != NULL;
    for (size_t i = 0; ok && i < gguf_n_kv(g); i++) ok = gguf_writer_copy_kv(w, g, i) == DJ_OK;
    ok = ok && gguf_writer_set_arr(w, arr, GGUF_TYPE_BOOL, v, n) == DJ_OK;
    for (size_t i = 0; ok && i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        ok = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes) == DJ_OK;
    }
    ok = ok && gguf_writer_write(w, dst) == DJ_OK;
    gguf_writer_destroy(w);
    gguf_close(g);
    return ok;
}

/* The hybrids' attention.recurrent_layers (a per-block array; overrides the interval). */
static void test_recurrent_layers(void) {
    char src[128], bad[128];
    snprintf(src, sizeof src, "%s/qwen35moe_rl.gguf", dir);
    snprintf(bad, sizeof bad, "%s/qwen35moe_rl_bad.gguf", dir);
    char *out = NULL;
    int rc = RUN(&out, "synth", "--arch", "qwen35moe", "--preset", "tiny", "--vocab-from",
                 (char *)test_shared_path(shared, "models/stories260K.gguf"), "-o", src, "-t", "1");
    CHECKF(rc == 0, "synth qwen35moe: exit %d: %s", rc, out);
    free(out);
    if (rc) return;
    static const struct {
        const char *what;
        uint8_t v[5];
        size_t n;
        enum dj_status want_st;
        const char *want;
    } cases[] = {
        {"the file's own pattern", {1, 0, 1, 0, 0}, 5, DJ_OK, NULL},
        {"4 entries for 5 blocks", {1, 0, 1, 0, 0}, 4, DJ_ERR_FORMAT, "qwen35moe.attention.recurrent_layers"},
        {"the NextN block recurrent", {1, 0, 1, 0, 1}, 5, DJ_ERR_FORMAT, "qwen35moe.attention.recurrent_layers"},
        {"attention layer 1 marked recurrent", {1, 1, 1, 0, 0}, 5, DJ_ERR_NOT_FOUND, "blk.1.attn_qkv.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bool ok = rewrite_with_bools(src, bad, "qwen35moe.attention.recurrent_layers", cases[i].v, cases[i].n);
        CHECKF(ok, "recurrent_layers %s: rewriting failed", cases[i].what);
        if (!ok) continue;
        struct dj_model *m = NULL;
        dj_clear_error();
        enum dj_status st = model_load(bad, &m);
        const char *msg = dj_last_error();
        CHECKF(st == cases[i].want_st, "recurrent_layers %s: status %d, expected %d (%s)", cases[i].what, st,
               cases[i].want_st, msg);
        if (st == DJ_OK && m)
            CHECK(m->layers[0].recurrent && !m->layers[1].recurrent && m->layers[2].recurrent &&
                  !m->layers[3].recurrent && m->hp.n_layer_kv == 2 && m->layers[3].kv_il == 1);
        else
            CHECKF(cases[i].want && strstr(msg, bad) && strstr(msg, cases[i].want),
                   "recurrent_layers %s: message lacks the file or '%s': %s", cases[i].what,
                   cases[i].want ? cases[i].want : "", msg);
        model_free(st == DJ_OK ? m : NULL);
        unlink(bad);
    }
    unlink(src);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SHARED_DIR DEJA_BINARY\n", argv[0]);
        return 2;
    }
    shared = argv[1];
    deja_bin = argv[2];
    snprintf(dir, sizeof dir, "/tmp/dj_model_hardening_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_valid();
    test_variants();
    test_arch_variants();
    test_recurrent_layers();
    rmdir(dir);
    TEST_END();
}

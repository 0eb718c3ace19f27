/*
 * test_moe_types.c — expert matmuls for every weight type deja runs: F16, BF16,
 * Q8_0, Q4_0, Q4_K, Q6_K, and the 21 others of ggml's table (Q4_1, Q5_0, Q5_1,
 * IQ4_NL, MXFP4, NVFP4, Q1_0, Q2_0, Q2_K, Q3_K, Q5_K, IQ4_XS, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0).  The golden MoE models
 * (golden/moe) have rows too short for 256-element K-quant blocks, so this test
 * writes its own: 256 wide, expert width 256, 8 experts, 2 layers, vocab 512
 * (stories260K's tokenizer), attention and router F32, the three expert tensors
 * in the type under test: bytes from dj_ref_quantize_row (llama.cpp's quantizers)
 * for the first six, random blocks with sane scales for the others
 * (tools/synth_blocks.h, as `deja synth` writes them: the importance-matrix types
 * have no quantizer), their F32 copies from dj_ref_dequantize_row.  Per type:
 *
 *  (a) expert slabs: a Mixtral-style (llama) model whose routing is forced —
 *      dims 0..7 of token t's embedding hold a large value at t % 8, and the
 *      router's row e reads dim e only, k = 1 — against eight dense llama models
 *      whose FFN is expert e's slab (the same bytes).  A sequence of tokens that
 *      all choose e (checked through moe_trace) must give bitwise the dense
 *      model's logits, in one batch (the 6 tokens share the expert: a gathered
 *      sub-batch) and token by token.  k = 1 makes the weight p/p = 1 exactly, so
 *      MoE adds 1 * o = o as the dense FFN adds o.  A wrong slab offset, repack of
 *      the 3-D tensor or row stride for the type gives another expert's (or no
 *      expert's) product.
 *  (b) batch invariance: a qwen3moe model (random router, k = 3) on 24 tokens:
 *      every logits row bitwise equal in one batch, token by token, ubatches of 3
 *      and 5, 1 and 2 threads; and two sequences in one ctx_forward equal to each
 *      alone.  The test checks that experts are shared by several tokens of a
 *      ubatch of 3 (the gathered path runs), from the routing trace.
 *  (c) accuracy: the (b) model against the same model with F32 experts holding
 *      the dequantized weights (dj_ref_dequantize_row): same routing (trace),
 *      max |logit diff| within the type's tolerance, below.  What remains is the
 *      kernels' activation rounding (q8_0 / q8_K rows for the quantized types)
 *      and their summation order.
 *  (d) `deja quantize q4_k_m` of the model with F32 experts: llama.cpp's type
 *      choices for an 8-expert model with 256-wide rows (Q4_K experts, Q6_K
 *      ffn_down_exps of the use_more_bits layer, Q8_0 attn_k/attn_v, F32 router),
 *      and the result runs batch invariant, close to the F32 model.
 *
 * Tolerances (max |logit diff| over 24 x 512 logits of magnitude up to 2.7),
 * measured on this seed, the same with the AVX-512, AVX2 and generic tables
 * (DJ_ISA; the test prints them): F16 0 and BF16 0 — those kernels widen the
 * weights to f32 exactly and keep the F32 kernel's order, so they must stay
 * bitwise equal — except BF16 in the avx512bf16 and amx tables, which round the
 * activations to bf16 as ggml does (amx: 1.3e-3, avx512bf16: see BF16_ACT_TOL) → 5e-3; Q8_0 7.6e-3, Q4_0 7.5e-3 (q8_0 activations) → 2e-2; Q4_K
 * 2.0e-2, Q6_K 2.2e-2 (q8_K activations) → 5e-2.  The random-block types, same
 * classes and tolerances (generic and AVX2 tables, before the AVX2 kernels of the
 * new types): q8_0-paired Q4_1 1.9e-3, Q5_0 1.3e-3, Q5_1 1.4e-3, IQ4_NL 1.1e-3,
 * MXFP4 1.4e-2, NVFP4 1.7e-2, Q1_0 1.3e-3, Q2_0 1.8e-3; q8_K-paired Q2_K 5.1e-3,
 * Q3_K 6.6e-4, Q5_K 3.5e-3, IQ4_XS 5.0e-4, IQ2_XXS 7.0e-4, IQ2_XS 6.9e-4, IQ2_S
 * 8.9e-4, IQ3_XXS 6.0e-4, IQ3_S 4.6e-4, IQ1_S 1.3e-3, IQ1_M 1.3e-3, TQ1_0 9.6e-3,
 * TQ2_0 1.5e-2 (their weights are smaller than the quantized 0.05-uniform ones
 * but for MXFP4, NVFP4 and TQ*).  A wrong block decode or scale gives errors of
 * the logits' own size.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "model/context.h"
#include "test.h"
#include "test_model.h"
#include "test_run.h"
#include "../../tools/synth_blocks.h"

#define BF16_ACT_TOL 5e-3f
enum { E = 256, FE = 256, NE = 8, NL = 2, NH = 4, NKV = 2, HD = 64, V = 512, NTOK = 24, NSAME = 6 };
#define SIGNAL 8.0f

struct types_case {
    uint32_t type;
    float tol;
    bool random; /* experts as random blocks (synth_blocks.h), not quantized from exps */
};
static const struct types_case cases[] = {
    {DJ_TYPE_F16, 0.0f, false},     {DJ_TYPE_BF16, 0.0f, false},    {DJ_TYPE_Q8_0, 2e-2f, false},
    {DJ_TYPE_Q4_0, 2e-2f, false},   {DJ_TYPE_Q4_K, 5e-2f, false},   {DJ_TYPE_Q6_K, 5e-2f, false},
    /* the other weight types: q8_0 activations */
    {DJ_TYPE_Q4_1, 2e-2f, true},    {DJ_TYPE_Q5_0, 2e-2f, true},    {DJ_TYPE_Q5_1, 2e-2f, true},
    {DJ_TYPE_IQ4_NL, 2e-2f, true},  {DJ_TYPE_MXFP4, 2e-2f, true},   {DJ_TYPE_NVFP4, 2e-2f, true},
    {DJ_TYPE_Q1_0, 2e-2f, true},    {DJ_TYPE_Q2_0, 2e-2f, true},
    /* q8_K activations */
    {DJ_TYPE_Q2_K, 5e-2f, true},    {DJ_TYPE_Q3_K, 5e-2f, true},    {DJ_TYPE_Q5_K, 5e-2f, true},
    {DJ_TYPE_IQ4_XS, 5e-2f, true},  {DJ_TYPE_IQ2_XXS, 5e-2f, true}, {DJ_TYPE_IQ2_XS, 5e-2f, true},
    {DJ_TYPE_IQ2_S, 5e-2f, true},   {DJ_TYPE_IQ3_XXS, 5e-2f, true}, {DJ_TYPE_IQ3_S, 5e-2f, true},
    {DJ_TYPE_IQ1_S, 5e-2f, true},   {DJ_TYPE_IQ1_M, 5e-2f, true},   {DJ_TYPE_TQ1_0, 5e-2f, true},
    {DJ_TYPE_TQ2_0, 5e-2f, true},
};

/* The F32 tensors every file shares (generated once). */
static float *embd;                    /* (V, E): random +-0.125, dims 0..7 the routing signal */
static float *outw;                    /* (V, E): random +-0.125 (untied: logits of magnitude ~1-10) */
static float *ones;                    /* (E) norms */
static float *wq[NL], *wk[NL], *wv[NL], *wo[NL];
static float *router_unit, *router_rand[NL]; /* (NE, E) */
static float *exps[NL][3];                   /* (NE * 256, 256): gate, up, down experts, f32 */

/* The expert tensors of one type: the file's bytes and their dequantized floats. */
struct expert_set {
    uint32_t type;
    size_t row_bytes;
    uint8_t *q[NL][3];
    float *deq[NL][3];
};

static void fill(float *x, size_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 2.0f * scale;
    }
}

static void make_common(void) {
    embd = malloc((size_t)V * E * sizeof(float));
    fill(embd, (size_t)V * E, 1, 0.125f);
    for (int t = 0; t < V; t++)
        for (int d = 0; d < NE; d++) embd[(size_t)t * E + d] = d == t % NE ? SIGNAL : 0.0f;
    outw = malloc((size_t)V * E * sizeof(float));
    fill(outw, (size_t)V * E, 2, 0.125f);
    ones = malloc(E * sizeof(float));
    for (int i = 0; i < E; i++) ones[i] = 1.0f;
    router_unit = calloc((size_t)NE * E, sizeof(float));
    for (int e = 0; e < NE; e++) router_unit[(size_t)e * E + e] = 1.0f;
    for (int il = 0; il < NL; il++) {
        wq[il] = malloc((size_t)E * NH * HD * sizeof(float));
        wk[il] = malloc((size_t)E * NKV * HD * sizeof(float));
        wv[il] = malloc((size_t)E * NKV * HD * sizeof(float));
        wo[il] = malloc((size_t)NH * HD * E * sizeof(float));
        router_rand[il] = malloc((size_t)NE * E * sizeof(float));
        fill(wq[il], (size_t)E * NH * HD, 10 + il, 0.125f);
        fill(wk[il], (size_t)E * NKV * HD, 20 + il, 0.125f);
        fill(wv[il], (size_t)E * NKV * HD, 30 + il, 0.125f);
        fill(wo[il], (size_t)NH * HD * E, 40 + il, 0.01f); /* small: the routing signal stays dominant */
        fill(router_rand[il], (size_t)NE * E, 50 + il, 0.125f);
        for (int j = 0; j < 3; j++) {
            exps[il][j] = malloc((size_t)NE * 256 * 256 * sizeof(float));
            fill(exps[il][j], (size_t)NE * 256 * 256, 100 + 10 * il + j, 0.05f);
        }
    }
}

static void free_common(void) {
    free(embd);
    free(outw);
    free(ones);
    free(router_unit);
    for (int il = 0; il < NL; il++) {
        free(wq[il]), free(wk[il]), free(wv[il]), free(wo[il]), free(router_rand[il]);
        for (int j = 0; j < 3; j++) free(exps[il][j]);
    }
}

/* random: the rows are synth_random_blocks of the type (seeded by layer, tensor and row),
 * else exps quantized by the reference quantizer. */
static bool make_experts(uint32_t type, bool random, struct expert_set *s) {
    memset(s, 0, sizeof *s);
    s->type = type;
    if (!dj_row_bytes(type, 256, &s->row_bytes) || (random && !synth_random_type(type))) return false;
    const size_t rows = (size_t)NE * 256;
    const int64_t n_blocks = 256 / (int64_t)dj_type_info(type)->blck;
    for (int il = 0; il < NL; il++)
        for (int j = 0; j < 3; j++) {
            s->q[il][j] = malloc(rows * s->row_bytes);
            s->deq[il][j] = malloc(rows * 256 * sizeof(float));
            if (!s->q[il][j] || !s->deq[il][j]) return false;
            for (size_t r = 0; r < rows; r++) {
                uint8_t *qr = s->q[il][j] + r * s->row_bytes;
                if (random) synth_random_blocks(type, qr, n_blocks, ((uint64_t)(il * 3 + j) << 32 | r) * 0x9E3779B97F4A7C15ull | 1);
                else if (!dj_ref_quantize_row(type, exps[il][j] + r * 256, qr, 256)) return false;
                if (!dj_ref_dequantize_row(type, qr, s->deq[il][j] + r * 256, 256)) return false;
            }
        }
    return true;
}

static void free_experts(struct expert_set *s) {
    for (int il = 0; il < NL; il++)
        for (int j = 0; j < 3; j++) free(s->q[il][j]), free(s->deq[il][j]);
}

/* What a file holds: a MoE model (dense < 0) with the unit or the random router, or
 * a dense llama whose FFN is expert `dense`'s slab; experts in the set's type, or
 * F32 dequantized (deq). */
struct file_spec {
    const char *arch; /* "llama" (Mixtral-style) or "qwen3moe" */
    uint32_t n_used;
    bool unit_router;
    int dense;
    bool deq;
};

static enum dj_status write_model(const char *path, const char *vocab_from, const struct file_spec *f,
                                  const struct expert_set *s) {
    struct gguf_ctx *voc = NULL;
    enum dj_status st = gguf_open(vocab_from, &voc);
    if (st) return st;
    struct gguf_writer *w = gguf_writer_create();
    if (!w) {
        gguf_close(voc);
        return DJ_ERR_NOMEM;
    }
    char key[128];
    const char *a = f->arch;
    const bool qwen = !strcmp(a, "qwen3moe");
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", a, k), key)
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((st = (x))) goto done;                                                                           \
    } while (0)
    TRY(gguf_writer_set_str(w, "general.architecture", a, strlen(a)));
    TRY(gguf_writer_set_u32(w, KEY("context_length"), 256));
    TRY(gguf_writer_set_u32(w, KEY("embedding_length"), E));
    TRY(gguf_writer_set_u32(w, KEY("block_count"), NL));
    TRY(gguf_writer_set_u32(w, KEY("feed_forward_length"), FE));
    TRY(gguf_writer_set_u32(w, KEY("attention.head_count"), NH));
    TRY(gguf_writer_set_u32(w, KEY("attention.head_count_kv"), NKV));
    TRY(gguf_writer_set_u32(w, KEY("attention.key_length"), HD));
    TRY(gguf_writer_set_u32(w, KEY("rope.dimension_count"), HD));
    TRY(gguf_writer_set_f32(w, KEY("rope.freq_base"), 10000.0f));
    TRY(gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f));
    if (f->dense < 0) {
        TRY(gguf_writer_set_u32(w, KEY("expert_count"), NE));
        TRY(gguf_writer_set_u32(w, KEY("expert_used_count"), f->n_used));
        if (qwen) TRY(gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), FE));
    }
    for (size_t i = 0; i < gguf_n_kv(voc); i++) {
        struct gguf_str k = gguf_kv_key(voc, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) TRY(gguf_writer_copy_kv(w, voc, i));
    }
#define ADD(nm, type, nd, n0, n1, n2, data, bytes)                                                            \
    do {                                                                                                     \
        const int64_t ne_[3] = {(n0), (n1), (n2)};                                                           \
        TRY(gguf_writer_add_tensor(w, nm, type, nd, ne_, data, bytes));                                      \
    } while (0)
    ADD("token_embd.weight", DJ_TYPE_F32, 2, E, V, 1, embd, (size_t)V * E * sizeof(float));
    ADD("output_norm.weight", DJ_TYPE_F32, 1, E, 1, 1, ones, E * sizeof(float));
    ADD("output.weight", DJ_TYPE_F32, 2, E, V, 1, outw, (size_t)V * E * sizeof(float));
    char names[NL][16][48];
    for (int il = 0; il < NL; il++) {
        int ni = 0;
#define NAME(suffix) (snprintf(names[il][ni], sizeof names[il][ni], "blk.%d.%s", il, suffix), names[il][ni++])
        ADD(NAME("attn_norm.weight"), DJ_TYPE_F32, 1, E, 1, 1, ones, E * sizeof(float));
        ADD(NAME("attn_q.weight"), DJ_TYPE_F32, 2, E, NH * HD, 1, wq[il], (size_t)E * NH * HD * sizeof(float));
        ADD(NAME("attn_k.weight"), DJ_TYPE_F32, 2, E, NKV * HD, 1, wk[il], (size_t)E * NKV * HD * sizeof(float));
        ADD(NAME("attn_v.weight"), DJ_TYPE_F32, 2, E, NKV * HD, 1, wv[il], (size_t)E * NKV * HD * sizeof(float));
        ADD(NAME("attn_output.weight"), DJ_TYPE_F32, 2, NH * HD, E, 1, wo[il], (size_t)NH * HD * E * sizeof(float));
        if (qwen) {
            ADD(NAME("attn_q_norm.weight"), DJ_TYPE_F32, 1, HD, 1, 1, ones, HD * sizeof(float));
            ADD(NAME("attn_k_norm.weight"), DJ_TYPE_F32, 1, HD, 1, 1, ones, HD * sizeof(float));
        }
        ADD(NAME("ffn_norm.weight"), DJ_TYPE_F32, 1, E, 1, 1, ones, E * sizeof(float));
        static const char *const exp_names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
        static const char *const dense_names[3] = {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
        const uint32_t t = f->deq ? DJ_TYPE_F32 : s->type;
        const size_t rb = f->deq ? 256 * sizeof(float) : s->row_bytes;
        for (int j = 0; j < 3; j++) { /* gate, up: (E -> FE); down: (FE -> E); all 256 x 256 */
            const uint8_t *data = f->deq ? (const uint8_t *)s->deq[il][j] : s->q[il][j];
            if (f->dense >= 0)
                ADD(NAME(dense_names[j]), t, 2, 256, 256, 1, data + (size_t)f->dense * 256 * rb, 256 * rb);
            else
                ADD(NAME(exp_names[j]), t, 3, 256, 256, NE, data, (size_t)NE * 256 * rb);
        }
        if (f->dense < 0)
            ADD(NAME("ffn_gate_inp.weight"), DJ_TYPE_F32, 2, E, NE, 1, f->unit_router ? router_unit : router_rand[il],
                (size_t)NE * E * sizeof(float));
#undef NAME
    }
    st = gguf_writer_write(w, path);
#undef ADD
#undef TRY
#undef KEY
done:
    gguf_writer_destroy(w);
    gguf_close(voc);
    return st;
}

static struct dj_model *load(const char *dir, const char *name, const char *vocab, const struct file_spec *f,
                             const struct expert_set *s) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    enum dj_status st = write_model(path, vocab, f, s);
    CHECKF(st == DJ_OK, "%s: writing: %s", path, dj_last_error());
    struct dj_model *m = NULL;
    if (st == DJ_OK) CHECKF(model_load(path, &m) == DJ_OK, "%s: %s", path, dj_last_error());
    unlink(path);
    return m;
}

/* Every logits row of toks in one batch, and the routing (n_layer * n * n_used ids). */
static float *eval_traced(const struct dj_model *m, const dj_token *toks, size_t n, int32_t *trace) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n;
    cp.n_ubatch = (uint32_t)n;
    cp.n_threads = 2;
    struct dj_context *c = NULL;
    if (ctx_create(m, cp, &c) != DJ_OK) return NULL;
    float *out = malloc(n * V * sizeof(float));
    c->moe_trace = trace;
    if (ctx_decode(c, toks, n, out, true) != DJ_OK) {
        free(out);
        out = NULL;
    }
    c->moe_trace = NULL;
    ctx_free(c);
    return out;
}

/* (a): the forced-routing MoE model against the dense model of each expert. */
static void check_slabs(const char *dir, const char *vocab, const struct expert_set *s) {
    const char *tn = dj_type_name(s->type);
    const struct file_spec fm = {"llama", 1, true, -1, false};
    struct dj_model *moe = load(dir, "forced", vocab, &fm, s);
    if (!moe) return;
    const struct dj_weight *up = &moe->layers[1].ffn_up_exps;
    CHECKF(up->type == s->type, "%s: expert tensor loaded as %s", tn, dj_type_name(up->type));
    int n_ok = 0;
    for (int e = 0; e < NE; e++) {
        const struct file_spec fd = {"llama", 1, true, e, false};
        struct dj_model *dense = load(dir, "dense", vocab, &fd, s);
        if (!dense) continue;
        dj_token toks[NSAME];
        for (int i = 0; i < NSAME; i++) toks[i] = (dj_token)(NE * (1 + 7 * i) + e); /* t % 8 == e */
        int32_t trace[NL * NSAME];
        float *a = eval_traced(moe, toks, NSAME, trace);
        bool routed = a != NULL;
        for (int i = 0; i < NL * NSAME; i++) routed &= trace[i] == e;
        CHECKF(routed, "%s expert %d: the forced routing chose other experts", tn, e);
        float *b = test_eval_logits(dense, toks, NSAME, NSAME, 2, 0);
        float *a1 = test_eval_logits(moe, toks, NSAME, 1, 1, 0);
        const size_t bytes = (size_t)NSAME * V * sizeof(float);
        const bool eq = a && b && !memcmp(a, b, bytes), eq1 = a1 && b && !memcmp(a1, b, bytes);
        CHECKF(eq, "%s expert %d: MoE logits (%zu tokens sharing it, one batch) differ from the dense model of its slab "
               "(max |diff| %g)", tn, e, (size_t)NSAME, a && b ? test_max_abs_diff(a, b, (size_t)NSAME * V) : -1.0f);
        CHECKF(eq1, "%s expert %d: MoE logits token by token differ from the dense model of its slab", tn, e);
        n_ok += routed && eq && eq1;
        free(a), free(b), free(a1);
        model_free(dense);
    }
    printf("%s (a): %s experts; %d of %d experts' logits bitwise equal to a dense FFN of their slab (one batch "
           "of %d tokens sharing it, and token by token)\n",
           tn, up->packed ? "repacked" : "file layout", n_ok, NE, NSAME);
    model_free(moe);
}

/* Two sequences in one ctx_forward, each row against the sequence alone (ref). */
static bool two_sequences(const struct dj_model *m, const dj_token *toks, const float *ref) {
    const size_t n_a = NTOK / 2, n_b = NTOK - n_a;
    struct kv_pool_params pp = {NL, NKV * HD, 16, 64, kv_type_default(), kv_type_default()};
    struct kv_pool *pool = NULL;
    if (kv_pool_create(&pp, &pool) != DJ_OK) return false;
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = NTOK;
    cp.n_threads = 2;
    cp.pool = pool;
    struct dj_context *c = NULL;
    bool ok = ctx_create(m, cp, &c) == DJ_OK;
    struct kv_seq sa, sb, sa1, sb1;
    kv_seq_init(&sa, pool), kv_seq_init(&sb, pool), kv_seq_init(&sa1, pool), kv_seq_init(&sb1, pool);
    float *alone = malloc((size_t)NTOK * V * sizeof(float)), *both = malloc((size_t)NTOK * V * sizeof(float));
    if (ok) { /* each alone; the second sequence is toks[n_a..) starting at position 0 */
        ctx_set_seq(c, &sa1);
        ok &= ctx_decode(c, toks, n_a, alone, true) == DJ_OK;
        ctx_set_seq(c, &sb1);
        ok &= ctx_decode(c, toks + n_a, n_b, alone + n_a * V, true) == DJ_OK;
        ctx_set_seq(c, NULL);
    }
    ok &= ref && !memcmp(alone, ref, n_a * V * sizeof(float)); /* the first is the reference's prefix */
    if (ok) { /* interleaved: a0 b0 a1 b1 ... */
        dj_token tok[NTOK];
        uint32_t pos[NTOK], out[NTOK];
        struct kv_seq *tseq[NTOK];
        size_t row[NTOK];
        ok &= kv_seq_prepare(&sa, n_a) == DJ_OK && kv_seq_prepare(&sb, n_b) == DJ_OK;
        size_t k = 0;
        for (size_t i = 0; i < n_b; i++) {
            if (i < n_a) tok[k] = toks[i], pos[k] = (uint32_t)i, tseq[k] = &sa, row[k] = i, out[k] = (uint32_t)k, k++;
            tok[k] = toks[n_a + i], pos[k] = (uint32_t)i, tseq[k] = &sb, row[k] = n_a + i, out[k] = (uint32_t)k, k++;
        }
        struct dj_batch b = {k, tok, pos, tseq, k, out};
        float *lg = malloc(k * V * sizeof(float));
        ok &= ctx_forward(c, &b, lg) == DJ_OK;
        for (size_t i = 0; ok && i < k; i++) memcpy(both + row[i] * V, lg + i * V, V * sizeof(float));
        ok &= !memcmp(both, alone, (size_t)NTOK * V * sizeof(float));
        free(lg);
    }
    kv_seq_free(&sa), kv_seq_free(&sb), kv_seq_free(&sa1), kv_seq_free(&sb1);
    free(alone), free(both);
    ctx_free(c);
    kv_pool_destroy(pool);
    return ok;
}

/* (b) and (c): the qwen3moe model with a random router. */
static void check_batch_and_accuracy(const char *dir, const char *vocab, const struct expert_set *s, float tol,
                                     float *worst) {
    const char *tn = dj_type_name(s->type);
    const struct file_spec fq = {"qwen3moe", 3, false, -1, false}, fr = {"qwen3moe", 3, false, -1, true};
    struct dj_model *m = load(dir, "natural", vocab, &fq, s), *mr = load(dir, "natural_f32", vocab, &fr, s);
    if (!m || !mr) goto out;
    dj_token toks[NTOK];
    uint64_t r = 0x1234567;
    for (int i = 0; i < NTOK; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        toks[i] = (dj_token)(8 + r % (V - 8));
    }
    const size_t bytes = (size_t)NTOK * V * sizeof(float);
    int32_t trace[NL * NTOK * 3], trace_r[NL * NTOK * 3];
    float *base = eval_traced(m, toks, NTOK, trace);
    CHECK(base != NULL);
    /* the experts of a ubatch of 3 are shared: some expert serves 2+ of its tokens */
    int n_shared = 0;
    for (int il = 0; il < NL; il++)
        for (int t0 = 0; t0 + 3 <= NTOK; t0 += 3)
            for (int e = 0; e < NE; e++) {
                int cnt = 0;
                for (int i = t0 * 3; i < (t0 + 3) * 3; i++) cnt += trace[il * NTOK * 3 + i] == e;
                n_shared += cnt >= 2;
            }
    CHECKF(n_shared >= 8, "%s: only %d (layer, ubatch of 3, expert) with 2+ tokens", tn, n_shared);
    struct { uint32_t ub; int th; } cfg[] = {{NTOK, 1}, {1, 1}, {1, 2}, {3, 1}, {3, 2}, {5, 2}};
    int n_eq = 0;
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0] && base; k++) {
        float *o = test_eval_logits(m, toks, NTOK, cfg[k].ub, cfg[k].th, 0);
        const bool eq = o && !memcmp(o, base, bytes);
        CHECKF(eq, "%s: ubatch %u threads %d differs from one batch (2 threads)", tn, cfg[k].ub, cfg[k].th);
        n_eq += eq;
        free(o);
    }
    const bool two = base && two_sequences(m, toks, base);
    CHECKF(two, "%s: two sequences in one ctx_forward differ from each alone", tn);
    printf("%s (b): %d ubatch/thread configurations and two sequences in one batch%s bitwise equal to one batch; "
           "%d (layer, ubatch of 3, expert) shared by 2+ tokens\n",
           tn, n_eq, two ? "" : " NOT", n_shared);
    /* (c) */
    float *ref = eval_traced(mr, toks, NTOK, trace_r);
    CHECK(ref != NULL);
    if (base && ref) {
        CHECKF(!memcmp(trace, trace_r, sizeof trace), "%s: routing differs from the F32 model's", tn);
        float d = test_max_abs_diff(base, ref, (size_t)NTOK * V), mag = 0;
        for (size_t i = 0; i < (size_t)NTOK * V; i++) mag = fabsf(ref[i]) > mag ? fabsf(ref[i]) : mag;
        *worst = d;
        CHECKF(d <= tol, "%s: max |logit diff| %g to F32 dequantized experts > %g", tn, d, tol);
        printf("%s (c): max |diff| to F32 dequantized experts %.3g (tolerance %g; max |logit| %.3g)\n", tn, d, tol,
               mag);
    }
    free(ref);
    free(base);
out:
    model_free(m);
    model_free(mr);
}

/* `deja quantize q4_k_m` of the qwen3moe model with F32 experts (rows of 256: the
 * K-quant rules show): experts Q4_K, layer 1's ffn_down_exps Q6_K (use_more_bits
 * of 2 layers: the last), attn_k/attn_v Q8_0 (8 experts), router F32; it runs,
 * batch invariant, within tolerance of the F32 model (measured 0.32 with every
 * matrix quantized, token_embd and attention too, and a few routed ids moved:
 * tolerance 1). */
static void check_quantize(const char *dir, const char *vocab) {
    struct expert_set s;
    if (!make_experts(DJ_TYPE_F32, false, &s)) {
        CHECK(false);
        free_experts(&s);
        return;
    }
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/f32.gguf", dir);
    snprintf(dst, sizeof dst, "%s/q4_k_m.gguf", dir);
    const struct file_spec fq = {"qwen3moe", 3, false, -1, false};
    CHECK(write_model(src, vocab, &fq, &s) == DJ_OK);
    free_experts(&s);
    char *out = NULL;
    int rc = RUN(&out, "quantize", src, dst, "q4_k_m");
    CHECKF(rc == 0, "quantize q4_k_m: %s", out);
    free(out);
    struct dj_model *m = NULL, *mf = NULL;
    CHECKF(model_load(dst, &m) == DJ_OK && model_load(src, &mf) == DJ_OK, "%s", dj_last_error());
    if (m && mf) {
        const struct dj_layer *L0 = &m->layers[0], *L1 = &m->layers[1];
        CHECKF(L0->ffn_up_exps.type == DJ_TYPE_Q4_K && L0->ffn_gate_exps.type == DJ_TYPE_Q4_K &&
                   L0->ffn_down_exps.type == DJ_TYPE_Q4_K && L1->ffn_up_exps.type == DJ_TYPE_Q4_K &&
                   L1->ffn_down_exps.type == DJ_TYPE_Q6_K,
               "q4_k_m experts: layer 0 down %s, layer 1 up %s down %s", dj_type_name(L0->ffn_down_exps.type),
               dj_type_name(L1->ffn_up_exps.type), dj_type_name(L1->ffn_down_exps.type));
        CHECK(L0->wk.type == DJ_TYPE_Q8_0 && L1->wv.type == DJ_TYPE_Q8_0 && L0->ffn_gate_inp.type == DJ_TYPE_F32);
        dj_token toks[NTOK];
        for (int i = 0; i < NTOK; i++) toks[i] = (dj_token)(8 + (i * 131) % (V - 8));
        const size_t bytes = (size_t)NTOK * V * sizeof(float);
        float *a = test_eval_logits(m, toks, NTOK, NTOK, 2, 0), *b = test_eval_logits(m, toks, NTOK, 1, 1, 0),
              *c3 = test_eval_logits(m, toks, NTOK, 3, 2, 0), *f = test_eval_logits(mf, toks, NTOK, NTOK, 2, 0);
        CHECK(a && b && c3 && f && !memcmp(a, b, bytes) && !memcmp(a, c3, bytes));
        const float d = a && f ? test_max_abs_diff(a, f, (size_t)NTOK * V) : -1.0f;
        int32_t tq[NL * NTOK * 3], tf[NL * NTOK * 3];
        float *ta = eval_traced(m, toks, NTOK, tq), *tb = eval_traced(mf, toks, NTOK, tf);
        int n_moved = 0;
        for (int i = 0; ta && tb && i < NL * NTOK * 3; i++) n_moved += tq[i] != tf[i];
        free(ta), free(tb);
        CHECKF(d >= 0 && d <= 1.0f, "q4_k_m: max |logit diff| to the F32 model %g > 1", d);
        printf("deja quantize q4_k_m: experts q4_K, layer 1 down q6_K, attn_k/v q8_0; batch invariant; max |diff| to "
               "F32 %.3g (tolerance 1; %d of %d routed ids differ from F32's)\n", d, n_moved, NL * NTOK * 3);
        free(a), free(b), free(c3), free(f);
    }
    model_free(m);
    model_free(mf);
    unlink(src);
    unlink(dst);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    char vocab[512], dir[] = "/tmp/deja_test_moe_types_XXXXXX";
    snprintf(vocab, sizeof vocab, "%s", test_shared_path(argv[1], "models/stories260K.gguf"));
    if (!mkdtemp(dir)) return 1;
    make_common();
    float worst[sizeof cases / sizeof cases[0]] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct expert_set s;
        const bool ok = make_experts(cases[i].type, cases[i].random, &s);
        CHECKF(ok, "%s: quantizing the experts", dj_type_name(cases[i].type));
        if (ok) {
            check_slabs(dir, vocab, &s);
            float tol = cases[i].tol;
            /* the avx512bf16 and amx tables round BF16 activations to bf16 (kernels.h): bitwise no more */
            if (cases[i].type == DJ_TYPE_BF16 && dj_kernels()->w[DJ_TYPE_BF16].act_type == DJ_TYPE_BF16)
                tol = BF16_ACT_TOL;
            check_batch_and_accuracy(dir, vocab, &s, tol, &worst[i]);
        }
        free_experts(&s);
    }
    check_quantize(dir, vocab);
    printf("max |logit diff| to F32 dequantized experts:");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        printf(" %s %.3g", dj_type_name(cases[i].type), worst[i]);
    printf("\n");
    free_common();
    rmdir(dir);
    TEST_END();
}

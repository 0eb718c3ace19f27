/*
 * test_mla_golden.c — deepseek2 (Multi-head Latent Attention, YaRN, MoE with shared
 * experts, sigmoid gating, selection bias, expert groups) against llama.cpp's
 * reference outputs in ../shared/golden/moe (README there: equations, tolerances).
 *
 * For deepseek2-lite-tiny (no q LoRA, softmax, 2 shared experts, split attn_k_b /
 * attn_v_b), deepseek2-lite-tiny-wkvb (the same weights in the legacy attn_kv_b
 * layout, split at load) and deepseek2-v3-tiny (q LoRA, sigmoid + exp_probs_b, 4
 * groups of 4 experts, 2 used, top-4, norm, scale 2.5), prompts p0..p2:
 *  - our tokenizer gives `prompt_tokens`;
 *  - f32 K/V: the prompt in one batch: every row within 1e-3 of logits_prompt.f32 (README:
 *    llama.cpp's own noise floor 1.3e-5) and the experts of every MoE layer and token
 *    are `routing_selected_experts`, in order;
 *  - the 32 greedy ids teacher-forced one at a time: row s within 1e-3 of
 *    logits_steps.f32 row s, argmax(row s) == greedy[s];
 *  - the same with an f16 (bf16) cache against those f32-cache references: every row
 *    within KV_F16_TOL (KV_BF16_TOL), every greedy id llama.cpp's (routing printed only).
 * Batch invariance, in f32, f16 and bf16 caches: p0 + its greedy ids in one batch is
 * bitwise equal to token by token, ubatches of 3 / 5 / 7 / 64, 1 and 2 threads.
 * Loader errors: copies of deepseek2-v3-tiny with a key or tensor renamed, or
 * expert_gating_func 3, are refused with a message naming the file and the key or tensor.
 * K/V types: the pool is K-only (no V rows, block bytes of K rows only, the engine's
 * bytes per token); the cache takes -ctk's type and V's is set to it; q8_0 / q4_0 on the
 * 40-wide row are refused by ctx_create and engine_create naming the widths; DeepSeek-V3's
 * shape gives 2,304 / 1,152 / 612 / 324 bytes per token and layer (printed with the MHA
 * equivalent).
 * q8_0 / q4_0 (and f16, bf16) on a synthesized deepseek2 whose row is 64 wide: bitwise
 * equal across ubatches, threads and block sizes; within KV_SYN_* of the f32 cache.
 *
 * With DJ_TEST_GPU=N (CTest's model/test_mla_golden_vulkan_f32: Vulkan device 0, lavapipe in
 * CI) the three models run on that device — the latent attention (the K-only pool's rows, the
 * per-head K_b / V_b products), the q LoRA, YaRN, and the experts with shared ones and
 * sigmoid/grouped routing — against the same references in f32 caches (every routed expert
 * equal to llama.cpp's) and V3's in an f16 cache, and batched = alone (lite f32, V3 f16);
 * exit 77 (SKIP) without a device.
 */
#include "engine/engine.h"
#include "test_gpu.h"
#include "test_moe.h"
#include "test_synth.h"

/* f16 / bf16 caches against llama.cpp's f32-cache logits: measured max |logit diff| over the
 * three models, 3 prompts, prompt rows and 32 steps (DJ_ISA avx512 and avx2 alike: the cache
 * rounding dominates): f16 5.05e-3, bf16 3.13e-2 — a K/V element keeps 11 (8) significant
 * bits, a relative error of 2^-12 (2^-9) per element, ~8x more for bf16 as measured.  The
 * bounds are twice that; the greedy ids must equal llama.cpp's at every step. */
#define KV_F16_TOL 1e-2f
#define KV_BF16_TOL 6e-2f
/* check_quant_kv's synthesized model: measured max |logit diff| to an f32 cache over 90
 * positions (avx512 and avx2): f16 6.3e-4, bf16 5.5e-3, q8_0 1.8e-2, q4_0 0.25; bounds 4x */
#define KV_SYN_F16 2.5e-3f
#define KV_SYN_BF16 2.2e-2f
#define KV_SYN_Q8_0 7e-2f
#define KV_SYN_Q4_0 1.0f

static void check_loader_errors(const char *shared) {
    char src[512], dst[] = "/tmp/deja_test_mla_XXXXXX.gguf";
    snprintf(src, sizeof src, "%s", test_shared_path(shared, "golden/moe/deepseek2-v3-tiny.gguf"));
    int fd = mkstemps(dst, 5);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    static const char kvl[] = "deepseek2.attention.kv_lora_rank", vml[] = "deepseek2.attention.value_length_mla",
                      gat[] = "deepseek2.expert_gating_func", kb[] = "blk.1.attn_k_b.weight",
                      qa[] = "blk.2.attn_q_a.weight";
    const uint32_t v3 = 3;
    CHECK(patch_copy(src, dst, kvl, strlen(kvl), strlen(kvl) - 1, "x", 1));
    expect_refused(dst, DJ_ERR_NOT_FOUND, "kv_lora_rank missing", "deepseek2.attention.kv_lora_rank");
    CHECK(patch_copy(src, dst, vml, strlen(vml), strlen(vml) - 1, "x", 1));
    expect_refused(dst, DJ_ERR_FORMAT, "key_length_mla without value_length_mla", "value_length_mla");
    CHECK(patch_copy(src, dst, gat, strlen(gat), strlen(gat) + 4, &v3, 4));
    expect_refused(dst, DJ_ERR_FORMAT, "expert_gating_func 3", "deepseek2.expert_gating_func");
    CHECK(patch_copy(src, dst, kb, strlen(kb), strlen(kb) - 1, "x", 1));
    expect_refused(dst, DJ_ERR_NOT_FOUND, "attn_k_b renamed", "blk.1.attn_k_b.weight");
    CHECK(patch_copy(src, dst, qa, strlen(qa), strlen(qa) - 1, "x", 1));
    expect_refused(dst, DJ_ERR_NOT_FOUND, "attn_q_a renamed", "blk.2.attn_q_a.weight");
    unlink(dst);
}

/* K/V cache types of an MLA model: the one K row in -ctk's type, no V rows. */
static void check_kv_types(const char *shared) {
    struct dj_model *m = NULL;
    CHECKF(model_load(test_shared_path(shared, "golden/moe/deepseek2-lite-tiny.gguf"), &m) == DJ_OK, "%s",
           dj_last_error());
    if (!m) return;
    const uint32_t D = m->hp.head_dim; /* kv_lora 32 + rope 8 = 40: not a multiple of q8_0's / q4_0's 32 */
    CHECK(D == m->hp.kv_lora + m->hp.n_rot && m->hp.n_head_kv == 1 && D % 32 != 0);
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = 64;
    struct dj_context *c = NULL;
    /* f16 K (the default) with a q8_0 V: the cache is f16, V's type set to K's (one row per token) */
    cp.type_k = DJ_TYPE_F16;
    cp.type_v = DJ_TYPE_Q8_0;
    enum dj_status st = ctx_create(m, cp, &c);
    CHECKF(st == DJ_OK && c && c->p.type_k == DJ_TYPE_F16 && c->p.type_v == DJ_TYPE_F16, "K f16 V q8_0 for MLA: %d '%s'",
           st, dj_last_error());
    if (c) {
        const struct kv_pool_params *pp = kv_pool_params(c->pool);
        struct kv_pool_stats ps;
        kv_pool_get_stats(c->pool, &ps);
        CHECK(pp->k_only && pp->type_k == DJ_TYPE_F16 && kv_pool_k_row_bytes(c->pool) == (size_t)D * 2);
        CHECK(kv_pool_v_row_bytes(c->pool) == 0 && kv_pool_v(c->pool, 0, 0) == NULL);
        CHECK(ps.block_bytes == (size_t)m->hp.n_layer * pp->block_size * D * 2); /* K rows only */
    }
    ctx_free(c);
    /* q8_0 / q4_0: 40-element rows do not split into 32-element blocks: refused, saying why */
    for (int i = 0; i < 2; i++) {
        c = NULL;
        cp.type_k = cp.type_v = i ? DJ_TYPE_Q4_0 : DJ_TYPE_Q8_0;
        st = ctx_create(m, cp, &c);
        CHECKF(st == DJ_ERR_UNSUPPORTED && !c && strstr(dj_last_error(), "kv_lora 32 + rope 8 = 40") &&
               strstr(dj_last_error(), "multiple of 32") && strstr(dj_last_error(), dj_type_name(cp.type_k)),
               "%s K/V on a 40-wide MLA row: status %d '%s'", dj_type_name(cp.type_k), st, dj_last_error());
        ctx_free(c);
        struct dj_engine_params ep = engine_default_params();
        ep.n_ctx = 64;
        ep.kv_type_k = ep.kv_type_v = cp.type_k;
        struct dj_engine *e = NULL;
        st = engine_create(m, &ep, &e);
        CHECKF(st == DJ_ERR_UNSUPPORTED && !e && strstr(dj_last_error(), "multiple of 32"), "engine, %s: %d '%s'",
               dj_type_name(cp.type_k), st, dj_last_error());
        engine_destroy(e);
    }
    /* the engine's pool: K rows only, engine_kv_bytes_per_token's bytes */
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 64;
    ep.kv_type_k = ep.kv_type_v = DJ_TYPE_BF16;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(m, &ep, &e) == DJ_OK, "engine with bf16 K/V for MLA: %s", dj_last_error());
    if (e) {
        struct kv_pool_stats ps;
        engine_pool_stats(e, &ps);
        CHECK(engine_kv_bytes_per_token(m, DJ_TYPE_BF16, DJ_TYPE_BF16) == (size_t)m->hp.n_layer * D * 2);
        CHECK(ps.block_bytes == engine_block_size(e) * engine_kv_bytes_per_token(m, DJ_TYPE_BF16, DJ_TYPE_BF16));
    }
    engine_destroy(e);
    model_free(m);

    /* DeepSeek-V3's shape (kv_lora 512, rope 64, 128 heads of K 192 = nope 128 + rope 64 and V 128),
     * one layer, through engine_kv_bytes_per_token: the MLA row vs the uncompressed MHA K and V */
    struct dj_model v3;
    memset(&v3, 0, sizeof v3);
    v3.hp.mla = true;
    v3.hp.n_layer = 1;
    v3.hp.n_layer_kv = 1; /* the pool's layers (engine_kv_bytes_per_token counts them) */
    v3.hp.n_head_kv = 1;
    v3.hp.kv_lora = 512;
    v3.hp.n_rot = 64;
    v3.hp.head_dim = 512 + 64;
    static const struct { uint32_t t; size_t want; } v3t[] = {
        {DJ_TYPE_F32, 2304}, {DJ_TYPE_F16, 1152}, {DJ_TYPE_BF16, 1152}, {DJ_TYPE_Q8_0, 612}, {DJ_TYPE_Q4_0, 324}};
    printf("DeepSeek-V3 shape, bytes of K/V per token and layer: MLA row (512 + 64) vs MHA 128 x (192 K + 128 V)\n");
    for (size_t i = 0; i < sizeof v3t / sizeof v3t[0]; i++) {
        const size_t mla = engine_kv_bytes_per_token(&v3, v3t[i].t, DJ_TYPE_F32); /* V's type does not apply */
        const size_t mha = kv_row_bytes(v3t[i].t, 128 * 192) + kv_row_bytes(v3t[i].t, 128 * 128);
        CHECKF(mla == v3t[i].want, "V3 %s: %zu bytes, expected %zu", dj_type_name(v3t[i].t), mla, v3t[i].want);
        printf("  %-5s MLA %6zu   MHA %7zu   (%.1fx smaller)\n", dj_type_name(v3t[i].t), mla, mha,
               (double)mha / (double)mla);
    }
}

/* q8_0 and q4_0 caches need a row that splits into 32-element blocks; the golden models'
 * 40 does not, so a synthesized deepseek2 (random F32 weights, every layer dense, kv_lora 56
 * + rope 8 = 64) runs them, with f16 and bf16: bitwise equal across ubatches, threads and
 * block sizes, and near the f32 cache's logits (bounds: 4x the measured max |diff|). */
static void check_quant_kv(const char *shared) {
    char path[] = "/tmp/deja_test_mla_q_XXXXXX.gguf";
    const int fd = mkstemps(path, 5);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    struct synth_model sm = synth_default();
    sm.arch = "deepseek2";
    sm.n_head = sm.n_head_kv = 4;
    sm.n_rot = 8;
    sm.kv_lora = 56;
    sm.qk_nope = 16;
    sm.v_head = 16;
    struct dj_model *m = NULL;
    enum dj_status st = synth_write(path, test_shared_path(shared, "golden/moe/deepseek2-lite-tiny.gguf"), &sm, NULL, NULL);
    CHECKF(st == DJ_OK, "synth deepseek2: %s", dj_last_error());
    if (!st) CHECKF(model_load(path, &m) == DJ_OK, "%s", dj_last_error());
    unlink(path);
    if (!m) return;
    CHECK(m->hp.mla && m->hp.head_dim == 64 && m->hp.n_expert == 0);
    enum { N = 90 };
    dj_token toks[N];
    for (size_t i = 0; i < N; i++) toks[i] = (dj_token)(3 + (i * 7919 + i / 5) % (m->hp.n_vocab - 3));
    const size_t V = m->hp.n_vocab, bytes = N * V * sizeof(float);
    float *f32 = test_eval_logits_kv(m, toks, N, N, 1, 0, DJ_TYPE_F32);
    CHECK(f32 != NULL);
    static const struct { uint32_t t; float bound; } ty[] = {
        {DJ_TYPE_F16, KV_SYN_F16}, {DJ_TYPE_BF16, KV_SYN_BF16}, {DJ_TYPE_Q8_0, KV_SYN_Q8_0}, {DJ_TYPE_Q4_0, KV_SYN_Q4_0}};
    static const struct { uint32_t ub, bs; int th; } cfg[] = {{1, 0, 1}, {1, 0, 2}, {3, 0, 2}, {7, 16, 1}, {64, 16, 2}, {N, 32, 2}};
    for (size_t k = 0; k < sizeof ty / sizeof ty[0] && f32; k++) {
        CHECK(model_kv_check(m, ty[k].t, ty[k].t) == DJ_OK);
        float *base = test_eval_logits_kv(m, toks, N, N, 1, 0, ty[k].t);
        CHECKF(base != NULL, "synth deepseek2, %s K/V: %s", dj_type_name(ty[k].t), dj_last_error());
        if (!base) continue;
        int n_same = 0;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            float *o = test_eval_logits_kv(m, toks, N, cfg[c].ub, cfg[c].th, cfg[c].bs, ty[k].t);
            const bool same = o && !memcmp(o, base, bytes);
            n_same += same;
            CHECKF(same, "synth deepseek2, %s K/V: ubatch %u threads %d block %u differs from one batch",
                   dj_type_name(ty[k].t), cfg[c].ub, cfg[c].th, cfg[c].bs);
            free(o);
        }
        const float d = test_max_abs_diff(base, f32, N * V);
        CHECKF(d <= ty[k].bound, "synth deepseek2, %s K/V: max |logit diff| to an f32 cache %g > %g",
               dj_type_name(ty[k].t), d, ty[k].bound);
        printf("synth deepseek2 (row 56 + 8), %s K/V: %d configurations bitwise equal to one batch; max |logit diff| "
               "to an f32 cache %.3g (bound %g)\n", dj_type_name(ty[k].t), n_same, d, ty[k].bound);
        free(base);
    }
    CHECK(engine_kv_bytes_per_token(m, DJ_TYPE_Q8_0, DJ_TYPE_Q8_0) == (size_t)m->hp.n_layer * 2 * 34);
    free(f32);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    static const char *names[] = {"deepseek2-lite-tiny", "deepseek2-lite-tiny-wkvb", "deepseek2-v3-tiny"};
    const int grc = test_gpu_begin(&test_ctx_gpu);
    if (grc) return grc;
    if (test_ctx_gpu) { /* the GPU runs f32 and f16 caches */
        for (int i = 0; i < 3; i++) check_model(argv[1], names[i], 1e-3f, false, DJ_TYPE_F32);
        check_model(argv[1], names[2], KV_F16_TOL, false, DJ_TYPE_F16);
        check_invariance(argv[1], names[0], DJ_TYPE_F32);
        check_invariance(argv[1], names[2], DJ_TYPE_F16);
        TEST_END();
    }
    for (int i = 0; i < 3; i++) check_model(argv[1], names[i], 1e-3f, false, DJ_TYPE_F32);
    /* f16 and bf16 caches against llama.cpp's f32-cache logits: the greedy ids must still be
     * llama.cpp's (every step asserted) and the logits within KV_F16_TOL / KV_BF16_TOL (see the top) */
    for (int i = 0; i < 3; i++) {
        check_model(argv[1], names[i], KV_F16_TOL, false, DJ_TYPE_F16);
        check_model(argv[1], names[i], KV_BF16_TOL, false, DJ_TYPE_BF16);
    }
    /* batch / ubatch / thread invariance in every cache type a 40-wide row takes */
    static const uint32_t kv_types[] = {DJ_TYPE_F32, DJ_TYPE_F16, DJ_TYPE_BF16};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++) check_invariance(argv[1], names[i], kv_types[k]);
    check_kv_types(argv[1]);
    check_quant_kv(argv[1]);
    check_loader_errors(argv[1]);
    TEST_END();
}

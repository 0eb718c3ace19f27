/*
 * test_mla_golden.c — deepseek2 (Multi-head Latent Attention, YaRN, MoE with shared
 * experts, sigmoid gating, selection bias, expert groups) against llama.cpp's
 * reference outputs in ../shared/golden/moe (README there: equations, tolerances).
 *
 * For deepseek2-lite-tiny (no q LoRA, softmax, 2 shared experts, split attn_k_b /
 * attn_v_b), deepseek2-lite-tiny-wkvb (the same weights in the legacy attn_kv_b
 * layout, split at load) and deepseek2-v3-tiny (q LoRA, sigmoid + exp_probs_b, 4
 * groups of 4 experts, 2 used, top-4, norm, scale 2.5), prompts p0..p2, F32 K/V
 * (CTest sets DJ_KV_TYPE=f32):
 *  - our tokenizer gives `prompt_tokens`;
 *  - the prompt in one batch: every row within 1e-3 of logits_prompt.f32 (README:
 *    llama.cpp's own noise floor 1.3e-5) and the experts of every MoE layer and token
 *    are `routing_selected_experts`, in order;
 *  - the 32 greedy ids teacher-forced one at a time: row s within 1e-3 of
 *    logits_steps.f32 row s, argmax(row s) == greedy[s].
 * Batch invariance: p0 + its greedy ids in one batch is bitwise equal to token by
 * token, ubatches of 3 / 5 / 7 / 64, 1 and 2 threads.
 * Loader errors: copies of deepseek2-v3-tiny with a key or tensor renamed, or
 * expert_gating_func 3, are refused with a message naming the file and the key or tensor.
 * K/V types: an MLA context or engine asked for another cache type than f32
 * (the default is f16) uses f32, with a warning.
 */
#include "engine/engine.h"
#include "test_moe.h"

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

static void check_kv_types(const char *shared) {
    struct dj_model *m = NULL;
    CHECKF(model_load(test_shared_path(shared, "golden/moe/deepseek2-lite-tiny.gguf"), &m) == DJ_OK, "%s",
           dj_last_error());
    if (!m) return;
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = 64;
    cp.type_k = cp.type_v = DJ_TYPE_F16;
    struct dj_context *c = NULL;
    /* the default cache type (f16) must not stop an MLA model: f32 is used, with a warning */
    enum dj_status st = ctx_create(m, cp, &c);
    CHECKF(st == DJ_OK && c && c->p.type_k == DJ_TYPE_F32 && c->p.type_v == DJ_TYPE_F32,
           "f16 K/V for MLA: status %d '%s'", st, dj_last_error());
    ctx_free(c);
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 64;
    ep.kv_type_k = ep.kv_type_v = DJ_TYPE_Q8_0;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(m, &ep, &e) == DJ_OK, "engine with q8_0 K/V for MLA: %s", dj_last_error());
    if (e) {
        struct kv_pool_stats ps;
        engine_pool_stats(e, &ps);
        CHECK(ps.block_bytes == engine_block_size(e) * engine_kv_bytes_per_token(m, DJ_TYPE_F32, DJ_TYPE_F32));
    }
    engine_destroy(e);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    static const char *names[] = {"deepseek2-lite-tiny", "deepseek2-lite-tiny-wkvb", "deepseek2-v3-tiny"};
    for (int i = 0; i < 3; i++) check_model(argv[1], names[i], 1e-3f, false);
    for (int i = 0; i < 3; i++) check_invariance(argv[1], names[i]);
    check_kv_types(argv[1]);
    check_loader_errors(argv[1]);
    TEST_END();
}

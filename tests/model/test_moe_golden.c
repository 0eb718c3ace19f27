/*
 * test_moe_golden.c — the Mixture-of-Experts forward pass (qwen3moe, Mixtral-style
 * llama) against llama.cpp's reference outputs in ../shared/golden/moe (README
 * there: how they were made, the equations, the tolerances), and its batch
 * invariance (DESIGN.md §3).
 *
 * For qwen3moe-tiny (F32), qwen3moe-tiny-f16 and mixtral-tiny (F32, tied head),
 * prompts p0..p2, with an F32 K/V cache (CTest sets DJ_KV_TYPE=f32):
 *  - our tokenizer gives `prompt_tokens`;
 *  - the prompt in one batch: every row within tol of logits_prompt.f32, and the
 *    experts each layer chose for each prompt token are `routing_selected_experts`,
 *    in the same order;
 *  - then the 32 `greedy` ids fed one at a time (teacher forcing): row s within tol
 *    of logits_steps.f32 row s, and argmax(row s) == greedy[s] (F16: skipped on rows
 *    whose top1_top2_gap is under 2 tol, as the README says).
 *  Tolerances (README "Checks and tolerances"): F32 1e-3 absolute on every logit
 *  (llama.cpp's own noise floor is 1.3e-5); F16 2e-2 (llama.cpp rounds activations
 *  to f16 before F16 matmuls, deja does not).
 *
 * Batch invariance: prompt p0 followed by its greedy ids (84 tokens) evaluated in
 * one batch is bitwise equal to token by token, ubatches of 3 / 5 / 7 / 64, with 1
 * and 2 threads — the experts run over sub-batches of the tokens that chose them,
 * whose composition changes with the split.
 *
 * With DJ_TEST_GPU=N (CTest's model/test_moe_golden_vulkan_f32: Vulkan device 0, lavapipe in
 * CI) the golden checks (logits within the same tolerances, every routed expert id equal to
 * llama.cpp's) and the ubatch invariance run on that device — the GPU reads the router's
 * logits back and routes on the host with the CPU's code; the experts' products and the
 * weighted sum run on the device; weights split over several storage buffers
 * (DJ_VK_MAX_BUFFER) give the same bits; without a Vulkan device the test exits 77 (SKIP).
 *
 * Loader errors: copies of qwen3moe-tiny.gguf with one thing patched in place
 * (expert_used_count 0 or 9, expert_count 1000, a renamed expert tensor, a 3-D
 * expert tensor with two dimensions swapped) are refused with a message naming
 * the file and the key or tensor.
 *
 * Repacked experts: qwen3moe-tiny quantized by `deja quantize` to q8_0 and q4_0
 * (the router stays F32): where the kernel table repacks the type, the expert
 * tensors hold a packed copy (slabs of 32 rows: whole 16-row groups) and the
 * logits equal those of the file's layout (DJ_REPACK=0) bitwise, in one batch and
 * token by token, and are batch invariant.
 */
#include "kernels/kernels.h"
#include "test_gpu.h"
#include "test_moe.h"
#include "test_run.h"

static void check_loader_errors(const char *shared) {
    char src[512], dst[] = "/tmp/deja_test_moe_XXXXXX.gguf";
    snprintf(src, sizeof src, "%s", test_shared_path(shared, "golden/moe/qwen3moe-tiny.gguf"));
    int fd = mkstemps(dst, 5);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    /* a u32 key: the name, then its type (4 bytes), then the value */
    static const char used[] = "qwen3moe.expert_used_count", count[] = "qwen3moe.expert_count";
    const uint32_t v0 = 0, v9 = 9, v1000 = 1000;
    CHECK(patch_copy(src, dst, used, strlen(used), strlen(used) + 4, &v0, 4));
    expect_refused(dst, DJ_ERR_FORMAT, "expert_used_count 0", "qwen3moe.expert_used_count");
    CHECK(patch_copy(src, dst, used, strlen(used), strlen(used) + 4, &v9, 4));
    expect_refused(dst, DJ_ERR_FORMAT, "expert_used_count 9 of 8", "qwen3moe.expert_used_count");
    CHECK(patch_copy(src, dst, count, strlen(count), strlen(count) + 4, &v1000, 4));
    expect_refused(dst, DJ_ERR_FORMAT, "expert_count 1000", "qwen3moe.expert_count");
    static const char up[] = "blk.1.ffn_up_exps.weight";
    CHECK(patch_copy(src, dst, up, strlen(up), strlen(up) - 1, "x", 1));
    expect_refused(dst, DJ_ERR_NOT_FOUND, "ffn_up_exps renamed", "blk.1.ffn_up_exps.weight");
    /* tensor info: the name, n_dims (4 bytes), then ne as u64: [32, 64, 8] -> [64, 32, 8] */
    static const char down[] = "blk.2.ffn_down_exps.weight";
    const uint64_t swapped[2] = {64, 32};
    CHECK(patch_copy(src, dst, down, strlen(down), strlen(down) + 4, swapped, sizeof swapped));
    expect_refused(dst, DJ_ERR_FORMAT, "ffn_down_exps [64, 32, 8]", "blk.2.ffn_down_exps.weight");
    /* llama.cpp's llama arch takes ffn_gate_exps as optional (an expert is then
     * down(silu(up x))): without layer 0's, mixtral loads and runs, finite and batch invariant
     * (no reference logits for that variant) */
    static const char gate[] = "blk.0.ffn_gate_exps.weight";
    CHECK(patch_copy(test_shared_path(shared, "golden/moe/mixtral-tiny.gguf"), dst, gate, strlen(gate),
                     strlen(gate) - 1, "x", 1));
    struct dj_model *m = NULL;
    CHECKF(model_load(dst, &m) == DJ_OK, "mixtral without blk.0.ffn_gate_exps: %s", dj_last_error());
    if (m) {
        CHECK(!m->layers[0].ffn_gate_exps.data && m->layers[1].ffn_gate_exps.data);
        static const dj_token toks[] = {2006, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000};
        const size_t n = sizeof toks / sizeof toks[0], V = m->hp.n_vocab;
        float *a = test_eval_logits(m, toks, n, (uint32_t)n, 2, 0), *b = test_eval_logits(m, toks, n, 1, 1, 0);
        CHECK(a && b && !memcmp(a, b, n * V * sizeof(float)));
        bool finite = a != NULL;
        for (size_t i = 0; a && i < n * V; i++) finite &= isfinite(a[i]) != 0;
        CHECK(finite);
        printf("mixtral without layer 0's ffn_gate_exps: loads, %zu tokens finite, one batch == token by token\n", n);
        free(a);
        free(b);
        model_free(m);
    }
    unlink(dst);
}

static void check_repacked(const char *shared) {
    char dir[] = "/tmp/deja_test_moe_q_XXXXXX";
    if (!mkdtemp(dir)) return;
    char src[512];
    snprintf(src, sizeof src, "%s", test_shared_path(shared, "golden/moe/qwen3moe-tiny.gguf"));
    static const dj_token toks[] = {2006, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200, 1300};
    const size_t n = sizeof toks / sizeof toks[0];
    const char *qtypes[] = {"q8_0", "q4_0"};
    for (int q = 0; q < 2; q++) {
        char path[600], *out = NULL;
        snprintf(path, sizeof path, "%s/qwen3moe-%s.gguf", dir, qtypes[q]);
        int rc = RUN(&out, "quantize", src, path, (char *)qtypes[q]);
        CHECKF(rc == 0, "quantize %s: %s", qtypes[q], out);
        free(out);
        struct dj_model *m = NULL, *m0 = NULL;
        CHECKF(model_load(path, &m) == DJ_OK, "%s", dj_last_error());
        setenv("DJ_REPACK", "0", 1);
        CHECKF(model_load(path, &m0) == DJ_OK, "%s", dj_last_error());
        unsetenv("DJ_REPACK");
        if (m && m0) {
            const struct dj_weight *up = &m->layers[1].ffn_up_exps;
            CHECKF(!up->packed == !dj_kernels()->w[up->type].pack, "%s experts (%s): %s", qtypes[q],
                   dj_type_name(up->type), up->packed ? "packed by a table without pack" : "not packed");
            CHECK(m->layers[0].ffn_gate_inp.type == DJ_TYPE_F32 && m0->layers[2].ffn_down_exps.packed == NULL);
            const size_t bytes = n * m->hp.n_vocab * sizeof(float);
            float *base = test_eval_logits(m0, toks, n, (uint32_t)n, 1, 0);
            float *a = test_eval_logits(m, toks, n, (uint32_t)n, 2, 0), *b = test_eval_logits(m, toks, n, 1, 1, 0),
                  *c3 = test_eval_logits(m, toks, n, 3, 2, 0);
            CHECKF(base && a && !memcmp(a, base, bytes), "%s: repacked differs from the file's layout (one batch)",
                   qtypes[q]);
            CHECKF(base && b && !memcmp(b, base, bytes), "%s: repacked token by token differs", qtypes[q]);
            CHECKF(base && c3 && !memcmp(c3, base, bytes), "%s: repacked in ubatches of 3 differs", qtypes[q]);
            printf("qwen3moe-tiny %s: experts %s; one batch, token by token, ubatches of 3 bitwise equal to the "
                   "file's layout\n", qtypes[q], up->packed ? "repacked" : "in the file's layout (no pack)");
            free(base);
            free(a);
            free(b);
            free(c3);
        }
        model_free(m);
        model_free(m0);
        unlink(path);
    }
    rmdir(dir);
}

/* GPU mode: weights split over several storage buffers (DJ_VK_MAX_BUFFER=16384: the experts'
 * matrices in parts of whole 8 KiB slabs, the output in 32 parts) give the bits of one buffer each. */
static void check_gpu_parts(const char *shared) {
    struct dj_model *m = NULL;
    CHECKF(model_load(test_shared_path(shared, "golden/moe/qwen3moe-tiny.gguf"), &m) == DJ_OK, "%s", dj_last_error());
    if (!m) return;
    static const dj_token toks[] = {2006, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100};
    const size_t n = sizeof toks / sizeof toks[0];
    float *one = test_eval_logits_kv(m, toks, n, (uint32_t)n, 1, 0, DJ_TYPE_F32);
    setenv("DJ_VK_MAX_BUFFER", "16384", 1);
    float *split = test_eval_logits_kv(m, toks, n, (uint32_t)n, 1, 0, DJ_TYPE_F32),
          *split_tbt = test_eval_logits_kv(m, toks, n, 1, 1, 0, DJ_TYPE_F32);
    setenv("DJ_VK_MAX_BUFFER", "100", 1); /* not one expert slab: refused with a message */
    struct dj_context *c = NULL;
    struct dj_ctx_params cp = ctx_default_params();
    cp.gpu = test_ctx_gpu;
    const enum dj_status st = ctx_create(m, cp, &c);
    CHECKF(st == DJ_ERR_UNSUPPORTED && strstr(dj_last_error(), "storage buffer"), "a 100-byte buffer cap: %s",
           st ? dj_last_error() : "accepted");
    ctx_free(c);
    unsetenv("DJ_VK_MAX_BUFFER");
    const size_t bytes = n * m->hp.n_vocab * sizeof(float);
    CHECKF(one && split && !memcmp(one, split, bytes), "weights in 16 KiB parts differ from one buffer each");
    CHECKF(one && split_tbt && !memcmp(one, split_tbt, bytes), "weights in parts, token by token, differ");
    printf("qwen3moe-tiny on the GPU: weights in 16 KiB parts = one buffer each, bitwise\n");
    free(one);
    free(split);
    free(split_tbt);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    const int grc = test_gpu_begin(&test_ctx_gpu);
    if (grc) return grc;
    check_model(argv[1], "qwen3moe-tiny", 1e-3f, false, DJ_TYPE_F32);
    check_model(argv[1], "qwen3moe-tiny-f16", 2e-2f, true, DJ_TYPE_F32);
    check_model(argv[1], "mixtral-tiny", 1e-3f, false, DJ_TYPE_F32);
    check_invariance(argv[1], "qwen3moe-tiny", kv_type_default());
    check_invariance(argv[1], "qwen3moe-tiny-f16", kv_type_default());
    check_invariance(argv[1], "mixtral-tiny", kv_type_default());
    if (test_ctx_gpu) {
        check_gpu_parts(argv[1]);
        TEST_END(); /* the rest is about the loader and the CPU's repacked layouts */
    }
    check_loader_errors(argv[1]);
    check_repacked(argv[1]);
    TEST_END();
}

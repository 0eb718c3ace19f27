/*
 * test_golden.c — the forward pass against llama.cpp's reference outputs
 * (../shared/golden; README there says how they were produced).
 *
 *  stories260K, aidreams260K (F32): prompt tokens identical; 64 greedy ids
 *    identical; logits at every one of the 64 steps within 2e-3 of the
 *    `f32kv` variant (F32 K/V, no flash attention: differences come from
 *    summation order only; golden/README.md expects ~1e-3).
 *  codelm-15m (F16): prompt tokens and 64 greedy ids identical for the six
 *    prompts; logits at the last prompt position within 1e-3.  The issue and
 *    golden/codelm/README.md allow 2e-2 (they expect llama.cpp to round
 *    activations to f16); measured, the reference did not, and deja's F16 x
 *    F32 products land within 5e-6, so 1e-3 is asserted to catch regressions.
 *
 * Steps are teacher-forced with the golden ids, so one divergence is reported
 * once instead of cascading.
 *
 * With DJ_TEST_GPU=N (CTest's model/test_golden_vulkan: Vulkan device 0, lavapipe in CI)
 * the forward pass runs on that device, with the same tolerances, on the two 260K models and
 * on codelm (2 prompts, 8 greedy steps: its 64 steps take minutes on lavapipe), and codelm's
 * one batch = token by token = ubatches of 3 bitwise; exit 77 (SKIP) without a device.
 */
#include <math.h>

#include "model/context.h"
#include "sample/sampler.h"
#include "test.h"
#include "test_gpu.h"
#include "test_json.h"
#include "test_model.h"

static uint32_t g_gpu; /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */

static void check_model(const char *shared, const char *model_rel, const char *dir, int n_prompts, bool steps,
                        float tol, int n_steps) {
    struct dj_model *m = NULL;
    enum dj_status st = model_load(test_shared_path(shared, model_rel), &m);
    CHECKF(st == DJ_OK, "%s", dj_last_error());
    if (st) return;
    const size_t V = m->hp.n_vocab;
    float *logits = malloc(V * sizeof(float));
    float worst = 0;
    for (int i = 0; i < n_prompts; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "golden/%s/p%d.f32kv.json", dir, i);
        char *doc = test_read_file(test_shared_path(shared, rel), NULL);
        CHECKF(doc != NULL, "%s", rel);
        if (!doc) continue;
        char *prompt = json_string(doc, "prompt");
        int *ptoks = NULL, *greedy = NULL;
        size_t np = json_int_array(doc, "prompt_tokens", &ptoks);
        size_t ng = json_int_array(doc, "greedy", &greedy);
        CHECK(prompt && np > 0 && ng == 64);

        /* our tokenizer gives the same prompt tokens */
        dj_token *ours = NULL;
        size_t n_ours = 0;
        CHECK(vocab_tokenize(m->vocab, prompt, strlen(prompt), true, true, &ours, &n_ours) == DJ_OK);
        CHECKF(n_ours == np && !memcmp(ours, ptoks, np * sizeof(int)), "%s p%d: prompt tokens differ", dir, i);
        free(ours);

        float *ref_steps = NULL, *ref_last = NULL;
        snprintf(rel, sizeof rel, "golden/%s/p%d.f32kv.%s", dir, i, steps ? "logits_steps.f32" : "logits_last.f32");
        if (steps) ref_steps = test_read_f32(test_shared_path(shared, rel), 64 * V);
        else ref_last = test_read_f32(test_shared_path(shared, rel), V);
        CHECKF(ref_steps || ref_last, "%s", rel);

        struct dj_context *c = NULL;
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = (uint32_t)(np + 64);
        cp.gpu = g_gpu;
        CHECKF(ctx_create(m, cp, &c) == DJ_OK, "%s", dj_last_error());
        if (!c) break;
        CHECK(ctx_decode(c, (const dj_token *)ptoks, np, logits, false) == DJ_OK);
        int mismatches = 0;
        for (int s = 0; s < n_steps; s++) {
            if (s > 0) CHECK(ctx_decode(c, &greedy[s - 1], 1, logits, false) == DJ_OK);
            const float *ref = steps ? ref_steps + (size_t)s * V : (s == 0 ? ref_last : NULL);
            if (ref) {
                float d = test_max_abs_diff(logits, ref, V);
                if (d > worst || d != d) worst = d;
                CHECKF(d <= tol, "%s p%d step %d: max |logit diff| %g > %g", dir, i, s, d, tol);
            }
            dj_token am = sampler_argmax(logits, V);
            if (am != greedy[s] && mismatches++ < 3)
                CHECKF(am == greedy[s], "%s p%d step %d: greedy id %d, reference %d", dir, i, s, am, greedy[s]);
        }
        CHECKF(mismatches == 0, "%s p%d: %d greedy mismatches", dir, i, mismatches);
        ctx_free(c);
        free(ref_steps);
        free(ref_last);
        free(ptoks);
        free(greedy);
        free(prompt);
        free(doc);
    }
    printf("%s%s: %d prompts, %d greedy steps, worst max |logit diff| vs llama.cpp = %.3g (tolerance %g)\n", dir,
           g_gpu ? " on the GPU" : "", n_prompts, n_steps, worst, tol);
    free(logits);
    model_free(m);
}

/* GPU mode: codelm's prompt p0 and its first 8 greedy ids, every position's logits, in one
 * batch = token by token = ubatches of 3, bitwise (lavapipe is slow on codelm's 32k-row output
 * product, so this short sequence stands in for test_batch's schedules). */
static void check_codelm_invariance(const char *shared) {
    struct dj_model *m = NULL;
    CHECKF(model_load(test_shared_path(shared, "models/codelm-15m-f16.gguf"), &m) == DJ_OK, "%s", dj_last_error());
    char *doc = test_read_file(test_shared_path(shared, "golden/codelm/p0.f32kv.json"), NULL);
    int *ptoks = NULL, *greedy = NULL;
    const size_t np = doc ? json_int_array(doc, "prompt_tokens", &ptoks) : 0;
    const size_t ng = doc ? json_int_array(doc, "greedy", &greedy) : 0;
    CHECK(m && np > 0 && ng >= 8);
    if (m && np > 0 && ng >= 8) {
        dj_token toks[256];
        size_t n = 0;
        for (size_t i = 0; i < np && n < 248; i++) toks[n++] = ptoks[i];
        for (size_t i = 0; i < 8; i++) toks[n++] = greedy[i];
        test_ctx_gpu = g_gpu;
        float *one = test_eval_logits(m, toks, n, (uint32_t)n, 1, 0), *tbt = test_eval_logits(m, toks, n, 1, 1, 0),
              *ub3 = test_eval_logits(m, toks, n, 3, 1, 0);
        const size_t bytes = n * m->hp.n_vocab * sizeof(float);
        CHECKF(one && tbt && !memcmp(one, tbt, bytes), "codelm on the GPU: token by token differs from one batch");
        CHECKF(one && ub3 && !memcmp(one, ub3, bytes), "codelm on the GPU: ubatches of 3 differ from one batch");
        printf("codelm on the GPU: %zu tokens, one batch = token by token = ubatches of 3, bitwise\n", n);
        free(one);
        free(tbt);
        free(ub3);
    }
    free(ptoks);
    free(greedy);
    free(doc);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    if (g_gpu) {
        check_model(argv[1], "models/stories260K.gguf", "stories260K", 4, true, 2e-3f, 64);
        check_model(argv[1], "models/aidreams260K.gguf", "aidreams260K", 4, true, 2e-3f, 64);
        check_model(argv[1], "models/codelm-15m-f16.gguf", "codelm", 2, false, 1e-3f, 8);
        check_codelm_invariance(argv[1]);
        TEST_END();
    }
    check_model(argv[1], "models/stories260K.gguf", "stories260K", 4, true, 2e-3f, 64);
    check_model(argv[1], "models/aidreams260K.gguf", "aidreams260K", 4, true, 2e-3f, 64);
    check_model(argv[1], "models/codelm-15m-f16.gguf", "codelm", 6, false, 1e-3f, 64);
    TEST_END();
}

/*
 * test_gemma_golden.c — gemma3 and gemma2 against llama.cpp: deja's forward pass on tiny
 * random-weight models against llama.cpp's logits for the same files (tests/golden/gemma;
 * its README says how they were made: llama.cpp d32676d7 through bench/peer/logits_peer.cpp,
 * F32 K/V, flash attention off, the prompt as one batch, 32 greedy steps).
 *
 * Files, made here from a clean clone and checked against SHA256SUMS (the bytes llama.cpp ran):
 *  - tiny-gemma3, tiny-gemma2: `deja synth --arch gemma3|gemma2 --preset tiny` with the
 *    llama SPM vocabulary of ../shared/vocab (sliding window 16; gemma3: 5 sliding layers and
 *    1 global; gemma2: alternating, soft-capping 50 / 30);
 *  - py-gemma3: tests/golden/gemma/make_tiny_gemma3.py (python3, standard library only: a GGUF
 *    writer of its own, so a bug deja's writer shared with its loader cannot hide): window 8,
 *    pattern 2, rope.freq_base_swa, linear rope scaling, final soft-capping, random norm
 *    weights, and a vocabulary with Gemma's special ids and <start_of_turn>.
 *
 * Per file and prompt: prompt tokens equal llama.cpp's; last position: the golden's top-64
 * logits within tol and no other id above its 64th + tol; 32 greedy steps teacher-forced with
 * llama.cpp's ids, each step's top-4 within tol and the argmax equal (a near-tie within 2 tol
 * in llama.cpp's own logits is printed and allowed).  tol = max(batch-vs-seq, fa-vs-not):
 * llama.cpp's own spread on that file (0.001-0.007 here; README), as test_quant_golden.
 *
 * The prompts are longer than the windows (24-96 tokens against 8 / 16), and the test checks
 * that the windows matter: the same model with every layer's window removed must miss the
 * golden by more than 10 tol at the longest prompt (measured: 0.45-2.1 on tiny-gemma3;
 * a window one key wider, 0.14-0.61).
 *
 * With DJ_TEST_GPU=N (CTest's model/test_gemma_golden_vulkan_f32: Vulkan device 0, lavapipe in
 * CI) every context runs on that device, with the same tolerances and the same window check
 * (the first 6 greedy steps of each prompt: lavapipe is slow on the 32k-row output product):
 * sliding windows, the second rope setting, GELU through the f16 table, q/k and post norms,
 * scaled embeddings and queries, soft-capping (attention on the device, the final one on the
 * host), all on the GPU; without a Vulkan device the test exits 77 (SKIP).
 *
 * Invariance (on the CPU and the GPU alike): the longest prompt of each file, past its windows,
 * in one batch = in ubatches of 5 with its last 12 tokens decoded one at a time, every
 * position's logits bitwise.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/context.h"
#include "sample/sampler.h"
#include "test.h"
#include "test_run.h"
#include "test_gpu.h"
#include "test_model.h"
#include "test_sha256.h"

#define TOL_FLOOR 1e-3f

static char gold_dir[4096];
static uint32_t g_gpu; /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */
#define GPU_STEPS 6 /* greedy steps checked on the GPU (lavapipe: ~0.1 s a step on a 32k vocabulary) */

static float jnum(json_t *a, size_t i, size_t j) { return (float)json_number_value(json_array_get(json_array_get(a, i), j)); }
static int jid(json_t *a, size_t i) { return (int)json_integer_value(json_array_get(json_array_get(a, i), 0)); }

/* Max |logit diff| at the last prompt position over the golden's top ids, for the prompt toks. */
static float last_diff(struct dj_model *m, const dj_token *toks, size_t np, json_t *top, float *logits) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.type_k = cp.type_v = DJ_TYPE_F32;
    cp.n_ctx = (uint32_t)np + 1;
    cp.n_threads = 2;
    cp.gpu = g_gpu;
    struct dj_context *c = NULL;
    float d = -1;
    if (ctx_create(m, cp, &c) == DJ_OK && ctx_decode(c, toks, np, logits, false) == DJ_OK) {
        d = 0;
        for (size_t k = 0; k < json_array_size(top); k++) d = fmaxf(d, fabsf(logits[jid(top, k)] - jnum(top, k, 1)));
    }
    ctx_free(c);
    return d;
}

static void check_file(const char *path, const char *name, const char *prompts_file) {
    char gpath[4200], ppath[4200];
    snprintf(gpath, sizeof gpath, "%s/%s.json", gold_dir, name);
    snprintf(ppath, sizeof ppath, "%s/%s", gold_dir, prompts_file);
    json_error_t jerr;
    json_t *g = json_load_file(gpath, 0, &jerr), *prompts = json_load_file(ppath, 0, &jerr);
    CHECKF(g && json_is_array(prompts), "%s / %s: %s", gpath, ppath, jerr.text);
    struct dj_model *m = NULL;
    enum dj_status st = g && prompts ? model_load(path, &m) : DJ_ERR_INVALID;
    CHECKF(st == DJ_OK, "%s: %s", name, dj_last_error());
    if (st) {
        json_decref(g), json_decref(prompts);
        return;
    }
    const size_t V = m->hp.n_vocab;
    const float spread = (float)json_number_value(json_object_get(g, "spread_all_positions")),
                spread_fa = (float)json_number_value(json_object_get(g, "spread_fa"));
    const float tol = fmaxf(TOL_FLOOR, fmaxf(spread, spread_fa));
    float worst_last = 0, worst_step = 0;
    int flips = 0, n_prompts = 0;
    float *logits = malloc(V * sizeof(float));
    json_t *res = json_object_get(g, "results"), *long_top = NULL;
    dj_token *long_toks = NULL;
    size_t long_np = 0;
    for (size_t pi = 0; pi < json_array_size(res); pi++) {
        json_t *r = json_array_get(res, pi);
        const size_t idx = (size_t)json_integer_value(json_object_get(r, "index"));
        const char *prompt = json_string_value(json_array_get(prompts, idx));
        json_t *ptoks = json_object_get(r, "prompt_tokens"), *greedy = json_object_get(r, "greedy"),
               *top = json_object_get(r, "top_last"), *steps = json_object_get(r, "step_top");
        const size_t np = json_array_size(ptoks), ns = json_array_size(greedy), nt = json_array_size(top);
        CHECKF(prompt && np > 0 && ns > 0 && nt > 0 && json_array_size(steps) == ns, "%s: p%zu malformed", gpath, pi);
        if (!prompt || !np || !ns || !nt || json_array_size(steps) != ns) continue;
        dj_token *toks = malloc(np * sizeof(dj_token)), *ours = NULL;
        for (size_t i = 0; i < np; i++) toks[i] = (dj_token)json_integer_value(json_array_get(ptoks, i));
        size_t n_ours = 0;
        CHECK(vocab_tokenize(m->vocab, prompt, strlen(prompt), true, true, &ours, &n_ours) == DJ_OK);
        CHECKF(n_ours == np && !memcmp(ours, toks, np * sizeof(dj_token)), "%s p%zu: prompt tokens differ", name, idx);
        free(ours);
        struct dj_ctx_params cp = ctx_default_params();
        cp.type_k = cp.type_v = DJ_TYPE_F32;
        cp.n_ctx = (uint32_t)(np + ns);
        cp.n_threads = 2;
        cp.gpu = g_gpu;
        struct dj_context *c = NULL;
        if (ctx_create(m, cp, &c) != DJ_OK || ctx_decode(c, toks, np, logits, false) != DJ_OK) {
            CHECKF(false, "%s p%zu: %s", name, idx, dj_last_error());
            ctx_free(c);
            free(toks);
            continue;
        }
        n_prompts++;
        float d = 0;
        char *in_top = calloc(V, 1);
        for (size_t k = 0; k < nt; k++) {
            in_top[jid(top, k)] = 1;
            d = fmaxf(d, fabsf(logits[jid(top, k)] - jnum(top, k, 1)));
        }
        size_t above = 0;
        for (size_t v = 0; v < V; v++) above += !in_top[v] && logits[v] > jnum(top, nt - 1, 1) + tol;
        free(in_top);
        worst_last = fmaxf(worst_last, d);
        CHECKF(d <= tol, "%s p%zu: last position max |logit diff| %g > tol %g", name, idx, d, tol);
        CHECKF(above == 0, "%s p%zu: %zu ids outside llama.cpp's top %zu score above its last + tol", name, idx, above,
               nt);
        const size_t ns_run = g_gpu && ns > GPU_STEPS ? GPU_STEPS : ns;
        for (size_t s = 0; s < ns_run; s++) {
            const dj_token want = (dj_token)json_integer_value(json_array_get(greedy, s));
            if (s > 0) {
                const dj_token prev = (dj_token)json_integer_value(json_array_get(greedy, s - 1));
                if (ctx_decode(c, &prev, 1, logits, false) != DJ_OK) {
                    CHECKF(false, "%s p%zu step %zu: %s", name, idx, s, dj_last_error());
                    break;
                }
            }
            json_t *st_top = json_array_get(steps, s);
            float ds = 0;
            for (size_t k = 0; k < json_array_size(st_top); k++)
                ds = fmaxf(ds, fabsf(logits[jid(st_top, k)] - jnum(st_top, k, 1)));
            worst_step = fmaxf(worst_step, ds);
            CHECKF(ds <= tol, "%s p%zu step %zu: max |logit diff| %g > tol %g", name, idx, s, ds, tol);
            const dj_token am = sampler_argmax(logits, V);
            if (am == want) continue;
            float gold_am = -INFINITY;
            for (size_t k = 0; k < json_array_size(st_top); k++)
                if (jid(st_top, k) == am) gold_am = jnum(st_top, k, 1);
            const float margin = jnum(st_top, 0, 1) - gold_am;
            CHECKF(margin <= 2 * tol, "%s p%zu step %zu: greedy id %d, llama.cpp's %d (margin %g > 2 tol)", name, idx,
                   s, am, want, margin);
            if (margin <= 2 * tol) {
                flips++;
                printf("  %s p%zu step %zu: near-tie flip: deja %d, llama.cpp %d (margin %.3g)\n", name, idx, s, am,
                       want, margin);
            }
        }
        ctx_free(c);
        if (np > long_np) {
            free(long_toks);
            long_toks = toks, long_np = np, long_top = top;
        } else {
            free(toks);
        }
    }
    CHECKF(n_prompts == (int)json_array_size(res), "%s: %d of %zu prompts ran", name, n_prompts, json_array_size(res));
    /* the windows matter: the longest prompt passes them, and without them the golden is missed */
    uint32_t n_win = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) n_win += m->layers[il].n_swa > 0;
    CHECKF(n_win > 0 && n_win < m->hp.n_layer, "%s: %u of %u layers have a window; the test wants both kinds", name,
           n_win, m->hp.n_layer);
    CHECKF(long_np > m->hp.n_swa, "%s: the longest prompt (%zu tokens) does not pass the window %u", name, long_np,
           m->hp.n_swa);
    if (long_toks) { /* one batch = ubatches of 5, then the last 12 token by token */
        test_ctx_gpu = g_gpu;
        float *one = test_eval_logits_kv(m, long_toks, long_np, (uint32_t)long_np, 2, 0, DJ_TYPE_F32),
              *split = malloc(long_np * V * sizeof(float));
        struct dj_ctx_params cp = ctx_default_params();
        cp.type_k = cp.type_v = DJ_TYPE_F32;
        cp.n_ctx = (uint32_t)long_np;
        cp.n_ubatch = 5;
        cp.gpu = g_gpu;
        struct dj_context *c = NULL;
        const size_t n_head = long_np - 12;
        bool ok = split && long_np > 12 && ctx_create(m, cp, &c) == DJ_OK &&
                  ctx_decode(c, long_toks, n_head, split, true) == DJ_OK;
        for (size_t i = n_head; ok && i < long_np; i++) ok = ctx_decode(c, long_toks + i, 1, split + i * V, false) == DJ_OK;
        CHECKF(ok, "%s: %s", name, dj_last_error());
        CHECKF(ok && one && !memcmp(one, split, long_np * V * sizeof(float)),
               "%s: ubatches of 5 and token by token differ from one batch", name);
        ctx_free(c);
        free(one);
        free(split);
    }
    float d_nowin = -1;
    if (long_toks) {
        for (uint32_t il = 0; il < m->hp.n_layer; il++) m->layers[il].n_swa = 0;
        d_nowin = last_diff(m, long_toks, long_np, long_top, logits);
        CHECKF(d_nowin > 10 * tol, "%s: without the windows the longest prompt misses llama.cpp by %g only (tol %g)",
               name, d_nowin, tol);
    }
    printf("%s%-12s last %.3g  steps %.3g  tol %.3g (batch-seq %.3g, fa %.3g)  flips %d; without windows %.3g; %zu tokens batched = alone\n", g_gpu ? "GPU " : "",
           name, worst_last, worst_step, tol, spread, spread_fa, flips, d_nowin, long_np);
    free(long_toks);
    free(logits);
    model_free(m);
    json_decref(g);
    json_decref(prompts);
}

/* Makes `name`.gguf in dir (argv: the command after the output path is filled in), checks its
 * sha256 against SHA256SUMS, then the goldens. */
static void check_made(const char *dir, const char *name, const char *prompts_file, int rc, char *out,
                       const char *path) {
    CHECKF(rc == 0, "%s: making the file: exit %d: %s", name, rc, out);
    free(out);
    char file[128], hex[65];
    snprintf(file, sizeof file, "%s.gguf", name);
    char *want = test_list_lookup(gold_dir, "SHA256SUMS", file);
    const bool have = rc == 0 && test_sha256_file(path, hex);
    CHECKF(want && have && !strcmp(want, hex), "%s: sha256 %s, llama.cpp ran %s", file, have ? hex : "(none)",
           want ? want : "(none)");
    if (want && have && !strcmp(want, hex)) check_file(path, name, prompts_file);
    free(want);
    unlink(path);
    (void)dir;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    snprintf(gold_dir, sizeof gold_dir, "%s", __FILE__);
    char *cut = strstr(gold_dir, "tests/model/test_gemma_golden.c");
    CHECKF(cut != NULL, "__FILE__ is not an absolute path into the tree: %s", __FILE__);
    if (!cut) TEST_END();
    strcpy(cut, "tests/golden/gemma");
    char dir[] = "/tmp/deja_test_gemma_golden_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    const char *vocab = test_shared_path(argv[1], "vocab/ggml-vocab-llama-spm.gguf");
    const char *archs[] = {"gemma3", "gemma2"};
    for (int i = 0; i < 2; i++) {
        char name[32], path[4200];
        snprintf(name, sizeof name, "tiny-%s", archs[i]);
        snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
        char *out = NULL;
        int rc = RUN(&out, "synth", "--arch", (char *)archs[i], "--preset", "tiny", "--vocab-from", (char *)vocab, "-o",
                     path, "-t", "2");
        check_made(dir, name, "prompts.json", rc, out, path);
    }
    {
        char path[4200], script[4200];
        snprintf(path, sizeof path, "%s/py-gemma3.gguf", dir);
        snprintf(script, sizeof script, "%s/make_tiny_gemma3.py", gold_dir);
        char *out = NULL;
        int rc = run((char *const[]){"/usr/bin/env", "python3", script, path, NULL}, &out);
        check_made(dir, "py-gemma3", "prompts_py.json", rc, out, path);
    }
    rmdir(dir);
    TEST_END();
}

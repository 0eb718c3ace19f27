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
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/context.h"
#include "sample/sampler.h"
#include "test.h"
#include "test_json.h"
#include "test_run.h"
#include "kernels/kernels.h"

enum { N_STEPS = 32 };

static float *read_f32(const char *path, size_t n_expect) {
    size_t len = 0;
    char *b = test_read_file(path, &len);
    if (!b || len != n_expect * sizeof(float)) {
        free(b);
        return NULL;
    }
    return (float *)b;
}

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
    }
    return d;
}

/* The n floats of "key": [a, b, ...] (top1_top2_gap). */
static size_t json_f32_array(const char *doc, const char *key, float *out, size_t n) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(doc, pat);
    if (!p) return 0;
    p += strlen(pat);
    size_t k = 0;
    while (*p && *p != ']' && k < n) {
        char *end;
        double v = strtod(p, &end);
        if (end == p) { p++; continue; }
        out[k++] = (float)v;
        p = end;
    }
    return k;
}

/* Layer il's expert ids of routing_selected_experts: n ints into out; how many read. */
static size_t json_routing(const char *doc, uint32_t il, int32_t *out, size_t n) {
    const char *r = strstr(doc, "\"routing_selected_experts\": {");
    if (!r) return 0;
    char pat[32];
    snprintf(pat, sizeof pat, "\"%u\": [", il);
    const char *p = strstr(r, pat);
    if (!p) return 0;
    p += strlen(pat);
    size_t k = 0;
    int depth = 1;
    while (*p && depth > 0 && k < n) {
        if (*p == '[') { depth++; p++; continue; }
        if (*p == ']') { depth--; p++; continue; }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        out[k++] = (int32_t)v;
        p = end;
    }
    return k;
}

static void check_model(const char *shared, const char *name, float tol, bool f16) {
    char rel[256];
    snprintf(rel, sizeof rel, "golden/moe/%s.gguf", name);
    struct dj_model *m = NULL;
    enum dj_status st = model_load(test_shared_path(shared, rel), &m);
    CHECKF(st == DJ_OK, "%s", dj_last_error());
    if (st) return;
    const size_t V = m->hp.n_vocab, K = m->hp.n_expert_used;
    CHECKF(m->hp.n_expert == 8 && K == 2, "%s: %u experts, %zu used", name, m->hp.n_expert, K);
    float worst_prompt = 0, worst_steps = 0;
    float *row = malloc(V * sizeof(float));
    for (int i = 0; i < 3; i++) {
        snprintf(rel, sizeof rel, "golden/moe/%s.p%d.json", name, i);
        char *doc = test_read_file(test_shared_path(shared, rel), NULL);
        CHECKF(doc != NULL, "%s", rel);
        if (!doc) continue;
        char *prompt = json_string(doc, "prompt");
        int *ptoks = NULL, *greedy = NULL;
        size_t np = json_int_array(doc, "prompt_tokens", &ptoks);
        size_t ng = json_int_array(doc, "greedy", &greedy);
        float gap[N_STEPS + 1];
        size_t n_gap = json_f32_array(doc, "top1_top2_gap", gap, N_STEPS + 1);
        CHECK(prompt && np > 0 && ng == N_STEPS && n_gap >= N_STEPS);

        dj_token *ours = NULL;
        size_t n_ours = 0;
        CHECK(vocab_tokenize(m->vocab, prompt, strlen(prompt), true, true, &ours, &n_ours) == DJ_OK);
        CHECKF(n_ours == np && !memcmp(ours, ptoks, np * sizeof(int)), "%s p%d: prompt tokens differ", name, i);
        free(ours);

        snprintf(rel, sizeof rel, "golden/moe/%s.p%d.logits_prompt.f32", name, i);
        float *ref_prompt = read_f32(test_shared_path(shared, rel), np * V);
        snprintf(rel, sizeof rel, "golden/moe/%s.p%d.logits_steps.f32", name, i);
        float *ref_steps = read_f32(test_shared_path(shared, rel), (N_STEPS + 1) * V);
        CHECKF(ref_prompt && ref_steps, "%s p%d: logits files", name, i);

        struct dj_context *c = NULL;
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = (uint32_t)(np + N_STEPS + 1);
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        if (!c || !ref_prompt || !ref_steps) goto next;
        /* the prompt in one batch, every row, and the routing */
        float *lp = malloc(np * V * sizeof(float));
        int32_t *trace = malloc((size_t)m->hp.n_layer * c->p.n_ubatch * K * sizeof(int32_t));
        int32_t *ref_route = malloc(np * K * sizeof(int32_t));
        c->moe_trace = trace;
        CHECK(ctx_decode(c, (const dj_token *)ptoks, np, lp, true) == DJ_OK);
        c->moe_trace = NULL;
        for (size_t r = 0; r < np; r++) {
            float d = max_abs_diff(lp + r * V, ref_prompt + r * V, V);
            if (d > worst_prompt || d != d) worst_prompt = d;
            CHECKF(d <= tol, "%s p%d prompt row %zu: max |logit diff| %g > %g", name, i, r, d, tol);
        }
        for (uint32_t il = 0; il < m->hp.n_layer; il++) {
            size_t n_ref = json_routing(doc, il, ref_route, np * K);
            CHECKF(n_ref == np * K, "%s p%d: routing of layer %u has %zu ids, expected %zu", name, i, il, n_ref, np * K);
            size_t bad = 0;
            for (size_t t = 0; t < np * K && t < n_ref; t++) bad += trace[(size_t)il * c->p.n_ubatch * K + t] != ref_route[t];
            CHECKF(bad == 0, "%s p%d layer %u: %zu expert ids differ from llama.cpp's routing", name, i, il, bad);
        }
        /* the greedy ids one at a time, teacher-forced */
        memcpy(row, lp + (np - 1) * V, V * sizeof(float));
        int mismatches = 0;
        for (int s = 0; s <= N_STEPS; s++) {
            if (s > 0) CHECK(ctx_decode(c, &greedy[s - 1], 1, row, false) == DJ_OK);
            float d = max_abs_diff(row, ref_steps + (size_t)s * V, V);
            if (d > worst_steps || d != d) worst_steps = d;
            CHECKF(d <= tol, "%s p%d step %d: max |logit diff| %g > %g", name, i, s, d, tol);
            if (s == N_STEPS || (f16 && gap[s] < 2 * tol)) continue;
            dj_token am = sampler_argmax(row, V);
            if (am != greedy[s] && mismatches++ < 3)
                CHECKF(am == greedy[s], "%s p%d step %d: greedy id %d, reference %d", name, i, s, am, greedy[s]);
        }
        CHECKF(mismatches == 0, "%s p%d: %d greedy mismatches", name, i, mismatches);
        free(lp);
        free(trace);
        free(ref_route);
    next:
        ctx_free(c);
        free(ref_prompt);
        free(ref_steps);
        free(ptoks);
        free(greedy);
        free(prompt);
        free(doc);
    }
    printf("%s: 3 prompts, max |logit diff| vs llama.cpp: prompt rows %.3g, steps %.3g (tolerance %g)\n", name,
           worst_prompt, worst_steps, tol);
    free(row);
    model_free(m);
}

static float *eval(const struct dj_model *m, const dj_token *toks, size_t n, uint32_t ubatch, int threads) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n;
    cp.n_ubatch = ubatch;
    cp.n_threads = threads;
    struct dj_context *c = NULL;
    if (ctx_create(m, cp, &c) != DJ_OK) return NULL;
    float *out = malloc(n * m->hp.n_vocab * sizeof(float));
    if (ubatch == 1) { /* token by token through the decode path */
        for (size_t i = 0; i < n; i++)
            if (ctx_decode(c, toks + i, 1, out + i * m->hp.n_vocab, false) != DJ_OK) { free(out); out = NULL; break; }
    } else if (ctx_decode(c, toks, n, out, true) != DJ_OK) {
        free(out);
        out = NULL;
    }
    ctx_free(c);
    return out;
}

static void check_invariance(const char *shared, const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "golden/moe/%s.gguf", name);
    struct dj_model *m = NULL;
    CHECKF(model_load(test_shared_path(shared, rel), &m) == DJ_OK, "%s", dj_last_error());
    if (!m) return;
    snprintf(rel, sizeof rel, "golden/moe/%s.p0.json", name);
    char *doc = test_read_file(test_shared_path(shared, rel), NULL);
    int *ptoks = NULL, *greedy = NULL;
    size_t np = doc ? json_int_array(doc, "prompt_tokens", &ptoks) : 0;
    size_t ng = doc ? json_int_array(doc, "greedy", &greedy) : 0;
    CHECK(np > 0 && ng == N_STEPS);
    const size_t n = np + ng;
    dj_token *toks = malloc(n * sizeof *toks);
    for (size_t i = 0; i < np; i++) toks[i] = ptoks[i];
    for (size_t i = 0; i < ng; i++) toks[np + i] = greedy[i];
    const size_t bytes = n * m->hp.n_vocab * sizeof(float);
    float *base = eval(m, toks, n, (uint32_t)n, 1);
    CHECK(base != NULL);
    struct { uint32_t ub; int th; } cfg[] = {{1, 1}, {1, 2}, {3, 1}, {3, 2}, {5, 2}, {7, 1}, {64, 2}, {(uint32_t)n, 2}};
    const size_t n_cfg = sizeof cfg / sizeof cfg[0];
    for (size_t k = 0; k < n_cfg && base; k++) {
        float *o = eval(m, toks, n, cfg[k].ub, cfg[k].th);
        CHECKF(o && !memcmp(o, base, bytes), "%s: ubatch %u threads %d differs from one batch", name, cfg[k].ub,
               cfg[k].th);
        free(o);
    }
    printf("%s: %zu tokens, %zu ubatch/thread configurations bitwise equal to one batch\n", name, n, n_cfg);
    free(base);
    free(toks);
    free(ptoks);
    free(greedy);
    free(doc);
    model_free(m);
}

/* The model at src with its bytes patched: the first occurrence of `find` (len n)
 * gets `repl` (n bytes) at offset `at` from its start; written to dst. */
static bool patch_copy(const char *src, const char *dst, const char *find, size_t n, size_t at, const void *repl,
                       size_t n_repl) {
    size_t len = 0;
    char *b = test_read_file(src, &len);
    if (!b) return false;
    char *p = memmem(b, len, find, n);
    bool ok = p && (size_t)(p - b) + at + n_repl <= len;
    if (ok) {
        memcpy(p + at, repl, n_repl);
        FILE *f = fopen(dst, "wb");
        ok = f && fwrite(b, 1, len, f) == len;
        if (f) ok = (fclose(f) == 0) && ok;
    }
    free(b);
    return ok;
}

static void expect_refused(const char *path, enum dj_status want, const char *what, const char *needle) {
    struct dj_model *m = NULL;
    enum dj_status st = model_load(path, &m);
    CHECKF(st == want, "%s: status %d, expected %d", what, st, want);
    CHECKF(st != DJ_OK && strstr(dj_last_error(), needle) && strstr(dj_last_error(), path), "%s: message '%s'", what,
           dj_last_error());
    if (st == DJ_OK) printf("%s: loaded\n", what);
    else printf("%s: %s\n", what, dj_last_error());
    model_free(m);
}

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
        float *a = eval(m, toks, n, (uint32_t)n, 2), *b = eval(m, toks, n, 1, 1);
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
            float *base = eval(m0, toks, n, (uint32_t)n, 1), *a = eval(m, toks, n, (uint32_t)n, 2),
                  *b = eval(m, toks, n, 1, 1), *c3 = eval(m, toks, n, 3, 2);
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

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    check_model(argv[1], "qwen3moe-tiny", 1e-3f, false);
    check_model(argv[1], "qwen3moe-tiny-f16", 2e-2f, true);
    check_model(argv[1], "mixtral-tiny", 1e-3f, false);
    check_invariance(argv[1], "qwen3moe-tiny");
    check_invariance(argv[1], "qwen3moe-tiny-f16");
    check_invariance(argv[1], "mixtral-tiny");
    check_loader_errors(argv[1]);
    check_repacked(argv[1]);
    TEST_END();
}

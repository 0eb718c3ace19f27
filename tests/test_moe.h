/*
 * test_moe.h — what the MoE golden tests share (tests/model/test_moe_golden.c:
 * qwen3moe and Mixtral; test_mla_golden.c: deepseek2): reading llama.cpp's
 * golden files (golden/moe/README.md), check_model (prompt tokens, every
 * logits row within tol, greedy ids, the routed experts of every MoE layer),
 * check_invariance (one batch, token by token, ubatches, threads: bitwise), both in a
 * given K/V cache type,
 * and patched-copy helpers for loader errors.  Static functions: one copy per
 * test program.
 */
#ifndef DJ_TEST_MOE_H
#define DJ_TEST_MOE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/context.h"
#include "sample/sampler.h"
#include "test.h"
#include "test_json.h"
#include "test_model.h"

enum { N_STEPS = 32 };

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

/* Worst max |logit diff| to llama.cpp of the last check_model, over prompt rows and steps. */
static float check_model_worst;

static void check_model(const char *shared, const char *name, float tol, bool f16, uint32_t kv_type) {
    char rel[256];
    snprintf(rel, sizeof rel, "golden/moe/%s.gguf", name);
    struct dj_model *m = NULL;
    enum dj_status st = model_load(test_shared_path(shared, rel), &m);
    CHECKF(st == DJ_OK, "%s", dj_last_error());
    if (st) return;
    const size_t V = m->hp.n_vocab, K = m->hp.n_expert_used;
    CHECKF(m->hp.n_expert > 0 && K > 0 && K <= m->hp.n_expert, "%s: %u experts, %zu used", name, m->hp.n_expert, K);
    float worst_prompt = 0, worst_steps = 0;
    size_t route_diff = 0; /* expert ids unlike llama.cpp's (non-f32 caches) */
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
        float *ref_prompt = test_read_f32(test_shared_path(shared, rel), np * V);
        snprintf(rel, sizeof rel, "golden/moe/%s.p%d.logits_steps.f32", name, i);
        float *ref_steps = test_read_f32(test_shared_path(shared, rel), (N_STEPS + 1) * V);
        CHECKF(ref_prompt && ref_steps, "%s p%d: logits files", name, i);

        struct dj_context *c = NULL;
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = (uint32_t)(np + N_STEPS + 1);
        cp.type_k = cp.type_v = kv_type;
        cp.gpu = test_ctx_gpu;
        CHECKF(ctx_create(m, cp, &c) == DJ_OK, "%s: %s", name, dj_last_error());
        if (!c || !ref_prompt || !ref_steps) goto next;
        /* the prompt in one batch, every row, and the routing */
        float *lp = malloc(np * V * sizeof(float));
        int32_t *trace = malloc((size_t)m->hp.n_layer * c->p.n_ubatch * K * sizeof(int32_t));
        int32_t *ref_route = malloc(np * K * sizeof(int32_t));
        c->moe_trace = trace;
        CHECK(ctx_decode(c, (const dj_token *)ptoks, np, lp, true) == DJ_OK);
        c->moe_trace = NULL;
        for (size_t r = 0; r < np; r++) {
            float d = test_max_abs_diff(lp + r * V, ref_prompt + r * V, V);
            if (d > worst_prompt || d != d) worst_prompt = d;
            CHECKF(d <= tol, "%s p%d prompt row %zu: max |logit diff| %g > %g", name, i, r, d, tol);
        }
        for (uint32_t il = m->hp.n_layer_dense; il < m->hp.n_layer; il++) { /* dense layers: no routing */
            size_t n_ref = json_routing(doc, il, ref_route, np * K);
            CHECKF(n_ref == np * K, "%s p%d: routing of layer %u has %zu ids, expected %zu", name, i, il, n_ref, np * K);
            size_t bad = 0;
            for (size_t t = 0; t < np * K && t < n_ref; t++) bad += trace[(size_t)il * c->p.n_ubatch * K + t] != ref_route[t];
            /* llama.cpp's routing is of an f32 cache: a rounded cache moves the router logits a
             * little and may swap near-tied experts (counted and printed, not asserted) */
            if (kv_type == DJ_TYPE_F32)
                CHECKF(bad == 0, "%s p%d layer %u: %zu expert ids differ from llama.cpp's routing", name, i, il, bad);
            route_diff += bad;
        }
        /* the greedy ids one at a time, teacher-forced */
        memcpy(row, lp + (np - 1) * V, V * sizeof(float));
        int mismatches = 0;
        for (int s = 0; s <= N_STEPS; s++) {
            if (s > 0) CHECK(ctx_decode(c, &greedy[s - 1], 1, row, false) == DJ_OK);
            float d = test_max_abs_diff(row, ref_steps + (size_t)s * V, V);
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
    printf("%s, %s K/V: 3 prompts, max |logit diff| vs llama.cpp: prompt rows %.3g, steps %.3g (tolerance %g); "
           "%zu routed expert ids differ\n", name, dj_type_name(kv_type), worst_prompt, worst_steps, tol, route_diff);
    check_model_worst = worst_prompt > worst_steps ? worst_prompt : worst_steps;
    free(row);
    model_free(m);
}

static void check_invariance(const char *shared, const char *name, uint32_t kv_type) {
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
    float *base = test_eval_logits_kv(m, toks, n, (uint32_t)n, 1, 0, kv_type);
    CHECKF(base != NULL, "%s, %s K/V: %s", name, dj_type_name(kv_type), dj_last_error());
    struct { uint32_t ub; int th; } cfg[] = {{1, 1}, {1, 2}, {3, 1}, {3, 2}, {5, 2}, {7, 1}, {64, 2}, {(uint32_t)n, 2}};
    const size_t n_cfg = sizeof cfg / sizeof cfg[0];
    for (size_t k = 0; k < n_cfg && base; k++) {
        float *o = test_eval_logits_kv(m, toks, n, cfg[k].ub, cfg[k].th, 0, kv_type);
        CHECKF(o && !memcmp(o, base, bytes), "%s, %s K/V: ubatch %u threads %d differs from one batch", name,
               dj_type_name(kv_type), cfg[k].ub, cfg[k].th);
        free(o);
    }
    printf("%s, %s K/V: %zu tokens, %zu ubatch/thread configurations bitwise equal to one batch\n", name,
           dj_type_name(kv_type), n, n_cfg);
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

#endif

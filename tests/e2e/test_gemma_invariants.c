/*
 * test_gemma_invariants.c — the exactness contracts (DESIGN.md §1, §3) on a model with
 * sliding-window layers: `deja synth --arch gemma3 --preset tiny` (5 layers with a window of
 * 16 keys, 1 global), replaying agent traces through `deja replay` (prompts of 130-2,000
 * tokens: every reused prefix is many windows long and ends at arbitrary offsets of a
 * window and of a 64-position block).
 *
 * Reference: reuse, dedup and persistence off (LLAMA_OPT_DIFF_ENABLED=0,
 * LLAMA_OPT_DEDUP_ENABLED=0), the per-session logits and ids hashes.  Then each must give
 * the same hashes, bitwise:
 *  - prefix reuse and dedup on (the default): n_reused > 0 (own prefix); and, on the first
 *    turns of two tau-bench sessions (~4,400 tokens each, one system prompt), > 1,000
 *    positions from the pool (dedup across sessions);
 *  - --parallel 3 (the sessions batched together in the engine's steps) and --ubatch 7 with
 *    --n-batch 13 (other chunkings of every prefill);
 *  - --kv-dir: a fresh store (nothing from disk), then a new process on it: n_reused_disk > 0;
 *  - --spec with every draft source (prompt lookup, memo, early exit), drafts accepted > 0;
 *  - LLAMA_OPT_PRECOMPUTE_ROPE_MAX=100: positions past 100 rotate on the fly (both rope
 *    settings, global and sliding), the others from the table;
 * Plus Tier 2 (LLAMA_OPT_DIFF_MODE=approx, whose RoPE correction rotates each layer's K with
 * that layer's base: model_rope_shift_layer): the replay runs every turn (its numbers are not
 * exact by design; approximate reuse engages only where a prompt edits an earlier one).
 */
#include <jansson.h>
#include <stdbool.h>
#include <unistd.h>

#include "test.h"
#include "test_run.h"

static char model[512], tmpdir[256];
static const char *traces[3], *tau[2]; /* tau: two sessions with one long system prompt */
static bool use_tau;

/* deja replay over the three traces (use_tau: the first turn of the two tau traces) with
 * extra arguments; the parsed JSON or NULL. */
static json_t *replay(const char *what, const char *a1, const char *a2, const char *a3, const char *a4) {
    char *out = NULL;
    const char *extra[4] = {a1, a2, a3, a4};
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)deja_bin;
    const char *base[] = {"replay", "-m", model, "--trace", traces[0], "--trace", traces[1], "--trace", traces[2],
                          "--max-turns", "3", "--max-chars", "7000", "-n", "12", "-c", "8192", "-t", "2", "--json"};
    const char *base_tau[] = {"replay", "-m", model, "--trace", tau[0], "--trace", tau[1], "--max-turns", "1",
                              "-n", "4", "-c", "8192", "-t", "2", "--json"};
    if (use_tau)
        for (size_t i = 0; i < sizeof base_tau / sizeof base_tau[0]; i++) argv[n++] = (char *)base_tau[i];
    else
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) argv[n++] = (char *)base[i];
    for (int i = 0; i < 4; i++)
        if (extra[i]) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    int rc = run(argv, &out);
    CHECKF(rc == 0, "%s: replay exit %d: %.2000s", what, rc, out);
    /* the JSON object is the line that starts with '{' (stderr lines may precede it) */
    const char *j = strstr(out, "{\"model\"");
    json_error_t err;
    json_t *doc = j ? json_loads(j, JSON_DISABLE_EOF_CHECK, &err) : NULL;
    CHECKF(doc != NULL, "%s: no JSON in the output: %.500s", what, out);
    free(out);
    return doc;
}

static long long total(json_t *doc, const char *key) {
    return json_integer_value(json_object_get(json_object_get(doc, "totals"), key));
}

/* The sessions' hashes of doc equal ref's (matched by session name). */
static void same_hashes(json_t *ref, json_t *doc, const char *what) {
    json_t *rs = json_object_get(ref, "sessions"), *ds = json_object_get(doc, "sessions");
    const size_t n_sess = use_tau ? 2 : 3;
    CHECKF(json_array_size(rs) == n_sess && json_array_size(ds) == n_sess, "%s: %zu / %zu sessions", what,
           json_array_size(rs), json_array_size(ds));
    for (size_t i = 0; i < json_array_size(rs); i++) {
        json_t *r = json_array_get(rs, i);
        const char *name = json_string_value(json_object_get(r, "session"));
        json_t *d = NULL;
        for (size_t k = 0; k < json_array_size(ds); k++)
            if (name && !strcmp(name, json_string_value(json_object_get(json_array_get(ds, k), "session"))))
                d = json_array_get(ds, k);
        CHECKF(d != NULL, "%s: session %s missing", what, name);
        if (!d) continue;
        for (int h = 0; h < 2; h++) {
            const char *key = h ? "ids_hash" : "logits_hash";
            const char *a = json_string_value(json_object_get(r, key)), *b = json_string_value(json_object_get(d, key));
            CHECKF(a && b && !strcmp(a, b), "%s: session %s %s %s, reference %s", what, name, key, b ? b : "-",
                   a ? a : "-");
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deja_test_gemma_inv_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    snprintf(model, sizeof model, "%s/tiny-gemma3.gguf", tmpdir);
    char *out = NULL;
    int rc = RUN(&out, "synth", "--arch", "gemma3", "--preset", "tiny", "--vocab-from",
                 (char *)test_shared_path(argv[1], "vocab/ggml-vocab-llama-spm.gguf"), "-o", model, "-t", "2");
    CHECKF(rc == 0, "synth: %s", out);
    free(out);
    if (rc) TEST_END();
    static char t0[1024], t1[1024], t2[1024];
    snprintf(t0, sizeof t0, "%s", test_shared_path(argv[1], "traces/claude_code__cctrace_f33cdb42.jsonl"));
    snprintf(t1, sizeof t1, "%s",
             test_shared_path(argv[1], "traces/mini_swe_agent__deepseek_chat_test_1-100__django__django-11039.jsonl"));
    snprintf(t2, sizeof t2, "%s",
             test_shared_path(argv[1], "traces/mini_swe_agent__deepseek_chat_test_1-100__django__django-13265.jsonl"));
    traces[0] = t0, traces[1] = t1, traces[2] = t2;
    static char u0[1024], u1[1024];
    snprintf(u0, sizeof u0, "%s", test_shared_path(argv[1], "traces/tau_airline__0.jsonl"));
    snprintf(u1, sizeof u1, "%s", test_shared_path(argv[1], "traces/tau_airline__1.jsonl"));
    tau[0] = u0, tau[1] = u1;

    setenv("LLAMA_OPT_DIFF_ENABLED", "0", 1);
    setenv("LLAMA_OPT_DEDUP_ENABLED", "0", 1);
    json_t *ref = replay("cold", NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_DIFF_ENABLED");
    unsetenv("LLAMA_OPT_DEDUP_ENABLED");
    if (!ref) TEST_END();
    CHECKF(total(ref, "n_reused") == 0, "cold run reused %lld", total(ref, "n_reused"));
    CHECKF(total(ref, "n_prompt") > 2000, "the traces gave only %lld prompt tokens", total(ref, "n_prompt"));

    json_t *d = replay("reuse", NULL, NULL, NULL, NULL);
    if (d) {
        same_hashes(ref, d, "reuse");
        CHECKF(total(d, "n_reused_own") > 0, "reuse: nothing of a session's own prefix reused");
        printf("reuse: %lld of %lld prompt positions reused (%lld own), hashes equal\n", total(d, "n_reused"),
               total(d, "n_prompt"), total(d, "n_reused_own"));
        json_decref(d);
    }
    if ((d = replay("parallel", "--parallel", "3", NULL, NULL))) {
        same_hashes(ref, d, "--parallel 3");
        json_decref(d);
    }
    if ((d = replay("chunks", "--ubatch", "7", "--n-batch", "13"))) {
        same_hashes(ref, d, "--ubatch 7 --n-batch 13");
        json_decref(d);
    }
    char kvdir[300];
    snprintf(kvdir, sizeof kvdir, "%s/kv", tmpdir);
    if ((d = replay("kv-dir 1", "--kv-dir", kvdir, NULL, NULL))) {
        same_hashes(ref, d, "--kv-dir (fresh)");
        CHECK(total(d, "n_reused_disk") == 0);
        json_decref(d);
    }
    if ((d = replay("kv-dir 2", "--kv-dir", kvdir, NULL, NULL))) {
        same_hashes(ref, d, "--kv-dir (restored)");
        CHECKF(total(d, "n_reused_disk") > 0, "kv-dir: nothing restored from disk");
        printf("kv-dir: %lld positions restored from disk, hashes equal\n", total(d, "n_reused_disk"));
        json_decref(d);
    }
    if ((d = replay("spec", "--spec-sources", "all", "--spec-fixed", NULL))) {
        same_hashes(ref, d, "--spec-sources all");
        json_t *sp = json_object_get(d, "spec");
        const long long acc = json_integer_value(json_object_get(sp, "accepted"));
        CHECKF(acc > 0, "spec: no draft accepted (drafted %lld)", json_integer_value(json_object_get(sp, "drafted")));
        printf("spec: %lld drafted, %lld accepted, hashes equal\n", json_integer_value(json_object_get(sp, "drafted")),
               acc);
        json_decref(d);
    }
    /* the precomputed RoPE table (both rope settings in a row) only up to position 100, the
     * rest on the fly: the same bits */
    setenv("LLAMA_OPT_PRECOMPUTE_ROPE_MAX", "100", 1);
    d = replay("rope table", NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_PRECOMPUTE_ROPE_MAX");
    if (d) {
        same_hashes(ref, d, "LLAMA_OPT_PRECOMPUTE_ROPE_MAX=100");
        json_decref(d);
    }
    /* Tier 2 */
    setenv("LLAMA_OPT_DIFF_MODE", "approx", 1);
    d = replay("approx", NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_DIFF_MODE");
    if (d) {
        CHECK(total(d, "turns") == total(ref, "turns"));
        json_decref(d);
    }
    json_decref(ref);
    /* dedup: two sessions whose first prompts share ~15,000 characters of system prompt */
    use_tau = true;
    setenv("LLAMA_OPT_DIFF_ENABLED", "0", 1);
    setenv("LLAMA_OPT_DEDUP_ENABLED", "0", 1);
    ref = replay("tau cold", NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_DIFF_ENABLED");
    unsetenv("LLAMA_OPT_DEDUP_ENABLED");
    if (ref && (d = replay("tau dedup", NULL, NULL, NULL, NULL))) {
        same_hashes(ref, d, "dedup");
        CHECKF(total(d, "n_reused_pool") > 1000, "dedup: %lld positions from the pool", total(d, "n_reused_pool"));
        printf("dedup: %lld of %lld prompt positions from the pool, hashes equal\n", total(d, "n_reused_pool"),
               total(d, "n_prompt"));
        json_decref(d);
    }
    json_decref(ref);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    CHECK(system(cmd) == 0);
    TEST_END();
}

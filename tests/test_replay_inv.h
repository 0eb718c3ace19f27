/*
 * test_replay_inv.h — the invariant tests' `deja replay` runs (test_gemma_invariants.c,
 * test_hybrid_invariants.c): three agent traces (3 turns, 7,000 characters, 12 tokens a
 * turn) or the first turns of two tau-bench sessions sharing one system prompt, --json,
 * and the comparison of two runs' per-session logits and ids hashes.
 *
 * inv_setup makes the test's folder (inv_tmpdir) and its tiny model (inv_model) and fills
 * inv_traces / inv_tau; inv_use_tau picks the tau pair for the following runs; inv_cold is
 * the reference run (reuse and dedup off).
 */
#ifndef DJ_TEST_REPLAY_INV_H
#define DJ_TEST_REPLAY_INV_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "test_run.h"

static char inv_model[512], inv_tmpdir[256];
static const char *inv_traces[3], *inv_tau[2];
static bool inv_use_tau; /* the tau pair instead of the three traces */

/* The traces both tests replay, from the shared folder. */
static void inv_set_traces(const char *shared) {
    static char t0[1024], t1[1024], t2[1024], u0[1024], u1[1024];
    snprintf(t0, sizeof t0, "%s", test_shared_path(shared, "traces/claude_code__cctrace_f33cdb42.jsonl"));
    snprintf(t1, sizeof t1, "%s",
             test_shared_path(shared, "traces/mini_swe_agent__deepseek_chat_test_1-100__django__django-11039.jsonl"));
    snprintf(t2, sizeof t2, "%s",
             test_shared_path(shared, "traces/mini_swe_agent__deepseek_chat_test_1-100__django__django-13265.jsonl"));
    snprintf(u0, sizeof u0, "%s", test_shared_path(shared, "traces/tau_airline__0.jsonl"));
    snprintf(u1, sizeof u1, "%s", test_shared_path(shared, "traces/tau_airline__1.jsonl"));
    inv_traces[0] = t0, inv_traces[1] = t1, inv_traces[2] = t2;
    inv_tau[0] = u0, inv_tau[1] = u1;
}

/* A fresh folder /tmp/deja_test_<tag>_inv_XXXXXX with `deja synth --arch arch --preset tiny`
 * (llama's SPM vocabulary) in it, and the traces; false (the failure checked) when either fails. */
static bool inv_setup(const char *shared, const char *arch, const char *tag) {
    snprintf(inv_tmpdir, sizeof inv_tmpdir, "/tmp/deja_test_%s_inv_XXXXXX", tag);
    if (!mkdtemp(inv_tmpdir)) {
        CHECKF(false, "mkdtemp %s", inv_tmpdir);
        return false;
    }
    snprintf(inv_model, sizeof inv_model, "%s/tiny-%s.gguf", inv_tmpdir, arch);
    char *out = NULL;
    int rc = RUN(&out, "synth", "--arch", (char *)arch, "--preset", "tiny", "--vocab-from",
                 (char *)test_shared_path(shared, "vocab/ggml-vocab-llama-spm.gguf"), "-o", inv_model, "-t", "2");
    CHECKF(rc == 0, "synth: %s", out);
    free(out);
    inv_set_traces(shared);
    return rc == 0;
}

/* deja replay with up to five extra arguments (NULL-terminated early); the parsed JSON or NULL. */
static json_t *inv_replay(const char *what, const char *a1, const char *a2, const char *a3, const char *a4,
                          const char *a5) {
    char *out = NULL;
    const char *extra[5] = {a1, a2, a3, a4, a5};
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)deja_bin;
    const char *base[] = {"replay", "-m", inv_model, "--trace", inv_traces[0], "--trace", inv_traces[1], "--trace",
                          inv_traces[2], "--max-turns", "3", "--max-chars", "7000", "-n", "12", "-c", "8192", "-t",
                          "2", "--json"};
    const char *base_tau[] = {"replay", "-m", inv_model, "--trace", inv_tau[0], "--trace", inv_tau[1], "--max-turns",
                              "1", "-n", "4", "-c", "8192", "-t", "2", "--json"};
    if (inv_use_tau)
        for (size_t i = 0; i < sizeof base_tau / sizeof base_tau[0]; i++) argv[n++] = (char *)base_tau[i];
    else
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) argv[n++] = (char *)base[i];
    for (int i = 0; i < 5 && extra[i]; i++) argv[n++] = (char *)extra[i];
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

/* The reference: inv_replay with reuse and dedup off (LLAMA_OPT_DIFF_ENABLED=0,
 * LLAMA_OPT_DEDUP_ENABLED=0), up to two extra arguments. */
static json_t *inv_cold(const char *what, const char *a1, const char *a2) {
    setenv("LLAMA_OPT_DIFF_ENABLED", "0", 1);
    setenv("LLAMA_OPT_DEDUP_ENABLED", "0", 1);
    json_t *ref = inv_replay(what, a1, a2, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_DIFF_ENABLED");
    unsetenv("LLAMA_OPT_DEDUP_ENABLED");
    return ref;
}

/* Removes inv_tmpdir and everything in it. */
static void inv_cleanup(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", inv_tmpdir);
    CHECK(system(cmd) == 0);
}

static long long inv_total(json_t *doc, const char *key) {
    return json_integer_value(json_object_get(json_object_get(doc, "totals"), key));
}

/* The sessions' hashes of doc equal ref's (matched by session name). */
static void inv_same_hashes(json_t *ref, json_t *doc, const char *what) {
    json_t *rs = json_object_get(ref, "sessions"), *ds = json_object_get(doc, "sessions");
    const size_t n_sess = inv_use_tau ? 2 : 3;
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

#endif

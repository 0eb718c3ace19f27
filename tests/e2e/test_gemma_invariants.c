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

#include "test_replay_inv.h"

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    if (!inv_setup(argv[1], "gemma3", "gemma")) TEST_END();

    json_t *ref = inv_cold("cold", NULL, NULL);
    if (!ref) TEST_END();
    CHECKF(inv_total(ref, "n_reused") == 0, "cold run reused %lld", inv_total(ref, "n_reused"));
    CHECKF(inv_total(ref, "n_prompt") > 2000, "the traces gave only %lld prompt tokens", inv_total(ref, "n_prompt"));

    json_t *d = inv_replay("reuse", NULL, NULL, NULL, NULL, NULL);
    if (d) {
        inv_same_hashes(ref, d, "reuse");
        CHECKF(inv_total(d, "n_reused_own") > 0, "reuse: nothing of a session's own prefix reused");
        printf("reuse: %lld of %lld prompt positions reused (%lld own), hashes equal\n", inv_total(d, "n_reused"),
               inv_total(d, "n_prompt"), inv_total(d, "n_reused_own"));
        json_decref(d);
    }
    if ((d = inv_replay("parallel", "--parallel", "3", NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "--parallel 3");
        json_decref(d);
    }
    if ((d = inv_replay("chunks", "--ubatch", "7", "--n-batch", "13", NULL))) {
        inv_same_hashes(ref, d, "--ubatch 7 --n-batch 13");
        json_decref(d);
    }
    char kvdir[300];
    snprintf(kvdir, sizeof kvdir, "%s/kv", inv_tmpdir);
    if ((d = inv_replay("kv-dir 1", "--kv-dir", kvdir, NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "--kv-dir (fresh)");
        CHECK(inv_total(d, "n_reused_disk") == 0);
        json_decref(d);
    }
    if ((d = inv_replay("kv-dir 2", "--kv-dir", kvdir, NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "--kv-dir (restored)");
        CHECKF(inv_total(d, "n_reused_disk") > 0, "kv-dir: nothing restored from disk");
        printf("kv-dir: %lld positions restored from disk, hashes equal\n", inv_total(d, "n_reused_disk"));
        json_decref(d);
    }
    if ((d = inv_replay("spec", "--spec-sources", "all", "--spec-fixed", NULL, NULL))) {
        inv_same_hashes(ref, d, "--spec-sources all");
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
    d = inv_replay("rope table", NULL, NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_PRECOMPUTE_ROPE_MAX");
    if (d) {
        inv_same_hashes(ref, d, "LLAMA_OPT_PRECOMPUTE_ROPE_MAX=100");
        json_decref(d);
    }
    /* Tier 2 */
    setenv("LLAMA_OPT_DIFF_MODE", "approx", 1);
    d = inv_replay("approx", NULL, NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_DIFF_MODE");
    if (d) {
        CHECK(inv_total(d, "turns") == inv_total(ref, "turns"));
        json_decref(d);
    }
    json_decref(ref);
    /* dedup: two sessions whose first prompts share ~15,000 characters of system prompt */
    inv_use_tau = true;
    ref = inv_cold("tau cold", NULL, NULL);
    if (ref && (d = inv_replay("tau dedup", NULL, NULL, NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "dedup");
        CHECKF(inv_total(d, "n_reused_pool") > 1000, "dedup: %lld positions from the pool", inv_total(d, "n_reused_pool"));
        printf("dedup: %lld of %lld prompt positions from the pool, hashes equal\n", inv_total(d, "n_reused_pool"),
               inv_total(d, "n_prompt"));
        json_decref(d);
    }
    json_decref(ref);
    inv_cleanup();
    TEST_END();
}

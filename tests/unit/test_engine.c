/*
 * test_engine.c — the engine's turns on stories260K with made-up token ids:
 *  - own-prefix reuse: a turn that extends what the session holds (prompt +
 *    generated tokens but the last) reuses exactly that many positions;
 *  - pool hits: a second session with the same first blocks takes them from
 *    the pool; a pool block replaces a partly matching own block;
 *  - canonicalization: sealing a block identical to a sealed one switches
 *    the table to the existing block (one physical copy);
 *  - every scenario's logits (all turns, in order) are bitwise those of the
 *    same turns with every optimization off;
 *  - accounting: no block is pinned once the sessions end;
 *  - the budget: too small for one block → an error at creation; too small
 *    for one sequence → a clear turn error, the session still usable;
 *    pressure → other sessions are parked, results unchanged;
 *  - LLAMA_OPT_STATS: one opt-stats line per turn;
 *    bad turns (empty, out-of-vocabulary token, past n_ctx) are errors.
 * The own-prefix, cross-session pool and canonicalization scenarios run again on
 * deepseek2-lite-tiny (Multi-head Latent Attention, a K-only pool): the same
 * reuse counts, logits bitwise those of the cold run.
 */
#include "core/hash.h"
#include "core/status.h"
#include "engine/engine.h"
#include "test.h"
#include "test_engine.h"

static struct dj_model *model;

static dj_token T(size_t i) { return (dj_token)(3 + (i * 7919 + i / 5) % 500); }
static dj_token U(size_t i) { return (dj_token)(3 + (i * 104729 + 17) % 499); }

static struct dj_engine *make(bool diff, bool dedup, double budget_mib) {
    struct dj_engine_params p = engine_default_params();
    p.n_ctx = 4096;
    p.n_threads = 2;
    p.opt.diff_enabled = diff;
    p.opt.dedup_enabled = dedup;
    p.kv_budget_mib = budget_mib;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(model, &p, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

static void ends_clean(struct dj_engine *e) {
    struct kv_pool_stats ps;
    engine_pool_stats(e, &ps);
    CHECKF(ps.pinned == 0, "%u blocks still pinned", ps.pinned);
    CHECKF(ps.allocated == ps.sealed, "%u allocated, %u sealed (cached)", ps.allocated, ps.sealed);
}

/* Scenario 1: own prefix, then a second session on the same first blocks. */
static uint64_t scenario_prefix(bool diff, bool dedup) {
    struct dj_engine *e = make(diff, dedup, 0);
    if (!e) return 0;
    struct dj_session *a, *b;
    CHECK(engine_session_create(e, &a) == DJ_OK && engine_session_create(e, &b) == DJ_OK);
    uint64_t h = DJ_FNV_OFFSET;
    dj_token p[400], ids[4];
    for (size_t i = 0; i < 100; i++) p[i] = T(i);
    struct dj_turn_result r = test_turn(e, a, p, 100, 4, &h, ids);
    CHECK(r.n_reused_own == 0 && r.n_reused_pool == 0 && r.n_computed == 100 && r.n_gen == 4);
    size_t held;
    engine_session_tokens(a, &held);
    CHECK(held == 103); /* the last generated token is not fed */
    /* turn 2: what A holds + 50 new tokens */
    memcpy(p + 100, ids, 3 * sizeof *ids);
    for (size_t i = 0; i < 50; i++) p[103 + i] = T(1000 + i);
    r = test_turn(e, a, p, 153, 4, &h, NULL);
    CHECKF(r.n_reused_own == (diff ? 103u : 0u), "own %zu", r.n_reused_own);
    CHECKF(r.n_reused_pool == (!diff && dedup ? 64u : 0u), "pool %zu", r.n_reused_pool);
    CHECK(r.n_computed == 153 - r.n_reused_own - r.n_reused_pool);
    /* session B: the same first 150 tokens, then its own */
    dj_token q[170];
    memcpy(q, p, 150 * sizeof *q);
    for (size_t i = 0; i < 20; i++) q[150 + i] = U(i);
    r = test_turn(e, b, q, 170, 3, &h, NULL);
    CHECKF(r.n_reused_pool == (dedup ? 128u : 0u) && r.n_reused_own == 0, "pool %zu own %zu", r.n_reused_pool,
           r.n_reused_own);
    if (dedup) {
        struct llama_opt_stats st;
        engine_get_stats(e, &st);
        CHECK(st.dedup_blocks_hit == (diff ? 2u : 3u) && st.dedup_tokens_saved == st.dedup_blocks_hit * 64);
    }
    /* A edits its middle: only the prefix before the edit is reused */
    p[80] = U(99);
    r = test_turn(e, a, p, 153, 2, &h, NULL);
    CHECKF(r.n_reused_own == (diff ? 80u : 0u), "own %zu after an edit at 80", r.n_reused_own);
    CHECK(r.n_reused_pool == (!diff && dedup ? 64u : 0u));
    engine_session_destroy(a);
    engine_session_destroy(b);
    ends_clean(e);
    engine_destroy(e);
    return h;
}

/* Scenario 2: a pool block replaces a partly matching own block; a block
 * computed again is canonicalized onto the sealed one. */
static uint64_t scenario_pool(bool diff, bool dedup) {
    struct dj_engine *e = make(diff, dedup, 0);
    if (!e) return 0;
    struct dj_session *a, *b, *c;
    CHECK(engine_session_create(e, &a) == DJ_OK && engine_session_create(e, &b) == DJ_OK &&
          engine_session_create(e, &c) == DJ_OK);
    uint64_t h = DJ_FNV_OFFSET;
    dj_token p[200];
    for (size_t i = 0; i < 200; i++) p[i] = T(5000 + i);
    test_turn(e, a, p, 100, 1, &h, NULL); /* A holds p[0, 100): block 1 partial */
    struct dj_turn_result r = test_turn(e, b, p, 200, 1, &h, NULL); /* B seals blocks 0..2 */
    CHECK(r.n_reused_pool == (dedup ? 64u : 0u));
    r = test_turn(e, a, p, 200, 1, &h, NULL);
    if (dedup) /* A's partial block 1 is dropped for B's full one, then block 2 */
        CHECKF(r.n_reused_own == (diff ? 64u : 0u) && r.n_reused_pool == (diff ? 128u : 192u) && r.n_computed == 8,
               "own %zu pool %zu computed %zu",
               r.n_reused_own, r.n_reused_pool, r.n_computed);
    else CHECK(r.n_reused_own == (diff ? 100u : 0u) && r.n_reused_pool == 0);
    struct kv_pool_stats before, after;
    engine_pool_stats(e, &before);
    /* block 1 ends at the prompt's end: taken from the pool, its last row (the last token)
     * recomputed into a copy on write, which is canonicalized back to B's block */
    r = test_turn(e, c, p, 128, 1, &h, NULL);
    CHECKF(r.n_reused_pool == (dedup ? 127u : 0u) && r.n_computed == (dedup ? 1u : 128u), "pool %zu computed %zu",
           r.n_reused_pool, r.n_computed);
    engine_pool_stats(e, &after);
    if (dedup) {
        struct llama_opt_stats st;
        engine_get_stats(e, &st);
        CHECKF(st.canon_entries_deduped >= 1, "canonicalized %llu", (unsigned long long)st.canon_entries_deduped);
        CHECKF(after.allocated == before.allocated, "allocated %u -> %u: C's block 1 is B's", before.allocated,
               after.allocated);
        CHECK(engine_session_n_blocks(c) == 2);
    }
    engine_session_destroy(b);
    engine_session_destroy(a);
    engine_session_destroy(c);
    ends_clean(e);
    engine_destroy(e);
    return h;
}

/* Scenario 3: a budget of 6 blocks and two sessions of 4 blocks each: the
 * second parks the first; results are those of a roomy cold run. */
static uint64_t scenario_pressure(bool diff, bool dedup, double budget, size_t *parked) {
    struct dj_engine *e = make(diff, dedup, budget);
    if (!e) return 0;
    struct dj_session *a, *b;
    CHECK(engine_session_create(e, &a) == DJ_OK && engine_session_create(e, &b) == DJ_OK);
    uint64_t h = DJ_FNV_OFFSET;
    dj_token p[240], q[240];
    for (size_t i = 0; i < 240; i++) p[i] = T(9000 + i), q[i] = U(9000 + i);
    *parked = 0;
    for (int k = 0; k < 3; k++) {
        *parked += test_turn(e, a, p, 200 + (size_t)k * 10, 2, &h, NULL).n_parked;
        *parked += test_turn(e, b, q, 200 + (size_t)k * 10, 2, &h, NULL).n_parked;
    }
    engine_session_destroy(a);
    engine_session_destroy(b);
    ends_clean(e);
    engine_destroy(e);
    return h;
}

static void test_budget(void) {
    struct dj_engine_params p = engine_default_params();
    p.kv_budget_mib = 0.01; /* a block of stories260K is 80 KiB */
    struct dj_engine *e = NULL;
    CHECK(engine_create(model, &p, &e) == DJ_ERR_INVALID && e == NULL);
    CHECKF(strstr(dj_last_error(), "smaller than one KV block"), "%s", dj_last_error());

    e = make(true, true, 3 * 80.0 / 1024.0); /* 3 blocks */
    if (!e) return;
    struct dj_session *s;
    CHECK(engine_session_create(e, &s) == DJ_OK);
    dj_token t[300], ids[2];
    for (size_t i = 0; i < 300; i++) t[i] = T(i);
    struct dj_turn_params tp = {.n_gen = 2};
    struct dj_turn_result r;
    CHECK(engine_turn(e, s, t, 300, &tp, ids, &r) == DJ_ERR_NOMEM);
    CHECKF(strstr(dj_last_error(), "KV budget too small") && strstr(dj_last_error(), "3 blocks"), "%s",
           dj_last_error());
    CHECK(engine_turn(e, s, t, 60, &tp, ids, &r) == DJ_OK && r.n_computed == 60);
    /* bad turns */
    CHECK(engine_turn(e, s, t, 0, &tp, ids, &r) == DJ_ERR_INVALID);
    dj_token bad[2] = {5, 512};
    CHECK(engine_turn(e, s, bad, 2, &tp, ids, &r) == DJ_ERR_INVALID && strstr(dj_last_error(), "vocabulary"));
    struct dj_turn_params big = {.n_gen = 4096};
    CHECK(engine_turn(e, s, t, 10, &big, ids, &r) == DJ_ERR_INVALID && strstr(dj_last_error(), "context size"));
    CHECK(engine_turn(e, s, t, 61, &tp, ids, &r) == DJ_OK && r.n_reused_own == 60 && r.n_computed == 1);
    engine_session_destroy(s);
    ends_clean(e);
    engine_destroy(e);
}

static void test_stats_line(void) {
    struct dj_engine_params p = engine_default_params();
    p.opt.stats_enabled = true;
    FILE *f = tmpfile();
    p.stats_out = f;
    struct dj_engine *e = NULL;
    CHECK(f && engine_create(model, &p, &e) == DJ_OK);
    if (!e) return;
    struct dj_session *s;
    CHECK(engine_session_create(e, &s) == DJ_OK);
    dj_token t[150];
    for (size_t i = 0; i < 150; i++) t[i] = T(i);
    uint64_t h = DJ_FNV_OFFSET;
    test_turn(e, s, t, 140, 3, &h, NULL);
    test_turn(e, s, t, 150, 3, &h, NULL);
    engine_destroy(e); /* destroys the session too */
    rewind(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        CHECKF(strncmp(line, "opt-stats {\"dedup_blocks_total\":", 32) == 0, "%s", line);
        if (n == 1) CHECKF(strstr(line, "\"diff_tokens_total\":150,\"diff_tokens_unchanged\":14"), "%s", line);
        n++;
    }
    CHECK(n == 2);
    fclose(f);
}

/* Own-prefix and pool reuse, each way of reusing on and off, equal the cold run bitwise. */
static void check_reuse_scenarios(void) {
    uint64_t cold = scenario_prefix(false, false);
    CHECK(scenario_prefix(true, false) == cold);
    CHECK(scenario_prefix(false, true) == cold);
    CHECK(scenario_prefix(true, true) == cold);
    cold = scenario_pool(false, false);
    CHECK(scenario_pool(true, false) == cold);
    CHECK(scenario_pool(false, true) == cold);
    CHECK(scenario_pool(true, true) == cold);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    if (model_load(test_shared_path(shared, "models/stories260K.gguf"), &model) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    check_reuse_scenarios();
    size_t parked;
    uint64_t cold = scenario_pressure(false, false, 0, &parked);
    CHECK(parked == 0);
    const double six = 6 * 80.0 / 1024.0;
    CHECK(scenario_pressure(false, false, six, &parked) == cold && parked > 0);
    CHECK(scenario_pressure(true, false, six, &parked) == cold && parked > 0);
    CHECK(scenario_pressure(true, true, six, &parked) == cold && parked > 0);
    CHECK(scenario_pressure(false, true, six, &parked) == cold);
    test_budget();
    test_stats_line();
    model_free(model);

    /* Multi-head Latent Attention: one K row per token and layer, no V rows */
    model = NULL;
    CHECKF(model_load(test_shared_path(shared, "golden/moe/deepseek2-lite-tiny.gguf"), &model) == DJ_OK, "%s",
           dj_last_error());
    if (model) {
        check_reuse_scenarios();
        printf("deepseek2-lite-tiny: own-prefix, pool and canonicalization reuse bitwise the cold run\n");
        model_free(model);
    }
    TEST_END();
}

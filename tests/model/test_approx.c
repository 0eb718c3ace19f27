/*
 * test_approx.c — the pieces of Tier-2 reuse after an edit
 * (LLAMA_OPT_DIFF_MODE=approx) and the guarantees around them, on
 * stories260K:
 *  - ctx_decode_at: recomputing positions the sequence already holds, in
 *    several calls and ubatches, over rows filled with garbage, gives the
 *    bits of an ordinary prefill; bad positions are refused;
 *  - ctx_probe_k: on exact rows the fresh layer-1 K equals the stored one
 *    (distance 0); a perturbed row shows its distance and is repaired;
 *    deeper layers are not touched;
 *  - the engine in approx mode: with LLAMA_OPT_DIFF_RECOMPUTE=1 every
 *    candidate is recomputed and the logits are bitwise those of exact
 *    reuse; with 0.15 the counts add up (approx + computed + prefix = prompt);
 *    approximate rows never reach the shared pool: another session sending
 *    the same prompt gets exactly the cold logits; no block stays pinned;
 *    a budget too small for the old and new rows together falls back to
 *    exact computation.
 * The engine part runs again on deepseek2-lite-tiny (Multi-head Latent
 * Attention, a K-only pool; model_rope_shift rotates the k_pe tail).
 */
#include <math.h>

#include "core/hash.h"
#include "engine/engine.h"
#include "kv/hash.h"
#include "model/context.h"
#include "test.h"
#include "test_engine.h"

static struct dj_model *model;

static dj_token T(size_t i) { return (dj_token)(3 + (i * 7919 + i / 5) % 500); }

static struct dj_context *make_ctx(uint32_t n_ubatch) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = 512;
    cp.n_ubatch = n_ubatch;
    cp.n_threads = 2;
    cp.block_size = 16;
    struct dj_context *c = NULL;
    CHECKF(ctx_create(model, cp, &c) == DJ_OK, "%s", dj_last_error());
    return c;
}

static void test_decode_at(void) {
    const size_t n = 150, k = 37, V = model->hp.n_vocab;
    dj_token t[150];
    for (size_t i = 0; i < n; i++) t[i] = T(i);
    float *want = malloc(V * sizeof(float)), *got = malloc(V * sizeof(float));
    struct dj_context *a = make_ctx(512), *b = make_ctx(3);
    if (!a || !b) goto out;
    CHECK(ctx_decode(a, t, n, want, false) == DJ_OK);
    /* b: an exact prefix of k, then rows k..n-1 full of garbage, recomputed */
    CHECK(ctx_decode(b, t, k, NULL, false) == DJ_OK);
    CHECK(kv_seq_prepare(b->seq, n - k) == DJ_OK);
    const size_t kv = b->n_embd_kv;
    for (size_t p = k; p < n; p++)
        for (uint32_t il = 0; il < model->hp.n_layer; il++)
            for (size_t i = 0; i < kv; i++) {
                ((float *)kv_seq_k(b->seq, il, p, 16))[i] = 1e3f * (float)((p + i) % 7) - 3e3f;
                ((float *)kv_seq_v(b->seq, il, p, 16))[i] = -7.5f;
            }
    kv_seq_advance(b->seq, n - k);
    uint32_t pos[150];
    for (size_t p = k; p < n; p++) pos[p - k] = (uint32_t)p;
    CHECK(ctx_decode_at(b, t + k, pos, 10, NULL) == DJ_OK);                 /* 37..46 */
    CHECK(ctx_decode_at(b, t + k + 10, pos + 10, n - k - 10, got) == DJ_OK); /* 47..149 */
    CHECK(memcmp(got, want, V * sizeof(float)) == 0);
    /* the next token, appended as usual, sees the same rows */
    dj_token next = T(999);
    CHECK(ctx_decode(a, &next, 1, want, false) == DJ_OK && ctx_decode(b, &next, 1, got, false) == DJ_OK);
    CHECK(memcmp(got, want, V * sizeof(float)) == 0);

    /* refused: positions not increasing, past the sequence, out-of-vocabulary tokens, sealed blocks */
    uint32_t bad[2] = {50, 50};
    CHECK(ctx_decode_at(b, t, bad, 2, NULL) == DJ_ERR_INVALID && strstr(dj_last_error(), "increasing"));
    bad[0] = (uint32_t)n + 1;
    CHECK(ctx_decode_at(b, t, bad, 1, NULL) == DJ_ERR_INVALID);
    dj_token oov = (dj_token)V;
    bad[0] = 60;
    CHECK(ctx_decode_at(b, &oov, bad, 1, NULL) == DJ_ERR_INVALID && strstr(dj_last_error(), "vocabulary"));
    CHECK(kv_pool_seal(b->pool, b->seq->table[0], kv_hash_chain(KV_CHAIN_ROOT, t, 16), KV_BLOCK_NONE, t) == DJ_OK);
    bad[0] = 3;
    CHECK(ctx_decode_at(b, t + 3, bad, 1, NULL) == DJ_ERR_INVALID && strstr(dj_last_error(), "sealed or shared"));
    double dev[1];
    CHECK(ctx_probe_k(b, t + 3, bad, 1, 1, dev) == DJ_ERR_INVALID);
    CHECK(ctx_probe_k(b, t + 60, bad + 0, 0, 99, dev) == DJ_ERR_INVALID && strstr(dj_last_error(), "layer"));
out:
    ctx_free(a);
    ctx_free(b);
    free(want);
    free(got);
}

static void test_probe(void) {
    const size_t n = 120, k = 40, R = n - k;
    dj_token t[120];
    for (size_t i = 0; i < n; i++) t[i] = T(300 + i);
    struct dj_context *c = make_ctx(7);
    if (!c) return;
    CHECK(ctx_decode(c, t, n, NULL, false) == DJ_OK);
    uint32_t pos[120];
    double dev[120];
    for (size_t j = 0; j < R; j++) pos[j] = (uint32_t)(k + j);
    CHECK(ctx_probe_k(c, t + k, pos, R, 1, dev) == DJ_OK);
    int nonzero = 0;
    for (size_t j = 0; j < R; j++) nonzero += dev[j] != 0.0;
    CHECKF(nonzero == 0, "%d exact rows differ from a fresh computation", nonzero);
    /* perturb layer-1 K of position k+5 and layer-2 V of position k+6 */
    ((float *)kv_seq_k(c->seq, 1, k + 5, 16))[3] += 0.5f;
    const float v2 = ((float *)kv_seq_v(c->seq, 2, k + 6, 16))[0] += 0.25f;
    CHECK(ctx_probe_k(c, t + k, pos, R, 1, dev) == DJ_OK);
    CHECKF(fabs(dev[5] - 0.25) < 1e-4, "distance %g, want 0.25", dev[5]);
    nonzero = 0;
    for (size_t j = 0; j < R; j++) nonzero += j != 5 && dev[j] != 0.0;
    CHECK(nonzero == 0);
    CHECK(ctx_probe_k(c, t + k, pos, R, 1, dev) == DJ_OK && dev[5] == 0.0); /* the probe wrote the fresh row */
    CHECK(((float *)kv_seq_v(c->seq, 2, k + 6, 16))[0] == v2);                        /* layer 2 untouched */
    ctx_free(c);
}

/* ---- the engine ------------------------------------------------------------ */

static struct dj_engine *make_engine(bool approx, float recompute, double budget_mib) {
    struct dj_engine_params p = engine_default_params();
    p.n_ctx = 1024;
    p.n_threads = 2;
    p.n_ubatch = 64;
    p.kv_budget_mib = budget_mib;
    p.opt.block_size = 16;
    p.opt.diff_mode = approx ? LLAMA_OPT_DIFF_APPROX : LLAMA_OPT_DIFF_EXACT;
    p.opt.diff_recompute = recompute;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(model, &p, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

/* Turn 1: 300 tokens; turn 2: tokens 100..104 replaced, 20 appended (what
 * the session holds is prompt 1 + 3 generated tokens: the edit leaves a KEEP
 * span of 195 after it, then the 3 generated tokens are replaced by new ones).
 * Returns the logits hash of both turns; *r2 gets turn 2's result. */
static uint64_t edit_scenario(struct dj_engine *e, struct dj_turn_result *r2, dj_token *p2, size_t *n2) {
    struct dj_session *s;
    CHECK(engine_session_create(e, &s) == DJ_OK);
    uint64_t h = DJ_FNV_OFFSET;
    dj_token p1[300];
    for (size_t i = 0; i < 300; i++) p1[i] = T(i);
    test_turn(e, s, p1, 300, 4, &h, NULL);
    memcpy(p2, p1, 300 * sizeof *p2);
    for (size_t i = 100; i < 105; i++) p2[i] = (dj_token)(3 + (p1[i] - 3 + 1) % 500);
    for (size_t i = 300; i < 320; i++) p2[i] = (dj_token)(3 + (i * 104729 + 17) % 499);
    *n2 = 320;
    *r2 = test_turn(e, s, p2, 320, 4, &h, NULL);
    engine_session_destroy(s);
    return h;
}

static void ends_clean(struct dj_engine *e) {
    struct kv_pool_stats ps;
    engine_pool_stats(e, &ps);
    CHECKF(ps.pinned == 0, "%u blocks still pinned", ps.pinned);
}

static void test_engine(void) {
    dj_token p2[320];
    size_t n2;
    struct dj_turn_result r, rx;
    struct dj_engine *ex = make_engine(false, 0.15f, 0);
    if (!ex) return;
    const uint64_t exact = edit_scenario(ex, &rx, p2, &n2);
    CHECK(rx.n_reused_own == 100 && rx.n_reused_approx == 0 && rx.n_computed == 220);
    ends_clean(ex);

    /* everything recomputed: exact */
    struct dj_engine *e = make_engine(true, 1.0f, 0);
    if (e) {
        CHECK(edit_scenario(e, &r, p2, &n2) == exact);
        CHECKF(r.n_reused_own == 100 && r.n_blend == 195 && r.n_reused_approx == 0 && r.n_probed == 195 &&
                   r.n_computed == 220,
               "own %zu blend %zu approx %zu probed %zu computed %zu", r.n_reused_own, r.n_blend, r.n_reused_approx,
               r.n_probed, r.n_computed);
        ends_clean(e);
        engine_destroy(e);
    }

    /* the default fraction: 15 % of the 195 candidates recomputed */
    e = make_engine(true, 0.15f, 0);
    if (!e) return;
    uint64_t h = edit_scenario(e, &r, p2, &n2);
    (void)h;
    CHECKF(r.n_blend == 30 && r.n_reused_approx == 165 && r.n_computed == 220 - 165 && r.n_probed == 195,
           "blend %zu approx %zu computed %zu probed %zu", r.n_blend, r.n_reused_approx, r.n_computed, r.n_probed);
    struct llama_opt_stats st;
    engine_get_stats(e, &st);
    CHECK(st.diff_tokens_approx == 165 && st.diff_tokens_blend == 30 && st.diff_tokens_probed == 195);

    /* a second session with the edited prompt: pool blocks before the edit,
     * exact; never the approximate blocks after it */
    struct dj_session *b;
    CHECK(engine_session_create(e, &b) == DJ_OK);
    uint64_t hb = DJ_FNV_OFFSET, hc = DJ_FNV_OFFSET;
    r = test_turn(e, b, p2, n2, 4, &hb, NULL);
    CHECKF(r.n_reused_pool == 96 && r.n_reused_approx == 0, "pool %zu approx %zu", r.n_reused_pool,
           r.n_reused_approx);
    struct dj_session *c;
    CHECK(engine_session_create(ex, &c) == DJ_OK);
    test_turn(ex, c, p2, n2, 4, &hc, NULL); /* cold, exact, in the exact engine (its pool has only exact blocks) */
    CHECK(hb == hc);
    engine_session_destroy(b);
    engine_session_destroy(c);
    ends_clean(e);
    struct kv_pool_stats ps;
    engine_pool_stats(e, &ps);
    engine_destroy(e);
    engine_destroy(ex);

    /* a budget that holds one sequence (22 blocks of 16) but not the old one
     * beside the new rows: the turn falls back to exact computation */
    e = make_engine(true, 0.15f, 25.0 * (double)ps.block_bytes / 1048576.0);
    if (!e) return;
    CHECK(edit_scenario(e, &r, p2, &n2) == exact);
    CHECKF(r.n_reused_approx == 0 && r.n_probed == 0 && r.n_reused_own == 100 && r.n_computed == 220,
           "approx %zu probed %zu own %zu computed %zu", r.n_reused_approx, r.n_probed, r.n_reused_own, r.n_computed);
    ends_clean(e);
    engine_destroy(e);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    if (model_load(test_shared_path(shared, "models/stories260K.gguf"), &model) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    test_decode_at();
    test_probe();
    test_engine();
    model_free(model);
    model = NULL;
    CHECKF(model_load(test_shared_path(shared, "golden/moe/deepseek2-lite-tiny.gguf"), &model) == DJ_OK, "%s",
           dj_last_error());
    if (model) {
        test_engine();
        printf("deepseek2-lite-tiny: Tier-2 reuse after an edit: counts as stories260K's, recompute-all and the pool exact\n");
    }
    model_free(model);
    TEST_END();
}

/*
 * test_attn_prune.c — attention statistics and Tier-2 pruning on stories260K
 * (kv/attn_prune.h, the attention kernel in model/forward.c, the engine):
 *  - the kernel: a sequence with blocks in its skip set gives the same bits
 *    with 1 or 2 threads and any ubatch split; differs from full attention;
 *    never reads a skipped row (the rows poisoned with NaN leave the logits
 *    finite; the same rows back in the attention set make them NaN, so the
 *    poison works); the probe query scores the skipped blocks for its
 *    statistics without using them;
 *  - statistics alone are exact: every logits vector of a three-turn session,
 *    and of two requests batched together (one greedy, one seeded sampling),
 *    bitwise those with statistics off; the block weights are the same bits
 *    with 1 and 2 threads;
 *  - pruning (h2o, a small budget): later turns skip tokens and say so; the
 *    rows computed while blocks were skipped never reach the shared pool (a
 *    new session sending the same prompt gets the cold logits); no block
 *    stays pinned.
 */
#include <math.h>

#include "core/hash.h"
#include "engine/engine.h"
#include "kv/attn_prune.h"
#include "model/context.h"
#include "test.h"
#include "test_engine.h"

static struct dj_model *model;

static dj_token T(size_t i) { return (dj_token)(3 + (i * 7919 + i / 5) % 500); }

enum { BS = 16, N0 = 100 };

static struct dj_context *make_ctx(uint32_t n_ubatch, int threads) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = 512;
    cp.n_ubatch = n_ubatch;
    cp.n_threads = threads;
    cp.block_size = BS;
    cp.type_k = cp.type_v = DJ_TYPE_F32;
    struct dj_context *c = NULL;
    CHECKF(ctx_create(model, cp, &c) == DJ_OK, "%s", dj_last_error());
    return c;
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

static void skip_blocks(struct kv_attn *a, bool on) {
    a->skip[2] = a->skip[3] = on;
    a->n_mask = 6;
    a->n_skip = on ? 2 : 0;
}

static void test_kernel(void) {
    const size_t V = model->hp.n_vocab;
    dj_token t[N0 + 4];
    for (size_t i = 0; i < N0 + 4; i++) t[i] = T(i);
    float *a1 = malloc(V * sizeof(float)), *a2 = malloc(V * sizeof(float)), *full = malloc(V * sizeof(float));
    struct dj_context *c1 = make_ctx(512, 2), *c2 = make_ctx(7, 1), *c3 = make_ctx(512, 2);
    struct kv_attn k1, k2;
    CHECK(kv_attn_init(&k1, model->hp.n_head, BS, 40) == DJ_OK && kv_attn_init(&k2, model->hp.n_head, BS, 40) == DJ_OK);
    if (!c1 || !c2 || !c3 || !a1 || !a2 || !full) goto out;
    CHECK(ctx_decode(c1, t, N0, NULL, false) == DJ_OK && ctx_decode(c2, t, N0, NULL, false) == DJ_OK &&
          ctx_decode(c3, t, N0, NULL, false) == DJ_OK);
    /* blocks 2 and 3 (positions 32..63) out of the attention set; four tokens on */
    c1->seq->attn = &k1;
    c2->seq->attn = &k2;
    skip_blocks(&k1, true);
    skip_blocks(&k2, true);
    CHECK(ctx_decode(c1, t + N0, 4, a1, false) == DJ_OK);
    for (int i = 0; i < 4; i++) CHECK(ctx_decode(c2, t + N0 + i, 1, a2, false) == DJ_OK); /* one at a time */
    CHECK(ctx_decode(c3, t + N0, 4, full, false) == DJ_OK);
    CHECK(memcmp(a1, a2, V * sizeof(float)) == 0);
    CHECK(memcmp(a1, full, V * sizeof(float)) != 0);
    CHECK(all_finite(a1, V));
    /* statistics: the skipped blocks got no mass, the others did */
    CHECK(atomic_load(&k1.mass[2 * k1.n_head]) == 0 && atomic_load(&k1.mass[1 * k1.n_head]) > 0);
    /* the skipped rows poisoned: never read */
    for (size_t p = 2 * BS; p < 4 * BS; p++)
        for (uint32_t il = 0; il < model->hp.n_layer; il++)
            for (size_t i = 0; i < c1->n_embd_kv; i++)
                ((float *)kv_seq_k(c1->seq, il, p, BS))[i] = ((float *)kv_seq_v(c1->seq, il, p, BS))[i] = NAN;
    dj_token nx = T(777);
    CHECK(ctx_decode(c1, &nx, 1, a1, false) == DJ_OK && all_finite(a1, V));
    /* the probe scores them (its statistics), its output does not use them */
    kv_attn_turn_begin(&k1, N0 + 5);
    CHECK(ctx_decode(c1, &nx, 1, a1, false) == DJ_OK && all_finite(a1, V));
    CHECK(atomic_load(&k1.probe[1 * k1.n_head]) > 0 && atomic_load(&k1.mass[2 * k1.n_head]) == 0);
    /* back in the attention set: the poison shows */
    skip_blocks(&k1, false);
    k1.probe_pos = KV_ATTN_NO_PROBE;
    CHECK(ctx_decode(c1, &nx, 1, a1, false) == DJ_OK && !all_finite(a1, V));
out:
    if (c1) c1->seq->attn = NULL;
    if (c2) c2->seq->attn = NULL;
    kv_attn_free(&k1);
    kv_attn_free(&k2);
    ctx_free(c1);
    ctx_free(c2);
    ctx_free(c3);
    free(a1);
    free(a2);
    free(full);
}

/* ---- the engine ------------------------------------------------------------ */

static float g_threshold = 0.001f;

static struct dj_engine *make_engine(bool stats, bool prune, int threads) {
    struct dj_engine_params p = engine_default_params();
    p.n_ctx = 1024;
    p.n_threads = threads;
    p.n_ubatch = 64;
    p.opt.block_size = BS;
    p.opt.attn_stats_enabled = stats;
    p.opt.attn_prune_enabled = prune;
    p.opt.attn_prune_policy = LLAMA_OPT_PRUNE_H2O;
    p.opt.attn_prune_budget = 128;
    p.opt.attn_prune_keep_first = BS;
    p.opt.attn_prune_keep_last = 2 * BS;
    p.opt.attn_prune_threshold = g_threshold;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(model, &p, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

/* Three turns, each the last prompt + its 8 tokens + 60 more; returns the logits hash,
 * r[3] the turns' results, w (if not NULL) the block weights after the last. */
static uint64_t session(struct dj_engine *e, struct dj_turn_result *r, float *w, size_t *nw) {
    struct dj_session *s;
    CHECK(engine_session_create(e, &s) == DJ_OK);
    uint64_t h = DJ_FNV_OFFSET;
    dj_token p[600], ids[8];
    size_t n = 240;
    for (size_t i = 0; i < n; i++) p[i] = T(i);
    for (int k = 0; k < 3; k++) {
        r[k] = test_turn(e, s, p, n, 8, &h, ids);
        memcpy(p + n, ids, 7 * sizeof *ids); /* the sequence holds the generated tokens but the last */
        n += 7;
        for (size_t i = 0; i < 60; i++, n++) p[n] = T(1000 + n);
    }
    if (w) {
        const float *wt;
        const uint8_t *sk;
        *nw = engine_session_attn(s, &wt, &sk);
        memcpy(w, wt, *nw * sizeof *w);
    }
    engine_session_destroy(s);
    return h;
}

struct out {
    uint64_t lhash;
    size_t n;
    bool done;
};
static void on_logits(void *ud, const float *l, size_t n) {
    struct out *o = ud;
    o->lhash = test_hash_f32(o->lhash, l, n);
}
static void on_token(void *ud, const struct dj_token_event *ev) {
    (void)ev;
    ((struct out *)ud)->n++;
}
static void on_done(void *ud, const struct dj_turn_result *r) {
    (void)r;
    ((struct out *)ud)->done = true;
}

static void submit(struct dj_engine *e, const dj_token *p, size_t n, bool sampled, struct out *o) {
    struct dj_request_params rp = engine_default_request();
    rp.prompt = p;
    rp.n_prompt = n;
    rp.max_tokens = 12;
    rp.ignore_eos = true;
    rp.on_logits = on_logits;
    rp.on_token = on_token;
    rp.on_done = on_done;
    rp.ud = o;
    if (sampled) {
        rp.sampling.temp = 0.8f;
        rp.sampling.seed = 42;
    }
    memset(o, 0, sizeof *o);
    o->lhash = DJ_FNV_OFFSET;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
}

static void test_engine(void) {
    struct dj_turn_result r0[3], r1[3], r2[3];
    float w1[64], w2[64];
    size_t n1 = 0, n2 = 0;
    struct dj_engine *off = make_engine(false, false, 2), *st = make_engine(true, false, 2),
                     *st1 = make_engine(true, false, 1);
    if (!off || !st || !st1) goto out;
    const uint64_t h_off = session(off, r0, NULL, NULL);
    CHECK(session(st, r1, w1, &n1) == h_off);
    CHECK(session(st1, r2, w2, &n2) == h_off);
    CHECKF(n1 > 10 && n1 == n2 && memcmp(w1, w2, n1 * sizeof *w1) == 0, "%zu / %zu blocks of weights", n1, n2);
    float sum = 0;
    for (size_t b = 0; b < n1; b++) sum += w1[b] >= 0 && w1[b] <= 1.0f;
    CHECK(sum == (float)n1);
    CHECK(r1[2].n_attn_skipped == 0 && r1[2].n_attn_pruned == 0);

    /* batched, one greedy and one sampled request: the bits of each alone, statistics off */
    dj_token pa[300], pb[200];
    for (size_t i = 0; i < 300; i++) pa[i] = T(5000 + i);
    for (size_t i = 0; i < 200; i++) pb[i] = T(9000 + 3 * i);
    struct out alone[2], both[2];
    submit(off, pa, 300, false, &alone[0]);
    engine_run_all(off);
    submit(off, pb, 200, true, &alone[1]);
    engine_run_all(off);
    submit(st, pa, 300, false, &both[0]);
    submit(st, pb, 200, true, &both[1]);
    engine_run_all(st);
    for (int i = 0; i < 2; i++)
        CHECKF(both[i].done && both[i].n == 12 && both[i].lhash == alone[i].lhash, "request %d: %zu tokens", i,
               both[i].n);

    /* pruning: h2o within 128 tokens */
    struct dj_engine *pr = make_engine(false, true, 2);
    if (pr) {
        struct dj_turn_result rp[3];
        const uint64_t h_pr = session(pr, rp, NULL, NULL);
        CHECK(h_pr != h_off);
        CHECKF(rp[0].n_attn_skipped == 0 && rp[0].n_attn_pruned > 0 && rp[1].n_attn_skipped == rp[0].n_attn_pruned &&
                   rp[2].n_attn_skipped > 0,
               "skipped %zu %zu %zu pruned %zu", rp[0].n_attn_skipped, rp[1].n_attn_skipped, rp[2].n_attn_skipped,
               rp[0].n_attn_pruned);
        /* after turn 1 the sequence holds 247 positions: blocks 0 (keep_first) and 13, 14 (ending
         * after 247 - 32) protected with the partial tail: 247 - 12 * 16 = 55 tokens; room for
         * (128 - 55) / 16 = 4 of the 12 others: 8 blocks pruned */
        CHECKF(rp[0].n_attn_pruned == 8 * BS, "pruned %zu", rp[0].n_attn_pruned);
        struct llama_opt_stats os;
        engine_get_stats(pr, &os);
        CHECK(os.attn_blocks_pruned * BS == os.attn_tokens_pruned && os.attn_tokens_skipped > 0);
        /* a new session sends the last turn's prompt: exact logits (only exact rows were shared) */
        dj_token p[600];
        size_t n = 240;
        for (size_t i = 0; i < n; i++) p[i] = T(i);
        struct dj_session *s;
        CHECK(engine_session_create(pr, &s) == DJ_OK);
        uint64_t hx = DJ_FNV_OFFSET, hc = DJ_FNV_OFFSET;
        const struct dj_turn_result rs = test_turn(pr, s, p, n, 4, &hx, NULL);
        engine_session_destroy(s);
        CHECK(engine_session_create(off, &s) == DJ_OK);
        test_turn(off, s, p, n, 4, &hc, NULL);
        engine_session_destroy(s);
        CHECKF(hx == hc && rs.n_reused_pool > 0, "pool reuse %zu", rs.n_reused_pool);
        struct kv_pool_stats ps;
        engine_pool_stats(pr, &ps);
        CHECKF(ps.pinned == 0, "%u blocks pinned", ps.pinned);
        engine_destroy(pr);
    }
    /* the probe restores at once: with threshold 0 every skipped block it gave any weight comes
     * back before the first token (the last prompt position computed again); deterministic */
    g_threshold = 0.0f;
    uint64_t hr[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        struct dj_engine *e2 = make_engine(false, true, 2);
        if (!e2) break;
        struct dj_turn_result rr[3];
        hr[k] = session(e2, rr, NULL, NULL);
        CHECKF(rr[1].n_attn_skipped > 0 && rr[1].n_attn_restored >= rr[1].n_attn_skipped,
               "skipped %zu restored %zu", rr[1].n_attn_skipped, rr[1].n_attn_restored);
        struct kv_pool_stats ps;
        engine_pool_stats(e2, &ps);
        CHECK(ps.pinned == 0);
        engine_destroy(e2);
    }
    CHECK(hr[0] == hr[1]);
    g_threshold = 0.001f;
out:
    engine_destroy(off);
    engine_destroy(st);
    engine_destroy(st1);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    if (model_load(test_shared_path(shared, "models/stories260K.gguf"), &model) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    test_kernel();
    test_engine();
    model_free(model);
    TEST_END();
}
